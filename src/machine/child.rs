//! Delegate and transfer calls at run time (revision 4): judging them in a model reply,
//! starting a child run ([`Effect::RunChild`]) with its carved-out budget, taking its report
//! back ([`EventBody::ChildFinished`](super::EventBody::ChildFinished)) and charging its
//! spend, and handing the run over on a transfer.
//!
//! A child is waited on like any tool call: its slot in the batch runs until the report
//! arrives, so the parent cannot answer (and so cannot complete) while a child is out.
//!
//! # What a transfer hands over (revision 5)
//!
//! The receiver continues the sender's conversation, the way the OpenAI Agents SDK hands a
//! conversation's input history to the next agent. The machine holds conversations only as
//! Merkle heads, so the handover takes two steps:
//!
//! 1. `Generating --ModelReplied-->` `Handoff` (`generating.replied.transfer_carry`): the
//!    transfer call is answered in the sender's conversation (`transferred to <agent>`), and
//!    the run rests in `Handoff` with the [`Transfer`](super::Transfer) pending.
//! 2. `Handoff --ConversationSupplied-->` `Preparing` (`handoff.conversation.transfer`): the
//!    executor supplies the sender's messages; they must be exactly the sender's conversation
//!    (length and head, [`check_supplied`](super::check_supplied)) or the event is refused. The
//!    receiver's conversation becomes: its own system prompt (when it has one), then every
//!    message of the sender's but its system prompt — the goal, the sender's turns, tool
//!    calls and results, the transfer call and its answer, verbatim — then a user message
//!    `[transfer from <sender>]` followed by the note. A receiver that was active before
//!    starts over from this: the sender's conversation is the conversation so far.
//!
//! The sender's calls of tools the receiver is not offered stay in the history as they were
//! made. OpenAI-compatible servers, the Responses API and Ollama accept such calls in a
//! history; Anthropic accepts them when the request offers tools, and refuses any `tool_use`
//! block when it offers none, so the Anthropic adapter sends a history's tool calls and
//! results as text when the request has no tools (see `provider::http::anthropic`).

use serde::{Deserialize, Serialize};

use super::budget::{BudgetKey, Usage};
use super::delegation::{Offered, classify, note_of, task_of};
use super::effect::Effect;
use super::error::{ErrorClass, Failure, MachineError};
use super::ids::{AgentId, Digest, EffectId, RunId};
use super::message::{Message, Role, check_supplied};
use super::reply::{ModelReply, ToolCallRequest};
use super::state::{Batch, Outcome, RunData, RunState, Slot, SlotStatus, ToolResult};
use super::step::{Cx, Note, activate};
use super::table::{EdgeId, StateKind};

/// How a child run ended, as its parent hears it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ChildOutcome {
    /// It answered.
    Completed {
        /// Its final answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
    /// A budget ran out before it answered (its own carve-out, usually).
    BudgetExhausted {
        /// Which budget.
        budget: BudgetKey,
    },
    /// It failed.
    Failed {
        /// Why.
        error: Failure,
    },
    /// It was cancelled.
    Cancelled {
        /// Why, if anyone said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl ChildOutcome {
    /// The child's view of a finished run's outcome: a failure for a budget becomes
    /// [`ChildOutcome::BudgetExhausted`], so the parent's model can tell it apart.
    pub fn of(outcome: &Outcome) -> ChildOutcome {
        match outcome {
            Outcome::Completed { answer, .. } => ChildOutcome::Completed {
                answer: answer.clone(),
            },
            Outcome::Failed { error } => match budget_of(error.class) {
                Some(budget) => ChildOutcome::BudgetExhausted { budget },
                None => ChildOutcome::Failed {
                    error: error.clone(),
                },
            },
            Outcome::Cancelled { reason } => ChildOutcome::Cancelled {
                reason: reason.clone(),
            },
        }
    }
}

fn budget_of(class: ErrorClass) -> Option<BudgetKey> {
    BudgetKey::ALL
        .into_iter()
        .find(|&k| ErrorClass::for_budget(k) == class)
}

/// What a finished child reports to its parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildReport {
    /// How it ended.
    pub outcome: ChildOutcome,
    /// What it spent (all of its own descendants included), charged to the parent.
    pub usage: Usage,
    /// The label of its answer: the join of its agents' taints when it ended (see
    /// [`ChildReport::label_of`]). Left out of the encoding when trusted and public.
    #[serde(default, skip_serializing_if = "super::Label::is_trusted_public")]
    pub label: super::Label,
}

