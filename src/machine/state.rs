//! The run state: which phase the run is in, plus the data every phase carries.
//!
//! Everything here is plain data with ordered maps, so its encoding is stable and
//! [`RunState::state_hash`] is a pure function of the history. The state holds no run id
//! (events carry it) and no message bodies (conversations are Merkle heads; see
//! [`message`](super::message)), so it stays small and a fork that replays its parent's events
//! reaches the parent's state hashes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{BudgetKey, Limits, Scope, Usage};
use super::error::Failure;
use super::ids::{AgentId, Digest, EffectRef, Hlc};
use super::message::ConversationRef;
use super::table::StateKind;

/// Where a run is. See `statechart.md` for every edge between these.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    /// The run exists but has not started; `Start` (carrying the goal) is the way out. This
    /// state exists because the goal and start time must arrive in an event like everything
    /// else.
    Created,
    /// Step boundary: about to build the next model request for the active agent. A run at
    /// rest here is cleanly pausable.
    Preparing {
        /// Run data.
        run: RunData,
    },
    /// A `CallModel` effect is outstanding for the active agent.
    Generating {
        /// Run data.
        run: RunData,
        /// The outstanding call.
        call: ModelCall,
    },
    /// A session run writes the summary of what fell out of an agent's window (revision 5; see
    /// [`session`](super::session)): a `CallModel` for it is outstanding.
    Summarizing {
        /// Run data.
        run: RunData,
        /// The outstanding summary call.
        call: ModelCall,
        /// The summaries still to write, the one being written first.
        summaries: super::summary::Summaries,
    },
    /// The active agent's retriever is asked for passages before its model turn (revision 5;
    /// see [`retrieval`](super::retrieval)): a `Retrieve` effect is outstanding.
    Retrieving {
        /// Run data.
        run: RunData,
        /// The `Retrieve` effect.
        effect: EffectRef,
    },
    /// Tool calls are outstanding; the batch holds the results that have arrived.
    CallingTools {
        /// Run data.
        run: RunData,
        /// The calls of the model's last reply.
        batch: Batch,
    },
    /// No tool is running and at least one call waits for a person.
    AwaitingInput {
        /// Run data.
        run: RunData,
        /// The calls of the model's last reply.
        batch: Batch,
    },
    /// The active agent finished (with an answer, or its budget ran out); `Proceed` consults
    /// the plan.
    Handoff {
        /// Run data.
        run: RunData,
        /// The agent that finished.
        from: AgentId,
        /// Its final answer, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// The answer parsed and validated against the agent's output schema, for agents
        /// that have one (`answer` is then its compact JSON text).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        /// Set when it finished because this budget ran out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exhausted: Option<BudgetKey>,
        /// Revision 5: it handed the run over by a `transfer_to_<agent>` call. The run waits
        /// here for its conversation's messages ([`RunState::wants_conversation`]), which the
        /// receiver continues; `Proceed` does not apply.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transfer: Option<Transfer>,
    },
    /// A cap was hit before a model call.
    BudgetExhausted {
        /// Run data.
        run: RunData,
        /// Whose budget.
        scope: Scope,
        /// Which budget.
        key: BudgetKey,
        /// True when the policy is `pause`: the run rests here until `BudgetRaised`.
        resting: bool,
    },
    /// An exit agent answered and the run staged global memory writes (revision 5): the
    /// `PublishMemory` effect is outstanding. The run completes when its answer says the
    /// writes were published; when they were refused it goes back to the writer (see
    /// [`memory`](super::memory)).
    Publishing {
        /// Run data.
        run: RunData,
        /// The agent whose answer completes the run.
        from: AgentId,
        /// Its final answer, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// Its structured output, for agents with an output schema.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        /// The `PublishMemory` effect.
        effect: EffectRef,
        /// A cancel that arrived while publishing: it takes effect only if the publish is
        /// refused (a publish that was applied cannot be taken back).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancel: Option<super::memory::PendingCancel>,
    },
    /// The run was about to end failed or cancelled and `on_failure = "compensate"`: the undo
    /// of one completed call is outstanding (see [`saga`](super::saga)), the latest first.
    Compensating {
        /// Run data; its `saga` says what is undone and what is left.
        run: RunData,
        /// How the run ends once the saga is over.
        outcome: Outcome,
        /// The saga entry whose undo is outstanding.
        entry: u32,
    },
    /// Terminal. Every event is refused.
    Done {
        /// Run data at the end.
        run: RunData,
        /// How it ended.
        outcome: Outcome,
    },
}

