//! Deadlines on calls that wait for a person: `[timers.deadlines]` names a tool that needs an
//! approval (`requires_approval`) or asks a question (`interactive`), how long a call of it
//! may wait, and what the machine decides when nobody answered in time.
//!
//! | `then` | the call | the run |
//! |---|---|---|
//! | `"reject"` | declined; the model is told nobody answered before the deadline | goes on |
//! | `"approve"` | runs, as if approved (approvals only) | goes on |
//! | `{ input = "TEXT" }` | TEXT is its result, as if a person had answered it | goes on |
//! | `"fail"` | — | fails `tool_denied`, naming the deadline |
//! | `{ escalate = { to, after_ms, then } }` | waits for `to`, under a new deadline that `then` decides | waits on |
//!
//! The transition that asks the person also emits a [`StartTimer`](super::Effect::StartTimer)
//! whose due instant (the event's time plus `after_ms`) the call's slot keeps
//! ([`Slot::deadline`]). A person who answers first wins: the call no longer waits, so the
//! timer's later firing is refused and changes nothing. Otherwise the
//! [`TimerFired`](super::EventBody::TimerFired) committed at or after the due instant applies
//! the policy, as the answer a person would have given — decided here, in the pure machine, so
//! `verify` and replays reproduce it. An escalation hands the call on rather than decide it
//! (see [`escalation`](super::escalation)).

use serde::{Deserialize, Serialize};

use super::error::{ErrorClass, Failure, MachineError};
use super::escalation::Escalation;
use super::event::HumanInput;
use super::ids::{AgentId, EffectId};
use super::spec::{Spec, SpecError};
use super::state::{Batch, Outcome, RunData, RunState, Slot, SlotStatus};
use super::step::Cx;
use super::table::{EdgeId, StateKind};
use super::timer::{HARD_MAX_SLEEP_MS, Timer, TimerSpec};

/// How long a call may wait for a person, and what happens then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    /// Milliseconds from the transition that asked the person (at most a year).
    pub after_ms: u64,
    /// What the machine decides when nobody answered by then.
    pub then: OnDeadline,
}

/// What a deadline that passed decides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadline {
    /// The call is declined (`"reject"`).
    Reject,
    /// The call runs (`"approve"`; approvals only).
    Approve,
    /// The run fails `tool_denied` (`"fail"`).
    Fail,
    /// This text is the call's result (`{ input = "TEXT" }`).
    Input(String),
    /// The call waits for someone else, under a deadline of its own
    /// (`{ escalate = { to = "NAME", after_ms = N, then = … } }`; see
    /// [`escalation`](super::escalation)).
    Escalate(Box<Escalation>),
}

/// Checks `[timers.deadlines]`: each names a tool of the spec that waits for a person, waits
/// 1 ms to a year, escalates along a bounded chain, and approves only a call that asks for an
/// approval.
pub(crate) fn validate(spec: &Spec, timers: &TimerSpec) -> Result<(), SpecError> {
    for (name, d) in &timers.deadlines {
        let bad = |reason: String| SpecError::OutOfRange {
            path: format!("timers.deadlines.{name}"),
            reason,
        };
        let Some(tool) = spec.tools.iter().find(|t| &t.name == name) else {
            return Err(bad(format!("no tool is named `{name}`")));
        };
        if !tool.interactive && !tool.requires_approval {
            return Err(bad(format!(
                "`{name}` never waits for a person: a deadline needs requires_approval or interactive"
            )));
        }
        if !(1..=HARD_MAX_SLEEP_MS).contains(&d.after_ms) {
            return Err(bad(format!(
                "after_ms must be between 1 and {HARD_MAX_SLEEP_MS} (a year), got {}",
                d.after_ms
            )));
        }
        let last = super::escalation::validate(&format!("timers.deadlines.{name}"), &d.then)?;
        if tool.interactive && *last == OnDeadline::Approve {
            return Err(bad(format!(
                "`{name}` asks a question, which cannot be approved: give \"reject\", \"fail\" or {{ input = \"…\" }}"
            )));
        }
    }
    Ok(())
}

/// Arms `slot`'s deadline when it has just started waiting for a person and the spec gives its
/// tool one: emits `StartTimer` and records it in the slot.
pub(crate) fn arm(cx: &mut Cx<'_>, agent: &AgentId, slot: &mut Slot) {
    if !matches!(
        slot.status,
        SlotStatus::Approval { .. } | SlotStatus::Question { .. }
    ) {
        return;
    }
    let Some(d) = cx
        .spec
        .spec()
        .timers
        .as_ref()
        .and_then(|t| t.deadlines.get(&slot.tool))
    else {
        return;
    };
    arm_in(cx, agent, slot, d.after_ms);
}

