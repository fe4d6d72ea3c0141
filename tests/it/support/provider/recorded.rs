//! A recorded request body (`request.json`) read back into the [`ProviderRequest`] that
//! would produce it — messages with their reasoning, tools, model settings and output
//! schema — and the body runtape sent compared with the recording key by key. Every key of a
//! recording is either compared or listed in [`IGNORABLE`] with the reason it may differ.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use runtape::machine::{
    AgentId, Attachment, Digest, Message, ModelSettings, Reasoning, ReasoningEffort,
    ReasoningSettings, Remaining, Role, ToolCall,
};
use runtape::provider::http::ProviderKind;
use runtape::provider::{ProviderRequest, ToolDef};
use serde_json::{Value, json};

/// Request keys a recording may carry that runtape does not send (or sends differently
/// without changing the meaning), with why that is acceptable. Any other key is compared.
pub const IGNORABLE: &[(&str, &str)] = &[
    (
        "n",
        "1 is the default; runtape never asks for several choices",
    ),
    (
        "user",
        "an end-user tag for abuse reports; runtape sends none",
    ),
    (
        "keep_alive",
        "Ollama's model-unload timer; the server default applies",
    ),
    (
        "top_k",
        "not a runtape model setting (providers disagree on it)",
    ),
    ("logprobs", "token log-probabilities are not requested"),
    ("top_logprobs", "token log-probabilities are not requested"),
    ("presence_penalty", "not a runtape model setting"),
    ("frequency_penalty", "not a runtape model setting"),
    ("metadata", "request tags, no effect on the reply"),
    ("truncation", "the server default (disabled) applies"),
    ("service_tier", "the account's default tier applies"),
    (
        "reasoning_format",
        "Groq's choice of where reasoning text comes back; runtape reads `reasoning` and `reasoning_content` alike",
    ),
    (
        "cache_control",
        "top-level automatic caching; runtape marks its own breakpoints on the stable prefix (compared apart)",
    ),
];

/// `tool_choice` values that mean what sending none means.
fn default_tool_choice(v: &Value) -> bool {
    v == "auto" || v == &json!({"type": "auto"})
}

/// What a recording's request says, as runtape's request plus the provider config it needs.
pub struct Rebuilt {
    pub request: ProviderRequest,
    /// The provider-level output cap (`max_tokens` for Anthropic when no setting gives it).
    pub max_tokens: Option<u64>,
}