/// A handover by tool call waiting for the sender's conversation (revision 5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// The agent the run is handed to.
    pub to: AgentId,
    /// The sender's note for it (empty when none was given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// An exit agent answered.
    Completed {
        /// Its answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// The answer as structured output: parsed and validated against the exit agent's
        /// output schema (absent for agents without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
    },
    /// It failed.
    Failed {
        /// Why.
        error: Failure,
    },
    /// Someone cancelled it.
    Cancelled {
        /// Why, if they said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// Data every started state carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    /// Seq of the transition that produced this state (1 for the state after `Start`).
    pub seq: u64,
    /// `Start.at`: wall-time budgets count from here.
    pub started_at: Hlc,
    /// The goal. Shared: every step clones the state, and a goal can be long.
    pub goal: std::sync::Arc<str>,
    /// The agent whose turn it is.
    pub active: AgentId,
    /// Every agent activated so far. Boxed: a map's node holds room for eleven entries
    /// whatever it holds, and every run in flight keeps its state (and, during a step, the
    /// next one); eleven boxes are a tenth of eleven agents' data. Serialised as the agents
    /// themselves.
    pub agents: BTreeMap<AgentId, Box<AgentRun>>,
    /// Run-wide usage.
    pub usage: Usage,
    /// Run-wide caps (raisable).
    pub limits: Limits,
    /// Model routes cooling down after they gave up, keyed `provider/model`, with the time
    /// until which they are skipped. Shared by every agent; expired entries are dropped at
    /// the next step boundary.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cooldowns: BTreeMap<String, Hlc>,
    /// The tool list each MCP server gave last, by server (revision 3; empty before): what
    /// the next model request offers of that server's tools. See
    /// [`EventBody::ToolsListed`](super::EventBody::ToolsListed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub catalogs: BTreeMap<String, ListedTools>,
    /// What the run's agents remember (revision 5; empty before): per-agent and shared notes,
    /// and the run's view of its global memory with the writes it has staged. See
    /// [`memory`](super::memory).
    #[serde(default, skip_serializing_if = "super::memory::Memory::is_empty")]
    pub memory: super::memory::Memory,
    /// The completed calls whose tool declares an undo, in the order they completed, with
    /// where each undo stands (`on_failure = "compensate"` only; see [`saga`](super::saga)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub saga: Vec<super::saga::SagaEntry>,
    /// Tool results and reader answers kept from the model, in the order they were hidden:
    /// the model names the first `$r1` (see [`hidden`](super::hidden)). Empty in a run no
    /// tool of which hides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<super::hidden::HiddenValue>,
}

/// One MCP server's tool list as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedTools {
    /// Digest of the catalog blob (descriptions, schemas, flags).
    pub catalog: Digest,
    /// The offered names (`SERVER__TOOL`), in the server's order.
    pub tools: Vec<String>,
    /// Definitions of the listed tools the run's spec does not have: tools the server added
    /// after the run started (revision 4; empty before). See
    /// [`EventBody::ToolsListed`](super::EventBody::ToolsListed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<super::ToolSpec>,
}