/// Emits the `StartTimer` of a deadline `after_ms` after this transition for `slot` (a call
/// of `agent`) and records it in the slot: the call's first deadline, or an escalation's.
pub(crate) fn arm_in(cx: &mut Cx<'_>, agent: &AgentId, slot: &mut Slot, after_ms: u64) {
    let due = cx.at.plus_ms(after_ms);
    let (agent, call_id) = (agent.clone(), slot.call_id.clone());
    let effect = cx.emit(|id| super::Effect::StartTimer {
        id,
        agent,
        call_id,
        due,
    });
    slot.deadline = Some(Timer { effect, due });
}

/// Whether `effect` is the deadline of a call in `state` that still waits for a person: what
/// the executor asks before waiting on a `StartTimer` (a run waiting for a person rests rather
/// than hold its lease until the deadline).
pub fn is_pending_deadline(state: &RunState, effect: &EffectId) -> bool {
    match state {
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => {
            waiting(batch, effect).is_some()
        }
        _ => false,
    }
}

/// The slot whose call still waits for a person under the deadline `effect`.
fn waiting(batch: &Batch, effect: &EffectId) -> Option<usize> {
    batch.slots.iter().position(|s| {
        s.deadline.is_some_and(|d| d.effect.matches(effect))
            && matches!(
                s.status,
                SlotStatus::Approval { .. } | SlotStatus::Question { .. }
            )
    })
}

/// `CallingTools`/`AwaitingInput` + `TimerFired` for a deadline: nobody answered in time, so
/// the spec's policy answers. Refused when no call waits under `effect` (a person answered
/// first), for another instant than the recorded one, or before it unless a person brought
/// the deadline forward (`runtape wake`, an early firing).
pub(crate) fn on_fired(
    cx: &mut Cx<'_>,
    from: StateKind,
    run: RunData,
    batch: Batch,
    firing: super::timer::Firing<'_>,
) -> Result<(EdgeId, RunState), MachineError> {
    let (effect, due) = (firing.effect, firing.due);
    let unknown = || MachineError::UnknownEffect {
        state: from,
        effect: effect.clone(),
    };
    let index = waiting(&batch, effect).ok_or_else(unknown)?;
    let slot = &batch.slots[index];
    let recorded = slot.deadline.ok_or_else(unknown)?.due;
    super::timer::check_due(cx, firing, recorded)?;
    let policy = cx
        .spec
        .spec()
        .timers
        .as_ref()
        .and_then(|t| t.deadlines.get(&slot.tool))
        .and_then(|d| super::escalation::policy_now(&d.then, slot))
        .cloned()
        .ok_or_else(unknown)?;
    if let OnDeadline::Escalate(e) = &policy {
        let mut batch = batch;
        let agent = run.active.clone();
        super::escalation::hand_on(cx, &agent, &mut batch.slots[index], e);
        return Ok(match from {
            StateKind::CallingTools => (
                EdgeId::CallingToolsDeadlineEscalate,
                RunState::CallingTools { run, batch },
            ),
            _ => (
                EdgeId::AwaitingInputDeadlineEscalate,
                RunState::AwaitingInput { run, batch },
            ),
        });
    }
    let who = match &slot.escalated {
        Some(e) => format!(" (escalated to {})", e.to),
        None => String::new(),
    };
    let passed = if firing.early && cx.at < due {
        format!(
            "nobody answered{who}; a person brought the deadline ({}) forward to {}",
            crate::text::rfc3339(due.ms()),
            crate::text::rfc3339(cx.at.ms())
        )
    } else {
        format!(
            "nobody answered{who} before the deadline ({})",
            crate::text::rfc3339(due.ms())
        )
    };
    let input = match policy {
        // Handled above: an escalation decides nothing yet.
        OnDeadline::Escalate(_) => return Err(unknown()),
        OnDeadline::Fail => {
            let error = Failure::new(
                ErrorClass::ToolDenied,
                format!("call {} ({}): {passed}", slot.call_id, slot.tool),
            );
            let edge = match from {
                StateKind::CallingTools => EdgeId::CallingToolsDeadlineFail,
                _ => EdgeId::AwaitingInputDeadlineFail,
            };
            let outcome = Outcome::Failed { error };
            return Ok((edge, RunState::Done { run, outcome }));
        }
        OnDeadline::Reject => HumanInput::Reject {
            reason: Some(passed),
        },
        OnDeadline::Approve => HumanInput::Approve,
        OnDeadline::Input(text) => HumanInput::Answer {
            text,
            files: Vec::new(),
        },
    };
    let asked = slot.status.effect().ok_or_else(unknown)?.in_run(cx.run_id);
    let (_, next) = super::batch::on_input(cx, from, run, batch, &asked, &input)?;
    let edge = match (from, next.kind()) {
        (StateKind::CallingTools, _) => EdgeId::CallingToolsDeadline,
        (_, StateKind::AwaitingInput) => EdgeId::AwaitingInputDeadlineWait,
        (_, StateKind::CallingTools) => EdgeId::AwaitingInputDeadlineRun,
        _ => EdgeId::AwaitingInputDeadlineDone,
    };
    Ok((edge, next))
}
