//! Small helpers the three protocol codecs share: reading JSON fields without panicking,
//! turning wire tool arguments into a [`ToolCallRequest`], and normalising finish reasons.

use serde_json::{Map, Value};

use super::codec::DecodeError;
use crate::machine::{
    Finish, FinishReason, Message, ModelSettings, Role, TokenUsage, ToolCallRequest,
};

/// A string field of a JSON object.
pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A non-negative integer field of a JSON object.
pub(crate) fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// An owned string field.
pub(crate) fn string_of(v: &Value, key: &str) -> Option<String> {
    str_of(v, key).map(str::to_owned)
}

/// Parses one JSON document (an event, a line or a whole body).
pub(crate) fn parse_json(text: &str) -> Result<Value, DecodeError> {
    serde_json::from_str(text).map_err(|e| DecodeError::InvalidJson {
        truncated: e.is_eof(),
        reason: e.to_string(),
    })
}

/// Parses a JSON body given as bytes (must be UTF-8).
pub(crate) fn parse_json_bytes(body: &[u8]) -> Result<Value, DecodeError> {
    let text = std::str::from_utf8(body).map_err(|_| DecodeError::InvalidUtf8)?;
    parse_json(text)
}

/// The array under `key` in a whole reply body `v`, the part of the reply a protocol cannot
/// do without (`choices`, `output`, `content`); fails with [`DecodeError::Shape`] ("no `KEY`
/// array") when it is missing or not an array.
pub(crate) fn required_array<'a>(v: &'a Value, key: &str) -> Result<&'a [Value], DecodeError> {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| DecodeError::Shape(format!("no `{key}` array")))
}

/// The usage record of a whole reply body `v`: its `usage` object read with the protocol's
/// `parts` reader; `None` when there is no such object or it reports no tokens.
pub(crate) fn body_usage(v: &Value, parts: fn(&Value) -> UsageParts) -> Option<TokenUsage> {
    v.get("usage")
        .filter(|u| u.is_object())
        .and_then(|u| parts(u).finish())
}

/// The system prompt for protocols that take it as one top-level field (Anthropic `system`,
/// Responses `instructions`): the non-empty system messages joined by blank lines; `None`
/// when there are none.
pub(crate) fn system_prompt(messages: &[Message]) -> Option<String> {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::System)
        .filter_map(|m| m.content.as_deref())
        .filter(|c| !c.is_empty())
        .collect();
    (!system.is_empty()).then(|| system.join("\n\n"))
}

/// `temperature` and `top_p`, where set: the same fields in chat completions, the Responses
/// API and Anthropic Messages. Call it while building a request body.
pub(crate) fn sampling(body: &mut Map<String, Value>, settings: &ModelSettings) {
    if let Some(t) = settings.temperature {
        body.insert("temperature".into(), t.into());
    }
    if let Some(p) = settings.top_p {
        body.insert("top_p".into(), p.into());
    }
}

/// Marks a tool definition `strict: true` when strict tools were asked for and its `schema`
/// allows it (see [`strict_compatible`]). Call it on the object that carries the tool's
/// schema (chat completions: the `function` object).
pub(crate) fn mark_strict(tool: &mut Value, schema: &Value, strict: bool) {
    if let Some(tool) = tool
        .as_object_mut()
        .filter(|_| strict && strict_compatible(schema))
    {
        tool.insert("strict".into(), true.into());
    }
}

/// The model to send: the request's, or the configured one when the request names none.
pub(crate) fn model_for(request: &crate::provider::ProviderRequest, default: &str) -> String {
    if request.model.is_empty() {
        default.to_owned()
    } else {
        request.model.clone()
    }
}

/// `None` for an empty string: "no visible text" is `None`, never `Some("")`.
pub(crate) fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A tool call whose arguments travelled as a JSON string: an empty (or all-whitespace)
/// string means `{}`; text that does not parse gives `null` arguments and a `parse_error`.
pub(crate) fn call_from_text(id: Option<String>, name: String, raw: String) -> ToolCallRequest {
    let (arguments, parse_error) = if raw.trim().is_empty() {
        (Value::Object(Map::new()), None)
    } else {
        match serde_json::from_str::<Value>(&raw) {
            Ok(v) => (v, None),
            Err(e) => (Value::Null, Some(e.to_string())),
        }
    };
    ToolCallRequest {
        id,
        name,
        arguments,
        arguments_raw: Some(raw),
        parse_error,
    }
}