/// The request that produces `recorded` (Err: what cannot be expressed).
pub fn provider_request(kind: ProviderKind, recorded: &Value) -> Result<Rebuilt, String> {
    if recorded.is_null() {
        return Err("request.json is null".into());
    }
    let mut messages = Vec::new();
    let mut files = Files::new();
    match kind {
        ProviderKind::OpenAiResponses => responses_messages(recorded, &mut messages, &mut files)?,
        _ => {
            if let Some(system) = recorded.get("system") {
                let text = system.as_str().ok_or("system is not a string")?;
                messages.push(Message::text(Role::System, text));
            }
            for m in recorded["messages"].as_array().ok_or("no messages")? {
                let Some(role) = m.get("role").and_then(Value::as_str) else {
                    return Err("a message is not an object with a role".into());
                };
                match kind {
                    ProviderKind::Anthropic => {
                        anthropic_message(role, m, &mut messages, &mut files)?
                    }
                    _ => messages.push(chat_message(role, m, &mut files)?),
                }
            }
        }
    }
    let tools = recorded["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| tool_def(kind, t)).collect())
        .unwrap_or_default();
    let (settings, max_tokens) = settings(kind, recorded)?;
    let (agent, output_schema) = output(kind, recorded);
    Ok(Rebuilt {
        request: ProviderRequest {
            agent: AgentId::from(agent.as_str()),
            model: recorded["model"].as_str().ok_or("no model")?.to_owned(),
            messages: Arc::new(messages),
            tools,
            remaining: Remaining::default(),
            attempt: 1,
            settings,
            output_schema,
            origin: Default::default(),
            files: Arc::new(files),
        },
        max_tokens,
    })
}

/// Whether an assistant turn before the last user message carries reasoning.
fn earlier_reasoning(messages: &Value) -> bool {
    let list = messages.as_array().cloned().unwrap_or_default();
    let last_user = list.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    list[..last_user].iter().any(|m| {
        m["role"] == "assistant"
            && (m.get("reasoning").is_some() || m.get("reasoning_content").is_some())
    })
}

fn tool_def(kind: ProviderKind, t: &Value) -> ToolDef {
    let (f, schema) = match kind {
        ProviderKind::Anthropic => (t, &t["input_schema"]),
        ProviderKind::OpenAiResponses => (t, &t["parameters"]),
        _ => (&t["function"], &t["function"]["parameters"]),
    };
    ToolDef {
        name: f["name"].as_str().unwrap_or_default().to_owned(),
        description: f["description"].as_str().unwrap_or_default().to_owned(),
        schema: schema.clone(),
    }
}

fn effort(word: &str) -> Result<ReasoningEffort, String> {
    serde_json::from_value(json!(word)).map_err(|_| format!("unknown reasoning effort {word}"))
}

fn settings(kind: ProviderKind, r: &Value) -> Result<(ModelSettings, Option<u64>), String> {
    let mut s = ModelSettings {
        temperature: r["temperature"].as_f64(),
        top_p: r["top_p"].as_f64(),
        seed: r["seed"].as_u64(),
        ..ModelSettings::default()
    };
    let options = &r["options"];
    if kind == ProviderKind::Ollama {
        s.temperature = options["temperature"].as_f64();
        s.top_p = options["top_p"].as_f64();
        s.seed = options["seed"].as_u64();
        s.max_output_tokens = options["num_predict"].as_u64();
    }
    let stop = match (&r["stop"], &r["stop_sequences"], &options["stop"]) {
        (Value::String(one), _, _) => vec![one.clone()],
        (Value::Array(many), _, _) | (_, Value::Array(many), _) | (_, _, Value::Array(many)) => {
            many.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        }
        _ => Vec::new(),
    };
    s.stop = stop;
    s.parallel_tool_calls = r["parallel_tool_calls"].as_bool();
    if r["tool_choice"]["disable_parallel_tool_use"] == json!(true) {
        s.parallel_tool_calls = Some(false);
    }
    let tools = r["tools"].as_array().cloned().unwrap_or_default();
    let strict = |t: &Value| t["strict"] == json!(true) || t["function"]["strict"] == json!(true);
    if tools.iter().any(strict) {
        s.strict_tools = Some(true);
    }
    let mut max_tokens = None;
    match kind {
        ProviderKind::Anthropic => {
            let cap = r["max_tokens"].as_u64();
            let effort_word = r.pointer("/output_config/effort").and_then(Value::as_str);
            let stated = effort_word.map(effort).transpose()?;
            match (
                r["thinking"]["type"].as_str(),
                r["thinking"]["budget_tokens"].as_u64(),
            ) {
                (Some("enabled"), Some(budget)) => {
                    s.reasoning = Some(ReasoningSettings {
                        effort: stated.unwrap_or(ReasoningEffort::Medium),
                        budget_tokens: Some(budget),
                    });
                    s.max_output_tokens = cap.map(|c| c.saturating_sub(budget));
                }
                (Some("adaptive"), _) => {
                    s.reasoning = Some(ReasoningSettings {
                        effort: stated.ok_or(
                            "adaptive thinking without output_config.effort: runtape always sends the effort it was given",
                        )?,
                        budget_tokens: None,
                    });
                    max_tokens = cap;
                }
                _ if stated.is_some() => {
                    return Err("output_config.effort without thinking: runtape's reasoning setting always asks for thinking".into());
                }
                _ => max_tokens = cap,
            }
            s.prompt_cache = Some(anthropic_caches(r));
        }
        ProviderKind::OpenAiResponses => {
            s.max_output_tokens = r["max_output_tokens"].as_u64();
            if let Some(e) = r["reasoning"]["effort"].as_str() {
                s.reasoning = Some(ReasoningSettings {
                    effort: effort(e)?,
                    budget_tokens: None,
                });
            }
        }
        ProviderKind::Ollama => {
            if let Some(think) = r["think"].as_bool() {
                let e = if think {
                    ReasoningEffort::Medium
                } else {
                    ReasoningEffort::None
                };
                s.reasoning = Some(ReasoningSettings {
                    effort: e,
                    budget_tokens: None,
                });
            }
        }
        _ => {
            s.max_output_tokens = r["max_completion_tokens"]
                .as_u64()
                .or(r["max_tokens"].as_u64());
            if let Some(e) = r["reasoning_effort"].as_str() {
                s.reasoning = Some(ReasoningSettings {
                    effort: effort(e)?,
                    budget_tokens: None,
                });
            }
        }
    }
    Ok((s, max_tokens))
}

/// Whether an Anthropic recording asked for prompt caching: top-level `cache_control`, or a
/// `cache_control` mark on a block of its system prompt, tools or messages.
fn anthropic_caches(r: &Value) -> bool {
    r.get("cache_control").is_some()
        || ["system", "tools", "messages"].iter().any(|k| {
            r.get(*k)
                .is_some_and(|v| v.to_string().contains("\"cache_control\""))
        })
}

/// Removes every `cache_control` mark, and turns a system prompt sent as text blocks into
/// its text: the body compared without caching marks (compared apart).
pub fn without_cache_marks(v: &Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("cache_control");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = v.clone();
    strip(&mut v);
    if let Some(Value::Array(blocks)) = v.get("system").cloned() {
        let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        v["system"] = json!(text.join("\n\n"));
    }
    v
}

/// Where a request body carries `cache_control` marks: `system`, `tools[i]`,
/// `messages[i]` (the message holding a marked block), in order.
pub fn cache_marks(v: &Value) -> Vec<String> {
    let mut at = Vec::new();
    if v["system"].to_string().contains("\"cache_control\"") {
        at.push("system".to_owned());
    }
    for key in ["tools", "messages"] {
        for (i, item) in v[key].as_array().into_iter().flatten().enumerate() {
            if item.to_string().contains("\"cache_control\"") {
                at.push(format!("{key}[{i}]"));
            }
        }
    }
    at
}

/// The agent id (the schema's name, which OpenAI requires) and the output schema.
fn output(kind: ProviderKind, r: &Value) -> (String, Option<Value>) {
    let (name, schema) = match kind {
        ProviderKind::Anthropic => (None, r.pointer("/output_config/format/schema")),
        ProviderKind::OpenAiResponses => (
            r.pointer("/text/format/name").and_then(Value::as_str),
            r.pointer("/text/format/schema"),
        ),
        ProviderKind::Ollama => (None, r.get("format").filter(|f| f.is_object())),
        _ => (
            r.pointer("/response_format/json_schema/name")
                .and_then(Value::as_str),
            r.pointer("/response_format/json_schema/schema"),
        ),
    };
    (name.unwrap_or("agent").to_owned(), schema.cloned())
}

fn role_of(role: &str) -> Result<Role, String> {
    serde_json::from_value(json!(role)).map_err(|_| format!("unknown role {role}"))
}

fn message(role: Role) -> Message {
    let mut m = Message::text(role, "");
    m.content = None;
    m
}

fn parsed_arguments(raw: &Value) -> Value {
    match raw {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
        other => other.clone(),
    }
}

/// File bytes by digest, as a rebuilt request carries them.
type Files = BTreeMap<Digest, Arc<[u8]>>;

/// The attachment for base64 `data` of `media_type`, its bytes kept in `files`.
fn attached(
    media_type: &str,
    data: &str,
    name: Option<&str>,
    files: &mut Files,
) -> Result<Attachment, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("file data is not base64: {e}"))?;
    let a = Attachment::of(media_type, &bytes, name.map(str::to_owned));
    files.insert(a.digest, Arc::from(bytes));
    Ok(a)
}

