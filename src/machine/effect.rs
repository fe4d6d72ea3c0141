//! Effects: the machine's only outputs. The executor performs them after the transition that
//! emitted them is durable, and feeds each result back as an event.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{Limits, Remaining};
use super::ids::{AgentId, EffectId, Hlc};
use super::message::ConversationRef;

/// Work for the executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Effect {
    /// Call a model; answer with `ModelReplied` or `ModelFailed`.
    CallModel {
        /// This effect.
        id: EffectId,
        /// The agent whose turn it is.
        agent: AgentId,
        /// What to send.
        request: ModelRequest,
        /// 1 for the first attempt on this route, 2 for the first retry, ...
        attempt: u32,
        /// Do not call before this time (retry backoff).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_before: Option<Hlc>,
    },
    /// Call a tool; answer with `ToolReturned` (or `EffectInDoubt` after a crash).
    CallTool {
        /// This effect.
        id: EffectId,
        /// The agent that asked.
        agent: AgentId,
        /// The model's call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// Validated arguments.
        args: Value,
        /// Stable across re-performing the same call in this run.
        idempotency_key: String,
    },
    /// Ask a non-idempotent tool whether an interrupted call (by its idempotency key) was
    /// performed; answer with `Reconciled`. Asking changes nothing, so it is simply asked again
    /// after a crash.
    Reconcile {
        /// This effect.
        id: EffectId,
        /// The agent whose call is in doubt.
        agent: AgentId,
        /// The model's call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The call's arguments.
        args: Value,
        /// The interrupted call's idempotency key.
        idempotency_key: String,
    },
    /// Run `delegate` as a child run with `task` as its goal, or find the child this effect
    /// already started, and drive it to its end; answer with `ChildFinished` (revision 4).
    RunChild {
        /// This effect; the child's id derives from it.
        id: EffectId,
        /// The agent that delegated.
        agent: AgentId,
        /// The model's call id.
        call_id: String,
        /// The agent the child runs.
        delegate: AgentId,
        /// The child's goal.
        task: String,
        /// The child's run-wide caps, carved out of the parent's remaining budget.
        limits: Limits,
        /// The child's depth in the tree (1 for a child of a top-level run).
        depth: u32,
    },
    /// Ask the retriever for passages for `agent`'s next turn; answer with `Retrieved`
    /// (revision 5). Read-only: performed again after a crash.
    Retrieve {
        /// This effect.
        id: EffectId,
        /// The agent about to take a turn.
        agent: AgentId,
        /// Its conversation so far (the query is built from it).
        conversation: ConversationRef,
        /// The number of the agent's turn about to be taken (1 for its first).
        turn: u64,
    },
    /// Publish the run's staged global memory writes, all or none, in one store transaction;
    /// answer with `MemoryPublished` (revision 5). Performing it again (after a crash) is
    /// safe: the store applies one effect's writes at most once and reports what it did.
    PublishMemory {
        /// This effect; the published versions name it as their origin.
        id: EffectId,
        /// The global memory written.
        name: String,
        /// The writes, by key, each with the version it was based on.
        writes: std::collections::BTreeMap<String, super::memory::Staged>,
    },
    /// Wake the run at `due`: answer with `TimerFired` carrying `due`, stamped no earlier than
    /// it (see [`timer`](super::timer)). Waiting changes nothing, so after a crash it is simply
    /// performed again, and fires at once when `due` has passed.
    StartTimer {
        /// This effect.
        id: EffectId,
        /// The agent whose call sleeps.
        agent: AgentId,
        /// The model's call id.
        call_id: String,
        /// When the run wakes.
        due: Hlc,
    },
    /// Ask a person; answer with `InputProvided`.
    RequestInput {
        /// This effect.
        id: EffectId,
        /// The agent whose call needs a person.
        agent: AgentId,
        /// The model's call id.
        call_id: String,
        /// What is asked.
        request: InputRequest,
    },
}

impl Effect {
    /// The effect's id.
    pub fn id(&self) -> &EffectId {
        match self {
            Effect::CallModel { id, .. }
            | Effect::CallTool { id, .. }
            | Effect::Reconcile { id, .. }
            | Effect::RequestInput { id, .. }
            | Effect::Retrieve { id, .. }
            | Effect::RunChild { id, .. }
            | Effect::PublishMemory { id, .. }
            | Effect::StartTimer { id, .. } => id,
        }
    }

    /// The same effect under another id (a fork performing its parent's outstanding effect).
    pub fn with_id(&self, new: EffectId) -> Effect {
        let mut e = self.clone();
        match &mut e {
            Effect::CallModel { id, .. }
            | Effect::RequestInput { id, .. }
            | Effect::Retrieve { id, .. }
            | Effect::RunChild { id, .. }
            | Effect::PublishMemory { id, .. }
            | Effect::StartTimer { id, .. } => *id = new,
            Effect::CallTool {
                id,
                idempotency_key,
                ..
            }
            | Effect::Reconcile {
                id,
                idempotency_key,
                ..
            } => {
                *idempotency_key = new.idempotency_key();
                *id = new;
            }
        }
        e
    }
}