/// A tool call whose arguments travelled as JSON (Anthropic `input`, Ollama `arguments`). A
/// string is treated as argument text; a missing value means `{}`.
pub(crate) fn call_from_value(
    id: Option<String>,
    name: String,
    arguments: Option<&Value>,
) -> ToolCallRequest {
    match arguments {
        Some(Value::String(raw)) => call_from_text(id, name, raw.clone()),
        Some(Value::Null) | None => ToolCallRequest {
            id,
            name,
            arguments: Value::Object(Map::new()),
            arguments_raw: None,
            parse_error: None,
        },
        Some(v) => ToolCallRequest {
            id,
            name,
            arguments: v.clone(),
            arguments_raw: None,
            parse_error: None,
        },
    }
}

/// The normalised form of a provider's finish reason. Tool calls with a missing or plain
/// `stop`-like reason count as `tool_calls` (Ollama says `stop` when it called a tool).
pub(crate) fn finish_reason(raw: Option<String>, has_tool_calls: bool) -> FinishReason {
    let mut normalized = raw.as_deref().and_then(|r| match r {
        "stop" | "end_turn" | "completed" => Some(Finish::Stop),
        "tool_calls" | "function_call" | "tool_use" => Some(Finish::ToolCalls),
        "length" | "max_tokens" | "max_output_tokens" | "model_context_window_exceeded" => {
            Some(Finish::Length)
        }
        "stop_sequence" => Some(Finish::StopSequence),
        "content_filter" | "refusal" => Some(Finish::ContentFilter),
        _ => None,
    });
    if has_tool_calls && matches!(normalized, None | Some(Finish::Stop)) {
        normalized = Some(Finish::ToolCalls);
    }
    FinishReason { raw, normalized }
}

/// The output-token cap for `request`: the agent's `max_output_tokens` when set, else the
/// provider's configured cap, lowered to the remaining token budget and to what the cost
/// budget allows (`options.budget_cap`).
pub(crate) fn request_cap(
    request: &crate::provider::ProviderRequest,
    options: &super::codec::EncodeOptions,
) -> Option<u64> {
    let cap = output_cap(
        request.settings.max_output_tokens.or(options.max_tokens),
        request.remaining.tokens,
    );
    output_cap(cap, options.budget_cap)
}

/// Whether `schema` can be enforced in OpenAI's strict mode (and Anthropic's): every object
/// schema in it lists all its properties as required and sets `additionalProperties: false`.
/// A schema that does not is sent non-strict rather than refused by the server.
pub(crate) fn strict_compatible(schema: &Value) -> bool {
    fn walk(v: &Value, depth: usize) -> bool {
        if depth > 64 {
            return false;
        }
        match v {
            Value::Object(map) => {
                let is_object = map.get("type").is_some_and(|t| {
                    t == "object"
                        || t.as_array()
                            .is_some_and(|a| a.iter().any(|x| x == "object"))
                }) || map.contains_key("properties");
                if is_object {
                    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                        return false;
                    }
                    let props: Vec<&String> = map
                        .get("properties")
                        .and_then(Value::as_object)
                        .map(|p| p.keys().collect())
                        .unwrap_or_default();
                    let required: Vec<&str> = map
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|r| r.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    if props.iter().any(|p| !required.contains(&p.as_str())) {
                        return false;
                    }
                }
                map.values().all(|child| walk(child, depth + 1))
            }
            Value::Array(items) => items.iter().all(|child| walk(child, depth + 1)),
            _ => true,
        }
    }
    schema.is_object() && walk(schema, 0)
}

/// The name a structured-output schema is sent under (OpenAI requires one): the agent id,
/// which is already letters, digits, `_` and `-`, at most 64 characters.
pub(crate) fn schema_name(request: &crate::provider::ProviderRequest) -> String {
    let name: String = request.agent.as_str().chars().take(64).collect();
    if name.is_empty() {
        "answer".to_owned()
    } else {
        name
    }
}

/// The index of the last user message: assistant turns after it are the current tool-use
/// loop, whose reasoning some providers need back.
pub(crate) fn last_user_index(messages: &[Message]) -> usize {
    messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0)
}