impl ChildReport {
    /// The call's result as the parent's model reads it: the answer as-is, or the typed
    /// failure as JSON (`{"status":"budget_exhausted","budget":"turns"}`).
    pub fn result(&self) -> ToolResult {
        match &self.outcome {
            ChildOutcome::Completed { answer: Some(a) } => ToolResult {
                content: a.clone(),
                is_error: false,
                label: self.label,
            },
            other => ToolResult {
                // A plain enum of strings and integers: serialising cannot fail.
                content: serde_json::to_string(other).unwrap_or_default(),
                is_error: !matches!(other, ChildOutcome::Completed { .. }),
                label: super::Label::TRUSTED,
            },
        }
    }

    /// The label a child run's answer carries, from its final state: the join of every
    /// agent's taint, since any of them may have shaped the answer. Call it where the report
    /// is built from the child's last state.
    pub fn label_of(state: &super::RunState) -> super::Label {
        state.data().map_or(super::Label::TRUSTED, |run| {
            run.agents
                .values()
                .fold(super::Label::TRUSTED, |l, a| l.join(a.taint))
        })
    }
}

/// Where a finished child's record ends (revision 5), read from its sealed head when its end
/// is reported: the parent's receipt for the result covers it, so the parent's chain commits
/// to the child's whole chain (and `verify --recursive` checks it against the child).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildProof {
    /// The child run.
    pub run: RunId,
    /// Its last step.
    pub seq: u64,
    /// The chain link of its last step.
    pub chain: Digest,
    /// The receipt link its first receipt hangs from (its anchor in the parent's chain);
    /// absent when the parent had no receipt yet when it asked for the child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// Its last receipt; absent when it has none (it ended before any model turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<ChildReceipt>,
}

/// A child's last receipt, as its parent names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildReceipt {
    /// Its seq in the child.
    pub seq: u64,
    /// Its link (the next receipt's `parent_sig`): the signature, or the digest when unsigned.
    pub link: String,
}

/// The reader declaration of delegate `target` when it is a quarantined reader of this spec.
fn reader<'s>(cx: &Cx<'s>, target: &AgentId) -> Option<&'s super::quarantine::QuarantineSpec> {
    cx.spec.agent(target)?.quarantine.as_ref()
}

/// Judges a delegate or transfer call: `None` when `call` is
/// neither (an ordinary tool, or unknown); otherwise the refusal fed back instead of running
/// it (`None` to run it) and whether it counts against the correction budget.
pub(crate) fn judge(
    cx: &mut Cx<'_>,
    agent: &AgentId,
    call_id: &str,
    call: &ToolCallRequest,
) -> Option<(Option<String>, bool)> {
    let spec_agent = cx.spec.agent(agent)?;
    let offered = classify(spec_agent, &call.name)?;
    let invalid = |cx: &mut Cx<'_>, reason: String| {
        cx.notes.push(Note::ToolInvalid {
            agent: agent.clone(),
            call_id: call_id.to_owned(),
            tool: call.name.clone(),
            reason: reason.clone(),
        });
        Some((
            Some(format!("invalid arguments for {}: {reason}", call.name)),
            true,
        ))
    };
    match offered {
        Offered::Transfer(_) => {
            if let Err(reason) = note_of(&call.arguments) {
                return invalid(cx, reason);
            }
            // A valid transfer alone in its reply never gets here (see `sole_transfer`).
            let reason = format!(
                "{} must be the only call in its reply; nothing was transferred",
                call.name
            );
            invalid(cx, reason)
        }
        Offered::Delegate(target) => {
            let problem = if reader(cx, &target).is_some() {
                super::quarantine::call_problem(&call.arguments)
            } else {
                task_of(&call.arguments).err()
            };
            if let Some(reason) = problem {
                return invalid(cx, reason);
            }
            let cap = spec_agent.delegation.max_depth;
            let depth = cx.spec.spec().depth.saturating_add(1);
            if depth > cap {
                let text = format!(
                    "{} refused: a child here would be {depth} levels deep and max_depth is {cap}; do this part yourself",
                    call.name
                );
                return Some((Some(text), false));
            }
            Some((None, false))
        }
    }
}

/// The target and note of a reply whose only call is a valid transfer of `agent`'s.
pub(crate) fn sole_transfer(
    cx: &Cx<'_>,
    agent: &AgentId,
    reply: &ModelReply,
) -> Option<(AgentId, String)> {
    let [call] = reply.tool_calls.as_slice() else {
        return None;
    };
    let Offered::Transfer(target) = classify(cx.spec.agent(agent)?, &call.name)? else {
        return None;
    };
    Some((target, note_of(&call.arguments).ok()?))
}

