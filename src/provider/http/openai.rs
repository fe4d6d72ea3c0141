//! OpenAI chat completions, request side and whole-body replies (the stream accumulator is in
//! `openai_stream`). Also used for OpenAI-compatible servers, which add fields of their own
//! (`reasoning`, `reasoning_content`, integer error codes) that are read when present.
//!
//! Mapping: the system prompt is a `system` message; assistant tool calls are
//! `{id, type: function, function: {name, arguments}}` with `arguments` a JSON **string**;
//! a tool result is a `tool` message with `tool_call_id`; tools are
//! `{type: function, function: {name, description, parameters}}`. Images and PDFs: see
//! [`attachments`](super::attachments).

use serde_json::{Map, Value, json};

use super::attachments;
use super::codec::{DecodeError, Decoded, EncodeOptions, ReplyDetails};
use super::common::{
    UsageParts, body_usage, call_from_text, call_from_value, finish_reason, last_user_index,
    mark_strict, model_for, non_empty, parse_json_bytes, request_cap, required_array, sampling,
    schema_name, str_of, strict_compatible, string_of, u64_of,
};
use super::errors::fail_if_reported;
use crate::machine::{Attachment, AttachmentKind, Message, ModelReply, Reasoning, Role, ToolCall};
use crate::provider::{ProviderRequest, ToolDef};

/// The chat-completions request body.
pub(crate) fn encode(request: &ProviderRequest, options: &EncodeOptions) -> Value {
    let settings = &request.settings;
    let mut body = Map::new();
    body.insert(
        "model".into(),
        model_for(request, &options.default_model).into(),
    );
    let loop_start = last_user_index(&request.messages);
    // A tool result takes text only: the files of a batch's results follow it in one user
    // message (a user message between two results would break the batch).
    let mut messages = Vec::with_capacity(request.messages.len());
    let mut tool_files: Vec<Value> = Vec::new();
    for (i, m) in request.messages.iter().enumerate() {
        if m.role != Role::Tool && !tool_files.is_empty() {
            let parts = std::mem::take(&mut tool_files);
            messages.push(json!({ "role": "user", "content": parts }));
        }
        messages.push(message(request, m, i > loop_start));
        if m.role == Role::Tool && !m.attachments.is_empty() {
            tool_files.push(json!({ "type": "text", "text": attachments::from_tool_note(m) }));
            tool_files.extend(m.attachments.iter().map(|a| file_part(request, a)));
        }
    }
    if !tool_files.is_empty() {
        messages.push(json!({ "role": "user", "content": tool_files }));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            tools(&request.tools, settings.strict_tools == Some(true)),
        );
        if let Some(parallel) = settings.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), parallel.into());
        }
    }
    body.insert("stream".into(), options.stream.into());
    if options.stream && options.compat.stream_usage {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(cap) = request_cap(request, options) {
        let field = if options.compat.legacy_max_tokens {
            "max_tokens"
        } else {
            "max_completion_tokens"
        };
        body.insert(field.into(), cap.into());
    }
    sampling(&mut body, settings);
    if let Some(seed) = settings.seed {
        body.insert("seed".into(), seed.into());
    }
    if !settings.stop.is_empty() {
        body.insert("stop".into(), settings.stop.clone().into());
    }
    if let Some(effort) = settings.effort() {
        body.insert("reasoning_effort".into(), effort.as_str().into());
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request),
                    "schema": schema,
                    "strict": strict_compatible(schema),
                }
            }),
        );
    }
    Value::Object(body)
}

/// Tool definitions in the function-calling shape (shared with Ollama). With `strict`, a
/// tool whose schema allows it is marked `strict: true`.
pub(crate) fn tools(tools: &[ToolDef], strict: bool) -> Value {
    tools
        .iter()
        .map(|t| {
            let mut function = json!({
                "name": t.name,
                "description": t.description,
                "parameters": t.schema,
            });
            mark_strict(&mut function, &t.schema, strict);
            json!({ "type": "function", "function": function })
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

/// One message. `in_loop` marks an assistant turn after the last user message: its
/// reasoning text goes back in the field it came in (servers such as DeepSeek require it
/// during tool use); earlier turns' reasoning is not sent.
fn message(request: &ProviderRequest, m: &Message, in_loop: bool) -> Value {
    let text = m.content.clone();
    match m.role {
        Role::System => json!({ "role": "system", "content": text.unwrap_or_default() }),
        Role::User if !m.attachments.is_empty() => {
            let mut parts: Vec<Value> = text
                .filter(|t| !t.is_empty())
                .map(|t| json!({ "type": "text", "text": t }))
                .into_iter()
                .collect();
            parts.extend(m.attachments.iter().map(|a| file_part(request, a)));
            json!({ "role": "user", "content": parts })
        }
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
            if in_loop && !m.tool_calls.is_empty() {
                for part in &m.reasoning {
                    if let Reasoning::Text { text, field } = part {
                        let field = field.as_deref().unwrap_or("reasoning_content");
                        if matches!(field, "reasoning_content" | "reasoning") {
                            out.insert(field.into(), text.clone().into());
                        }
                    }
                }
            }
            Value::Object(out)
        }
    }
}

/// A file as a content part of a chat message: an image by `data:` URL, a PDF as a `file`.
fn file_part(request: &ProviderRequest, a: &Attachment) -> Value {
    match a.kind() {
        AttachmentKind::Image => {
            json!({ "type": "image_url", "image_url": { "url": attachments::data_url(request, a) } })
        }
        AttachmentKind::Pdf => json!({
            "type": "file",
            "file": { "filename": a.file_name(), "file_data": attachments::data_url(request, a) },
        }),
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

/// Reasoning text from compatible servers (`reasoning_content` or `reasoning`), with the
/// field it came in.
pub(crate) fn reasoning_of(v: &Value) -> Option<(&'static str, &str)> {
    str_of(v, "reasoning_content")
        .map(|t| ("reasoning_content", t))
        .or_else(|| str_of(v, "reasoning").map(|t| ("reasoning", t)))
}

/// The reasoning part for text that came in `field`.
pub(crate) fn reasoning_part(field: &str, text: String) -> Vec<Reasoning> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![Reasoning::Text {
        text,
        field: Some(field.to_owned()),
    }]
}

/// Decodes a whole chat-completion body.
pub(crate) fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let v = parse_json_bytes(body)?;
    fail_if_reported(&v)?;
    let choices = required_array(&v, "choices")?;
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
        usage: body_usage(&v, usage_parts),
        cost_nanos: None,
        model: string_of(&v, "model"),
        response_id: string_of(&v, "id"),
        refusal: message
            .and_then(|m| string_of(m, "refusal"))
            .and_then(non_empty),
        thinking: message
            .and_then(reasoning_of)
            .map(|(_, t)| t.to_owned())
            .and_then(non_empty),
        reasoning: message
            .and_then(reasoning_of)
            .map(|(field, t)| reasoning_part(field, t.to_owned()))
            .unwrap_or_default(),
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