/// The output-token cap to ask for: the configured cap, lowered to the remaining token
/// budget; at least 1 so that a request is never malformed.
pub(crate) fn output_cap(configured: Option<u64>, remaining: Option<u64>) -> Option<u64> {
    let cap = match (configured, remaining) {
        (Some(c), Some(r)) => Some(c.min(r)),
        (c, r) => c.or(r),
    };
    cap.map(|c| c.max(1))
}

/// Usage counters as a partially known record: fields merge as events report them, and the
/// result is `None` unless input or output tokens were reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UsageParts {
    pub(crate) input: Option<u64>,
    pub(crate) output: Option<u64>,
    pub(crate) total: Option<u64>,
    pub(crate) cached_input: Option<u64>,
    pub(crate) reasoning: Option<u64>,
    pub(crate) cache_creation: Option<u64>,
    pub(crate) cache_read: Option<u64>,
}

impl UsageParts {
    /// Overwrites every field `other` reports.
    pub(crate) fn merge(&mut self, other: UsageParts) {
        let pick = |mine: &mut Option<u64>, theirs: Option<u64>| {
            if theirs.is_some() {
                *mine = theirs;
            }
        };
        pick(&mut self.input, other.input);
        pick(&mut self.output, other.output);
        pick(&mut self.total, other.total);
        pick(&mut self.cached_input, other.cached_input);
        pick(&mut self.reasoning, other.reasoning);
        pick(&mut self.cache_creation, other.cache_creation);
        pick(&mut self.cache_read, other.cache_read);
    }

    /// The usage record, `None` when neither input nor output tokens were reported.
    pub(crate) fn finish(self) -> Option<TokenUsage> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        Some(TokenUsage {
            input_tokens: self.input.unwrap_or(0),
            output_tokens: self.output.unwrap_or(0),
            total_tokens: self.total,
            cached_input_tokens: self.cached_input,
            reasoning_tokens: self.reasoning,
            cache_creation_input_tokens: self.cache_creation,
            cache_read_input_tokens: self.cache_read,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_text_rules() {
        let empty = call_from_text(None, "t".into(), "  ".into());
        assert_eq!(empty.arguments, serde_json::json!({}));
        assert_eq!(empty.arguments_raw.as_deref(), Some("  "));
        assert!(empty.parse_error.is_none());

        let bad = call_from_text(None, "t".into(), "{\"a\":".into());
        assert_eq!(bad.arguments, Value::Null);
        assert!(bad.parse_error.is_some());
    }

    #[test]
    fn finish_normalisation() {
        let f = |raw: Option<&str>, tools| finish_reason(raw.map(str::to_owned), tools).normalized;
        assert_eq!(f(Some("stop"), true), Some(Finish::ToolCalls));
        assert_eq!(f(None, true), Some(Finish::ToolCalls));
        assert_eq!(f(None, false), None);
        assert_eq!(f(Some("max_tokens"), false), Some(Finish::Length));
        assert_eq!(f(Some("length"), true), Some(Finish::Length));
        assert_eq!(f(Some("stop_sequence"), false), Some(Finish::StopSequence));
        assert_eq!(
            f(Some("content_filter"), false),
            Some(Finish::ContentFilter)
        );
        assert_eq!(f(Some("pause_turn"), false), None);
    }

    #[test]
    fn strictness_needs_closed_objects_with_every_property_required() {
        let closed = serde_json::json!({
            "type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "string"}}, "required": ["a"]
        });
        assert!(strict_compatible(&closed));
        let open =
            serde_json::json!({"type": "object", "properties": {"a": {}}, "required": ["a"]});
        assert!(!strict_compatible(&open));
        let optional = serde_json::json!({
            "type": "object", "additionalProperties": false,
            "properties": {"a": {}, "b": {}}, "required": ["a"]
        });
        assert!(!strict_compatible(&optional));
        let nested = serde_json::json!({
            "type": "object", "additionalProperties": false, "required": ["x"],
            "properties": {"x": {"type": "object", "properties": {"y": {}}}}
        });
        assert!(!strict_compatible(&nested));
    }

    #[test]
    fn output_cap_takes_the_smaller_and_never_zero() {
        assert_eq!(output_cap(Some(4096), Some(100)), Some(100));
        assert_eq!(output_cap(Some(50), Some(100)), Some(50));
        assert_eq!(output_cap(None, Some(0)), Some(1));
        assert_eq!(output_cap(None, None), None);
    }
}
