//! Every recorded provider case, replayed from a local HTTP server through the real adapter:
//! once with the body whole and once cut into random small chunks, asserting everything
//! `expect.json` says (text, tool calls, finish, usage, cost, refusal, reasoning blocks with
//! signatures, structured output) and that the request sent has the shape of
//! `request.json`: every key of a recording is compared, or listed as ignorable with a reason
//! (`support::provider::recorded::IGNORABLE`). A second test serves every error status the
//! providers document (400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504, 529)
//! in each protocol's error shape and checks the class, retryability and hint. Two more
//! handle what vendors add later on purpose: every success case again with an unknown key in
//! every object and an unknown event first (the same reply), and statuses nobody documents
//! (402, 418, 451, 499, 507, 520, 599) classified by rule.
//!
//! Cases come from `tests/fixtures/provider-recordings` (or `RUNTAPE_PROVIDER_CASES` when set) and
//! `tests/fixtures/providers`. Run with `--nocapture` to see one line per case.

use crate::support;

use runtape::machine::{Finish, ProviderErrorClass, TokenUsage};
use runtape::provider::ProviderError;
use runtape::provider::http::{Decoded, PricingTable, ProviderKind, cost_nanos, parse_error_body};
use serde_json::Value;
use support::provider::recorded::{check_request_shape, provider_request};
use support::provider::*;

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
        .unwrap_or_else(|| kind.endpoint_path().to_owned());
    let endpoint = kind.endpoint_path();
    ensure!(
        path.ends_with(endpoint),
        "recorded path {path} does not end in {endpoint}"
    );
    let base = format!("{}{}", server.url(), &path[..path.len() - endpoint.len()]);

    let (rebuilt, representable) = match provider_request(kind, &case.request) {
        Ok(r) => (Some(r), Ok(())),
        Err(reason) => (None, Err(reason)),
    };
    let mut config = config(kind, &base, "config-model");
    // This checks what is decoded, not how long it takes: a long recording sent in small
    // pieces, each after a pause, takes seconds, and longer on a busy machine.
    config.timeout = std::time::Duration::from_secs(300);
    config.stream = case.stream();
    config.max_tokens = rebuilt.as_ref().and_then(|r| r.max_tokens);
    let query = case.query();
    if kind == ProviderKind::AzureOpenAi {
        config.api_version = query
            .as_deref()
            .and_then(|q| q.strip_prefix("api-version="))
            .map(str::to_owned);
    }
    let request = match &rebuilt {
        Some(r) => r.request.clone(),
        None => {
            let model = case.request["model"]
                .as_str()
                .or(case.expect["model"].as_str())
                .unwrap_or("test-model");
            hello(model)
        }
    };
    let provider = provider(config, KEY);
    let deltas = Deltas::default();
    let sink = deltas.sink();
    let result = provider.complete_decoded(&request, &sink).await;

    let sent = server.requests();
    ensure_eq!(sent.len(), 1, "requests the server saw");
    let sent = &sent[0];
    ensure_eq!(sent.method.as_str(), "POST", "method");
    let want_path = match (kind, &query) {
        (ProviderKind::AzureOpenAi, Some(q)) => format!("{path}?{q}"),
        _ => path.clone(),
    };
    ensure_eq!(sent.path.as_str(), want_path.as_str(), "path");
    check_headers(kind, sent)?;

    match case.expect["kind"].as_str() {
        Some("success") => {
            let decoded = result.map_err(|e| format!("expected success, got error {e}"))?;
            check_success(case, &decoded, &deltas)?;
            if let Some(schema) = &request.output_schema {
                check_structured(schema, &decoded)?;
            }
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
            let skipped = check_request_shape(kind, &case.request, &sent.json())?;
            Ok(if skipped.is_empty() {
                "shape: every key matches request.json".into()
            } else {
                format!(
                    "shape: matches request.json; not compared: {}",
                    skipped.join(", ")
                )
            })
        }
        Err(reason) => Ok(format!("shape: not compared ({reason})")),
    }
}

/// The answer of a structured-output case parses as JSON and validates against the schema
/// the request carried.
fn check_structured(schema: &Value, decoded: &Decoded) -> Result<(), String> {
    let text = decoded
        .reply
        .text
        .as_deref()
        .ok_or("a structured-output case without text")?;
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("answer is not JSON: {e}"))?;
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    ensure!(
        errors.is_empty(),
        "answer does not match its schema: {errors:?}"
    );
    Ok(())
}

