//! Builds a reply from an OpenAI Responses SSE stream.
//!
//! Events: `response.created` (id, model), `response.output_text.delta` (text, reported to
//! the sink as it arrives), `response.output_item.done` (each finished item: a message, a
//! function call, a reasoning item), and one terminal event: `response.completed` or
//! `response.incomplete` (status, usage, and the whole output, used when no item arrived
//! apart), `response.failed` or `error` (an error although the HTTP status was 200). Every
//! other event (`*.added`, argument and summary deltas, `*.done` of parts) is redundant with
//! those and ignored, as are event types added later. A stream without a terminal event is
//! truncated.

use serde_json::Value;

use super::codec::{DecodeError, Decoded, ReportedError, StreamFacts};
use super::common::{parse_json, str_of, u64_of};
use super::errors::parse_error_value;
use super::responses::assemble;
use super::sse::SseEvent;

/// Accumulated state of one Responses stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResponsesStream {
    /// A terminal event arrived.
    pub(crate) done: bool,
    created: Option<Value>,
    final_response: Option<Value>,
    /// Finished items with their `output_index`.
    items: Vec<(u64, Value)>,
    text: String,
    facts: StreamFacts,
}

impl ResponsesStream {
    /// Applies one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), DecodeError> {
        self.facts.events += 1;
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let v = parse_json(data)?;
        let kind = str_of(&v, "type")
            .or(event.event.as_deref())
            .unwrap_or_default()
            .to_owned();
        self.facts.event_types.insert(kind.clone());
        match kind.as_str() {
            "response.created" | "response.in_progress" if self.created.is_none() => {
                self.created = v.get("response").cloned();
            }
            "response.output_text.delta" => {
                if let Some(delta) = str_of(&v, "delta").filter(|d| !d.is_empty()) {
                    self.text.push_str(delta);
                    on_text(delta);
                }
            }
            "response.output_item.done" => {
                let index = u64_of(&v, "output_index").unwrap_or(self.items.len() as u64);
                if let Some(item) = v.get("item") {
                    self.items.retain(|(i, _)| *i != index);
                    self.items.push((index, item.clone()));
                }
            }
            "response.completed" | "response.incomplete" => {
                self.final_response = v.get("response").cloned();
                self.done = true;
            }
            "response.failed" => {
                let response = v.get("response").unwrap_or(&Value::Null);
                let reported = parse_error_value(response).unwrap_or_else(|| ReportedError {
                    message: "the response failed".into(),
                    ..ReportedError::default()
                });
                return Err(DecodeError::Reported(Box::new(reported)));
            }
            "error" => {
                // `{type: error, code, message}`: the fields sit at the top level.
                let reported = match v.get("error") {
                    Some(_) => parse_error_value(&v).unwrap_or_default(),
                    None => ReportedError {
                        code: str_of(&v, "code").map(str::to_owned),
                        message: str_of(&v, "message").unwrap_or_default().to_owned(),
                        ..ReportedError::default()
                    },
                };
                return Err(DecodeError::Reported(Box::new(reported)));
            }
            _ => {}
        }
        Ok(())
    }

    /// The reply, or [`DecodeError::Truncated`] when no terminal event came.
    pub(crate) fn finish(mut self) -> Result<Decoded, DecodeError> {
        if !self.done {
            return Err(DecodeError::Truncated {
                expected: "`response.completed`",
            });
        }
        let response = self.final_response.or(self.created).unwrap_or(Value::Null);
        self.items.sort_by_key(|(i, _)| *i);
        let items: Vec<Value> = if self.items.is_empty() {
            response
                .get("output")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            self.items.into_iter().map(|(_, item)| item).collect()
        };
        let mut decoded = assemble(&response, &items);
        // The text the sink saw is the text of the reply, whatever the items say.
        if !self.text.is_empty() {
            decoded.reply.text = Some(self.text);
        }
        decoded.details.stream = Some(self.facts);
        Ok(decoded)
    }
}
