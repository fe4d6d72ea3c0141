//! Every recorded provider case, replayed from a local HTTP server through the real adapter:
//! once with the body whole and once cut into random small chunks, asserting everything
//! `expect.json` says and that the request sent has the shape of `request.json`.
//!
//! Cases come from `../shared/fixtures/providers`, or from `RUNTAPE_PROVIDER_CASES` when set.
//! Run with `--nocapture` to see one line per case.

mod provider_support;

use std::sync::Arc;

use provider_support::*;
use runtape::machine::{
    AgentId, Finish, Message, ProviderErrorClass, Remaining, Role, TokenUsage, ToolCall,
};
use runtape::provider::http::{Decoded, PricingTable, ProviderKind, cost_nanos, parse_error_body};
use runtape::provider::{ProviderError, ProviderRequest, ToolDef};
use serde_json::{Value, json};

macro_rules! ensure_eq {
    ($got:expr, $want:expr, $what:expr) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            return Err(format!("{}: got {:?}, expected {:?}", $what, got, want));
        }
    }};
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {{
        if !$cond {
            return Err(format!($($msg)+));
        }
    }};
}

const KEY: &str = "test-key-conformance";

#[tokio::test]
async fn every_recorded_case_conforms() {
    let cases = load_cases();
    assert!(!cases.is_empty(), "no cases in {}", cases_dir().display());
    let mut failures = Vec::new();
    for case in &cases {
        let mut request_note = String::new();
        let mut ok = true;
        for chunked in [false, true] {
            match run(case, chunked).await {
                Ok(note) => request_note = note,
                Err(e) => {
                    ok = false;
                    let mode = if chunked { "chunked" } else { "whole" };
                    failures.push(format!("case {} ({mode}): {e}", case.name));
                }
            }
        }
        if ok {
            println!(
                "case {}: ok (whole, chunked); request {request_note}",
                case.name
            );
        } else {
            println!("case {}: FAILED", case.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

async fn run(case: &Case, chunked: bool) -> Result<String, String> {
    let kind = case.kind();
    let mut behaviour = Behaviour::Respond {
        status: case.status,
        headers: case.headers.clone(),
        body: case.body.clone(),
        chunking: Chunking::Whole,
        end: End::Finish,
    };
    if chunked {
        behaviour = behaviour.chunked(Rng::from_name(&case.name).next());
    }
    let server = MockServer::always(behaviour).await;
    let path = case
        .path()
        .unwrap_or_else(|| kind_default_path(kind).to_owned());
    let endpoint = kind_default_path(kind);
    ensure!(
        path.ends_with(endpoint),
        "recorded path {path} does not end in {endpoint}"
    );
    let base = format!("{}{}", server.url(), &path[..path.len() - endpoint.len()]);

    let (request, representable) = match provider_request(kind, &case.request) {
        Ok(r) => (r, Ok(())),
        Err(reason) => {
            let model = case.request["model"]
                .as_str()
                .or(case.expect["model"].as_str())
                .unwrap_or("test-model");
            (hello(model), Err(reason))
        }
    };
    let mut config = config(kind, &base, "config-model");
    config.stream = case.stream();
    config.max_tokens = case.request["max_tokens"]
        .as_u64()
        .filter(|_| kind == ProviderKind::Anthropic);
    let provider = provider(config, KEY);
    let deltas = Deltas::default();
    let sink = deltas.sink();
    let result = provider.complete_decoded(&request, &sink).await;

    let sent = server.requests();
    ensure_eq!(sent.len(), 1, "requests the server saw");
    let sent = &sent[0];
    ensure_eq!(sent.method.as_str(), "POST", "method");
    ensure_eq!(sent.path.as_str(), path.as_str(), "path");
    check_headers(kind, sent)?;

    match case.expect["kind"].as_str() {
        Some("success") => {
            let decoded = result.map_err(|e| format!("expected success, got error {e}"))?;
            check_success(case, &decoded, &deltas)?;
        }
        Some("error") => {
            let err = match result {
                Ok(d) => return Err(format!("expected an error, got {:?}", d.reply)),
                Err(e) => e,
            };
            check_error(case, &err)?;
        }
        other => return Err(format!("unknown expect kind {other:?}")),
    }

    match representable {
        Ok(()) => {
            check_request_shape(kind, &case.request, &sent.json())?;
            let dropped = case.request["messages"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m.get("reasoning").is_some()));
            Ok(if dropped {
                "shape: matches request.json (an assistant `reasoning` field, which Message cannot hold, not compared)".into()
            } else {
                "shape: matches request.json".into()
            })
        }
        Err(reason) => Ok(format!("shape: not compared ({reason})")),
    }
}

fn kind_default_path(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "/chat/completions",
        ProviderKind::Anthropic => "/v1/messages",
        ProviderKind::Ollama => "/api/chat",
    }
}

fn check_headers(kind: ProviderKind, sent: &Recorded) -> Result<(), String> {
    match kind {
        ProviderKind::OpenAi => {
            let bearer = format!("Bearer {KEY}");
            ensure_eq!(
                sent.header("authorization"),
                Some(bearer.as_str()),
                "authorization header"
            );
        }
        ProviderKind::Anthropic => {
            ensure_eq!(sent.header("x-api-key"), Some(KEY), "x-api-key header");
            ensure_eq!(
                sent.header("anthropic-version"),
                Some("2023-06-01"),
                "anthropic-version header"
            );
            ensure_eq!(sent.header("authorization"), None, "authorization header");
        }
        ProviderKind::Ollama => {
            ensure_eq!(sent.header("authorization"), None, "authorization header");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Success

fn opt_str(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn check_success(case: &Case, decoded: &Decoded, deltas: &Deltas) -> Result<(), String> {
    let e = &case.expect;
    let reply = &decoded.reply;
    ensure_eq!(reply.text, opt_str(&e["text"]), "text");
    ensure_eq!(
        deltas.joined(),
        reply.text.clone().unwrap_or_default(),
        "text delivered to the token sink"
    );
    if case.stream() && reply.text.is_some() {
        ensure!(
            deltas.count() > 1 || reply.text.as_ref().is_some_and(|t| t.len() < 8),
            "a streamed reply arrived as {} delta(s)",
            deltas.count()
        );
    }
    ensure_eq!(reply.model, opt_str(&e["model"]), "model");
    ensure_eq!(reply.response_id, opt_str(&e["response_id"]), "response_id");

    let want_calls = e["tool_calls"].as_array().cloned().unwrap_or_default();
    ensure_eq!(
        reply.tool_calls.len(),
        want_calls.len(),
        "number of tool calls"
    );
    for (i, (got, want)) in reply.tool_calls.iter().zip(&want_calls).enumerate() {
        ensure_eq!(got.id, opt_str(&want["id"]), format!("tool_calls[{i}].id"));
        ensure_eq!(
            Some(got.name.as_str()),
            want["name"].as_str(),
            format!("tool_calls[{i}].name")
        );
        ensure_eq!(
            got.arguments,
            want["arguments"],
            format!("tool_calls[{i}].arguments")
        );
        let want_raw = want
            .get("arguments_raw")
            .map(|r| r.as_str().unwrap_or_default().to_owned());
        ensure_eq!(
            got.arguments_raw,
            want_raw,
            format!("tool_calls[{i}].arguments_raw")
        );
        ensure_eq!(
            got.parse_error,
            None,
            format!("tool_calls[{i}].parse_error")
        );
    }

    ensure_eq!(
        reply.finish_reason.raw,
        opt_str(&e["finish_reason"]["raw"]),
        "finish_reason.raw"
    );
    let want_finish: Option<Finish> =
        serde_json::from_value(e["finish_reason"]["normalized"].clone())
            .map_err(|x| x.to_string())?;
    ensure_eq!(
        reply.finish_reason.normalized,
        want_finish,
        "finish_reason.normalized"
    );

    let want_usage = if e["usage"].is_null() {
        None
    } else {
        let u = &e["usage"];
        Some(TokenUsage {
            input_tokens: u["input_tokens"]
                .as_u64()
                .ok_or("usage.input_tokens missing")?,
            output_tokens: u["output_tokens"]
                .as_u64()
                .ok_or("usage.output_tokens missing")?,
            total_tokens: u["total_tokens"].as_u64(),
            cached_input_tokens: u["cached_input_tokens"].as_u64(),
            reasoning_tokens: u["reasoning_tokens"].as_u64(),
            cache_creation_input_tokens: u["cache_creation_input_tokens"].as_u64(),
            cache_read_input_tokens: u["cache_read_input_tokens"].as_u64(),
        })
    };
    ensure_eq!(reply.usage, want_usage, "usage");

    let table = PricingTable::builtin();
    let want_cost = match (
        reply.model.as_deref().and_then(|m| table.lookup(m)),
        reply.usage,
    ) {
        (Some(price), Some(usage)) => Some(cost_nanos(&price, &usage)),
        _ => None,
    };
    ensure_eq!(reply.cost_nanos, want_cost, "cost_nanos");

    if let Some(refusal) = e.get("refusal") {
        ensure_eq!(reply.refusal, opt_str(refusal), "refusal");
    }
    if let Some(thinking) = e.get("thinking").or(e.get("reasoning")) {
        ensure_eq!(reply.thinking, opt_str(thinking), "thinking");
    }
    let d = &decoded.details;
    if let Some(stop) = e.get("stop_sequence") {
        ensure_eq!(d.stop_sequence, opt_str(stop), "stop_sequence");
    }
    if let Some(signatures) = e.get("thinking_signatures") {
        let want: Vec<String> = serde_json::from_value(signatures.clone()).unwrap_or_default();
        ensure_eq!(d.thinking_signatures, want, "thinking_signatures");
    }
    if let Some(types) = e.get("content_block_types") {
        let want: Vec<String> = serde_json::from_value(types.clone()).map_err(|x| x.to_string())?;
        ensure_eq!(d.content_block_types, want, "content_block_types");
    }
    if let Some(n) = e.get("n_choices") {
        ensure_eq!(d.choices, n.as_u64().map(|n| n as usize), "n_choices");
    }
    if let Some(facts) = e.get("stream_facts") {
        let got = d
            .stream
            .as_ref()
            .ok_or("no stream facts for a streamed case")?;
        if let Some(n) = facts["n_data_chunks"].as_u64() {
            ensure_eq!(got.events as u64, n, "stream_facts.n_data_chunks");
            ensure_eq!(
                Some(got.done_sentinel),
                facts["saw_done_sentinel"].as_bool(),
                "stream_facts.saw_done_sentinel"
            );
            ensure_eq!(
                Some(got.comments as u64),
                facts["n_sse_comments"].as_u64(),
                "stream_facts.n_sse_comments"
            );
            ensure!(
                facts["inline_errors"].is_null(),
                "expected inline errors in a success case"
            );
        }
        if let Some(n) = facts["n_events"].as_u64() {
            ensure_eq!(got.events as u64, n, "stream_facts.n_events");
            let want: Vec<String> =
                serde_json::from_value(facts["event_types"].clone()).map_err(|x| x.to_string())?;
            ensure_eq!(
                got.event_types.iter().cloned().collect::<Vec<_>>(),
                want,
                "stream_facts.event_types"
            );
            ensure!(
                facts["stream_errors"].is_null(),
                "expected stream errors in a success case"
            );
        }
        if let Some(n) = facts["n_lines"].as_u64() {
            ensure_eq!(got.lines as u64, n, "stream_facts.n_lines");
            ensure!(
                facts["errors"].is_null(),
                "expected line errors in a success case"
            );
        }
    } else {
        ensure_eq!(d.stream, None, "stream facts for a whole-body case");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Errors

fn check_error(case: &Case, err: &ProviderError) -> Result<(), String> {
    let e = &case.expect;
    let status = e["http_status"].as_u64().map(|s| s as u16);
    ensure_eq!(err.status, status, "status");
    ensure_eq!(err.error_type, opt_str(&e["error_type"]), "error_type");
    let want_code = match &e["error_code"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    ensure_eq!(err.error_code, want_code, "error_code");
    ensure_eq!(Some(err.message.as_str()), e["message"].as_str(), "message");
    ensure_eq!(err.request_id, opt_str(&e["request_id"]), "request_id");
    ensure_eq!(Some(err.retryable), e["retryable"].as_bool(), "retryable");
    let should_retry = e["x_should_retry_header"].as_str().map(|s| s == "true");
    ensure_eq!(err.should_retry, should_retry, "x-should-retry");
    let retry_after = e["retry_after_seconds"].as_u64().map(|s| s * 1000);
    ensure_eq!(err.retry_after_ms, retry_after, "retry_after_ms");
    ensure_eq!(err.provider.as_str(), case.kind().as_str(), "provider name");

    let (class, hint) = match status {
        Some(401 | 403) => (ProviderErrorClass::ProviderAuth, "auth rejected"),
        Some(429) => (ProviderErrorClass::ProviderRateLimit, "rate limited"),
        Some(404) => (ProviderErrorClass::BadRequest, "model not found"),
        Some(400) => (ProviderErrorClass::BadRequest, "request rejected"),
        other => return Err(format!("no class expectation for status {other:?}")),
    };
    ensure_eq!(err.class, class, "class");
    ensure!(
        err.hint.contains(hint),
        "hint {:?} lacks {hint:?}",
        err.hint
    );
    ensure!(
        err.to_string().contains(&err.message),
        "Display lacks the message"
    );

    let body = String::from_utf8_lossy(&case.body);
    let snippet = err.body_snippet.as_deref().ok_or("no body snippet")?;
    ensure!(
        snippet.chars().count() <= 500,
        "snippet longer than 500 characters"
    );
    ensure!(
        body.starts_with(snippet),
        "snippet is not the start of the body"
    );
    ensure_eq!(
        snippet.chars().count(),
        body.chars().count().min(500),
        "snippet length"
    );

    if let Some(metadata) = e.get("error_metadata") {
        let parsed = parse_error_body(&case.body).ok_or("body did not parse as an error")?;
        ensure_eq!(parsed.metadata.as_ref(), Some(metadata), "error metadata");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The request: request.json → ProviderRequest, and the sent body compared with request.json.

fn provider_request(kind: ProviderKind, recorded: &Value) -> Result<ProviderRequest, String> {
    if recorded.is_null() {
        return Err("request.json is null".into());
    }
    let mut messages = Vec::new();
    if let Some(system) = recorded.get("system") {
        let text = system.as_str().ok_or("system is not a string")?;
        messages.push(Message::text(Role::System, text));
    }
    for m in recorded["messages"].as_array().ok_or("no messages")? {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err("a message is not an object with a role".into());
        };
        match kind {
            ProviderKind::Anthropic => anthropic_message(role, m, &mut messages)?,
            _ => messages.push(chat_message(role, m)?),
        }
    }
    let tools = recorded["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let f = if kind == ProviderKind::Anthropic {
                        t
                    } else {
                        &t["function"]
                    };
                    let schema = if kind == ProviderKind::Anthropic {
                        &t["input_schema"]
                    } else {
                        &f["parameters"]
                    };
                    ToolDef {
                        name: f["name"].as_str().unwrap_or_default().to_owned(),
                        description: f["description"].as_str().unwrap_or_default().to_owned(),
                        schema: schema.clone(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ProviderRequest {
        agent: AgentId::from("agent"),
        model: recorded["model"].as_str().ok_or("no model")?.to_owned(),
        messages: Arc::new(messages),
        tools,
        remaining: Remaining::default(),
        attempt: 1,
    })
}

fn role_of(role: &str) -> Result<Role, String> {
    serde_json::from_value(json!(role)).map_err(|_| format!("unknown role {role}"))
}

fn chat_message(role: &str, m: &Value) -> Result<Message, String> {
    let content = match m.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("content parts (an image) have no equivalent in Message".into()),
    };
    let tool_calls = m["tool_calls"]
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
                    arguments: match &c["function"]["arguments"] {
                        Value::String(raw) => {
                            serde_json::from_str(raw).unwrap_or(Value::String(raw.clone()))
                        }
                        other => other.clone(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Message {
        role: role_of(role)?,
        content,
        tool_calls,
        tool_call_id: m["tool_call_id"].as_str().map(str::to_owned),
        name: m["tool_name"].as_str().map(str::to_owned),
        is_error: false,
    })
}

fn anthropic_message(role: &str, m: &Value, out: &mut Vec<Message>) -> Result<(), String> {
    let role = role_of(role)?;
    let blocks = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(blocks) => blocks.clone(),
        _ => return Err("content is neither text nor blocks".into()),
    };
    if role == Role::Assistant {
        let mut msg = Message::text(Role::Assistant, "");
        msg.content = None;
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
                other => return Err(format!("assistant block {other:?} has no equivalent")),
            }
        }
        out.push(msg);
        return Ok(());
    }
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => out.push(Message::text(role, b["text"].as_str().unwrap_or_default())),
            Some("tool_result") => out.push(Message {
                role: Role::Tool,
                content: b["content"].as_str().map(str::to_owned),
                tool_calls: Vec::new(),
                tool_call_id: b["tool_use_id"].as_str().map(str::to_owned),
                name: None,
                is_error: b["is_error"].as_bool().unwrap_or(false),
            }),
            other => return Err(format!("user block {other:?} has no equivalent")),
        }
    }
    Ok(())
}

/// Keys of request.json that are not compared: sampling and other options the adapter does
/// not send. Any other key must match.
const IGNORED_KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "n",
    "user",
    "format",
    "options",
    "keep_alive",
    "tool_choice",
    "max_tokens",
];

fn check_request_shape(kind: ProviderKind, recorded: &Value, sent: &Value) -> Result<(), String> {
    let rec = recorded
        .as_object()
        .ok_or("request.json is not an object")?;
    let mut compared = vec!["model", "messages", "tools", "stream", "stream_options"];
    ensure_eq!(sent["model"], recorded["model"], "request model");
    let rec_stream = recorded["stream"].as_bool().unwrap_or(false);
    ensure_eq!(
        sent["stream"].as_bool().unwrap_or(false),
        rec_stream,
        "request stream flag"
    );
    if let Some(options) = recorded.get("stream_options") {
        ensure_eq!(&sent["stream_options"], options, "request stream_options");
    }
    if kind == ProviderKind::OpenAi && rec_stream {
        ensure_eq!(
            sent["stream_options"],
            json!({"include_usage": true}),
            "stream_options sent when streaming"
        );
    }
    let norm = |v: &Value| normalize_messages(kind, v);
    ensure_eq!(
        norm(&sent["messages"]),
        norm(&recorded["messages"]),
        "request messages"
    );
    let tools = |v: &Value| v.as_array().cloned().unwrap_or_default();
    ensure_eq!(
        tools(&sent["tools"]),
        tools(&recorded["tools"]),
        "request tools"
    );
    if kind == ProviderKind::Anthropic {
        compared.extend(["system", "max_tokens"]);
        ensure_eq!(sent["system"], recorded["system"], "request system");
        ensure_eq!(
            sent["max_tokens"],
            recorded["max_tokens"],
            "request max_tokens"
        );
    }
    for key in rec.keys() {
        ensure!(
            compared.contains(&key.as_str()) || IGNORED_KEYS.contains(&key.as_str()),
            "request.json key `{key}` is neither compared nor known to be ignorable"
        );
    }
    Ok(())
}

/// Message lists in a comparable form: Anthropic string content as one text block; OpenAI
/// argument strings parsed; the non-standard `reasoning` field (not representable) dropped.
fn normalize_messages(kind: ProviderKind, messages: &Value) -> Value {
    let list = messages.as_array().cloned().unwrap_or_default();
    list.into_iter()
        .map(|mut m| {
            if let Some(obj) = m.as_object_mut() {
                obj.remove("reasoning");
                if kind == ProviderKind::Anthropic
                    && let Some(Value::String(s)) = obj.get("content").cloned()
                {
                    obj.insert("content".into(), json!([{"type": "text", "text": s}]));
                }
                if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
                    for c in calls {
                        if let Some(Value::String(raw)) = c.pointer("/function/arguments").cloned()
                        {
                            let parsed = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                            c["function"]["arguments"] = parsed;
                        }
                    }
                }
            }
            m
        })
        .collect()
}
