//! Anthropic Messages, request side and whole-body replies (the stream accumulator is in
//! `anthropic_stream`).
//!
//! Mapping: system messages become the top-level `system` string (joined by blank lines);
//! messages mapping to the same role are merged into one message of content blocks, so
//! consecutive tool results travel as one `user` message of `tool_result` blocks (placed
//! before any text, as the API requires); assistant tool calls are `tool_use` blocks whose
//! `input` is an object (arguments that never parsed are sent as `{}`); a message that is a
//! single text block is sent as a plain string; an assistant turn's `thinking` and
//! `redacted_thinking` blocks go back first in its content, signatures intact.
//! `max_tokens` is required: the agent's `max_output_tokens`, else the configured value
//! (default 4096), lowered to `request.remaining.tokens`; reasoning is sent as the model
//! takes it (adaptive thinking with `output_config.effort` on Claude 4.6 and later, a thinking
//! budget before; see the table in `fields`), and a thinking budget is added to `max_tokens`
//! (Anthropic counts thinking inside it). Prompt caching (unless `prompt_cache = false`):
//! the last tool, the system prompt (sent as one text block) and the last block of the turn
//! before the newest carry `cache_control: {type: ephemeral}`, so each request reads the
//! prefix the previous one wrote. Stop sequences are `stop_sequences`;
//! `parallel_tool_calls = false` is `tool_choice.disable_parallel_tool_use`; an output schema
//! is `output_config.format`. A request that offers no tools cannot carry `tool_use` or
//! `tool_result` blocks (the API refuses them), so then a history's tool calls and results are
//! sent as text: `[called NAME with ARGS]` in the assistant turn, `[result of NAME] …` (or
//! `[error from NAME] …`) in the user turn. That happens to an agent that got a conversation
//! handed over by a transfer (revision 5) and is offered no tools.

use serde_json::{Map, Value, json};

use super::attachments;
use super::codec::{DecodeError, Decoded, EncodeOptions, ReplyDetails};
use super::common::{
    UsageParts, body_usage, call_from_text, call_from_value, finish_reason, mark_strict, model_for,
    non_empty, output_cap, parse_json_bytes, required_array, sampling, str_of, string_of,
    system_prompt, u64_of,
};
use super::config::DEFAULT_ANTHROPIC_MAX_TOKENS;
use super::errors::{fail_if_reported, reported_error};
use crate::machine::{
    Attachment, AttachmentKind, Message, ModelReply, ModelSettings, Reasoning, Role, TokenUsage,
    ToolCallRequest,
};
use crate::provider::ProviderRequest;

/// The smallest thinking budget Anthropic accepts (`thinking.budget_tokens` ≥ 1,024).
const MIN_THINKING_BUDGET: u64 = 1024;