/// `Generating --ModelReplied-->` a transfer: the sender's call is answered, and `to` is
/// activated with the goal and the note (or the run fails with `handoff_cycle` when `to` has
/// used `max_agent_visits`).
pub(crate) fn transfer(
    cx: &mut Cx<'_>,
    mut run: RunData,
    from: &AgentId,
    call_id: String,
    to: AgentId,
    note: &str,
) -> (EdgeId, RunState) {
    if let Some(a) = run.agents.get_mut(from) {
        a.strikes = 0;
    }
    let answered = Message {
        tool_call_id: Some(call_id),
        name: Some(format!("{}{to}", super::delegation::TRANSFER_PREFIX)),
        ..Message::text(Role::Tool, format!("transferred to {to}"))
    };
    cx.append(&mut run, from, answered);
    let carry = cx.spec.spec().semantics >= super::delegation::TRANSFER_CONVERSATION_SEMANTICS;
    let max = cx.spec.plan().max_agent_visits;
    let visits = run.agents.get(&to).map_or(0, |a| a.visits);
    if visits >= max {
        cx.notes.push(Note::HandoffCycle {
            agent: to.clone(),
            visits,
        });
        let error = Failure::new(
            ErrorClass::HandoffCycle,
            format!(
                "agent {to} would be activated a {}th time; max_agent_visits is {max}",
                visits + 1
            ),
        );
        let outcome = Outcome::Failed { error };
        return (
            EdgeId::GeneratingRepliedTransferCycle,
            RunState::Done { run, outcome },
        );
    }
    if carry {
        let transfer = super::state::Transfer {
            to,
            note: note.to_owned(),
        };
        let state = RunState::Handoff {
            run,
            from: from.clone(),
            answer: None,
            output: None,
            exhausted: None,
            transfer: Some(transfer),
        };
        return (EdgeId::GeneratingRepliedTransferCarry, state);
    }
    cx.notes.push(Note::Handoff {
        from: from.clone(),
        to: to.clone(),
    });
    let text = if note.trim().is_empty() {
        format!("{}\n\n[transfer from {from}]", run.goal)
    } else {
        format!("{}\n\n[transfer from {from}]\n{note}", run.goal)
    };
    let label = run.agents.get(from).map(|a| a.taint).unwrap_or_default();
    activate(cx, &mut run, &to, text, label);
    (
        EdgeId::GeneratingRepliedTransfer,
        RunState::Preparing { run },
    )
}

/// `Handoff` (a transfer pending) + `ConversationSupplied` (revision 5): `messages` must be the
/// sender's conversation; the receiver continues it (see the module doc).
pub(crate) fn on_conversation_supplied(
    cx: &mut Cx<'_>,
    mut run: RunData,
    from: &AgentId,
    transfer: &super::state::Transfer,
    agent: &AgentId,
    messages: &[Message],
) -> Result<(EdgeId, RunState), MachineError> {
    let expected = run
        .agents
        .get(from)
        .map(|a| a.conversation)
        .unwrap_or_default();
    if agent != from {
        return Err(MachineError::ConversationMismatch {
            agent: format!("{agent} (the transfer waits for {from}'s)"),
            expected_len: expected.len,
            expected_head: expected.head.to_hex(),
            got_len: messages.len(),
            got_head: super::message::head_of(messages).to_hex(),
        });
    }
    check_supplied(from, &expected, messages)?;
    let to = transfer.to.clone();
    cx.notes.push(Note::Handoff {
        from: from.clone(),
        to: to.clone(),
    });
    let system = cx
        .spec
        .agent(&to)
        .map(|a| a.system_prompt.clone())
        .unwrap_or_default();
    let at = cx.at;
    let Some(receiver) = run.agents.get_mut(&to) else {
        return Err(MachineError::UnknownAgent(to.to_string()));
    };
    if receiver.visits == 0 {
        receiver.first_active_at = at;
    }
    receiver.visits += 1;
    receiver.strikes = 0;
    receiver.route = 0;
    receiver.conversation = super::message::ConversationRef::default();
    run.active = to.clone();
    if !system.is_empty() {
        cx.append(&mut run, &to, Message::text(Role::System, system));
    }
    for m in messages.iter().filter(|m| m.role != Role::System) {
        cx.append(&mut run, &to, m.clone());
    }
    let note = if transfer.note.trim().is_empty() {
        format!("[transfer from {from}]")
    } else {
        format!("[transfer from {from}]\n{}", transfer.note)
    };
    cx.append(&mut run, &to, Message::text(Role::User, note));
    Ok((
        EdgeId::HandoffConversationTransfer,
        RunState::Preparing { run },
    ))
}

