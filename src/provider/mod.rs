//! Model providers: the [`ModelProvider`] trait, the request it receives, the error it
//! returns, and the offline providers (`echo`, `scripted`). The HTTP adapters (OpenAI
//! compatible, Anthropic, Ollama) live in [`http`].
//!
//! A provider turns a [`ProviderRequest`] into a [`ModelReply`] (the same shape for every
//! provider) or a classified [`ProviderError`]. Streaming providers report text deltas to the
//! token sink as they arrive. To cancel a call, drop its future: the HTTP adapters tear down
//! the connection when that happens.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::machine::{
    AgentId, Message, ModelFailure, ModelReply, ModelSettings, ProviderErrorClass, Remaining,
};

mod echo;
pub mod http;
mod scripted;

pub use echo::EchoProvider;
pub use scripted::{ScriptOutcome, ScriptedProvider};

/// Receives text deltas of a streamed reply, in order. Called from the provider's task; keep
/// it cheap (the executor forwards to observers without blocking).
pub type TokenSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A model call, resolved: the messages and tool definitions themselves, not references.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderRequest {
    /// The agent whose turn it is.
    pub agent: AgentId,
    /// The model to ask.
    pub model: String,
    /// The agent's conversation, system prompt first.
    pub messages: Arc<Vec<Message>>,
    /// Tools offered, in grant order.
    pub tools: Vec<ToolDef>,
    /// Budget left; adapters may cap the output tokens they ask for with `remaining.tokens`.
    pub remaining: Remaining,
    /// 1 for the first attempt on this route, 2 for the first retry, ...
    pub attempt: u32,
    /// The agent's model settings (sampling, stop sequences, reasoning, ...), encoded per
    /// provider.
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub settings: ModelSettings,
    /// The agent's output schema: ask for structured output matching it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Which run asks, and where it sits in its delegation tree. Not part of what a provider
    /// sends: a cassette uses it to record and replay each delegated child's calls in the
    /// child's own section.
    #[serde(skip)]
    pub origin: RequestOrigin,
    /// The bytes of the files the messages carry ([`Message::attachments`]), by digest: read
    /// from the store by the executor before the call. Not recorded with the request (the
    /// messages name each file by its digest, so a cassette's fingerprint covers them).
    /// A file missing here is sent as its placeholder text.
    #[serde(skip)]
    pub files: Files,
}

/// File bytes by digest (see [`ProviderRequest::files`]).
pub type Files = Arc<std::collections::BTreeMap<crate::machine::Digest, Arc<[u8]>>>;

/// Where a model request comes from (see [`ProviderRequest::origin`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestOrigin {
    /// The asking run (`None` when the caller is not a run, e.g. a direct provider call).
    pub run: Option<crate::machine::RunId>,
    /// Its place in its delegation tree: empty for a run nobody delegated; for a child, the
    /// `SEQ.INDEX` of each delegating effect from the top run down, joined by dots (`3.0`,
    /// `3.0.5.1`). The same whatever ids the runs have.
    pub path: String,
}

impl ProviderRequest {
    /// How many assistant messages of the conversation the asking agent wrote: the index of
    /// its turn being asked for (0 for the first). A conversation handed over by transfers
    /// (revision 5) holds other agents' turns too: it is cut at each handover — the
    /// `transfer_to_<agent>` result followed by the `[transfer from <sender>]` note the machine
    /// writes — and only the stretches written by this agent count (the stretch before a
    /// handover is the sender's, the one after it the receiver's). Without handovers every
    /// assistant message counts.
    pub fn turn(&self) -> usize {
        use crate::machine::{Role, TRANSFER_PREFIX};
        let messages = self.messages.as_slice();
        // (index of the note, sender, receiver) of each handover, in order.
        let handovers: Vec<(usize, &str, &str)> = messages
            .windows(2)
            .enumerate()
            .filter_map(|(i, pair)| {
                let [result, note] = pair else { return None };
                let to = result.name.as_deref()?.strip_prefix(TRANSFER_PREFIX)?;
                let from = note
                    .content
                    .as_deref()?
                    .strip_prefix("[transfer from ")?
                    .split(']')
                    .next()?;
                (result.role == Role::Tool && note.role == Role::User).then_some((i + 1, from, to))
            })
            .collect();
        let me = self.agent.as_str();
        let mut author = handovers.first().map_or(me, |h| h.1);
        let mut next = handovers.iter().peekable();
        let mut turns = 0;
        for (i, m) in messages.iter().enumerate() {
            if let Some((_, _, to)) = next.next_if(|h| h.0 == i) {
                author = to;
            }
            if m.role == Role::Assistant && author == me {
                turns += 1;
            }
        }
        turns
    }
}

/// A tool as offered to a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub schema: Value,
}

/// Something that answers model calls.
pub trait ModelProvider: Send + Sync {
    /// A short description for logs and cassettes: kind and model or base URL, never a key.
    fn describe(&self) -> String;

