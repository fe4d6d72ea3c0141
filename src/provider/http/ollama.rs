//! Ollama's native `/api/chat`: request body, whole-body replies and the NDJSON stream.
//!
//! Mapping: messages keep their roles (`system`, `user`, `assistant`, `tool`); assistant tool
//! calls are `{function: {name, arguments}}` with `arguments` an **object** and no id; a tool
//! result is a `tool` message with `tool_name`; tools use the OpenAI function shape; an output
//! cap travels as `options.num_predict`; an assistant turn's reasoning goes back as its
//! `thinking`. Replies: native tool calls have no id (left `None`),
//! `done_reason: "stop"` with tool calls normalises to `tool_calls`, usage comes from
//! `prompt_eval_count` / `eval_count` (a missing one counts 0 when the other is present:
//! Ollama omits `prompt_eval_count` when the whole prompt was cached), and the stream ends
//! with a line holding `"done": true`.

use serde_json::{Map, Value, json};

use super::codec::{DecodeError, Decoded, EncodeOptions, ReplyDetails, StreamFacts};
use super::common::{
    UsageParts, call_from_value, finish_reason, model_for, non_empty, parse_json, parse_json_bytes,
    request_cap, str_of, string_of, u64_of,
};
use super::errors::fail_if_reported;
use super::openai::tools;
use crate::machine::{Message, ModelReply, Reasoning, ReasoningEffort, Role, ToolCallRequest};
use crate::provider::ProviderRequest;

/// The `/api/chat` request body. Settings travel in `options` (`num_predict`, `temperature`,
/// `top_p`, `seed`, `stop`); reasoning effort is `think` (`false` for `none`, else `true`);
/// an output schema is `format`.
pub(crate) fn encode(request: &ProviderRequest, options: &EncodeOptions) -> Value {
    let settings = &request.settings;
    let mut body = Map::new();
    body.insert(
        "model".into(),
        model_for(request, &options.default_model).into(),
    );
    let messages = request
        .messages
        .iter()
        .map(|m| message(request, m))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert("tools".into(), tools(&request.tools, false));
    }
    body.insert("stream".into(), options.stream.into());
    let mut opts = Map::new();
    if let Some(cap) = request_cap(request, options) {
        opts.insert("num_predict".into(), cap.into());
    }
    if let Some(t) = settings.temperature {
        opts.insert("temperature".into(), t.into());
    }
    if let Some(p) = settings.top_p {
        opts.insert("top_p".into(), p.into());
    }
    if let Some(seed) = settings.seed {
        opts.insert("seed".into(), seed.into());
    }
    if !settings.stop.is_empty() {
        opts.insert("stop".into(), settings.stop.clone().into());
    }
    if !opts.is_empty() {
        body.insert("options".into(), Value::Object(opts));
    }
    if let Some(effort) = settings.effort() {
        body.insert("think".into(), (effort != ReasoningEffort::None).into());
    }
    if let Some(schema) = &request.output_schema {
        body.insert("format".into(), schema.clone());
    }
    Value::Object(body)
}

fn message(request: &ProviderRequest, m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = Map::new();
    out.insert("role".into(), role.into());
    out.insert(
        "content".into(),
        m.content.clone().unwrap_or_default().into(),
    );
    let thinking: String = m
        .reasoning
        .iter()
        .filter_map(|r| match r {
            Reasoning::Text { text, .. } | Reasoning::Thinking { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if !thinking.is_empty() {
        out.insert("thinking".into(), thinking.into());
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| json!({ "function": { "name": c.name, "arguments": arguments_object(&c.arguments) } }))
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    // Images go in the message's `images` list, in base64 (Ollama takes no PDFs).
    let images: Vec<Value> = m
        .attachments
        .iter()
        .filter(|a| a.kind() == crate::machine::AttachmentKind::Image)
        .map(|a| super::attachments::base64_of(request, a).into())
        .collect();
    if !images.is_empty() {
        out.insert("images".into(), Value::Array(images));
    }
    if m.role == Role::Tool
        && let Some(name) = &m.name
    {
        out.insert("tool_name".into(), name.clone().into());
    }
    Value::Object(out)
}

/// Ollama wants an object: argument text that never parsed is sent as `{}`.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    }
}

/// Decodes a whole (`"stream": false`) body.
pub(crate) fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let v = parse_json_bytes(body)?;
    let mut acc = OllamaStream::default();
    acc.apply(&v, &mut |_| {})?;
    let mut decoded = acc.finish(false)?;
    decoded.details.stream = None;
    Ok(decoded)
}

/// Accumulated state of one Ollama NDJSON stream (also used for a whole body).
#[derive(Clone, Debug, Default)]
pub(crate) struct OllamaStream {
    /// A line with `"done": true` arrived.
    pub(crate) done: bool,
    model: Option<String>,
    text: String,
    thinking: String,
    calls: Vec<ToolCallRequest>,
    done_reason: Option<String>,
    usage: UsageParts,
    lines: usize,
}

impl OllamaStream {
    /// Applies one NDJSON line.
    pub(crate) fn on_line(
        &mut self,
        line: &str,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(), DecodeError> {
        self.lines += 1;
        let v = parse_json(line)?;
        self.apply(&v, on_text)
    }

    fn apply(&mut self, v: &Value, on_text: &mut dyn FnMut(&str)) -> Result<(), DecodeError> {
        fail_if_reported(v)?;
        if !v.is_object() {
            return Err(DecodeError::Shape("a line is not a JSON object".into()));
        }
        if let Some(model) = string_of(v, "model") {
            self.model = Some(model);
        }
        if let Some(message) = v.get("message") {
            if let Some(text) = str_of(message, "content").filter(|t| !t.is_empty()) {
                self.text.push_str(text);
                on_text(text);
            }
            if let Some(thinking) = str_of(message, "thinking") {
                self.thinking.push_str(thinking);
            }
            let calls = message.get("tool_calls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                let function = call.get("function").unwrap_or(&Value::Null);
                let name = string_of(function, "name").unwrap_or_default();
                let id = string_of(call, "id");
                self.calls
                    .push(call_from_value(id, name, function.get("arguments")));
            }
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            self.done_reason = string_of(v, "done_reason");
            self.usage.merge(UsageParts {
                input: u64_of(v, "prompt_eval_count"),
                output: u64_of(v, "eval_count"),
                ..UsageParts::default()
            });
        }
        Ok(())
    }

    /// The reply; with `require_done`, [`DecodeError::Truncated`] when no `done` line came.
    pub(crate) fn finish(self, require_done: bool) -> Result<Decoded, DecodeError> {
        if require_done && !self.done {
            return Err(DecodeError::Truncated {
                expected: "a line with `\"done\": true`",
            });
        }
        let has_calls = !self.calls.is_empty();
        let reply = ModelReply {
            text: non_empty(self.text),
            tool_calls: self.calls,
            finish_reason: finish_reason(self.done_reason, has_calls),
            usage: self.usage.finish(),
            cost_nanos: None,
            model: self.model,
            response_id: None,
            refusal: None,
            reasoning: super::openai::reasoning_part("thinking", self.thinking.clone()),
            thinking: non_empty(self.thinking),
        };
        Ok(Decoded {
            reply,
            details: ReplyDetails {
                stream: Some(StreamFacts {
                    lines: self.lines,
                    ..StreamFacts::default()
                }),
                ..ReplyDetails::default()
            },
        })
    }
}