/// A `data:MEDIA;base64,DATA` URL's attachment.
fn attached_url(url: &str, name: Option<&str>, files: &mut Files) -> Result<Attachment, String> {
    let rest = url
        .strip_prefix("data:")
        .ok_or("a file by URL, not by data, has no equivalent")?;
    let (media_type, data) = rest
        .split_once(";base64,")
        .ok_or("a data URL that is not base64")?;
    attached(media_type, data, name, files)
}

fn chat_message(role: &str, m: &Value, files: &mut Files) -> Result<Message, String> {
    let mut out = message(role_of(role)?);
    out.content = match m.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) if parts.iter().all(|p| p["type"] == "text") => {
            return Err(
                "content as text parts has no equivalent in Message (it is sent as a string)"
                    .into(),
            );
        }
        Some(Value::Array(parts)) => {
            let mut text: Option<String> = None;
            for p in parts {
                match p["type"].as_str() {
                    Some("text") => text
                        .get_or_insert_with(String::new)
                        .push_str(p["text"].as_str().unwrap_or_default()),
                    Some("image_url") => out.attachments.push(attached_url(
                        p["image_url"]["url"].as_str().unwrap_or_default(),
                        None,
                        files,
                    )?),
                    Some("file") => out.attachments.push(attached_url(
                        p["file"]["file_data"].as_str().unwrap_or_default(),
                        p["file"]["filename"].as_str(),
                        files,
                    )?),
                    other => return Err(format!("content part {other:?} has no equivalent")),
                }
            }
            text
        }
        Some(_) => return Err("content is neither text nor parts".into()),
    };
    out.tool_calls = m["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_owned(),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: parsed_arguments(&c["function"]["arguments"]),
                })
                .collect()
        })
        .unwrap_or_default();
    out.tool_call_id = m["tool_call_id"].as_str().map(str::to_owned);
    out.name = m["tool_name"].as_str().map(str::to_owned);
    // Ollama's native images: base64 without a media type, which the bytes tell.
    for image in m["images"].as_array().into_iter().flatten() {
        let data = image.as_str().unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("an image is not base64: {e}"))?;
        let media_type = runtape::machine::attachment::sniff_media_type(&bytes)
            .ok_or("an image of a kind runtape does not take")?;
        out.attachments
            .push(attached(media_type, data, None, files)?);
    }
    for field in ["reasoning_content", "reasoning", "thinking"] {
        if let Some(text) = m[field].as_str() {
            out.reasoning.push(Reasoning::Text {
                text: text.to_owned(),
                field: Some(field.to_owned()),
            });
        }
    }
    Ok(out)
}