    /// Performs one model call. Text deltas of a streamed reply go to `tokens` as they
    /// arrive; the returned reply holds the whole text as well. Dropping the future cancels
    /// the call.
    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>>;

    /// Which kinds of attachment (images, PDFs) `model` is sent; the others go as a text
    /// placeholder and the executor traces a `model.attachments_not_sent` warning. `None`
    /// (the default): the provider declares nothing and nothing is warned about (the echo
    /// and scripted providers read text only; a cassette replays what was recorded).
    fn accepts(&self, model: &str) -> Option<Vec<crate::machine::AttachmentKind>> {
        let _ = model;
        None
    }
}

/// A failed model call, classified for the machine and explained for a person. Never holds
/// the API key (adapters build it from the response, not from the request headers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct ProviderError {
    /// The provider's name (or kind).
    pub provider: String,
    /// What the machine does with it.
    pub class: ProviderErrorClass,
    /// Whether trying again may help.
    pub retryable: bool,
    /// HTTP status, if a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's error type (`rate_limit_error`, `invalid_request_error`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The provider's error code, as text (OpenRouter sends integers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The provider's message, or what went wrong on our side.
    pub message: String,
    /// The request id from the body or headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// From `Retry-After` (seconds or an HTTP date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Anthropic's `x-should-retry`, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
    /// The start of the body (at most 500 characters; the read is capped at 8 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_snippet: Option<String>,
    /// The request field the provider named as wrong (OpenAI's `error.param`), when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// The agent's model setting a 400/422 refused (`reasoning.effort`), when the error
    /// points at the field that carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// What to do about it, for a person.
    pub hint: String,
    /// The call was refused before it was sent because it would pass this budget's cap
    /// (see [`allowance`](crate::machine::allowance)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::machine::BudgetKey>,
}

impl ProviderError {
    /// An error with no HTTP details.
    pub fn new(provider: &str, class: ProviderErrorClass, message: impl Into<String>) -> Self {
        let failure = ModelFailure::new(class, "");
        ProviderError {
            provider: provider.to_owned(),
            class,
            retryable: failure.retryable,
            status: None,
            error_type: None,
            error_code: None,
            message: message.into(),
            request_id: None,
            retry_after_ms: None,
            should_retry: None,
            body_snippet: None,
            param: None,
            setting: None,
            hint: String::new(),
            budget: None,
        }
    }

    /// The failure event the machine receives.
    pub fn to_failure(&self) -> ModelFailure {
        ModelFailure {
            class: self.class,
            retryable: self.retryable,
            retry_after_ms: self.retry_after_ms,
            status: self.status,
            message: self.to_string(),
            budget: self.budget,
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.provider)?;
        if let Some(s) = self.status {
            write!(f, " HTTP {s}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(t) = &self.error_type {
            write!(f, " ({t})")?;
        }
        if !self.hint.is_empty() {
            write!(f, " – {}", self.hint)?;
        }
        Ok(())
    }
}

/// Adds `latency` before a result, for the offline providers (on the engine's clock).
async fn after(latency: Duration) {
    if !latency.is_zero() {
        crate::clock::current().sleep(latency).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Message, Role, ToolCall};

    fn said(text: &str) -> Message {
        Message::text(Role::Assistant, text)
    }

    /// `from` hands over to `to`: its transfer call, the answer, the note the machine writes.
    fn handover(from: &str, to: &str) -> Vec<Message> {
        vec![
            Message {
                content: None,
                tool_calls: vec![ToolCall {
                    id: format!("t-{to}"),
                    name: format!("transfer_to_{to}"),
                    arguments: serde_json::json!({}),
                }],
                ..said("")
            },
            Message {
                tool_call_id: Some(format!("t-{to}")),
                name: Some(format!("transfer_to_{to}")),
                ..Message::text(Role::Tool, format!("transferred to {to}"))
            },
            Message::text(Role::User, format!("[transfer from {from}]")),
        ]
    }

    fn request(agent: &str, messages: Vec<Message>) -> ProviderRequest {
        ProviderRequest {
            agent: AgentId::from(agent),
            messages: Arc::new(messages),
            ..ProviderRequest::default()
        }
    }

    #[test]
    fn a_turn_counts_only_the_assistant_messages_the_asking_agent_wrote() {
        let mut m = vec![
            Message::text(Role::System, "lead"),
            Message::text(Role::User, "go"),
        ];
        m.push(said("one"));
        assert_eq!(
            request("lead", m.clone()).turn(),
            1,
            "no handover: all count"
        );
        m.extend(handover("lead", "reviewer"));
        m[0] = Message::text(Role::System, "reviewer");
        assert_eq!(request("reviewer", m.clone()).turn(), 0, "lead's two turns");
        m.push(said("looks fine"));
        m.extend(handover("reviewer", "lead"));
        m[0] = Message::text(Role::System, "lead");
        // lead: "one" and its transfer call; reviewer's two are not its own.
        assert_eq!(request("lead", m.clone()).turn(), 2);
        m.push(said("done"));
        assert_eq!(request("lead", m).turn(), 3);
    }
}