/// One agent's part of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRun {
    /// Its conversation (by reference).
    pub conversation: ConversationRef,
    /// What it has spent, over all its visits.
    pub usage: Usage,
    /// Its caps (raisable).
    pub limits: Limits,
    /// Times activated.
    pub visits: u32,
    /// When first activated: its wall-time budget counts from here.
    pub first_active_at: Hlc,
    /// Bad tool calls in a row (reset by a reply whose calls are all valid).
    pub strikes: u32,
    /// Route in use: the first one not cooling down, chosen again at every step boundary.
    pub route: u32,
    /// Its conversation was opened from a session's history (revision 5): it has its system
    /// prompt already, so its first activation adds only the user message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seeded: bool,
    /// The output-token limit its model calls ask for instead of its `max_output_tokens`,
    /// set when a cut reply is retried (revision 7; see [`OnTruncated`](super::OnTruncated)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<u64>,
    /// The text of its replies cut so far and continued (`on_truncated = "continue"`,
    /// revision 7): its answer begins with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub continued: String,
    /// The join of the labels of every message its conversation holds (see
    /// [`label`](super::label)): what its next model reply is labelled with, and what the
    /// tool policy judges its calls by. Trusted and public, the default, is left out of the
    /// encoding.
    #[serde(default, skip_serializing_if = "super::Label::is_trusted_public")]
    pub taint: super::Label,
    /// The sizes of its conversation as requests send it, and what was compacted to fit its
    /// context window (an agent with `[agents.context]` only; see [`context`](super::context)).
    #[serde(
        default,
        skip_serializing_if = "super::context::ContextLedger::is_empty"
    )]
    pub context: super::context::ContextLedger,
}

/// The outstanding model call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The `CallModel` effect.
    pub effect: EffectRef,
    /// Route index.
    pub route: u32,
    /// Attempt on that route (1-based).
    pub attempt: u32,
}

/// The tool calls of one model reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// In the order the model made them; results are appended to the conversation in this
    /// order whatever order they arrive in.
    pub slots: Vec<Slot>,
}

/// One tool call and where it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    /// The call id.
    pub call_id: String,
    /// The tool name as the model wrote it.
    pub tool: String,
    /// The arguments.
    pub args: Value,
    /// Where the call stands.
    pub status: SlotStatus,
    /// The effect that first dispatched it; its idempotency key derives from this, so a retry
    /// performs it with the same key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<EffectRef>,
    /// The deadline of a call waiting for a person, when the spec gives its tool one (see
    /// [`deadline`](super::deadline)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<super::timer::Timer>,
    /// Who the call waits for since its deadline escalated it, and how many times it was
    /// handed on; absent while it waits for whoever answers first (see
    /// [`escalation`](super::escalation)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated: Option<super::escalation::Escalated>,
    /// How many hidden values the run held when the call was judged: only those may be
    /// filled into its arguments, so a value hidden later (a result of the same reply that
    /// came back while this call waited for a person) is never filled in unjudged (see
    /// [`hidden`](super::hidden)).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden_seen: usize,
    /// The files its result carries ([`ToolOutcome::Ok`](super::ToolOutcome::Ok)'s), put on
    /// the tool message when the batch settles. Left out of the encoding when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<super::Attachment>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Slot {
    /// The hidden values this call's arguments may name: those held when it was judged.
    pub fn nameable<'r>(&self, run: &'r RunData) -> &'r [super::hidden::HiddenValue] {
        &run.hidden[..self.hidden_seen.min(run.hidden.len())]
    }
}

/// Where a tool call stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SlotStatus {
    /// A `CallTool` effect is outstanding.
    Running {
        /// The effect.
        effect: EffectRef,
    },
    /// Waiting for a person's approval.
    Approval {
        /// The `RequestInput` effect.
        effect: EffectRef,
    },
    /// An interactive tool waits for a person's answer.
    Question {
        /// The `RequestInput` effect.
        effect: EffectRef,
    },
    /// An interrupted call waits for a person's decision.
    InDoubt {
        /// The `RequestInput` effect.
        effect: EffectRef,
    },
    /// An interrupted call's tool is asked whether it was performed.
    Reconciling {
        /// The `Reconcile` effect.
        effect: EffectRef,
    },
    /// A `sleep_for`/`sleep_until` call sleeps until `due` (see [`timer`](super::timer)).
    Sleeping {
        /// The `StartTimer` effect.
        effect: EffectRef,
        /// When it wakes.
        due: Hlc,
    },
    /// Finished (run, refused, or answered).
    Finished {
        /// The result fed back to the model.
        result: ToolResult,
    },
}

