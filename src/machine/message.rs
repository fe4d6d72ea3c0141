//! Conversation messages and the content-addressed conversation list.
//!
//! A state never holds message bodies. Each agent's conversation is a Merkle list: its
//! [`ConversationRef`] is the message count and the head digest, where
//! `head(n) = blake3(head(n-1) || canonical(message n))` and `head(0)` is all zeros. The head
//! commits to every message, so a state hash commits to the whole conversation while the state
//! itself stays the same size at step 10 and step 30,000. The messages a transition adds come
//! out in [`Transition::appended`](super::Transition::appended); whoever keeps the bodies (the
//! store, or a [`Conversations`] in memory) files them under their head.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::{AgentId, Digest};
use super::label::Label;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent's system prompt.
    System,
    /// The goal, a handoff note, or a person's words.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// A tool call as the model made it (and as the conversation remembers it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id, or one the machine derived when the provider gave none.
    pub id: String,
    /// The tool name the model asked for (kept verbatim in the assistant message).
    pub name: String,
    /// The parsed arguments; a string holding the raw text when they did not parse as JSON.
    pub arguments: Value,
}

/// One message of an agent's conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text, if any. `None` and `Some("")` are different (a tool-only assistant turn has
    /// `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls of an assistant message, in the order the model made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name (or `None` when the call named no known tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a tool result: true when the content reports an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For an assistant message: the reasoning the provider returned with it, block by block,
    /// kept so it can be shown and sent back in later turns the way the provider requires.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<Reasoning>,
    /// Files the message carries (images, PDFs), by digest: the goal's, a person's, a tool
    /// result's (see [`attachment`](super::attachment)). Left out of the encoding when empty,
    /// so messages without files hash as they always did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<super::Attachment>,
    /// Its information-flow label (see [`label`](super::label)): how far it may be trusted and
    /// who may read it. Trusted and public, the default, is left out of the encoding, so the
    /// messages of a run that declares no trust hash as they always did.
    #[serde(default, skip_serializing_if = "Label::is_trusted_public")]
    pub label: Label,
}

/// One piece of a model's reasoning, as its provider returned it. Kept with the assistant
/// message (signatures and encrypted content included, byte for byte) because some providers
/// refuse a later request that drops or alters it — Anthropic during tool use, for one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reasoning {
    /// An Anthropic `thinking` block: the text and the signature that must come back with it.
    Thinking {
        /// The thinking text (or its summary, for models that summarise).
        text: String,
        /// The block's signature; empty when the provider sent none.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        signature: String,
    },
    /// An Anthropic `redacted_thinking` block: encrypted, passed back as it came.
    RedactedThinking {
        /// The opaque data.
        data: String,
    },
    /// Reasoning text from an OpenAI-compatible server (`reasoning_content` or `reasoning`)
    /// or Ollama (`thinking`).
    Text {
        /// The text.
        text: String,
        /// The wire field it came in (`reasoning_content`, `reasoning`, `thinking`), so it
        /// goes back in the same one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field: Option<String>,
    },
    /// An OpenAI Responses API reasoning item, passed back by its encrypted content.
    Item {
        /// The item id (`rs_…`).
        id: String,
        /// Its summary texts, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// The encrypted reasoning (`include: ["reasoning.encrypted_content"]`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
}

impl Reasoning {
    /// The readable text of this piece (empty for redacted or encrypted-only reasoning).
    pub fn text(&self) -> String {
        match self {
            Reasoning::Thinking { text, .. } | Reasoning::Text { text, .. } => text.clone(),
            Reasoning::RedactedThinking { .. } => String::new(),
            Reasoning::Item { summary, .. } => summary.join("\n\n"),
        }
    }
}

impl Message {
    /// A message with a role and text and nothing else.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
            reasoning: Vec::new(),
            attachments: Vec::new(),
            label: Label::TRUSTED,
        }
    }

    /// The canonical bytes that the conversation digest covers: compact JSON with fields in
    /// declaration order and object keys sorted (serde_json's map is ordered).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Room for the text and the fields around it, so the buffer is rarely grown.
        let mut out = Vec::with_capacity(self.content.as_ref().map_or(0, String::len) + 128);
        // Serialising a Message cannot fail: every field is a string, bool, vec or JSON value.
        crate::compact_json::write(&mut out, self).expect("a Message always serialises");
        out
    }
}

/// An agent's conversation as the state holds it: how many messages and the Merkle head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationRef {
    /// Number of messages.
    pub len: u32,
    /// Digest over every message in order; [`Digest::ZERO`] when empty.
    pub head: Digest,
}