/// The Messages request body.
pub(crate) fn encode(request: &ProviderRequest, options: &EncodeOptions) -> Value {
    let settings = &request.settings;
    let configured = settings
        .max_output_tokens
        .or(options.max_tokens)
        .unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS);
    let visible = output_cap(Some(configured), request.remaining.tokens).unwrap_or(configured);
    let model = model_for(request, &options.default_model);
    let (mut thinking, effort) = reasoning(settings, &model);
    let mut budget = match &thinking {
        Some(Thinking::Budget(b)) => *b,
        _ => 0,
    };
    // Anthropic counts thinking inside `max_tokens`, so the cost budget's cap bounds both; a
    // thinking budget must stay below `max_tokens` and at least its minimum, else it goes.
    let total = match options.budget_cap {
        Some(cap) if visible + budget > cap => {
            let total = cap.max(1);
            if budget >= total {
                budget = total - 1;
                if budget < MIN_THINKING_BUDGET {
                    budget = 0;
                    thinking = None;
                }
                if let Some(Thinking::Budget(b)) = &mut thinking {
                    *b = budget;
                }
            }
            total
        }
        _ => visible + budget,
    };
    let cache = settings.prompt_cache != Some(false);
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("max_tokens".into(), total.into());
    if let Some(system) = system_prompt(&request.messages) {
        let system = if cache {
            json!([{ "type": "text", "text": system, "cache_control": ephemeral() }])
        } else {
            system.into()
        };
        body.insert("system".into(), system);
    }
    let mut list = messages(request, &request.messages, !request.tools.is_empty());
    if cache {
        mark_previous_turn(&mut list);
    }
    body.insert("messages".into(), list);
    if !request.tools.is_empty() {
        let strict = settings.strict_tools == Some(true);
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({ "name": t.name, "description": t.description, "input_schema": t.schema });
                mark_strict(&mut tool, &t.schema, strict);
                tool
            })
            .collect();
        if cache && let Some(last) = tools.last_mut().and_then(Value::as_object_mut) {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
        if settings.parallel_tool_calls == Some(false) {
            body.insert(
                "tool_choice".into(),
                json!({ "type": "auto", "disable_parallel_tool_use": true }),
            );
        }
    }
    body.insert("stream".into(), options.stream.into());
    sampling(&mut body, settings);
    if !settings.stop.is_empty() {
        body.insert("stop_sequences".into(), settings.stop.clone().into());
    }
    match thinking {
        Some(Thinking::Budget(budget)) => {
            body.insert(
                "thinking".into(),
                json!({ "type": "enabled", "budget_tokens": budget }),
            );
        }
        Some(Thinking::Adaptive) => {
            body.insert("thinking".into(), json!({ "type": "adaptive" }));
        }
        None => {}
    }
    let mut output_config = Map::new();
    if let Some(effort) = effort {
        output_config.insert("effort".into(), effort.into());
    }
    if let Some(schema) = &request.output_schema {
        output_config.insert(
            "format".into(),
            json!({ "type": "json_schema", "schema": schema }),
        );
    }
    if !output_config.is_empty() {
        body.insert("output_config".into(), Value::Object(output_config));
    }
    Value::Object(body)
}

/// How thinking is asked for.
enum Thinking {
    /// `{type: enabled, budget_tokens}`.
    Budget(u64),
    /// `{type: adaptive}`.
    Adaptive,
}

/// The `thinking` and `output_config.effort` a request sends for `settings.reasoning` to
/// `model` (see the Anthropic table in `fields`): an explicit budget is always sent as one;
/// an effort alone becomes adaptive thinking on models that have it, else the effort's budget;
/// the effort word goes in `output_config.effort` on models that take it.
fn reasoning(settings: &ModelSettings, model: &str) -> (Option<Thinking>, Option<&'static str>) {
    use super::fields::{ClaudeReasoning, claude_effort, claude_reasoning};
    let Some(r) = settings.reasoning else {
        return (None, None);
    };
    let Some(effort) = claude_effort(r.effort) else {
        return (None, None);
    };
    let form = claude_reasoning(model);
    let thinking = match (r.budget_tokens, form) {
        (Some(budget), _) => Some(Thinking::Budget(budget)),
        (None, ClaudeReasoning::Adaptive) => Some(Thinking::Adaptive),
        (None, _) => settings.thinking_budget().map(Thinking::Budget),
    };
    let effort = (form != ClaudeReasoning::Budget).then_some(effort);
    (thinking, effort)
}

/// `{type: ephemeral}`: a prompt-cache breakpoint with the default (5-minute) lifetime.
fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

