//! Compensation (sagas): undoing what a failed or cancelled run did.
//!
//! A tool may declare its undo in the spec ([`Compensation`]: another tool, and arguments
//! filled from the original call — see [`template`]). With `on_failure = "compensate"`
//! ([`OnFailure`]), every call of such a tool that returns a result is recorded on the run as
//! a [`SagaEntry`], its undo's arguments filled in there and then. When the run is about to
//! end failed or cancelled, it moves to [`Compensating`](super::RunState::Compensating)
//! instead and performs the undos one at a time, the latest completed call's first:
//!
//! - each undo is a `CallTool` effect, so it is committed before it runs, gets a receipt, and
//!   is in doubt after a crash like any tool call. Its idempotency key derives from the run and
//!   the original call ([`undo_key`]), so a retried undo carries the same key;
//! - an undo that returns is marked `undone` and the next one starts; after the last, the run
//!   ends with the outcome it was going to have;
//! - an undo that fails, whose arguments could not be filled, or whose outcome is unknown after
//!   a crash (and the agent's `on_in_doubt` is not `retry`) stops the saga: the run ends with its
//!   outcome, the entry says what went wrong and the entries before it stay `pending`. Nothing
//!   retries it: an undo that failed may have done half its work, and the undos left may
//!   depend on it, so a person takes it from there (`runtape show` lists the saga);
//! - a cancel while compensating is recorded and changes nothing: undoing is what it asks for.
//!
//! Every decision here is made from the history, so `verify` re-derives the saga and
//! replays reach it again.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::effect::Effect;
use super::error::MachineError;
use super::event::{EventBody, ToolOutcome};
use super::ids::{AgentId, EffectRef};
use super::spec::OnInDoubt;
use super::state::{Outcome, RunData, RunState, Slot};
use super::step::Cx;
use super::table::{EdgeId, StateKind};

pub mod template;

/// What a run that fails or is cancelled does about the calls it completed
/// (`[run] on_failure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Nothing: the run ends as it is.
    #[default]
    Fail,
    /// Performs the declared compensation of every completed call, latest first.
    Compensate,
}

impl OnFailure {
    /// True for the default (left out of the stored spec).
    pub fn is_fail(&self) -> bool {
        *self == OnFailure::Fail
    }
}

/// A tool's declared undo: `compensate = { tool = "…", arguments = { … } }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compensation {
    /// The tool that undoes the call (a `[[tools]]` name or `SERVER__TOOL`).
    pub tool: String,
    /// Its arguments: JSON whose strings may hold [`template`] placeholders.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// One completed call whose tool declared an undo.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SagaEntry {
    /// The original call's first `CallTool` effect.
    pub origin: EffectRef,
    /// The agent that made it.
    pub agent: AgentId,
    /// The model's call id.
    pub call_id: String,
    /// The original tool.
    pub tool: String,
    /// The undo's tool.
    pub undo: String,
    /// The undo's arguments, filled from the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Why the arguments could not be filled (the undo then fails without running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfilled: Option<String>,
    /// Where its undo stands.
    pub status: SagaStatus,
}

/// Where one undo stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SagaStatus {
    /// Not performed (yet, or ever: the saga stopped before it, or the run did not fail).
    Pending,
    /// Its `CallTool` is outstanding.
    Running {
        /// The effect.
        effect: EffectRef,
    },
    /// It returned.
    Undone {
        /// What it returned.
        result: String,
    },
    /// It failed, or could not be performed; the saga stopped here.
    Failed {
        /// Why.
        reason: String,
    },
    /// It was interrupted and its outcome is unknown; the saga stopped here.
    InDoubt,
}

/// How a run's saga ended, for `show` and the UI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaEnd {
    /// Every recorded call was undone.
    Compensated,
    /// An undo failed or is in doubt: a person must finish the job.
    CompensationFailed,
}

impl SagaEnd {
    /// `compensated` or `compensation_failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            SagaEnd::Compensated => "compensated",
            SagaEnd::CompensationFailed => "compensation_failed",
        }
    }
}