fn anthropic_message(
    role: &str,
    m: &Value,
    out: &mut Vec<Message>,
    files: &mut Files,
) -> Result<(), String> {
    let role = role_of(role)?;
    let blocks = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(blocks) => blocks.clone(),
        _ => return Err("content is neither text nor blocks".into()),
    };
    if role == Role::Assistant {
        let mut msg = message(Role::Assistant);
        for b in &blocks {
            match b["type"].as_str() {
                Some("text") => msg
                    .content
                    .get_or_insert_with(String::new)
                    .push_str(b["text"].as_str().unwrap_or_default()),
                Some("tool_use") => msg.tool_calls.push(ToolCall {
                    id: b["id"].as_str().unwrap_or_default().to_owned(),
                    name: b["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: b["input"].clone(),
                }),
                Some("thinking") => msg.reasoning.push(Reasoning::Thinking {
                    text: b["thinking"].as_str().unwrap_or_default().to_owned(),
                    signature: b["signature"].as_str().unwrap_or_default().to_owned(),
                }),
                Some("redacted_thinking") => msg.reasoning.push(Reasoning::RedactedThinking {
                    data: b["data"].as_str().unwrap_or_default().to_owned(),
                }),
                other => return Err(format!("assistant block {other:?} has no equivalent")),
            }
        }
        out.push(msg);
        return Ok(());
    }
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => out.push(Message::text(role, b["text"].as_str().unwrap_or_default())),
            Some("tool_result") => {
                let mut msg = message(Role::Tool);
                msg.content = b["content"].as_str().map(str::to_owned);
                // A result with files: a list of blocks, its text then the files.
                for part in b["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => msg
                            .content
                            .get_or_insert_with(String::new)
                            .push_str(part["text"].as_str().unwrap_or_default()),
                        Some("image" | "document") => msg.attachments.push(attached(
                            part["source"]["media_type"].as_str().unwrap_or_default(),
                            part["source"]["data"].as_str().unwrap_or_default(),
                            None,
                            files,
                        )?),
                        other => {
                            return Err(format!("tool_result block {other:?} has no equivalent"));
                        }
                    }
                }
                msg.tool_call_id = b["tool_use_id"].as_str().map(str::to_owned);
                msg.is_error = b["is_error"].as_bool().unwrap_or(false);
                out.push(msg);
            }
            Some("image" | "document") => {
                let source = &b["source"];
                if source["type"] != "base64" {
                    return Err("a file by URL, not by data, has no equivalent".into());
                }
                let a = attached(
                    source["media_type"].as_str().unwrap_or_default(),
                    source["data"].as_str().unwrap_or_default(),
                    None,
                    files,
                )?;
                // The file belongs to the user message its block follows.
                match out.last_mut().filter(|m| m.role == role) {
                    Some(last) => last.attachments.push(a),
                    None => {
                        let mut msg = message(role);
                        msg.attachments.push(a);
                        out.push(msg);
                    }
                }
            }
            other => return Err(format!("user block {other:?} has no equivalent")),
        }
    }
    Ok(())
}