/// Marks the conversation up to the previous turn as a cache breakpoint: the last content
/// block of the message before the newest one (a later request extends this prefix, so it
/// reads it back from the cache). A message sent as a plain string becomes one text block to
/// carry the mark. A conversation of one message has no previous turn and is left alone.
fn mark_previous_turn(list: &mut Value) {
    let Some(messages) = list.as_array_mut() else {
        return;
    };
    let Some(n) = messages.len().checked_sub(2) else {
        return;
    };
    let content = &mut messages[n]["content"];
    if let Value::String(text) = content {
        *content = json!([{ "type": "text", "text": text }]);
    }
    // Thinking blocks cannot carry a mark.
    if let Some(block) = content
        .as_array_mut()
        .and_then(|blocks| blocks.last_mut())
        .and_then(Value::as_object_mut)
        .filter(|b| {
            !matches!(
                b.get("type").and_then(Value::as_str),
                Some("thinking" | "redacted_thinking")
            )
        })
    {
        block.insert("cache_control".into(), ephemeral());
    }
}

/// The `messages` array; `tool_blocks` false (no tools offered) sends tool calls and results
/// as text.
fn messages(request: &ProviderRequest, list: &[Message], tool_blocks: bool) -> Value {
    let mut grouped: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in list {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => {
                let mut blocks = text_block(m.content.as_deref());
                blocks.extend(m.attachments.iter().map(|a| file_block(request, a)));
                ("user", blocks)
            }
            Role::Assistant => {
                let mut blocks = thinking_blocks(&m.reasoning);
                blocks.extend(text_block(m.content.as_deref()));
                blocks.extend(m.tool_calls.iter().map(|c| {
                    if tool_blocks {
                        json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input_object(&c.arguments) })
                    } else {
                        let args = serde_json::to_string(&c.arguments).unwrap_or_default();
                        json!({ "type": "text", "text": format!("[called {} with {args}]", c.name) })
                    }
                }));
                ("assistant", blocks)
            }
            Role::Tool if tool_blocks => ("user", vec![tool_result(request, m)]),
            Role::Tool => {
                let name = m.name.as_deref().unwrap_or("a tool");
                let tag = if m.is_error {
                    "error from"
                } else {
                    "result of"
                };
                let text = format!("[{tag} {name}] {}", m.content.as_deref().unwrap_or(""));
                let mut blocks = vec![json!({ "type": "text", "text": text })];
                blocks.extend(m.attachments.iter().map(|a| file_block(request, a)));
                ("user", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match grouped.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => grouped.push((role, blocks)),
        }
    }
    grouped
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results must open a user message; the sort is stable for the rest.
            blocks.sort_by_key(|b| str_of(b, "type") != Some("tool_result"));
            let content = match blocks.as_slice() {
                [single] if str_of(single, "type") == Some("text") => single["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({ "role": role, "content": content })
        })
        .collect()
}

/// An assistant turn's thinking, as the blocks Anthropic requires back (first in the turn,
/// signature intact). Reasoning without a signature (another provider's) cannot be sent.
fn thinking_blocks(reasoning: &[Reasoning]) -> Vec<Value> {
    reasoning
        .iter()
        .filter_map(|r| match r {
            Reasoning::Thinking { text, signature } if !signature.is_empty() => {
                Some(json!({ "type": "thinking", "thinking": text, "signature": signature }))
            }
            Reasoning::RedactedThinking { data } => {
                Some(json!({ "type": "redacted_thinking", "data": data }))
            }
            _ => None,
        })
        .collect()
}

fn text_block(text: Option<&str>) -> Vec<Value> {
    match text {
        Some(t) if !t.is_empty() => vec![json!({ "type": "text", "text": t })],
        _ => Vec::new(),
    }
}

/// A file as a content block: `image` or `document`, the bytes in base64.
fn file_block(request: &ProviderRequest, a: &Attachment) -> Value {
    let kind = match a.kind() {
        AttachmentKind::Image => "image",
        AttachmentKind::Pdf => "document",
    };
    json!({
        "type": kind,
        "source": { "type": "base64", "media_type": a.media_type, "data": attachments::base64_of(request, a) },
    })
}