fn check_headers(kind: ProviderKind, sent: &Recorded) -> Result<(), String> {
    match kind {
        ProviderKind::AzureOpenAi => {
            ensure_eq!(sent.header("api-key"), Some(KEY), "api-key header");
            ensure_eq!(sent.header("authorization"), None, "authorization header");
        }
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
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
        // Models on your own Ollama cost nothing unless priced.
        (None, _) if case.kind() == ProviderKind::Ollama => Some(0),
        _ => None,
    };
    ensure_eq!(reply.cost_nanos, want_cost, "cost_nanos");

    if let Some(refusal) = e.get("refusal") {
        ensure_eq!(reply.refusal, opt_str(refusal), "refusal");
    }
    if let Some(thinking) = e
        .get("thinking")
        .or(e.get("reasoning").filter(|r| r.is_string()))
    {
        ensure_eq!(reply.thinking, opt_str(thinking), "thinking");
    }
    if let Some(Value::Array(blocks)) = e.get("reasoning") {
        let want: Vec<Value> = blocks
            .iter()
            .map(|b| {
                let mut b = b.clone();
                if let Some(obj) = b.as_object_mut() {
                    // An empty `summary` is left out of runtape's encoding, like an empty
                    // signature.
                    obj.retain(|k, v| {
                        !(v.is_null()
                            || (k == "signature" && v == "")
                            || (k == "summary" && v == &Value::Array(Vec::new())))
                    });
                }
                b
            })
            .collect();
        let got = serde_json::to_value(&reply.reasoning).map_err(|x| x.to_string())?;
        ensure_eq!(got, Value::Array(want), "reasoning blocks");
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

    let Some(&(_, class, _, hint)) = status.and_then(documented) else {
        return Err(format!("status {status:?} is not in DOCUMENTED_STATUSES"));
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
// Every error status the providers document

/// Every status the providers document for their APIs (OpenAI, Azure OpenAI, Anthropic,
/// Ollama), with the class runtape gives it, whether it is retried, and a word of the hint.
/// Recorded error cases are checked against this table too, so a status missing here fails.
const DOCUMENTED_STATUSES: &[(u16, ProviderErrorClass, bool, &str)] = &[
    (
        400,
        ProviderErrorClass::BadRequest,
        false,
        "request rejected",
    ),
    (
        401,
        ProviderErrorClass::ProviderAuth,
        false,
        "auth rejected",
    ),
    (
        403,
        ProviderErrorClass::ProviderAuth,
        false,
        "auth rejected",
    ),
    (
        404,
        ProviderErrorClass::BadRequest,
        false,
        "model not found",
    ),
    (
        408,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "timed out",
    ),
    (
        409,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "conflict",
    ),
    (413, ProviderErrorClass::BadRequest, false, "too large"),
    (
        422,
        ProviderErrorClass::BadRequest,
        false,
        "request rejected",
    ),
    (
        429,
        ProviderErrorClass::ProviderRateLimit,
        true,
        "rate limited",
    ),
    (
        500,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "unavailable",
    ),
    (
        502,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "unavailable",
    ),
    (
        503,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "unavailable",
    ),
    (
        504,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "unavailable",
    ),
    (
        529,
        ProviderErrorClass::ProviderUnavailable,
        true,
        "unavailable",
    ),
];

fn documented(status: u16) -> Option<&'static (u16, ProviderErrorClass, bool, &'static str)> {
    DOCUMENTED_STATUSES.iter().find(|(s, ..)| *s == status)
}

/// The error an unstreamed call of `kind` gets from a server answering `status` with `body`,
/// or what went wrong instead (the call succeeded).
async fn error_answered(
    kind: ProviderKind,
    status: u16,
    body: &str,
) -> Result<ProviderError, String> {
    let server = MockServer::always(Behaviour::json(status, body)).await;
    let mut cfg = config(kind, &base_for(kind, &server.url()), "m");
    cfg.stream = false;
    match provider(cfg, KEY)
        .complete_decoded(&hello("m"), &|_| {})
        .await
    {
        Ok(d) => Err(format!("{kind} {status}: succeeded with {:?}", d.reply)),
        Err(e) => Ok(e),
    }
}

/// The error body each protocol documents for `status`.
fn documented_body(kind: ProviderKind, status: u16) -> String {
    let anthropic_type = match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    match kind {
        ProviderKind::Anthropic => format!(
            r#"{{"type":"error","error":{{"type":"{anthropic_type}","message":"documented {status}"}},"request_id":"req_doc"}}"#
        ),
        ProviderKind::Ollama => format!(r#"{{"error":"documented {status}"}}"#),
        _ => format!(
            r#"{{"error":{{"message":"documented {status}","type":"{}","param":null,"code":null}}}}"#,
            if status >= 500 {
                "server_error"
            } else {
                "invalid_request_error"
            }
        ),
    }
}

#[tokio::test]
async fn every_documented_error_status_is_classified_in_every_protocol() {
    let kinds = [
        ProviderKind::OpenAi,
        ProviderKind::AzureOpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::Ollama,
    ];
    let mut failures = Vec::new();
    for &(status, class, retryable, hint) in DOCUMENTED_STATUSES {
        for kind in kinds {
            let body = documented_body(kind, status);
            let err = match error_answered(kind, status, &body).await {
                Ok(e) => e,
                Err(failure) => {
                    failures.push(failure);
                    continue;
                }
            };
            let ok = err.status == Some(status)
                && err.class == class
                && err.retryable == retryable
                && err.hint.contains(hint)
                && err.message == format!("documented {status}");
            if !ok {
                failures.push(format!(
                    "{kind} {status}: got class {:?} retryable {} hint {:?} message {:?}",
                    err.class, err.retryable, err.hint, err.message
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// What vendors add later

/// The key every object of a reply gets in [`with_unknown_keys`].
const UNKNOWN_KEY: &str = "x_added_by_a_later_api_version";

/// Objects whose keys are data, not the vendor's schema (tool arguments, schemas, metadata):
/// a key added there would change what the model said, so none is added.
const DATA_KEYS: &[&str] = &[
    "input",
    "arguments",
    "parameters",
    "metadata",
    "parsed",
    "schema",
    "json_schema",
    "properties",
];

fn add_unknown_keys(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if !DATA_KEYS.contains(&k.as_str()) {
                    add_unknown_keys(child);
                }
            }
            map.insert(
                UNKNOWN_KEY.into(),
                serde_json::json!({"nested": [1, "two", null], "flag": true}),
            );
        }
        Value::Array(list) => list.iter_mut().for_each(add_unknown_keys),
        _ => {}
    }
}

/// `case` as a later API version might send it: an unknown key in every object of the body
/// (each SSE `data:` payload and each NDJSON line too), and for an SSE stream an event of an
/// unknown type before the first. What the case expects of the reply is unchanged; its stream
/// accounting (event counts and types) is not compared.
fn with_unknown_keys(case: &Case) -> Case {
    let mut c = case.clone();
    let text = String::from_utf8_lossy(&case.body).into_owned();
    let inject = |payload: &str| -> Option<String> {
        let mut v: Value = serde_json::from_str(payload).ok()?;
        v.is_object().then(|| {
            add_unknown_keys(&mut v);
            v.to_string()
        })
    };
    let body = if let Some(whole) = inject(&text) {
        whole
    } else if text.lines().any(|l| l.starts_with("data:")) {
        let lines: Vec<String> = text
            .split('\n')
            .map(|line| match line.strip_prefix("data:") {
                Some(p) => {
                    inject(p.trim()).map_or_else(|| line.to_owned(), |j| format!("data: {j}"))
                }
                None => line.to_owned(),
            })
            .collect();
        let unknown = match case.kind() {
            ProviderKind::Anthropic | ProviderKind::OpenAiResponses => {
                "event: x_later.new_event\ndata: {\"type\":\"x_later.new_event\",\"n\":1}\n\n"
            }
            _ => "data: {\"object\":\"x_later.new_chunk\",\"n\":1}\n\n",
        };
        format!("{unknown}{}", lines.join("\n"))
    } else {
        text.split('\n')
            .map(|line| inject(line).unwrap_or_else(|| line.to_owned()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    c.body = body.into_bytes();
    if c.expect.get("stream_facts").is_some() {
        c.expect["stream_facts"] = serde_json::json!({});
    }
    c
}

/// Vendors add fields and event types without notice: every recorded success case decodes
/// to the same reply with an unknown key in every object and an unknown event first.
#[tokio::test]
async fn keys_and_events_a_later_api_adds_change_nothing() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in load_cases()
        .iter()
        .filter(|c| c.expect["kind"] == "success")
    {
        let later = with_unknown_keys(case);
        assert_ne!(later.body, case.body, "{}: nothing was added", case.name);
        checked += 1;
        if let Err(e) = run(&later, false).await {
            failures.push(format!("case {}: {e}", case.name));
        }
    }
    assert!(checked > 40, "only {checked} success cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Statuses no vendor documents (a proxy's, a CDN's, a new one) are classified by rule, in
/// every protocol: any 5xx is `provider_unavailable` and retried, any other is not retried
/// and is `unknown` unless the body's error type says more; never a success, and the
/// message is the body's.
#[tokio::test]
async fn undocumented_statuses_are_classified_by_rule() {
    let kinds = [
        ProviderKind::OpenAi,
        ProviderKind::AzureOpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::Ollama,
    ];
    let mut failures = Vec::new();
    for status in [402u16, 418, 451, 499, 507, 520, 599] {
        assert!(documented(status).is_none());
        for kind in kinds {
            // The protocol's error shape with a type nobody documents.
            let body = documented_body(kind, status)
                .replace("invalid_request_error", "x_new_error")
                .replace("server_error", "x_new_error")
                .replace("api_error", "x_new_error");
            let err = match error_answered(kind, status, &body).await {
                Ok(e) => e,
                Err(failure) => {
                    failures.push(failure);
                    continue;
                }
            };
            let (class, retryable) = if status >= 500 {
                (ProviderErrorClass::ProviderUnavailable, true)
            } else {
                (ProviderErrorClass::Unknown, false)
            };
            let ok = err.status == Some(status)
                && err.class == class
                && err.retryable == retryable
                && err.message == format!("documented {status}");
            if !ok {
                failures.push(format!(
                    "{kind} {status}: got class {:?} retryable {} message {:?}",
                    err.class, err.retryable, err.message
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