impl SlotStatus {
    /// The outstanding effect, if any.
    pub fn effect(&self) -> Option<EffectRef> {
        match self {
            SlotStatus::Running { effect }
            | SlotStatus::Approval { effect }
            | SlotStatus::Question { effect }
            | SlotStatus::InDoubt { effect }
            | SlotStatus::Reconciling { effect }
            | SlotStatus::Sleeping { effect, .. } => Some(*effect),
            SlotStatus::Finished { .. } => None,
        }
    }
}

/// A result as fed back to the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text.
    pub content: String,
    /// True for errors and refusals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Its label: the tool's (or child run's) for a result it produced; trusted for the
    /// machine's refusals and a person's answers. Left out of the encoding when trusted and
    /// public.
    #[serde(default, skip_serializing_if = "super::Label::is_trusted_public")]
    pub label: super::Label,
}

impl Batch {
    /// True while any call is running (or its tool is being asked whether it ran).
    pub fn any_running(&self) -> bool {
        self.slots.iter().any(|s| {
            matches!(
                s.status,
                SlotStatus::Running { .. }
                    | SlotStatus::Reconciling { .. }
                    | SlotStatus::Sleeping { .. }
            )
        })
    }

    /// True when every call has a result.
    pub fn all_finished(&self) -> bool {
        self.slots
            .iter()
            .all(|s| matches!(s.status, SlotStatus::Finished { .. }))
    }

    /// The slot whose outstanding effect is `effect`.
    pub(crate) fn slot_for(&mut self, effect: &super::EffectId) -> Option<&mut Slot> {
        self.slots
            .iter_mut()
            .find(|s| s.status.effect().is_some_and(|e| e.matches(effect)))
    }
}

impl RunState {
    /// The phase, as the transition table names it.
    pub fn kind(&self) -> StateKind {
        match self {
            RunState::Created => StateKind::Created,
            RunState::Preparing { .. } => StateKind::Preparing,
            RunState::Generating { .. } => StateKind::Generating,
            RunState::Summarizing { .. } => StateKind::Summarizing,
            RunState::Retrieving { .. } => StateKind::Retrieving,
            RunState::CallingTools { .. } => StateKind::CallingTools,
            RunState::AwaitingInput { .. } => StateKind::AwaitingInput,
            RunState::Handoff { .. } => StateKind::Handoff,
            RunState::BudgetExhausted { .. } => StateKind::BudgetExhausted,
            RunState::Publishing { .. } => StateKind::Publishing,
            RunState::Compensating { .. } => StateKind::Compensating,
            RunState::Done { .. } => StateKind::Done,
        }
    }

    /// The run data (`None` before `Start`).
    pub fn data(&self) -> Option<&RunData> {
        match self {
            RunState::Created => None,
            RunState::Preparing { run }
            | RunState::Generating { run, .. }
            | RunState::Summarizing { run, .. }
            | RunState::Retrieving { run, .. }
            | RunState::CallingTools { run, .. }
            | RunState::AwaitingInput { run, .. }
            | RunState::Handoff { run, .. }
            | RunState::BudgetExhausted { run, .. }
            | RunState::Publishing { run, .. }
            | RunState::Compensating { run, .. }
            | RunState::Done { run, .. } => Some(run),
        }
    }