fn tool_result(request: &ProviderRequest, m: &Message) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), "tool_result".into());
    block.insert(
        "tool_use_id".into(),
        m.tool_call_id.clone().unwrap_or_default().into(),
    );
    let text = m.content.as_deref().filter(|c| !c.is_empty());
    if !m.attachments.is_empty() {
        // A result with files is a list of blocks: its text, then the files.
        let mut blocks = text_block(text);
        blocks.extend(m.attachments.iter().map(|a| file_block(request, a)));
        block.insert("content".into(), Value::Array(blocks));
    } else if let Some(content) = text {
        block.insert("content".into(), content.into());
    }
    if m.is_error {
        block.insert("is_error".into(), true.into());
    }
    Value::Object(block)
}

/// `tool_use.input` must be an object: parsed arguments pass through; argument text that
/// parses to an object is used; anything else is sent as `{}`.
fn input_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    }
}

/// Usage counters from an Anthropic `usage` object.
pub(crate) fn usage_parts(u: &Value) -> UsageParts {
    UsageParts {
        input: u64_of(u, "input_tokens"),
        output: u64_of(u, "output_tokens"),
        cache_creation: u64_of(u, "cache_creation_input_tokens"),
        cache_read: u64_of(u, "cache_read_input_tokens"),
        reasoning: u
            .get("output_tokens_details")
            .and_then(|d| u64_of(d, "thinking_tokens")),
        ..UsageParts::default()
    }
}

/// One content block as the stream or the body delivered it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Block {
    pub(crate) index: u64,
    pub(crate) kind: String,
    pub(crate) text: String,
    pub(crate) thinking: String,
    pub(crate) signature: String,
    /// `redacted_thinking` data.
    pub(crate) data: String,
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    /// `input` as given at the start (whole body: the arguments).
    pub(crate) input: Option<Value>,
    /// Streamed `input_json_delta` text; `None` when the arguments did not arrive as text.
    pub(crate) json: Option<String>,
}

/// What a response said besides its blocks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Envelope {
    pub(crate) id: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) stop_sequence: Option<String>,
    /// A refusal's `stop_details.explanation`, when the API gave one.
    pub(crate) refusal: Option<String>,
    pub(crate) usage: Option<TokenUsage>,
}

/// The words of a refusal: `stop_details.explanation` of a message (or a stream's
/// `message_delta.delta`) that stopped with `refusal`; `None` when there is none.
pub(crate) fn refusal_explanation(v: &Value) -> Option<String> {
    let details = v
        .get("stop_details")
        .filter(|d| str_of(d, "type") == Some("refusal"))?;
    string_of(details, "explanation").and_then(non_empty)
}

/// Builds the reply from blocks (in index order) and the envelope.
pub(crate) fn assemble(mut blocks: Vec<Block>, envelope: Envelope) -> Decoded {
    blocks.sort_by_key(|b| b.index);
    let mut text = String::new();
    let mut thinking = String::new();
    let mut signatures = Vec::new();
    let mut calls: Vec<ToolCallRequest> = Vec::new();
    let mut types = Vec::new();
    let mut reasoning = Vec::new();
    for block in blocks {
        types.push(block.kind.clone());
        text.push_str(&block.text);
        thinking.push_str(&block.thinking);
        match block.kind.as_str() {
            "thinking" => reasoning.push(Reasoning::Thinking {
                text: block.thinking.clone(),
                signature: block.signature.clone(),
            }),
            "redacted_thinking" => reasoning.push(Reasoning::RedactedThinking {
                data: block.data.clone(),
            }),
            _ => {}
        }
        if !block.signature.is_empty() {
            signatures.push(block.signature);
        }
        if block.kind != "tool_use" {
            continue;
        }
        calls.push(match block.json {
            Some(json) if json.trim().is_empty() && is_filled_object(block.input.as_ref()) => {
                ToolCallRequest {
                    arguments_raw: Some(json),
                    ..call_from_value(block.id, block.name, block.input.as_ref())
                }
            }
            Some(json) => call_from_text(block.id, block.name, json),
            None => call_from_value(block.id, block.name, block.input.as_ref()),
        });
    }
    let refusal = match envelope.stop_reason.as_deref() {
        Some("refusal") => envelope.refusal.or_else(|| non_empty(text.clone())),
        _ => None,
    };
    let reply = ModelReply {
        text: non_empty(text),
        finish_reason: finish_reason(envelope.stop_reason, !calls.is_empty()),
        tool_calls: calls,
        usage: envelope.usage,
        cost_nanos: None,
        model: envelope.model,
        response_id: envelope.id,
        // A refusal carries its words in `stop_details.explanation`, else in the text.
        refusal,
        thinking: non_empty(thinking),
        reasoning,
    };
    Decoded {
        reply,
        details: ReplyDetails {
            stop_sequence: envelope.stop_sequence,
            thinking_signatures: signatures,
            content_block_types: types,
            ..ReplyDetails::default()
        },
    }
}