/// How `run`'s saga ended; `None` while it is not over or when no undo was attempted.
pub fn saga_end(state: &RunState) -> Option<SagaEnd> {
    let RunState::Done { run, .. } = state else {
        return None;
    };
    if run
        .saga
        .iter()
        .any(|e| matches!(e.status, SagaStatus::Failed { .. } | SagaStatus::InDoubt))
    {
        return Some(SagaEnd::CompensationFailed);
    }
    let attempted = run
        .saga
        .iter()
        .any(|e| matches!(e.status, SagaStatus::Undone { .. }));
    (attempted
        && run
            .saga
            .iter()
            .all(|e| matches!(e.status, SagaStatus::Undone { .. })))
    .then_some(SagaEnd::Compensated)
}

/// The idempotency key of the undo of the call whose first effect is `origin` in `run`: the
/// same for every attempt of that undo, distinct from the call's own key.
pub fn undo_key(run: &super::RunId, origin: EffectRef) -> String {
    format!("{}:undo", origin.in_run(run).idempotency_key())
}

/// Records `slot`'s call, which returned `outcome`, when the spec compensates and its tool
/// declares an undo. Call it when a running call returns.
pub(crate) fn record(
    cx: &Cx<'_>,
    run: &mut RunData,
    slot: &Slot,
    effect: EffectRef,
    outcome: &ToolOutcome,
) {
    let spec = cx.spec.spec();
    if spec.on_failure != OnFailure::Compensate {
        return;
    }
    let (Some(comp), ToolOutcome::Ok { value, .. }) = (spec.compensations.get(&slot.tool), outcome)
    else {
        return;
    };
    let (args, unfilled) = match template::fill(&comp.arguments, &slot.args, value) {
        Ok(a) => (Some(a), None),
        Err(e) => (None, Some(e)),
    };
    run.saga.push(SagaEntry {
        origin: slot.origin.unwrap_or(effect),
        agent: run.active.clone(),
        call_id: slot.call_id.clone(),
        tool: slot.tool.clone(),
        undo: comp.tool.clone(),
        args,
        unfilled,
        status: SagaStatus::Pending,
    });
}

/// Where the saga goes next: the latest pending entry's undo is emitted (`Compensating`), or,
/// when there is none or its arguments could not be filled, the run ends with `outcome`.
fn next(cx: &mut Cx<'_>, mut run: RunData, outcome: Outcome) -> RunState {
    let Some(i) = run
        .saga
        .iter()
        .rposition(|e| e.status == SagaStatus::Pending)
    else {
        return RunState::Done { run, outcome };
    };
    let entry = &mut run.saga[i];
    let Some(args) = entry.args.clone() else {
        entry.status = SagaStatus::Failed {
            reason: format!(
                "its arguments could not be filled: {}",
                entry.unfilled.as_deref().unwrap_or("no arguments")
            ),
        };
        return RunState::Done { run, outcome };
    };
    let effect = emit(cx, entry, args);
    entry.status = SagaStatus::Running { effect };
    RunState::Compensating {
        run,
        outcome,
        entry: u32::try_from(i).unwrap_or(u32::MAX),
    }
}

fn emit(cx: &mut Cx<'_>, entry: &SagaEntry, args: Value) -> EffectRef {
    let key = undo_key(cx.run_id, entry.origin);
    let (agent, call_id, tool) = (
        entry.agent.clone(),
        format!("undo:{}", entry.call_id),
        entry.undo.clone(),
    );
    cx.emit(|id| Effect::CallTool {
        id,
        agent,
        call_id,
        tool,
        args,
        idempotency_key: key,
    })
}