    pub(crate) fn data_mut(&mut self) -> Option<&mut RunData> {
        match self {
            RunState::Created => None,
            RunState::Preparing { run }
            | RunState::Generating { run, .. }
            | RunState::Summarizing { run, .. }
            | RunState::Retrieving { run, .. }
            | RunState::CallingTools { run, .. }
            | RunState::AwaitingInput { run, .. }
            | RunState::Handoff { run, .. }
            | RunState::BudgetExhausted { run, .. }
            | RunState::Publishing { run, .. }
            | RunState::Compensating { run, .. }
            | RunState::Done { run, .. } => Some(run),
        }
    }

    /// Seq of the transition that produced this state (0 for `Created`).
    pub fn seq(&self) -> u64 {
        self.data().map_or(0, |d| d.seq)
    }

    /// True for `Done`.
    pub fn is_done(&self) -> bool {
        matches!(self, RunState::Done { .. })
    }

    /// True where the executor should feed `Proceed` (a step boundary it may leave).
    pub fn wants_proceed(&self) -> bool {
        matches!(
            self,
            RunState::Preparing { .. }
                | RunState::Handoff { transfer: None, .. }
                | RunState::BudgetExhausted { resting: false, .. }
        )
    }

    /// The conversation whose messages the executor must supply next, in a
    /// [`ConversationSupplied`](super::EventBody::ConversationSupplied) event, and whose it is:
    /// the sender's, once a transfer (revision 5) handed the run over. The executor reads the
    /// bodies from where it keeps conversations (the store files each message under its
    /// head); the machine checks them against this reference before it uses them, so a
    /// supplied list that is not this conversation is refused, never copied. `None` when the
    /// state waits for no conversation.
    pub fn wants_conversation(&self) -> Option<(&AgentId, ConversationRef)> {
        match self {
            RunState::Handoff {
                run,
                from,
                transfer: Some(_),
                ..
            } => run.agents.get(from).map(|a| (from, a.conversation)),
            _ => None,
        }
    }

    /// The outcome, once done.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            RunState::Done { outcome, .. } => Some(outcome),
            _ => None,
        }
    }

    /// Effects this state is waiting on, as positions in the run (for finding them in the
    /// history, e.g. when a fork must perform its parent's outstanding effects).
    pub fn outstanding(&self) -> Vec<EffectRef> {
        match self {
            RunState::Generating { call, .. } | RunState::Summarizing { call, .. } => {
                vec![call.effect]
            }
            RunState::Retrieving { effect, .. } | RunState::Publishing { effect, .. } => {
                vec![*effect]
            }
            RunState::Compensating { run, entry, .. } => run
                .saga
                .get(*entry as usize)
                .and_then(|e| match e.status {
                    super::saga::SagaStatus::Running { effect } => Some(effect),
                    _ => None,
                })
                .into_iter()
                .collect(),
            RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => batch
                .slots
                .iter()
                .flat_map(|s| {
                    let deadline = s.deadline.filter(|_| {
                        matches!(
                            s.status,
                            SlotStatus::Approval { .. } | SlotStatus::Question { .. }
                        )
                    });
                    s.status
                        .effect()
                        .into_iter()
                        .chain(deadline.map(|d| d.effect))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The state's canonical bytes: compact JSON of this plain data. Every map is a `BTreeMap`
    /// (and serde_json's `Value` maps are ordered), no field is a float outside tool arguments,
    /// and field order is fixed by declaration, so the bytes are a pure function of the state.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // A state is rarely under a kilobyte: start there rather than grow from 128 bytes.
        let mut out = Vec::with_capacity(1024);
        // Serialising cannot fail: the state is strings, integers, bools, ordered maps and JSON
        // values, none of which has a fallible Serialize impl.
        crate::compact_json::write(&mut out, self).expect("RunState always serialises");
        out
    }

    /// The state's hash under `hash` (the run's [`HistoryHash`](super::HistoryHash), from its
    /// revision) over [`canonical_bytes`](Self::canonical_bytes): what a transition records
    /// and a replay compares.
    pub fn state_hash(&self, hash: super::HistoryHash) -> Digest {
        hash.of(&self.canonical_bytes())
    }
}