/// Responses `input` items back into messages: consecutive reasoning, assistant text and
/// function calls form one assistant message.
fn responses_messages(r: &Value, out: &mut Vec<Message>, files: &mut Files) -> Result<(), String> {
    if let Some(instructions) = r["instructions"].as_str().filter(|i| !i.is_empty()) {
        out.push(Message::text(Role::System, instructions));
    }
    let items = match &r["input"] {
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => return Err("input is neither text nor items".into()),
    };
    let mut assistant: Option<Message> = None;
    for item in &items {
        let kind = item["type"]
            .as_str()
            .unwrap_or(if item.get("role").is_some() {
                "message"
            } else {
                ""
            });
        let role = item["role"].as_str();
        let is_assistant_part =
            matches!(kind, "reasoning" | "function_call") || role == Some("assistant");
        if !is_assistant_part && let Some(a) = assistant.take() {
            out.push(a);
        }
        match (kind, role) {
            ("message", Some("user")) => {
                let mut msg = Message::text(Role::User, "");
                let text = match &item["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => {
                        for p in parts {
                            match p["type"].as_str() {
                                Some("input_image") => msg.attachments.push(attached_url(
                                    p["image_url"].as_str().unwrap_or_default(),
                                    None,
                                    files,
                                )?),
                                Some("input_file") => msg.attachments.push(attached_url(
                                    p["file_data"].as_str().unwrap_or_default(),
                                    p["filename"].as_str(),
                                    files,
                                )?),
                                _ => {}
                            }
                        }
                        parts.iter().filter_map(|p| p["text"].as_str()).collect()
                    }
                    _ => String::new(),
                };
                msg.content = Some(text);
                out.push(msg);
            }
            ("message", Some("assistant")) => {
                let a = assistant.get_or_insert_with(|| message(Role::Assistant));
                let text: String = match &item["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => {
                        parts.iter().filter_map(|p| p["text"].as_str()).collect()
                    }
                    _ => String::new(),
                };
                a.content.get_or_insert_with(String::new).push_str(&text);
            }
            ("reasoning", _) => {
                let a = assistant.get_or_insert_with(|| message(Role::Assistant));
                a.reasoning.push(Reasoning::Item {
                    id: item["id"].as_str().unwrap_or_default().to_owned(),
                    summary: item["summary"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s["text"].as_str().map(str::to_owned))
                        .collect(),
                    encrypted_content: item["encrypted_content"].as_str().map(str::to_owned),
                });
            }
            ("function_call", _) => {
                let a = assistant.get_or_insert_with(|| message(Role::Assistant));
                a.tool_calls.push(ToolCall {
                    id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                    name: item["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: parsed_arguments(&item["arguments"]),
                });
            }
            ("function_call_output", _) => {
                let mut m = message(Role::Tool);
                m.content = item["output"].as_str().map(str::to_owned);
                // An output with files: a list of parts, its text then the files.
                for part in item["output"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("input_text") => m
                            .content
                            .get_or_insert_with(String::new)
                            .push_str(part["text"].as_str().unwrap_or_default()),
                        Some("input_image") => m.attachments.push(attached_url(
                            part["image_url"].as_str().unwrap_or_default(),
                            None,
                            files,
                        )?),
                        Some("input_file") => m.attachments.push(attached_url(
                            part["file_data"].as_str().unwrap_or_default(),
                            part["filename"].as_str(),
                            files,
                        )?),
                        other => return Err(format!("output part {other:?} has no equivalent")),
                    }
                }
                m.tool_call_id = item["call_id"].as_str().map(str::to_owned);
                out.push(m);
            }
            other => return Err(format!("input item {other:?} has no equivalent")),
        }
    }
    out.extend(assistant);
    Ok(())
}