/// The model request, by reference: the conversation is named by its Merkle head, the tools
/// by name. The executor resolves both (conversation bodies from the store, tool definitions
/// from the spec) into the request a provider sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Provider name (from the agent's route).
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Which of the agent's routes (0 = primary).
    pub route: u32,
    /// The conversation to send.
    pub conversation: ConversationRef,
    /// Tools offered, in grant order.
    pub tools: Vec<String>,
    /// Budget left, the tighter of agent and run.
    pub remaining: Remaining,
    /// The MCP catalogs the offer was resolved against, by server (revision 3; empty when the
    /// run lists no MCP server): the blobs holding what the model was shown of those tools.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub catalogs: std::collections::BTreeMap<String, super::ids::Digest>,
    /// A session summary is asked for (revision 5): the conversation is the summarisation
    /// exchange, and the agent's output schema is not applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
    /// The memory the spec injects (`[memory] inject`, revision 5), rendered as the data
    /// message sent after the conversation, in the user position: recorded here so the
    /// request is exactly what the model saw. See
    /// [`memory::injected_message`](super::memory::injected_message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The output-token limit to ask for instead of the agent's `max_output_tokens`: twice
    /// what a cut reply had, after `on_truncated = "retry"` (revision 7). Still lowered to
    /// `remaining.tokens` by the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// The agent's tool results compacted so far to fit its context window, applied to the
    /// conversation before it is sent (see [`compact_messages`](super::context::compact_messages)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted: Vec<super::context::Compacted>,
    /// For a summary call of `on_overflow = { summarize = … }`: the conversation is that
    /// agent's, and what is sent is the exchange [`SummaryOf::exchange`] builds from it.
    ///
    /// [`SummaryOf::exchange`]: super::context_summary::SummaryOf::exchange
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarize: Option<Box<super::context_summary::SummaryOf>>,
    /// The summary the agent's conversation is sent with, in place of the messages it
    /// replaces (see [`context_summary`](super::context_summary)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarized: Option<Box<super::context_summary::ContextSummary>>,
}

impl ModelRequest {
    /// Turns `messages`, the bodies of [`conversation`](Self::conversation), into what the
    /// provider receives: the compactions and the summary the context window asked for
    /// applied (see [`context`](super::context)), then the injected memory (revision 5) after
    /// them; for a context summary call, the summarisation exchange. Call
    /// it wherever a recorded request is turned into a provider request, so the driver,
    /// `show` and cassette export agree.
    pub fn complete_messages(&self, messages: &mut Vec<super::Message>) {
        if let Some(of) = &self.summarize {
            *messages = of.exchange(messages);
            return;
        }
        super::context::compact_messages(messages, &self.compacted);
        if let Some(summary) = &self.summarized {
            summary.apply(messages);
        }
        if let Some(text) = &self.memory {
            messages.push(super::memory::injected_message(text));
        }
    }

    /// Whose stored conversation [`conversation`](Self::conversation) is, for a `CallModel`
    /// of `agent`: the summarisation exchange's for a session summary, the summarised
    /// agent's for a context summary, else `agent`'s.
    pub fn conversation_owner(&self, agent: &super::AgentId) -> super::AgentId {
        match (&self.summarize, self.summary) {
            (Some(of), _) => of.agent.clone(),
            (None, true) => super::AgentId::from(super::session::SUMMARY_CONVERSATION),
            (None, false) => agent.clone(),
        }
    }

    /// The model settings this request is sent with: `agent`'s (the spec's agent whose turn
    /// it is), with the output-token limit a truncation retry set in place of its
    /// `max_output_tokens`. Call it wherever a recorded request is turned into what a
    /// provider receives, so the driver, `show` and cassette export agree.
    pub fn settings(&self, agent: Option<&super::AgentSpec>) -> super::ModelSettings {
        let mut settings = agent.map(|a| a.model_settings.clone()).unwrap_or_default();
        if let Some(limit) = self.max_output_tokens {
            settings.max_output_tokens = Some(limit);
        }
        settings
    }
}

/// What a person is asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// Why a person is needed.
    pub kind: InputKind,
    /// The tool concerned.
    pub tool: String,
    /// The call's arguments (for an interactive tool: the question).
    pub args: Value,
    /// For an approval a tool's policy asked for (`on_untrusted = "ask"`): the rule the call
    /// breaks, so the person knows what they are approving. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a person is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// A `requires_approval` tool call: approve, reject, or answer in its place.
    Approval,
    /// An interactive tool asks a question: answer (or reject).
    Question,
    /// A non-idempotent call was interrupted mid-flight: approve retries it, reject reports
    /// it failed, an answer becomes its result.
    InDoubt,
}
