//! Forking: a new run whose history up to a step is its parent's (read in place, never
//! copied), optionally with edits at the fork point, continuing live or from the parent's
//! recording.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::driver::{Driver, lease_of, receipt_tip};
use super::reads::off_thread;
use super::tape::{Tape, TapeEnd};
use super::trace::Trace;
use super::{EngineError, RunHandle, Shared};
use crate::ledger::codec::{decode_effects, decode_event};
use crate::ledger::{
    self, ActFrom, HeadKeeper, HistoryError, Outstanding, Rebuilt, check_continuable, first_head,
};
use crate::machine::{
    AgentId, BudgetKey, Edit, Event, EventBody, Message, Role, RunId, RunState, Scope, ToolOutcome,
    head_of, step,
};
use crate::store::{HeadRecord, NewRun, Write};

/// A change to make at the fork point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ForkEdit {
    /// Replace the last user message of an agent's conversation (default: the active agent);
    /// what followed it is dropped, so the agent answers the new message.
    ReplaceLastUserMessage {
        /// Whose conversation (`None`: the active agent).
        agent: Option<AgentId>,
        /// The new message.
        text: String,
    },
    /// Replace a tool call's result: in the outstanding batch, or already in the conversation.
    ReplaceToolResult {
        /// The call id.
        call_id: String,
        /// The result to use.
        result: ToolOutcome,
    },
    /// Set (or, without a value, forget) a memory key at the fork point (revision 5): see
    /// [`Edit::SetMemory`](crate::machine::Edit::SetMemory).
    SetMemory {
        /// The scope.
        scope: crate::machine::MemoryScope,
        /// Whose notes, for the `agent` scope (`None`: the active agent).
        agent: Option<AgentId>,
        /// The key.
        key: String,
        /// The value; `None` forgets the key.
        value: Option<String>,
    },
    /// Set a budget.
    SetLimit {
        /// Whose budget.
        scope: Scope,
        /// Which.
        key: BudgetKey,
        /// The new cap.
        limit: u64,
    },
}

/// How a fork continues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForkMode {
    /// Perform everything live from the fork point.
    #[default]
    Live,
    /// Replay the parent's recorded events while the fork asks for exactly what the parent
    /// asked for; then go live or stop.
    Tape(TapeEnd),
}

/// Turns the state at the fork point into the edits to make there (what `budget.KEY=VALUE`
/// means depends on it).
pub(crate) type Resolve = Box<dyn FnOnce(&RunState) -> Vec<ForkEdit> + Send>;

/// Why a fork could not be made (nothing was written).
fn refuse(msg: String) -> EngineError {
    EngineError::Machine(crate::machine::MachineError::EditDoesNotApply(msg))
}

/// Everything a fork is made from, read from the parent (on the blocking pool).
struct Planned {
    rec: crate::store::RunRecord,
    spec: crate::machine::RunSpec,
    rebuilt: Rebuilt,
    convs: BTreeMap<AgentId, Arc<Vec<Message>>>,
    machine_edits: Vec<Edit>,
    edited: bool,
    last_at: crate::machine::Hlc,
    /// What the fork inherits outstanding: the parent's position, the effect as the fork
    /// performs it, and as the parent emitted it.
    inherited: Vec<(
        crate::machine::EffectRef,
        crate::machine::Effect,
        crate::machine::Effect,
    )>,
    tape: Option<Tape>,
    tip: Option<crate::receipt::ChainTip>,
    /// For a fork from step 0: the run's first event, as the parent began (a session run's
    /// history included).
    opening: Option<EventBody>,
}