/// Compares the body runtape sent with the recording: every key of the recording must be
/// compared (and equal, after the normalisations below) or be [`IGNORABLE`]. Returns the
/// ignorable keys that were skipped, with their reasons.
pub fn check_request_shape(
    kind: ProviderKind,
    recorded: &Value,
    sent: &Value,
) -> Result<Vec<String>, String> {
    let rec = recorded
        .as_object()
        .ok_or("request.json is not an object")?;
    let mut skipped = Vec::new();
    // Anthropic: caching marks are compared apart (the recording's client may have placed
    // them elsewhere, or used top-level `cache_control`), the rest without them.
    let cleaned;
    let sent = if kind == ProviderKind::Anthropic {
        let recorded_marks = cache_marks(recorded);
        let marks = cache_marks(sent);
        if marks != recorded_marks {
            skipped.push(format!(
                "cache_control marks (sent at [{}]; the recording's at [{}])",
                marks.join(", "),
                recorded_marks.join(", ")
            ));
        }
        cleaned = without_cache_marks(sent);
        &cleaned
    } else {
        sent
    };
    let recorded_clean;
    let rec = if kind == ProviderKind::Anthropic {
        recorded_clean = without_cache_marks(recorded);
        recorded_clean
            .as_object()
            .ok_or("request.json is not an object")?
    } else {
        rec
    };
    for (key, want) in rec {
        if let Some((_, why)) = IGNORABLE.iter().find(|(k, _)| k == key) {
            skipped.push(format!("{key} ({why})"));
            continue;
        }
        let got = sent.get(key).cloned().unwrap_or(Value::Null);
        let (got, want) = match key.as_str() {
            "tool_choice" if default_tool_choice(want) => {
                skipped.push(format!(
                    "tool_choice ({want} is what sending none means when tools are offered)"
                ));
                continue;
            }
            "stream" => (
                json!(got.as_bool().unwrap_or(false)),
                json!(want.as_bool().unwrap_or(false)),
            ),
            "messages" => {
                if kind.is_openai_chat() && earlier_reasoning(want) {
                    skipped.push("reasoning of assistant turns before the last user message (runtape sends reasoning back only within the current tool-use loop)".into());
                }
                (
                    normalize_messages(kind, &got),
                    normalize_messages(kind, want),
                )
            }
            "input" => (normalize_input(&got), normalize_input(want)),
            "tools" => (normalize_tools(&got), normalize_tools(want)),
            "instructions" => (
                json!(got.as_str().unwrap_or_default()),
                json!(want.as_str().unwrap_or_default()),
            ),
            "stop" => (json!(as_list(&got)), json!(as_list(want))),
            // Ollama: an empty `format` asks for nothing.
            "format" if want == "" => (got, Value::Null),
            // Ollama: empty `options` set nothing.
            "options" if want == &json!({}) => (got, Value::Null),
            // The legacy name of the output cap: runtape sends its successor.
            "max_tokens" if kind.is_openai_chat() => {
                (sent["max_completion_tokens"].clone(), want.clone())
            }
            "response_format" | "text" => (normalize_format(&got), normalize_format(want)),
            // `display: summarized` is the documented default.
            "thinking" if want.get("display") == Some(&json!("summarized")) => {
                let mut want = want.clone();
                if let Some(obj) = want.as_object_mut() {
                    obj.remove("display");
                }
                skipped.push("thinking.display (summarized is the default)".into());
                (got, want)
            }
            "reasoning" if kind == ProviderKind::OpenAiResponses => {
                skipped.push("reasoning.summary (runtape asks for `auto` summaries)".into());
                (got["effort"].clone(), want["effort"].clone())
            }
            _ => (got, want.clone()),
        };
        if got != want {
            return Err(format!(
                "request key `{key}`: sent {}, recorded {}",
                clip(&got),
                clip(&want)
            ));
        }
    }
    Ok(skipped)
}

