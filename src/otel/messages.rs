//! Prompt and completion content in the GenAI conventions' message shape, for the opt-in
//! `gen_ai.input.messages` and `gen_ai.output.messages` span attributes (`--otlp-content`):
//! each message a `role` and its `parts` — `text`, `tool_call` (id, name, arguments) and
//! `tool_call_response` (id, response) — and each output message its `finish_reason`. Pure:
//! the tracker reads the request and the reply from the store and calls these.

use serde_json::{Map, Value, json};

use crate::machine::{Message, ModelReply, Role};

/// The conventions' role of a message.
fn role(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn text_part(content: &str) -> Value {
    json!({"type": "text", "content": content})
}

/// A `tool_call` part; `id` left out when the provider gave none.
fn call_part(id: Option<&str>, name: &str, arguments: &Value) -> Value {
    let mut part = Map::new();
    part.insert("type".into(), "tool_call".into());
    if let Some(id) = id {
        part.insert("id".into(), id.into());
    }
    part.insert("name".into(), name.into());
    part.insert("arguments".into(), arguments.clone());
    Value::Object(part)
}

/// The messages of a request as the conventions' input messages: a tool result becomes a
/// `tool` message with one `tool_call_response` part naming the call it answers.
pub(super) fn input_messages(messages: &[Message]) -> Value {
    let shaped = messages.iter().map(|m| {
        let mut parts = Vec::new();
        match (&m.role, &m.tool_call_id) {
            (Role::Tool, Some(id)) => parts.push(json!({
                "type": "tool_call_response",
                "id": id,
                "response": m.content.clone().unwrap_or_default(),
            })),
            _ => {
                if let Some(text) = &m.content {
                    parts.push(text_part(text));
                }
                for call in &m.tool_calls {
                    parts.push(call_part(Some(&call.id), &call.name, &call.arguments));
                }
            }
        }
        json!({"role": role(m.role), "parts": parts})
    });
    Value::Array(shaped.collect())
}

/// A reply as the conventions' output messages: one assistant message with its text (or its
/// refusal) and its tool calls, and `finish_reason` (`stop`, `length`, `content_filter`,
/// `tool_call`, or `refusal`, which the conventions allow as a string of their own).
pub(super) fn output_messages(reply: &ModelReply, finish: &str) -> Value {
    let mut parts = Vec::new();
    if let Some(text) = reply.text.as_deref().or(reply.refusal.as_deref()) {
        parts.push(text_part(text));
    }
    for call in &reply.tool_calls {
        parts.push(call_part(call.id.as_deref(), &call.name, &call.arguments));
    }
    let finish_reason = match finish {
        "tool_calls" => "tool_call",
        "stop_sequence" => "stop",
        other => other,
    };
    json!([{"role": "assistant", "parts": parts, "finish_reason": finish_reason}])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{ToolCall, ToolCallRequest};

    #[test]
    fn a_tool_exchange_has_call_and_response_parts_with_ids() {
        let mut assistant = Message::text(Role::Assistant, "");
        assistant.content = None;
        assistant.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "add".into(),
            arguments: json!({"a": 1}),
        }];
        let mut result = Message::text(Role::Tool, "2");
        result.tool_call_id = Some("c1".into());
        result.name = Some("add".into());
        let messages = vec![
            Message::text(Role::System, "be brief"),
            Message::text(Role::User, "1+1?"),
            assistant,
            result,
        ];
        assert_eq!(
            input_messages(&messages),
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [{"type": "text", "content": "1+1?"}]},
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}]},
                {"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "c1", "response": "2"}]},
            ])
        );
    }

    #[test]
    fn a_reply_is_one_assistant_message_with_its_finish_reason() {
        let mut reply = ModelReply::text("hi");
        let mut call = ToolCallRequest::new("c1", "add", json!({"a": 1}));
        call.id = None;
        reply.tool_calls = vec![call];
        let out = output_messages(&reply, "tool_calls");
        assert_eq!(out[0]["finish_reason"], "tool_call");
        assert_eq!(out[0]["parts"][0], json!({"type": "text", "content": "hi"}));
        assert_eq!(
            out[0]["parts"][1],
            json!({"type": "tool_call", "name": "add", "arguments": {"a": 1}})
        );
        assert_eq!(
            output_messages(&ModelReply::text("x"), "stop_sequence")[0]["finish_reason"],
            "stop"
        );
    }
}