/// Creates the fork and starts driving it.
pub(super) async fn fork(
    shared: &Arc<Shared>,
    parent: &RunId,
    seq: u64,
    resolve: Resolve,
    mode: ForkMode,
    new_id: RunId,
) -> Result<RunHandle, EngineError> {
    let planned = {
        let (shared, parent, new_id) = (shared.clone(), parent.clone(), new_id.clone());
        off_thread(&shared.store.clone(), move |store| {
            plan(&shared, store, &parent, seq, resolve, mode, &new_id)
        })
        .await?
    };
    let Planned {
        rec,
        spec,
        rebuilt,
        convs,
        machine_edits,
        edited,
        last_at,
        inherited,
        tape,
        tip,
        opening,
    } = planned;
    let now = shared.config.clock.wall_ms();
    let mut new = NewRun {
        id: new_id.clone(),
        parent: Some((parent.clone(), seq)),
        spec: rec.spec.clone(),
        setup: rec.setup.clone(),
        goal: rec.goal.clone(),
        now_ms: now,
        owner: shared.owner.clone(),
        lease_expires_ms: now + shared.config.lease_ttl.as_millis() as u64,
        head: HeadRecord::default(),
        session: None,
    };
    let head = HeadKeeper::new(
        first_head(
            &new,
            rebuilt.state.state_hash(spec.history_hash()),
            rebuilt.chain,
            // A tip at seq 0 is a delegated child's anchor in its parent, not a receipt of
            // this run's chain: the head's receipt tip stays empty until it seals one.
            tip.as_ref().filter(|t| t.seq > 0),
        ),
        shared.config.receipts.clone(),
    );
    new.head = head.sealed(&*shared.writes.store);
    let epoch = lease_of(shared.writes.write(Write::CreateRun(new)).await?);
    let mut driver = Driver::new(
        shared,
        new_id.clone(),
        spec,
        epoch,
        rebuilt,
        convs,
        last_at,
        head,
        tip,
    );
    driver.inherit(inherited.iter().map(|(_, mine, _)| mine.clone()));
    if let Some(opening) = opening {
        driver.queue.push_back(opening);
    }
    if edited {
        driver.queue.push_back(EventBody::Edited {
            edits: machine_edits,
        });
    }
    match tape {
        Some(mut tape) => {
            tape.suppress(inherited.into_iter().map(|(_, mine, _)| mine).collect());
            driver.tape = Some(Box::new(tape));
        }
        None => driver.to_perform = inherited.into_iter().map(|(_, mine, _)| mine).collect(),
    }
    driver.opening = Some(Box::new(Trace::RunForked {
        parent: parent.clone(),
        seq,
    }));
    Ok(driver.spawn())
}

/// Reads and checks everything the fork is made from; writes nothing.
fn plan(
    shared: &Shared,
    store: &dyn crate::store::Store,
    parent: &RunId,
    seq: u64,
    resolve: Resolve,
    mode: ForkMode,
    new_id: &RunId,
) -> Result<Planned, EngineError> {
    let rec = ledger::record(store, parent)?;
    // The fork copies the parent's spec and setup and continues its history through `seq`:
    // refuse a parent whose record there `verify` would reject, before anything is written.
    check_continuable(store, &rec, &shared.config.receipts, ActFrom::Step(seq))?;
    let spec = ledger::spec_of(&rec)?;
    let rebuilt = ledger::state_at(store, parent, &spec, seq)?;
    if let RunState::Done { outcome, .. } = &rebuilt.state {
        let how = serde_json::to_value(outcome)
            .ok()
            .and_then(|v| v["outcome"].as_str().map(str::to_owned))
            .unwrap_or_default();
        return Err(HistoryError::SeqOutOfRange {
            run: format!(
                "{parent} (step {seq} is the end of the run: {how}; fork from step {} or earlier)",
                seq.saturating_sub(1)
            ),
            seq,
            latest: seq.saturating_sub(1),
        }
        .into());
    }
    let convs = ledger::conversations(store, &rebuilt.state)?;
    let edits = resolve(&rebuilt.state);
    let machine_edits = translate(&edits, &rebuilt.state, &convs)?;
    let last_at = ledger::time_at(store, parent, seq)?;

    // Dry run: an edit that does not apply is refused before anything is written.
    let edited = if machine_edits.is_empty() {
        None
    } else {
        let at = shared.config.clock.stamp(seq + 1, last_at);
        let event = Event::new(
            new_id,
            at,
            EventBody::Edited {
                edits: machine_edits.clone(),
            },
        );
        Some(step(&rebuilt.state, &event, &spec)?)
    };
    let after = edited.as_ref().map_or(&rebuilt.state, |t| &t.next);

    // What the fork inherits outstanding (emitted by the parent at or before the fork point).
    let mut inherited = Vec::new();
    for at in after.outstanding().into_iter().filter(|r| r.seq <= seq) {
        let effect = ledger::effect_at(store, parent, at)?;
        inherited.push((at, effect.with_id(at.in_run(new_id)), effect));
    }
    let tape = match mode {
        ForkMode::Live => None,
        ForkMode::Tape(on_end) => {
            let rows = ledger::transitions(store, parent, seq + 1, rec.seq)?;
            let mut events = VecDeque::with_capacity(rows.len());
            for t in &rows {
                events.push_back((
                    decode_event(parent, t.seq, &t.event)?,
                    decode_effects(parent, t.seq, &t.effects)?,
                ));
            }
            let mut parent_effects = Outstanding::new();
            for (_, _, theirs) in &inherited {
                parent_effects.insert(theirs.clone(), None);
            }
            Some(Tape {
                events,
                parent_effects,
                suppressed: Outstanding::new(),
                fork_seq: seq,
                shift: u64::from(edited.is_some()),
                on_end,
            })
        }
    };

    // The fork continues its parent's receipt chain from the fork point; refuse a signer that
    // could not, before writing anything.
    let tip = receipt_tip(shared, store, parent, seq)?;
    // A fork from step 0 begins as its parent began (a session run's carried history
    // included, read from the parent's first event, so a replayed session run forks too).
    let opening = match rebuilt.state {
        RunState::Created => match ledger::first_event(store, parent)? {
            Some(first @ (EventBody::Start { .. } | EventBody::SessionStart { .. })) => Some(first),
            _ => Some(super::session::opening(store, &spec, &rec.goal)?),
        },
        _ => None,
    };
    Ok(Planned {
        opening,
        edited: edited.is_some(),
        rec,
        spec,
        rebuilt,
        convs,
        machine_edits,
        last_at,
        inherited,
        tape,
        tip,
    })
}