/// Notes, before a reply's calls are dispatched, how many child runs they start (`calls`:
/// each call with whether it was accepted) and what the parent has left now.
pub(crate) fn plan<'c>(
    cx: &mut Cx<'_>,
    run: &RunData,
    agent: &AgentId,
    calls: impl Iterator<Item = (&'c ToolCallRequest, bool)>,
) {
    let Some(spec_agent) = cx.spec.agent(agent) else {
        return;
    };
    let n = calls
        .filter(|(c, accepted)| {
            *accepted && matches!(classify(spec_agent, &c.name), Some(Offered::Delegate(_)))
        })
        .count();
    cx.children = (n > 0).then(|| (u32::try_from(n).unwrap_or(u32::MAX), cx.remaining(run)));
}

/// Emits `RunChild` for `slot` when it is a delegate call (already judged and counted as a
/// tool call); `None` for any other call. Each child's caps are carved out of what the parent
/// had left before the reply's calls, shared evenly among the children the reply starts.
pub(crate) fn start(
    cx: &mut Cx<'_>,
    run: &RunData,
    agent: &AgentId,
    slot: &mut Slot,
) -> Option<SlotStatus> {
    let spec_agent = cx.spec.agent(agent)?;
    let Offered::Delegate(delegate) = classify(spec_agent, &slot.tool)? else {
        return None;
    };
    let task = if reader(cx, &delegate).is_some() {
        super::quarantine::task_for(run, slot)
    } else {
        task_of(&slot.args).ok()?
    };
    let (siblings, left) = cx.children.unwrap_or((1, cx.remaining(run)));
    let limits = spec_agent.delegation.budget.carve(&left, siblings);
    let depth = cx.spec.spec().depth.saturating_add(1);
    let (agent, call_id) = (agent.clone(), slot.call_id.clone());
    slot.origin.get_or_insert_with(|| cx.next_ref());
    let effect = cx.emit(|id| Effect::RunChild {
        id,
        agent,
        call_id,
        delegate,
        task,
        limits,
        depth,
    });
    Some(SlotStatus::Running { effect })
}

/// `CallingTools` + `ChildFinished`: the child's result goes into its slot and its spend is
/// charged to the run and to the agent that delegated.
pub(crate) fn on_child_finished(
    cx: &mut Cx<'_>,
    mut run: RunData,
    mut batch: Batch,
    effect: &EffectId,
    report: &ChildReport,
) -> Result<(EdgeId, RunState), MachineError> {
    let agent = run.active.clone();
    let slot = batch
        .slot_for(effect)
        .filter(|s| matches!(s.status, SlotStatus::Running { .. }))
        .filter(|s| {
            cx.spec
                .agent(&agent)
                .and_then(|a| classify(a, &s.tool))
                .is_some_and(|o| matches!(o, Offered::Delegate(_)))
        })
        .ok_or_else(|| MachineError::UnknownEffect {
            state: StateKind::CallingTools,
            effect: effect.clone(),
        })?;
    let quarantined = cx
        .spec
        .agent(&agent)
        .and_then(|a| classify(a, &slot.tool))
        .and_then(|o| match o {
            Offered::Delegate(d) => reader(cx, &d).cloned(),
            Offered::Transfer(_) => None,
        });
    let result = match (quarantined, &report.outcome) {
        (Some(q), ChildOutcome::Completed { answer: Some(text) }) => {
            let decision = run
                .agents
                .get(&agent)
                .map_or(super::Label::TRUSTED, |a| a.taint);
            super::quarantine::result(&mut run, &q, slot, decision, report.label, text)
        }
        _ => report.result(),
    };
    slot.status = SlotStatus::Finished { result };
    run.usage.absorb(&report.usage);
    if let Some(a) = run.agents.get_mut(&agent) {
        a.usage.absorb(&report.usage);
    }
    Ok(match super::batch::settle(cx, run, batch) {
        (StateKind::CallingTools, s) => (EdgeId::CallingToolsChildWait, s),
        (StateKind::AwaitingInput, s) => (EdgeId::CallingToolsChildInput, s),
        (_, s) => (EdgeId::CallingToolsChildDone, s),
    })
}
