//! Builds a reply from an OpenAI chat-completions SSE stream, one `data:` event at a time.
//!
//! Rules the recordings taught: tool-call fragments are joined per `index` (the first chunk
//! carries id and name, later ones only argument text, and a compatible server may leave out
//! `arguments` entirely); a `finish_reason` is never overwritten by a later `null`; usage
//! arrives in a last chunk with `choices: []`; `data: {"error": ...}` is an error even though
//! the HTTP status was 200; and a stream without `data: [DONE]` is truncated.

use serde_json::Value;

use super::codec::{DecodeError, Decoded, ReplyDetails, StreamFacts};
use super::common::{UsageParts, call_from_text, finish_reason, non_empty, parse_json, str_of};
use super::errors::fail_if_reported;
use super::openai::{reasoning_of, reasoning_part, usage_parts};
use super::sse::SseEvent;
use crate::machine::ModelReply;

/// Accumulated state of one OpenAI stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpenAiStream {
    /// `data: [DONE]` arrived.
    pub(crate) done: bool,
    id: Option<String>,
    model: Option<String>,
    text: String,
    refusal: String,
    thinking: String,
    thinking_field: Option<&'static str>,
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: UsageParts,
    facts: StreamFacts,
}

/// A tool call being assembled from fragments.
#[derive(Clone, Debug, Default)]
struct PartialCall {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl OpenAiStream {
    /// Applies one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), DecodeError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            self.facts.done_sentinel = true;
            return Ok(());
        }
        self.facts.events += 1;
        if data.is_empty() {
            return Ok(());
        }
        let v = parse_json(data)?;
        fail_if_reported(&v)?;
        if self.id.is_none() {
            self.id = str_of(&v, "id").map(str::to_owned);
        }
        if self.model.is_none() {
            self.model = str_of(&v, "model").map(str::to_owned);
        }
        let choices = v.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta") {
                self.on_delta(delta, on_text);
            }
            if let Some(reason) = str_of(choice, "finish_reason") {
                self.finish = Some(reason.to_owned());
            }
        }
        if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
            self.usage.merge(usage_parts(usage));
        }
        Ok(())
    }

    fn on_delta(&mut self, delta: &Value, on_text: &mut dyn FnMut(&str)) {
        if let Some(text) = str_of(delta, "content").filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            on_text(text);
        }
        if let Some(refusal) = str_of(delta, "refusal") {
            self.refusal.push_str(refusal);
        }
        if let Some((field, reasoning)) = reasoning_of(delta) {
            self.thinking.push_str(reasoning);
            self.thinking_field.get_or_insert(field);
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for fragment in calls.into_iter().flatten() {
            let index = fragment.get("index").and_then(Value::as_u64);
            let id = str_of(fragment, "id");
            let slot = self.slot(index, id);
            if slot.id.is_none() {
                slot.id = id.map(str::to_owned);
            }
            let Some(function) = fragment.get("function") else {
                continue;
            };
            if let Some(name) = str_of(function, "name")
                && slot.name.is_empty()
            {
                slot.name.push_str(name);
            }
            match function.get("arguments") {
                Some(Value::String(part)) => slot.arguments.push_str(part),
                Some(Value::Null) | None => {}
                // Some servers send the arguments as an object: keep them as text.
                Some(other) => slot.arguments.push_str(&other.to_string()),
            }
        }
    }

    /// The call a fragment belongs to: by `index`; without one, by a new `id`, else the last.
    fn slot(&mut self, index: Option<u64>, id: Option<&str>) -> &mut PartialCall {
        let position = match index {
            Some(i) => self.calls.iter().position(|c| c.index == i),
            None => match id {
                Some(id) => self.calls.iter().position(|c| c.id.as_deref() == Some(id)),
                None => self.calls.len().checked_sub(1),
            },
        };
        let position = position.unwrap_or_else(|| {
            let next = self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0);
            self.calls.push(PartialCall {
                index: index.unwrap_or(next),
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        // In bounds: found by `position` or just pushed.
        &mut self.calls[position]
    }

    /// The reply, or [`DecodeError::Truncated`] when `[DONE]` never came.
    pub(crate) fn finish(mut self) -> Result<Decoded, DecodeError> {
        if !self.done {
            return Err(DecodeError::Truncated {
                expected: "`data: [DONE]`",
            });
        }
        self.calls.sort_by_key(|c| c.index);
        let tool_calls: Vec<_> = self
            .calls
            .into_iter()
            .map(|c| call_from_text(c.id, c.name, c.arguments))
            .collect();
        let reply = ModelReply {
            text: non_empty(self.text),
            finish_reason: finish_reason(self.finish, !tool_calls.is_empty()),
            tool_calls,
            usage: self.usage.finish(),
            cost_nanos: None,
            model: self.model,
            response_id: self.id,
            refusal: non_empty(self.refusal),
            reasoning: reasoning_part(
                self.thinking_field.unwrap_or("reasoning_content"),
                self.thinking.clone(),
            ),
            thinking: non_empty(self.thinking),
        };
        Ok(Decoded {
            reply,
            details: ReplyDetails {
                stream: Some(self.facts),
                ..ReplyDetails::default()
            },
        })
    }
}