fn is_filled_object(v: Option<&Value>) -> bool {
    v.and_then(Value::as_object).is_some_and(|o| !o.is_empty())
}

/// A block from a whole-body `content` entry or a stream's `content_block_start`.
pub(crate) fn block_from(index: u64, b: &Value) -> Block {
    Block {
        index,
        kind: string_of(b, "type").unwrap_or_default(),
        text: string_of(b, "text").unwrap_or_default(),
        thinking: string_of(b, "thinking").unwrap_or_default(),
        signature: string_of(b, "signature").unwrap_or_default(),
        data: string_of(b, "data").unwrap_or_default(),
        id: string_of(b, "id"),
        name: string_of(b, "name").unwrap_or_default(),
        input: b.get("input").cloned(),
        json: None,
    }
}

/// Decodes a whole Messages body.
pub(crate) fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let v = parse_json_bytes(body)?;
    fail_if_reported(&v)?;
    if str_of(&v, "type") == Some("error") {
        return Err(reported_error(&v));
    }
    let content = required_array(&v, "content")?;
    let blocks = (0u64..)
        .zip(content)
        .map(|(i, b)| block_from(i, b))
        .collect();
    let envelope = Envelope {
        id: string_of(&v, "id"),
        model: string_of(&v, "model"),
        stop_reason: string_of(&v, "stop_reason"),
        stop_sequence: string_of(&v, "stop_sequence"),
        refusal: refusal_explanation(&v),
        usage: body_usage(&v, usage_parts),
    };
    Ok(assemble(blocks, envelope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::ToolCall;

    /// A handed-over history: a call of `lookup` answered, then the receiver's turn.
    fn history() -> Vec<Message> {
        vec![
            Message::text(Role::System, "You review."),
            Message::text(Role::User, "Ship it."),
            Message {
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "lookup".into(),
                    arguments: json!({"q": "x"}),
                }],
                content: None,
                ..Message::text(Role::Assistant, "")
            },
            Message {
                tool_call_id: Some("c1".into()),
                name: Some("lookup".into()),
                ..Message::text(Role::Tool, "found")
            },
            Message::text(Role::User, "[transfer from lead]"),
        ]
    }

    #[test]
    fn tool_blocks_are_sent_as_text_when_the_request_offers_no_tools() {
        let blocks = messages(&ProviderRequest::default(), &history(), false);
        let text = blocks.to_string();
        assert!(
            !text.contains("tool_use") && !text.contains("tool_result"),
            "{text}"
        );
        assert_eq!(
            blocks[1]["content"],
            json!(r#"[called lookup with {"q":"x"}]"#)
        );
        assert_eq!(
            blocks[2]["content"],
            json!([
                {"type": "text", "text": "[result of lookup] found"},
                {"type": "text", "text": "[transfer from lead]"}
            ])
        );
        let with_tools = messages(&ProviderRequest::default(), &history(), true).to_string();
        assert!(with_tools.contains("tool_use") && with_tools.contains("tool_result"));
    }
}
