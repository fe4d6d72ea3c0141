//! Builds a reply from an Anthropic Messages SSE stream.
//!
//! Events: `message_start` (id, model, first usage), `content_block_start` /
//! `content_block_delta` / `content_block_stop` per block index (`text_delta`,
//! `input_json_delta`, `thinking_delta`, `signature_delta`), `message_delta` (stop reason and
//! final usage, whose fields override those of `message_start` only where present, so input
//! tokens reported only at the start are kept), `message_stop` (the terminal event), `ping`
//! (ignored) and `error` (an error although the HTTP status was 200). Unknown event and delta
//! types are ignored, as the API asks. Tool-call JSON is joined per block and parsed at the end.

use serde_json::Value;

use super::anthropic::{Block, Envelope, assemble, block_from, usage_parts};
use super::codec::{DecodeError, Decoded, StreamFacts};
use super::common::{UsageParts, parse_json, str_of, string_of, u64_of};
use super::errors::reported_error;
use super::sse::SseEvent;

/// Accumulated state of one Anthropic stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct AnthropicStream {
    /// `message_stop` arrived.
    pub(crate) done: bool,
    id: Option<String>,
    model: Option<String>,
    blocks: Vec<Block>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    /// `stop_details.explanation` of a refusal.
    refusal: Option<String>,
    usage: UsageParts,
    facts: StreamFacts,
}

impl AnthropicStream {
    /// Applies one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), DecodeError> {
        self.facts.events += 1;
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let v = parse_json(&event.data)?;
        let kind = str_of(&v, "type")
            .or(event.event.as_deref())
            .unwrap_or_default()
            .to_owned();
        self.facts.event_types.insert(kind.clone());
        match kind.as_str() {
            "message_start" => {
                let message = v.get("message").unwrap_or(&Value::Null);
                self.id = string_of(message, "id");
                self.model = string_of(message, "model");
                if let Some(u) = message.get("usage").filter(|u| u.is_object()) {
                    self.usage.merge(usage_parts(u));
                }
            }
            "content_block_start" => {
                let index = u64_of(&v, "index").unwrap_or(self.blocks.len() as u64);
                let block = v.get("content_block").unwrap_or(&Value::Null);
                let block = block_from(index, block);
                if !block.text.is_empty() {
                    on_text(&block.text);
                }
                self.blocks.retain(|b| b.index != index);
                self.blocks.push(block);
            }
            "content_block_delta" => {
                let index = u64_of(&v, "index").unwrap_or(0);
                let delta = v.get("delta").unwrap_or(&Value::Null);
                self.on_delta(index, delta, on_text);
            }
            "message_delta" => {
                if let Some(delta) = v.get("delta") {
                    if let Some(reason) = string_of(delta, "stop_reason") {
                        self.stop_reason = Some(reason);
                    }
                    if let Some(sequence) = string_of(delta, "stop_sequence") {
                        self.stop_sequence = Some(sequence);
                    }
                    if let Some(words) = super::anthropic::refusal_explanation(delta) {
                        self.refusal = Some(words);
                    }
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    self.usage.merge(usage_parts(u));
                }
            }
            "message_stop" => self.done = true,
            "error" => return Err(reported_error(&v)),
            // `ping`, `content_block_stop` and event types added later carry nothing needed.
            _ => {}
        }
        Ok(())
    }

    fn on_delta(&mut self, index: u64, delta: &Value, on_text: &mut dyn FnMut(&str)) {
        let position = self.blocks.iter().position(|b| b.index == index);
        let position = position.unwrap_or_else(|| {
            // A delta for a block that never started: infer the block from the delta.
            let kind = match str_of(delta, "type") {
                Some("input_json_delta") => "tool_use",
                Some("thinking_delta" | "signature_delta") => "thinking",
                _ => "text",
            };
            self.blocks.push(Block {
                index,
                kind: kind.to_owned(),
                ..Block::default()
            });
            self.blocks.len() - 1
        });
        // In bounds: found by `position` or just pushed.
        let block = &mut self.blocks[position];
        match str_of(delta, "type") {
            Some("text_delta") => {
                if let Some(text) = str_of(delta, "text").filter(|t| !t.is_empty()) {
                    block.text.push_str(text);
                    on_text(text);
                }
            }
            Some("input_json_delta") => {
                let part = str_of(delta, "partial_json").unwrap_or_default();
                block.json.get_or_insert_with(String::new).push_str(part);
            }
            Some("thinking_delta") => {
                block
                    .thinking
                    .push_str(str_of(delta, "thinking").unwrap_or_default());
            }
            Some("signature_delta") => {
                block
                    .signature
                    .push_str(str_of(delta, "signature").unwrap_or_default());
            }
            _ => {}
        }
    }

    /// The reply, or [`DecodeError::Truncated`] when `message_stop` never came.
    pub(crate) fn finish(self) -> Result<Decoded, DecodeError> {
        if !self.done {
            return Err(DecodeError::Truncated {
                expected: "the `message_stop` event",
            });
        }
        let envelope = Envelope {
            id: self.id,
            model: self.model,
            stop_reason: self.stop_reason,
            stop_sequence: self.stop_sequence,
            refusal: self.refusal,
            usage: self.usage.finish(),
        };
        let mut decoded = assemble(self.blocks, envelope);
        decoded.details.stream = Some(self.facts);
        Ok(decoded)
    }
}