/// Turns user-level edits into machine edits against the state at the fork point.
fn translate(
    edits: &[ForkEdit],
    state: &RunState,
    convs: &std::collections::BTreeMap<AgentId, Arc<Vec<Message>>>,
) -> Result<Vec<Edit>, EngineError> {
    let mut out = Vec::with_capacity(edits.len());
    let active = state.data().map(|d| d.active.clone());
    for edit in edits {
        out.push(match edit {
            ForkEdit::ReplaceLastUserMessage { agent, text } => {
                let agent = agent.clone().or_else(|| active.clone()).ok_or_else(|| refuse("the run has not started; there is no user message to replace".into()))?;
                let msgs = convs.get(&agent).ok_or_else(|| refuse(format!("unknown agent `{agent}`")))?;
                let i = msgs
                    .iter()
                    .rposition(|m| m.role == Role::User)
                    .ok_or_else(|| refuse(format!("agent {agent} has no user message at this step")))?;
                Edit::RewriteConversation {
                    agent: agent.clone(),
                    keep: i as u32,
                    base: head_of(&msgs[..i]),
                    messages: vec![Message::text(Role::User, text.clone())],
                }
            }
            ForkEdit::ReplaceToolResult { call_id, result } => {
                let in_batch = matches!(state, RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. }
                    if batch.slots.iter().any(|s| &s.call_id == call_id));
                if in_batch {
                    Edit::ReplaceToolResult { call_id: call_id.clone(), result: result.clone() }
                } else {
                    let agent = active.clone().ok_or_else(|| refuse("the run has not started".into()))?;
                    let msgs = convs.get(&agent).ok_or_else(|| refuse(format!("unknown agent `{agent}`")))?;
                    let i = msgs
                        .iter()
                        .rposition(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call_id))
                        .ok_or_else(|| refuse(format!("no result of tool call `{call_id}` at this step")))?;
                    let old = &msgs[i];
                    let (content, is_error) = match result {
                        ToolOutcome::Ok { value: serde_json::Value::String(s), .. } => (s.clone(), false),
                        ToolOutcome::Ok { value, .. } => (value.to_string(), false),
                        ToolOutcome::Error { message } => (message.clone(), true),
                    };
                    let replaced = Message { content: Some(content), is_error, ..old.clone() };
                    let mut messages = vec![replaced];
                    messages.extend(msgs[i + 1..].iter().cloned());
                    Edit::RewriteConversation { agent, keep: i as u32, base: head_of(&msgs[..i]), messages }
                }
            }
            ForkEdit::SetLimit { scope, key, limit } => Edit::SetLimit { scope: scope.clone(), key: *key, limit: *limit },
            ForkEdit::SetMemory { scope, agent, key, value } => Edit::SetMemory {
                scope: *scope,
                agent: agent.clone().or_else(|| active.clone()),
                key: key.clone(),
                value: value.clone(),
            },
        });
    }
    Ok(out)
}
