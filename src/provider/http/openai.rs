//! OpenAI chat completions, request side and whole-body replies (the stream accumulator is in
//! `openai_stream`). Also used for OpenAI-compatible servers, which add fields of their own
//! (`reasoning`, `reasoning_content`, integer error codes) that are read when present.
//!
//! Mapping: the system prompt is a `system` message; assistant tool calls are
//! `{id, type: function, function: {name, arguments}}` with `arguments` a JSON **string**;
//! a tool result is a `tool` message with `tool_call_id`; tools are
//! `{type: function, function: {name, description, parameters}}`.

use serde_json::{Map, Value, json};

use super::codec::{DecodeError, Decoded, EncodeOptions, ReplyDetails};
use super::common::{
    UsageParts, call_from_text, call_from_value, finish_reason, model_for, non_empty, output_cap,
    parse_json_bytes, str_of, string_of, u64_of,
};
use super::errors::parse_error_value;
use crate::machine::{Message, ModelReply, Role, ToolCall};
use crate::provider::{ProviderRequest, ToolDef};

/// The chat-completions request body.
pub(crate) fn encode(request: &ProviderRequest, options: &EncodeOptions) -> Value {
    let mut body = Map::new();
    body.insert(
        "model".into(),
        model_for(request, &options.default_model).into(),
    );
    let messages = request.messages.iter().map(message).collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert("tools".into(), tools(&request.tools));
    }
    body.insert("stream".into(), options.stream.into());
    if options.stream {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(cap) = output_cap(options.max_tokens, request.remaining.tokens) {
        body.insert("max_completion_tokens".into(), cap.into());
    }
    Value::Object(body)
}

/// Tool definitions in the function-calling shape (shared with Ollama).
pub(crate) fn tools(tools: &[ToolDef]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.schema,
                }
            })
        })
        .collect()
}

/// Argument text for a call the conversation remembers: the raw text when the arguments
/// did not parse (the conversation keeps them as a string), compact JSON otherwise.
pub(crate) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn message(m: &Message) -> Value {
    let text = m.content.clone();
    match m.role {
        Role::System => json!({ "role": "system", "content": text.unwrap_or_default() }),
        Role::User => json!({ "role": "user", "content": text.unwrap_or_default() }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": text.unwrap_or_default(),
        }),
        Role::Assistant => {
            let mut out = Map::new();
            out.insert("role".into(), "assistant".into());
            match text {
                Some(t) => {
                    out.insert("content".into(), t.into());
                }
                // A tool-only turn has no content; a turn with neither needs an empty one.
                None if m.tool_calls.is_empty() => {
                    out.insert("content".into(), "".into());
                }
                None => {}
            }
            if !m.tool_calls.is_empty() {
                let calls = m.tool_calls.iter().map(tool_call).collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(out)
        }
    }
}

fn tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": arguments_text(&call.arguments) },
    })
}

/// Usage counters from an OpenAI `usage` object.
pub(crate) fn usage_parts(u: &Value) -> UsageParts {
    UsageParts {
        input: u64_of(u, "prompt_tokens"),
        output: u64_of(u, "completion_tokens"),
        total: u64_of(u, "total_tokens"),
        cached_input: u
            .get("prompt_tokens_details")
            .and_then(|d| u64_of(d, "cached_tokens")),
        reasoning: u
            .get("completion_tokens_details")
            .and_then(|d| u64_of(d, "reasoning_tokens")),
        ..UsageParts::default()
    }
}

/// Reasoning text from compatible servers (`reasoning_content` or `reasoning`).
pub(crate) fn reasoning_of(v: &Value) -> Option<&str> {
    str_of(v, "reasoning_content").or_else(|| str_of(v, "reasoning"))
}

/// Decodes a whole chat-completion body.
pub(crate) fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let v = parse_json_bytes(body)?;
    if v.get("error").is_some_and(|e| !e.is_null()) {
        let reported = parse_error_value(&v).unwrap_or_default();
        return Err(DecodeError::Reported(Box::new(reported)));
    }
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| DecodeError::Shape("no `choices` array".into()))?;
    let choice = choices
        .iter()
        .find(|c| u64_of(c, "index").unwrap_or(0) == 0)
        .or(choices.first());
    let message = choice.and_then(|c| c.get("message"));

    let text = message
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default();
    let tool_calls: Vec<_> = message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .map(|calls| calls.iter().map(decode_call).collect())
        .unwrap_or_default();
    let raw_finish = choice.and_then(|c| string_of(c, "finish_reason"));
    let reply = ModelReply {
        text: non_empty(text),
        finish_reason: finish_reason(raw_finish, !tool_calls.is_empty()),
        tool_calls,
        usage: v
            .get("usage")
            .filter(|u| u.is_object())
            .and_then(|u| usage_parts(u).finish()),
        cost_nanos: None,
        model: string_of(&v, "model"),
        response_id: string_of(&v, "id"),
        refusal: message
            .and_then(|m| string_of(m, "refusal"))
            .and_then(non_empty),
        thinking: message
            .and_then(reasoning_of)
            .map(str::to_owned)
            .and_then(non_empty),
    };
    Ok(Decoded {
        reply,
        details: ReplyDetails {
            choices: Some(choices.len()),
            ..ReplyDetails::default()
        },
    })
}

/// Message content: a string, or an array of parts whose `text`s are joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_of(p, "text")).collect(),
        _ => String::new(),
    }
}

fn decode_call(call: &Value) -> crate::machine::ToolCallRequest {
    let id = string_of(call, "id");
    let function = call.get("function");
    let name = function
        .and_then(|f| string_of(f, "name"))
        .unwrap_or_default();
    match function.and_then(|f| f.get("arguments")) {
        Some(Value::String(raw)) => call_from_text(id, name, raw.clone()),
        other => call_from_value(id, name, other),
    }
}
