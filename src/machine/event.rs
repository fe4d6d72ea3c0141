//! Events: the machine's only inputs. Each carries the run it is addressed to and its time.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{BudgetKey, Scope};
use super::edit::Edit;
use super::ids::{Digest, EffectId, Hlc, RunId};
use super::reply::{ModelFailure, ModelReply};
use super::spec::ToolSpec;
use super::table::EventKind;

/// One input to [`step`](super::step).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The run this event is for; effects emitted in response carry it in their ids.
    pub run: RunId,
    /// When it happened (HLC). The only clock the machine sees.
    pub at: Hlc,
    /// What happened.
    pub body: EventBody,
}

impl Event {
    /// An event for `run` at `at`.
    pub fn new(run: &RunId, at: Hlc, body: EventBody) -> Self {
        Event {
            run: run.clone(),
            at,
            body,
        }
    }

    /// The event's kind, as the transition table names it.
    pub fn kind(&self) -> EventKind {
        self.body.kind()
    }
}

/// What happened.
// Events are built once and passed to `step` by reference, so the size of the largest variant
// (a model reply) costs nothing worth an extra allocation per reply.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    /// Begin the run with this goal.
    Start {
        /// The user's goal, the entry agent's first user message.
        goal: String,
    },
    /// Begin a run of a session with this goal and the conversations the session's previous
    /// run ended with (revision 5; see [`session`](super::session)).
    SessionStart {
        /// The user's goal, the entry agent's next user message.
        goal: String,
        /// What each agent's conversation goes on from.
        seed: super::session::SessionSeed,
    },
    /// Leave a step boundary (`Preparing`, `Handoff`, a non-resting `BudgetExhausted`).
    Proceed,
    /// A model call succeeded.
    ModelReplied {
        /// The `CallModel` effect answered.
        effect: EffectId,
        /// The reply.
        reply: ModelReply,
        /// How the reply's text streamed in, when it came in more than one piece: the byte
        /// length of each piece, in order (the text cut at these lengths gives the pieces
        /// back). Empty when it came whole. Kept so a cassette exported from the run replays
        /// the stream as it was; the machine does not read it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        chunks: Vec<u32>,
    },
    /// A model call failed.
    ModelFailed {
        /// The `CallModel` effect answered.
        effect: EffectId,
        /// The classified failure.
        failure: ModelFailure,
    },
    /// A tool call finished.
    ToolReturned {
        /// The `CallTool` effect answered.
        effect: EffectId,
        /// Its result.
        outcome: ToolOutcome,
    },
    /// A person answered a `RequestInput`.
    InputProvided {
        /// The `RequestInput` effect answered.
        effect: EffectId,
        /// The answer.
        input: HumanInput,
    },
    /// On resume: a non-idempotent tool call had started and has no recorded result.
    EffectInDoubt {
        /// The `CallTool` effect.
        effect: EffectId,
    },
    /// A tool's `reconcile` command answered whether an interrupted call was performed.
    Reconciled {
        /// The `Reconcile` effect answered.
        effect: EffectId,
        /// Its answer.
        answer: Reconciliation,
    },
    /// A cap was raised (by a person, or by a fork edit).
    BudgetRaised {
        /// Whose budget.
        scope: Scope,
        /// Which budget.
        key: BudgetKey,
        /// The new cap, in the key's unit (nanodollars for cost, ms for wall time).
        limit: u64,
    },
    /// Stop the run.
    CancelRequested {
        /// Why, if anyone said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Changes applied at a fork point (the first transition of a fork that edits).
    Edited {
        /// The edits, applied in order.
        edits: Vec<Edit>,
    },
    /// The retriever answered a `Retrieve` (revision 5; see [`retrieval`](super::retrieval)).
    Retrieved {
        /// The `Retrieve` effect answered.
        effect: EffectId,
        /// The passages, or why there are none.
        retrieval: super::retrieval::Retrieval,
    },
    /// A child run started by `RunChild` ended (revision 4).
    ChildFinished {
        /// The `RunChild` effect answered.
        effect: EffectId,
        /// How it ended and what it spent.
        report: super::child::ChildReport,
        /// Revision 5: where the child's record ends — its last receipt and history tip — so
        /// the parent's receipt for this result commits to the child's whole chain. Absent
        /// before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<super::child::ChildProof>,
    },
    /// The messages of the conversation the state waits for
    /// ([`RunState::wants_conversation`](super::RunState::wants_conversation)), in order,
    /// supplied by the executor from its store (revision 5: a transfer's sender's
    /// conversation). The machine checks them against that conversation's length and Merkle
    /// head ([`check_supplied`](super::check_supplied)) before it uses them, so they are
    /// recorded here, in the history, exactly as the receiver got them: replay, forks and
    /// `verify` reproduce the handover from the event alone.
    ConversationSupplied {
        /// Whose conversation they are.
        agent: super::ids::AgentId,
        /// The messages, first to last.
        messages: Vec<super::message::Message>,
    },
    /// The run's view of its global memory, read from the store at its first step boundary
    /// (revision 5): every key with its latest version (forgotten keys included, without a
    /// value). Recorded, so replay, verify and forks see what the run saw.
    MemoryLoaded {
        /// The global memory (`[memory] global`).
        name: String,
        /// Its entries, by key.
        entries: std::collections::BTreeMap<String, super::memory::Versioned>,
        /// True when the entries came from a cassette (`runtape replay`), not from this
        /// database: `verify` then does not look for them here.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        replayed: bool,
        /// For a fork taken before its line loaded global memory: the load after the fork
        /// point whose view it takes (an ancestor's), so it sees the memory as of its fork
        /// point and none of its ancestors' later publishes; `verify` checks the entries are
        /// that load's. `None` for a load read from the store.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_ancestor: Option<super::memory::LoadedAt>,
    },
    /// The store answered a `PublishMemory` (revision 5).
    MemoryPublished {
        /// The `PublishMemory` effect answered.
        effect: EffectId,
        /// Published, or refused with the keys that moved.
        outcome: super::memory::PublishOutcome,
        /// True when the outcome came from a cassette (`runtape replay`): nothing was written
        /// to this database, and `verify` does not look for it here.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        replayed: bool,
    },
    /// A `StartTimer` came due: the call sleeping on it wakes (see [`timer`](super::timer)).
    /// Stamped no earlier than `due` unless `early`; refused before it, for another instant
    /// than the one recorded, and once the call woke.
    TimerFired {
        /// The `StartTimer` effect answered.
        effect: EffectId,
        /// Its due instant, as the effect recorded it.
        due: Hlc,
        /// A person fired it before `due` (`runtape wake`): the event's time is when it
        /// actually fired, and what the model is told says so (see [`wake`](super::wake)).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        early: bool,
    },
    /// An MCP server listed its tools (revision 3): from the next model request on, the
    /// server's tools the agents are offered are the granted ones in this list. Committed at a
    /// step boundary before the run's first model request, and again after the server said its
    /// list changed or a resume found a list other than the recorded one.
    ToolsListed {
        /// The server (`[[mcp]]` name).
        server: String,
        /// BLAKE3 of the catalog: the listed tools with descriptions, schemas and flags,
        /// stored as a content-addressed blob under this digest.
        catalog: Digest,
        /// The names the tools are offered by (`SERVER__TOOL`), in the server's order.
        tools: Vec<String>,
        /// Revision 4: the definitions (description, schema, flags with the spec's
        /// `[mcp.tools.NAME]` overrides applied, as in the catalog) of the listed tools the
        /// run's spec does not have — tools the server added after the run started — so the
        /// machine can offer and check them knowing only the history. Empty before.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        added: Vec<ToolSpec>,
    },
}

