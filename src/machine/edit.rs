//! Edits applied at a fork point, recorded as the fork's first event (`Edited`) so that the
//! fork's history replays and verifies like any other.

use serde::{Deserialize, Serialize};

use super::budget::{BudgetKey, Scope};
use super::event::ToolOutcome;
use super::ids::{AgentId, Digest};
use super::message::Message;
use super::table::EdgeId;

/// One change to the state at a fork point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Edit {
    /// Rewrite the tail of an agent's conversation: keep its first `keep` messages (whose head
    /// is `base`), then append `messages`. Replacing the last user message or a tool result
    /// already in the conversation is this edit; the caller reads the old messages to build it.
    RewriteConversation {
        /// Whose conversation.
        agent: AgentId,
        /// Messages kept from the start.
        keep: u32,
        /// The head of those kept messages.
        base: Digest,
        /// Messages appended after them.
        messages: Vec<Message>,
    },
    /// Replace the result of a call in the outstanding tool batch (finished or not).
    ReplaceToolResult {
        /// The call.
        call_id: String,
        /// The result to use.
        result: ToolOutcome,
    },
    /// Set (`Some`) or forget (`None`) a memory key at the fork point (revision 5): in an
    /// agent's notes, the shared notes, or — staged, published when the fork completes — the
    /// global memory. Checked like a `remember`/`forget` call, caps included.
    SetMemory {
        /// The scope.
        scope: super::memory::MemoryScope,
        /// Whose notes, for the `agent` scope.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<AgentId>,
        /// The key.
        key: String,
        /// The value; `None` forgets the key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// Set a cap to any value (a fork may lower one too).
    SetLimit {
        /// Whose budget.
        scope: Scope,
        /// Which budget.
        key: BudgetKey,
        /// The new cap.
        limit: u64,
    },
}

use super::batch::{result_of, settle};
use super::error::MachineError;
use super::message::ConversationRef;
use super::route::{recheck, set_limit};
use super::state::{RunState, SlotStatus};
use super::step::Cx;
use super::table::StateKind;

/// Any started state + `Edited`: applies `edits` in order, then re-derives the state: a model
/// call outstanding is issued again (its conversation may have changed), a tool batch whose
/// results are now all in goes back to the model, and a cap that was lifted lets the agent
/// go on.
pub(crate) fn apply(
    cx: &mut Cx<'_>,
    state: &RunState,
    edits: &[Edit],
) -> Result<(EdgeId, RunState), MachineError> {
    if edits.is_empty() {
        return Err(MachineError::EditDoesNotApply("no edits were given".into()));
    }
    let mut next = state.clone();
    for edit in edits {
        match edit {
            Edit::RewriteConversation {
                agent,
                keep,
                base,
                messages,
            } => {
                let run = next.data_mut().ok_or_else(|| {
                    MachineError::EditDoesNotApply("the run has not started".into())
                })?;
                let a = run
                    .agents
                    .get_mut(agent)
                    .ok_or_else(|| MachineError::UnknownAgent(agent.to_string()))?;
                if *keep > a.conversation.len {
                    return Err(MachineError::EditDoesNotApply(format!(
                        "agent {agent} has {} messages at this step; cannot keep {keep}",
                        a.conversation.len
                    )));
                }
                if *keep == 0 && *base != Digest::ZERO {
                    return Err(MachineError::EditDoesNotApply(
                        "an empty prefix has the zero head".into(),
                    ));
                }
                a.conversation = ConversationRef {
                    len: *keep,
                    head: *base,
                };
                for m in messages {
                    cx.append(run, agent, m.clone());
                }
            }
            Edit::ReplaceToolResult { call_id, result } => {
                let (RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. }) =
                    &mut next
                else {
                    return Err(MachineError::EditDoesNotApply(format!(
                        "no tool batch is outstanding at this step, so there is no result of {call_id} to replace; \
                         edit the conversation instead"
                    )));
                };
                let slot = batch
                    .slots
                    .iter_mut()
                    .find(|s| &s.call_id == call_id)
                    .ok_or_else(|| {
                        MachineError::EditDoesNotApply(format!(
                            "no tool call `{call_id}` at this step"
                        ))
                    })?;
                slot.status = SlotStatus::Finished {
                    result: result_of(result, super::Label::TRUSTED),
                };
            }
            Edit::SetMemory {
                scope,
                agent,
                key,
                value,
            } => {
                let run = next.data_mut().ok_or_else(|| {
                    MachineError::EditDoesNotApply("the run has not started".into())
                })?;
                super::memory::tools::edit(cx.spec, run, *scope, agent.as_ref(), key, value)
                    .map_err(MachineError::EditDoesNotApply)?;
            }
            Edit::SetLimit { scope, key, limit } => {
                let run = next.data_mut().ok_or_else(|| {
                    MachineError::EditDoesNotApply("the run has not started".into())
                })?;
                set_limit(run, scope, *key, *limit, false)?;
            }
        }
    }
    Ok(match next {
        RunState::Generating { run, call } => match cx.exhaustion(&run) {
            Some((scope, key, resting)) => {
                cx.notes.push(super::step::Note::BudgetExhausted {
                    scope: scope.clone(),
                    key,
                });
                (
                    EdgeId::GeneratingEditExhausted,
                    RunState::BudgetExhausted {
                        run,
                        scope,
                        key,
                        resting,
                    },
                )
            }
            None => {
                let call = cx.call_model(&run, call.route, 1, None);
                (EdgeId::GeneratingEdit, RunState::Generating { run, call })
            }
        },
        RunState::CallingTools { run, batch } => match settle(cx, run, batch) {
            (StateKind::CallingTools, s) => (EdgeId::CallingToolsEdit, s),
            (StateKind::AwaitingInput, s) => (EdgeId::CallingToolsEditInput, s),
            (_, s) => (EdgeId::CallingToolsEditDone, s),
        },
        RunState::AwaitingInput { run, batch } => match settle(cx, run, batch) {
            (StateKind::Preparing, s) => (EdgeId::AwaitingInputEditDone, s),
            (_, s) => (EdgeId::AwaitingInputEdit, s),
        },
        RunState::BudgetExhausted { run, .. } => match recheck(cx, run) {
            (true, s) => (EdgeId::BudgetExhaustedEditResume, s),
            (false, s) => (EdgeId::BudgetExhaustedEdit, s),
        },
        s @ RunState::Preparing { .. } => (EdgeId::PreparingEdit, s),
        s => (EdgeId::HandoffEdit, s),
    })
}
