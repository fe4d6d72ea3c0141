//! The OpenAI Responses API (`POST {base}/responses`), request side and whole-body replies
//! (the stream accumulator is in `responses_stream`).
//!
//! Mapping: system messages become `instructions`; user text is `{role: user, content}`;
//! an assistant turn is its reasoning items (`{type: reasoning, id, summary,
//! encrypted_content}`), then its text (`{role: assistant, content}`), then one
//! `{type: function_call, call_id, name, arguments}` per tool call; a tool result is
//! `{type: function_call_output, call_id, output}`. Reasoning is passed back by encrypted
//! content rather than `previous_response_id`: requests are sent with `store: false` and
//! `include: ["reasoning.encrypted_content"]` whenever reasoning is asked for or present, so
//! a run resumed, forked or replayed elsewhere needs nothing kept at OpenAI. Settings:
//! `max_output_tokens`, `temperature`, `top_p`, `reasoning.effort`, `parallel_tool_calls`,
//! `strict` tools and `text.format` for an output schema; `seed` and `stop` do not exist in
//! this API (the spec loader refuses them).

use serde_json::{Map, Value, json};

use super::attachments;
use super::codec::{DecodeError, Decoded, EncodeOptions, ReplyDetails};
use super::common::{
    UsageParts, body_usage, call_from_text, finish_reason, mark_strict, model_for, non_empty,
    parse_json_bytes, request_cap, required_array, sampling, schema_name, str_of,
    strict_compatible, string_of, system_prompt, u64_of,
};
use super::errors::fail_if_reported;
use super::openai::arguments_text;
use crate::machine::{
    Attachment, AttachmentKind, Message, ModelReply, Reasoning, Role, ToolCallRequest,
};
use crate::provider::ProviderRequest;

/// The Responses request body.
pub(crate) fn encode(request: &ProviderRequest, options: &EncodeOptions) -> Value {
    let settings = &request.settings;
    let mut body = Map::new();
    body.insert(
        "model".into(),
        model_for(request, &options.default_model).into(),
    );
    if let Some(system) = system_prompt(&request.messages) {
        body.insert("instructions".into(), system.into());
    }
    let mut input = Vec::new();
    for m in request.messages.iter() {
        items(request, m, &mut input);
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let strict = settings.strict_tools == Some(true);
        let tools = request
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.schema,
                });
                mark_strict(&mut tool, &t.schema, strict);
                tool
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(parallel) = settings.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), parallel.into());
        }
    }
    body.insert("stream".into(), options.stream.into());
    if let Some(cap) = request_cap(request, options) {
        body.insert("max_output_tokens".into(), cap.into());
    }
    sampling(&mut body, settings);
    let carries_reasoning = request.messages.iter().any(|m| {
        m.reasoning
            .iter()
            .any(|r| matches!(r, Reasoning::Item { .. }))
    });
    if let Some(effort) = settings.effort() {
        // A summary is what makes the reasoning readable (`show`); the rest is encrypted.
        body.insert(
            "reasoning".into(),
            json!({ "effort": effort.as_str(), "summary": "auto" }),
        );
    }
    if settings.reasoning.is_some() || carries_reasoning {
        body.insert("store".into(), false.into());
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "text".into(),
            json!({
                "format": {
                    "type": "json_schema",
                    "name": schema_name(request),
                    "schema": schema,
                    "strict": strict_compatible(schema),
                }
            }),
        );
    }
    Value::Object(body)
}

/// A file as an input content part: `input_image` (detail `auto`, the API's default) or
/// `input_file`, by `data:` URL.
fn file_part(request: &ProviderRequest, a: &Attachment) -> Value {
    match a.kind() {
        AttachmentKind::Image => json!({
            "type": "input_image",
            "detail": "auto",
            "image_url": attachments::data_url(request, a),
        }),
        AttachmentKind::Pdf => json!({
            "type": "input_file",
            "filename": a.file_name(),
            "file_data": attachments::data_url(request, a),
        }),
    }
}