fn clip(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 600 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(600).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

fn as_list(v: &Value) -> Vec<Value> {
    match v {
        Value::String(_) => vec![v.clone()],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

/// `strict` left out means `false`.
fn normalize_format(v: &Value) -> Value {
    let mut v = v.clone();
    for ptr in ["/json_schema", "/format"] {
        if let Some(obj) = v.pointer_mut(ptr).and_then(Value::as_object_mut)
            && obj.get("type").is_none_or(|t| t == "json_schema")
            && obj.contains_key("schema")
        {
            obj.entry("strict").or_insert(json!(false));
        }
    }
    v
}

/// Tools: `description: null` is an empty description; `strict: false` is the default.
fn normalize_tools(v: &Value) -> Value {
    let mut list = v.as_array().cloned().unwrap_or_default();
    let fix = |obj: &mut serde_json::Map<String, Value>| {
        if obj.get("description") == Some(&Value::Null) {
            obj.insert("description".into(), json!(""));
        }
        if obj.get("strict") == Some(&json!(false)) {
            obj.remove("strict");
        }
    };
    for t in &mut list {
        if let Some(obj) = t.as_object_mut() {
            fix(obj);
            if let Some(f) = obj.get_mut("function").and_then(Value::as_object_mut) {
                fix(f);
            }
        }
    }
    Value::Array(list)
}

/// Responses input items: function calls compared without their item `id` and `status`
/// (optional; runtape passes back `call_id`), assistant messages as text.
fn normalize_input(v: &Value) -> Value {
    let list = match v {
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        _ => v.as_array().cloned().unwrap_or_default(),
    };
    list.into_iter()
        // An assistant message with no text says nothing; runtape leaves it out.
        .filter(|item| !(item["role"] == "assistant" && item["content"] == ""))
        .map(|mut item| {
            if let Some(obj) = item.as_object_mut() {
                if obj.get("type") == Some(&json!("function_call")) {
                    obj.remove("id");
                    obj.remove("status");
                    if let Some(Value::String(raw)) = obj.get("arguments").cloned() {
                        obj.insert("arguments".into(), parsed_arguments(&Value::String(raw)));
                    }
                }
                if obj.get("type") == Some(&json!("message")) || obj.get("role").is_some() {
                    obj.remove("type");
                    obj.remove("id");
                    obj.remove("status");
                    if let Some(Value::Array(parts)) = obj.get("content").cloned() {
                        let text: String =
                            parts.iter().filter_map(|p| p["text"].as_str()).collect();
                        obj.insert("content".into(), json!(text));
                    }
                }
            }
            item
        })
        .collect()
}

/// Message lists in a comparable form: Anthropic string content as one text block and
/// `is_error: false` left out; OpenAI argument strings parsed, and reasoning of turns before
/// the last user message left out.
fn normalize_messages(kind: ProviderKind, messages: &Value) -> Value {
    let list = messages.as_array().cloned().unwrap_or_default();
    let last_user = list.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    list.into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            if let Some(obj) = m.as_object_mut() {
                if kind.is_openai_chat() && i < last_user {
                    obj.remove("reasoning");
                    obj.remove("reasoning_content");
                }
                // A tool-only assistant turn: `content: null` and no `content` mean the same.
                if kind.is_openai_chat()
                    && obj.get("role") == Some(&json!("assistant"))
                    && obj.get("content") == Some(&Value::Null)
                    && obj.contains_key("tool_calls")
                {
                    obj.remove("content");
                }
                if kind == ProviderKind::Anthropic {
                    if let Some(Value::String(s)) = obj.get("content").cloned() {
                        obj.insert("content".into(), json!([{"type": "text", "text": s}]));
                    }
                    if let Some(Value::Array(blocks)) = obj.get_mut("content") {
                        for b in blocks {
                            if let Some(b) = b.as_object_mut()
                                && b.get("is_error") == Some(&json!(false))
                            {
                                b.remove("is_error");
                            }
                        }
                    }
                }
                if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
                    for c in calls {
                        if let Some(Value::String(raw)) = c.pointer("/function/arguments").cloned()
                        {
                            c["function"]["arguments"] = parsed_arguments(&Value::String(raw));
                        }
                    }
                }
            }
            m
        })
        .collect()
}