impl EventBody {
    /// The files the event brings (a tool result's, a person's answer's), whose bytes the
    /// transition recording it stores; none for other events.
    pub fn files(&self) -> &[super::Attachment] {
        match self {
            EventBody::ToolReturned {
                outcome: ToolOutcome::Ok { files, .. },
                ..
            }
            | EventBody::InputProvided {
                input: HumanInput::Answer { files, .. },
                ..
            } => files,
            _ => &[],
        }
    }

    /// The kind, as the transition table names it.
    pub fn kind(&self) -> EventKind {
        match self {
            EventBody::Start { .. } => EventKind::Start,
            EventBody::SessionStart { .. } => EventKind::SessionStart,
            EventBody::Retrieved { .. } => EventKind::Retrieved,
            EventBody::Proceed => EventKind::Proceed,
            EventBody::ModelReplied { .. } => EventKind::ModelReplied,
            EventBody::ModelFailed { .. } => EventKind::ModelFailed,
            EventBody::ToolReturned { .. } => EventKind::ToolReturned,
            EventBody::InputProvided { .. } => EventKind::InputProvided,
            EventBody::EffectInDoubt { .. } => EventKind::EffectInDoubt,
            EventBody::Reconciled { .. } => EventKind::Reconciled,
            EventBody::BudgetRaised { .. } => EventKind::BudgetRaised,
            EventBody::CancelRequested { .. } => EventKind::CancelRequested,
            EventBody::Edited { .. } => EventKind::Edited,
            EventBody::ToolsListed { .. } => EventKind::ToolsListed,
            EventBody::ChildFinished { .. } => EventKind::ChildFinished,
            EventBody::ConversationSupplied { .. } => EventKind::ConversationSupplied,
            EventBody::MemoryLoaded { .. } => EventKind::MemoryLoaded,
            EventBody::MemoryPublished { .. } => EventKind::MemoryPublished,
            EventBody::TimerFired { .. } => EventKind::TimerFired,
        }
    }
}

/// A tool's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    /// It worked; the value is fed back to the model (a string as-is, anything else as JSON).
    Ok {
        /// The result.
        value: Value,
        /// Files the result carries (an MCP result's images and PDFs), by digest: their bytes
        /// are stored as blobs with the transition that records this event, and the tool
        /// message fed back to the model carries them. Left out of the encoding when empty, so
        /// results without files hash as they always did.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<super::Attachment>,
    },
    /// It failed (non-zero exit, timeout, its own error); fed back to the model as an error.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl ToolOutcome {
    /// A result without files.
    pub fn ok(value: Value) -> Self {
        ToolOutcome::Ok {
            value,
            files: Vec::new(),
        }
    }
}

/// What a tool's `reconcile` command said about an interrupted call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Reconciliation {
    /// It was performed; `result` is what it produced, when the tool knows.
    Performed {
        /// The call's result, fed back to the model like a tool result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
    },
    /// It was not performed: it may be performed now, with the same idempotency key.
    NotPerformed,
    /// Nobody knows (the command said so, failed, timed out or answered nonsense).
    Unknown {
        /// Why, for the person who decides.
        reason: String,
    },
}

/// A person's answer to a `RequestInput`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HumanInput {
    /// Run the gated call (or retry the in-doubt one).
    Approve,
    /// Do not run it; the model is told the call was declined.
    Reject {
        /// Why, passed on to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Use this text as the call's result instead of running it.
    Answer {
        /// The text.
        text: String,
        /// Files the person gave with it (`resume --input TEXT --attach FILE`), by digest:
        /// their bytes are stored as blobs with the transition that records this event, and
        /// the tool message the answer becomes carries them. Left out of the encoding when
        /// empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<super::Attachment>,
    },
}