/// The input items for one message.
fn items(request: &ProviderRequest, m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::System => {}
        Role::User if !m.attachments.is_empty() => {
            let mut parts: Vec<Value> = m
                .content
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(|t| json!({ "type": "input_text", "text": t }))
                .into_iter()
                .collect();
            parts.extend(m.attachments.iter().map(|a| file_part(request, a)));
            out.push(json!({ "role": "user", "content": parts }));
        }
        Role::User => {
            out.push(json!({ "role": "user", "content": m.content.clone().unwrap_or_default() }))
        }
        Role::Tool => {
            let text = m.content.clone().unwrap_or_default();
            // An output with files is a list of parts: its text, then the files.
            let output = if m.attachments.is_empty() {
                Value::String(text)
            } else {
                let mut parts: Vec<Value> = Some(text)
                    .filter(|t| !t.is_empty())
                    .map(|t| json!({ "type": "input_text", "text": t }))
                    .into_iter()
                    .collect();
                parts.extend(m.attachments.iter().map(|a| file_part(request, a)));
                Value::Array(parts)
            };
            out.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": output,
            }))
        }
        Role::Assistant => {
            for r in &m.reasoning {
                if let Reasoning::Item {
                    id,
                    summary,
                    encrypted_content,
                } = r
                {
                    let mut item = json!({
                        "type": "reasoning",
                        "id": id,
                        "summary": summary
                            .iter()
                            .map(|t| json!({ "type": "summary_text", "text": t }))
                            .collect::<Vec<_>>(),
                    });
                    if let Some(enc) = encrypted_content {
                        item["encrypted_content"] = enc.clone().into();
                    }
                    out.push(item);
                }
            }
            if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
                out.push(json!({ "role": "assistant", "content": text }));
            }
            for c in &m.tool_calls {
                out.push(json!({
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": arguments_text(&c.arguments),
                }));
            }
        }
    }
}

/// Usage counters from a Responses `usage` object.
pub(crate) fn usage_parts(u: &Value) -> UsageParts {
    UsageParts {
        input: u64_of(u, "input_tokens"),
        output: u64_of(u, "output_tokens"),
        total: u64_of(u, "total_tokens"),
        cached_input: u
            .get("input_tokens_details")
            .and_then(|d| u64_of(d, "cached_tokens")),
        reasoning: u
            .get("output_tokens_details")
            .and_then(|d| u64_of(d, "reasoning_tokens")),
        ..UsageParts::default()
    }
}

/// Decodes a whole Responses body.
pub(crate) fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let v = parse_json_bytes(body)?;
    fail_if_reported(&v)?;
    let output = required_array(&v, "output")?;
    Ok(assemble(&v, output))
}

/// The reply from a response object (`v`) and its output items in order.
pub(crate) fn assemble(v: &Value, output: &[Value]) -> Decoded {
    let mut text = String::new();
    let mut refusal = String::new();
    let mut calls: Vec<ToolCallRequest> = Vec::new();
    let mut reasoning = Vec::new();
    let mut types = Vec::new();
    for item in output {
        let kind = str_of(item, "type").unwrap_or_default();
        types.push(kind.to_owned());
        match kind {
            "message" => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match str_of(part, "type") {
                        Some("output_text") => {
                            text.push_str(str_of(part, "text").unwrap_or_default())
                        }
                        Some("refusal") => {
                            refusal.push_str(str_of(part, "refusal").unwrap_or_default())
                        }
                        _ => {}
                    }
                }
            }
            "function_call" => {
                let raw = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                calls.push(call_from_text(
                    string_of(item, "call_id"),
                    string_of(item, "name").unwrap_or_default(),
                    raw,
                ));
            }
            "reasoning" => {
                let summary: Vec<String> = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| string_of(s, "text"))
                    .collect();
                reasoning.push(Reasoning::Item {
                    id: string_of(item, "id").unwrap_or_default(),
                    summary,
                    encrypted_content: string_of(item, "encrypted_content"),
                });
            }
            _ => {}
        }
    }
    let status = string_of(v, "status");
    let incomplete = v
        .get("incomplete_details")
        .and_then(|d| string_of(d, "reason"));
    let raw_finish = match status.as_deref() {
        Some("incomplete") => incomplete.or(status),
        _ => status,
    };
    let thinking: String = reasoning
        .iter()
        .map(Reasoning::text)
        .collect::<Vec<_>>()
        .join("\n\n");
    let reply = ModelReply {
        text: non_empty(text),
        finish_reason: finish_reason(raw_finish, !calls.is_empty()),
        tool_calls: calls,
        usage: body_usage(v, usage_parts),
        cost_nanos: None,
        model: string_of(v, "model"),
        response_id: string_of(v, "id"),
        refusal: non_empty(refusal),
        thinking: non_empty(thinking),
        reasoning,
    };
    Decoded {
        reply,
        details: ReplyDetails {
            content_block_types: types,
            ..ReplyDetails::default()
        },
    }
}