impl ConversationRef {
    /// The head after appending a message with these canonical bytes to a list whose head is
    /// `prev`.
    pub fn chain(prev: &Digest, message_bytes: &[u8]) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(&prev.0);
        h.update(message_bytes);
        Digest(*h.finalize().as_bytes())
    }

    /// Appends `message`, returning the record a transition reports for it.
    pub(crate) fn push(&mut self, agent: &AgentId, message: Message) -> Appended {
        let prev = self.head;
        let bytes = message.canonical_bytes();
        let head = Self::chain(&prev, &bytes);
        let index = self.len;
        self.len += 1;
        self.head = head;
        Appended {
            agent: agent.clone(),
            index,
            prev,
            head,
            message,
            bytes,
        }
    }
}

/// A message a transition appended to an agent's conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Appended {
    /// Whose conversation.
    pub agent: AgentId,
    /// Position in the conversation (0-based).
    pub index: u32,
    /// The head before this message.
    pub prev: Digest,
    /// The head after it.
    pub head: Digest,
    /// The message.
    pub message: Message,
    /// The message's canonical bytes (what `head` covers), kept so that whoever stores the
    /// message does not encode it again.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// Conversation bodies kept in memory, keyed by agent: the companion a caller of
/// [`step`](super::step) keeps to turn a `CallModel` request's [`ConversationRef`] into
/// messages. Feed it every transition's [`Appended`] records in order.
#[derive(Clone, Debug, Default)]
pub struct Conversations {
    by_agent: BTreeMap<AgentId, Vec<Message>>,
}

/// A conversation body that does not match the head the state expects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "conversation of agent {agent} is out of step: expected message {expected_index}, got {got_index}"
)]
pub struct ConversationGap {
    /// The agent.
    pub agent: AgentId,
    /// The index the next message should have had.
    pub expected_index: u32,
    /// The index it had.
    pub got_index: u32,
}

impl Conversations {
    /// An empty set of conversations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one appended message. Fails when a message is missing or repeated.
    pub fn apply(&mut self, appended: &Appended) -> Result<(), ConversationGap> {
        let list = self.by_agent.entry(appended.agent.clone()).or_default();
        let expected = u32::try_from(list.len()).unwrap_or(u32::MAX);
        if appended.index != expected {
            // A fork edit rewinds a conversation: it appends at a lower index.
            if appended.index < expected {
                list.truncate(appended.index as usize);
            } else {
                return Err(ConversationGap {
                    agent: appended.agent.clone(),
                    expected_index: expected,
                    got_index: appended.index,
                });
            }
        }
        list.push(appended.message.clone());
        Ok(())
    }

    /// The first `conversation.len` messages of `agent`'s conversation, if that many are known.
    pub fn messages(&self, agent: &AgentId, conversation: &ConversationRef) -> Option<&[Message]> {
        let list = self.by_agent.get(agent).map(Vec::as_slice).unwrap_or(&[]);
        list.get(..conversation.len as usize)
    }

    /// Every agent's full conversation.
    pub fn all(&self) -> &BTreeMap<AgentId, Vec<Message>> {
        &self.by_agent
    }
}

/// Recomputes the head of a list of messages (for checking bodies loaded from storage).
pub fn head_of(messages: &[Message]) -> Digest {
    messages.iter().fold(Digest::ZERO, |prev, m| {
        ConversationRef::chain(&prev, &m.canonical_bytes())
    })
}

/// Checks that `messages` are exactly the conversation `expected` refers to — as many
/// messages, and the same Merkle head — before a transition uses messages it was given rather
/// than appended itself (a [`ConversationSupplied`](super::EventBody::ConversationSupplied)
/// event). `agent` names the conversation in the error. A mismatch is refused, never copied.
pub fn check_supplied(
    agent: &AgentId,
    expected: &ConversationRef,
    messages: &[Message],
) -> Result<(), super::MachineError> {
    let head = head_of(messages);
    if messages.len() == expected.len as usize && head == expected.head {
        return Ok(());
    }
    Err(super::MachineError::ConversationMismatch {
        agent: agent.to_string(),
        expected_len: expected.len,
        expected_head: expected.head.to_hex(),
        got_len: messages.len(),
        got_head: head.to_hex(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_commits_to_every_message_in_order() {
        let a = Message::text(Role::User, "a");
        let b = Message::text(Role::User, "b");
        assert_ne!(
            head_of(&[a.clone(), b.clone()]),
            head_of(&[b.clone(), a.clone()])
        );
        let mut conv = ConversationRef::default();
        let agent = AgentId::from("x");
        conv.push(&agent, a.clone());
        let rec = conv.push(&agent, b.clone());
        assert_eq!(conv.head, head_of(&[a, b]));
        assert_eq!(rec.index, 1);
        assert_eq!(conv.len, 2);
    }

    #[test]
    fn none_and_empty_content_hash_differently() {
        let mut none = Message::text(Role::Assistant, "");
        none.content = None;
        let empty = Message::text(Role::Assistant, "");
        assert_ne!(head_of(&[none]), head_of(&[empty]));
    }
}