/// Called by [`step`](super::step) with the state a transition reached: a run about to end
/// failed or cancelled under `on_failure = "compensate"` with calls to undo starts its saga
/// instead. Returns the edge and state to take in place of `next`; `None` leaves it as it is.
pub(crate) fn begin(cx: &mut Cx<'_>, ending: &RunState) -> Option<(EdgeId, RunState)> {
    let RunState::Done { run, outcome } = ending else {
        return None;
    };
    if cx.spec.spec().on_failure != OnFailure::Compensate
        || matches!(outcome, Outcome::Completed { .. })
        || !run.saga.iter().any(|e| e.status == SagaStatus::Pending)
    {
        return None;
    }
    cx.effects.clear();
    Some(match next(cx, run.clone(), outcome.clone()) {
        s @ RunState::Compensating { .. } => (EdgeId::AnyCompensate, s),
        s => (EdgeId::AnyCompensateStopped, s),
    })
}

/// `Compensating` + any event: an undo's result, its being in doubt after a crash, or a cancel
/// (recorded; the saga goes on). Anything else is refused.
pub(crate) fn on_event(
    cx: &mut Cx<'_>,
    state: &RunState,
    body: &EventBody,
) -> Result<(EdgeId, RunState), MachineError> {
    let RunState::Compensating {
        run,
        outcome,
        entry,
    } = state
    else {
        return Err(refused(state, body));
    };
    let mut run = run.clone();
    let i = *entry as usize;
    let running = match run.saga.get(i).map(|e| &e.status) {
        Some(SagaStatus::Running { effect }) => *effect,
        _ => return Err(refused(state, body)),
    };
    let answered = |effect: &super::EffectId| {
        if running.matches(effect) {
            Ok(())
        } else {
            Err(MachineError::UnknownEffect {
                state: StateKind::Compensating,
                effect: effect.clone(),
            })
        }
    };
    match body {
        EventBody::CancelRequested { .. } => Ok((EdgeId::CompensatingCancel, state.clone())),
        EventBody::ToolReturned { effect, outcome: o } => {
            answered(effect)?;
            match o {
                ToolOutcome::Ok { value, .. } => {
                    run.saga[i].status = SagaStatus::Undone {
                        result: match value {
                            Value::String(s) => s.clone(),
                            v => v.to_string(),
                        },
                    };
                    Ok(match next(cx, run, outcome.clone()) {
                        s @ RunState::Compensating { .. } => (EdgeId::CompensatingReturnedNext, s),
                        s if saga_end(&s) == Some(SagaEnd::Compensated) => {
                            (EdgeId::CompensatingReturnedDone, s)
                        }
                        s => (EdgeId::CompensatingReturnedStopped, s),
                    })
                }
                ToolOutcome::Error { message } => {
                    run.saga[i].status = SagaStatus::Failed {
                        reason: message.clone(),
                    };
                    Ok((
                        EdgeId::CompensatingReturnedStopped,
                        RunState::Done {
                            run,
                            outcome: outcome.clone(),
                        },
                    ))
                }
            }
        }
        EventBody::EffectInDoubt { effect } => {
            answered(effect)?;
            let retry = cx
                .spec
                .agent(&run.saga[i].agent)
                .is_some_and(|a| a.on_in_doubt == OnInDoubt::Retry);
            let undo = run.saga[i].clone();
            match (retry, undo.args.clone()) {
                (true, Some(args)) => {
                    let effect = emit(cx, &undo, args);
                    run.saga[i].status = SagaStatus::Running { effect };
                    Ok((
                        EdgeId::CompensatingInDoubtRetry,
                        RunState::Compensating {
                            run,
                            outcome: outcome.clone(),
                            entry: *entry,
                        },
                    ))
                }
                _ => {
                    run.saga[i].status = SagaStatus::InDoubt;
                    Ok((
                        EdgeId::CompensatingInDoubtStopped,
                        RunState::Done {
                            run,
                            outcome: outcome.clone(),
                        },
                    ))
                }
            }
        }
        _ => Err(refused(state, body)),
    }
}

fn refused(state: &RunState, body: &EventBody) -> MachineError {
    MachineError::InvalidTransition {
        state: state.kind(),
        event: body.kind(),
    }
}
