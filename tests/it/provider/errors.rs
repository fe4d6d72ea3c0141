//! Typed HTTP errors: class from status and error type (never message text), retryability
//! (408/409/429/5xx/529, overridden by `x-should-retry`), `Retry-After` in seconds or as a
//! date, request ids, hints, a body snippet of at most 500 characters from a read capped at
//! 8 KiB, and errors inside HTTP-200 streams.

use crate::support;

use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use runtape::machine::ProviderErrorClass::{self, *};
use runtape::provider::http::{ProviderKind, classify, http_error, retry_after_ms};
use support::provider::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

fn error_at(status: u16, pairs: &[(&str, &str)], body: &str) -> runtape::provider::ProviderError {
    http_error(
        "p",
        status,
        &headers(pairs),
        body.as_bytes(),
        SystemTime::UNIX_EPOCH,
        None,
    )
}

#[test]
fn status_decides_class_and_retryability() {
    let table: &[(u16, ProviderErrorClass, bool)] = &[
        (400, BadRequest, false),
        (401, ProviderAuth, false),
        (403, ProviderAuth, false),
        (404, BadRequest, false),
        (408, ProviderUnavailable, true),
        (409, ProviderUnavailable, true),
        (413, BadRequest, false),
        (418, Unknown, false),
        (422, BadRequest, false),
        (429, ProviderRateLimit, true),
        (500, ProviderUnavailable, true),
        (502, ProviderUnavailable, true),
        (503, ProviderUnavailable, true),
        (529, ProviderUnavailable, true),
    ];
    for &(status, class, retryable) in table {
        let err = error_at(status, &[], "not json");
        assert_eq!(
            (err.class, err.retryable),
            (class, retryable),
            "status {status}"
        );
        assert_eq!(err.status, Some(status));
        assert!(!err.hint.is_empty(), "status {status} has a hint");
        assert_eq!(
            err.message,
            format!(
                "the server answered {status} {}",
                reqwest::StatusCode::from_u16(status)
                    .unwrap()
                    .canonical_reason()
                    .unwrap_or("error")
            )
        );
    }
}

#[test]
fn message_text_never_decides_the_class() {
    let misleading = r#"{"error":{"message":"rate limit exceeded; server overloaded; invalid api key","type":"invalid_request_error"}}"#;
    assert_eq!(error_at(400, &[], misleading).class, BadRequest);
    assert_eq!(classify(None, None, None), Unknown);
    assert_eq!(
        classify(None, Some("overloaded_error"), None),
        ProviderUnavailable
    );
    assert_eq!(
        classify(None, Some("rate_limit_error"), None),
        ProviderRateLimit
    );
    assert_eq!(
        classify(None, Some("authentication_error"), None),
        ProviderAuth
    );
    assert_eq!(
        classify(
            Some(400),
            Some("invalid_request_error"),
            Some("content_filter")
        ),
        ContentFilter
    );
    assert_eq!(
        classify(
            Some(401),
            Some("invalid_request_error"),
            Some("invalid_api_key")
        ),
        ProviderAuth
    );
}

#[test]
fn x_should_retry_overrides_the_status() {
    let yes = error_at(400, &[("x-should-retry", "true")], "{}");
    assert!(yes.retryable);
    assert_eq!(yes.should_retry, Some(true));
    let no = error_at(503, &[("x-should-retry", "false")], "{}");
    assert!(!no.retryable);
    assert_eq!(no.should_retry, Some(false));
    assert_eq!(no.class, ProviderUnavailable);
}

#[test]
fn retry_after_is_read_as_seconds_or_a_date() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let at = |pairs: &[(&str, &str)]| retry_after_ms(&headers(pairs), now);
    assert_eq!(at(&[("retry-after", "20")]), Some(20_000));
    assert_eq!(at(&[("retry-after", "1.5")]), Some(1_500));
    assert_eq!(
        at(&[("retry-after-ms", "250"), ("retry-after", "9")]),
        Some(250)
    );
    let in_30s = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(at(&[("retry-after", &in_30s)]), Some(30_000));
    let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(at(&[("retry-after", &past)]), Some(0));
    assert_eq!(at(&[("retry-after", "soon")]), None);
    assert_eq!(at(&[]), None);

    let err = http_error(
        "p",
        429,
        &headers(&[("retry-after", "20")]),
        b"{}",
        now,
        None,
    );
    assert_eq!(err.retry_after_ms, Some(20_000));
    assert_eq!(err.to_failure().retry_after_ms, Some(20_000));
    assert!(err.hint.starts_with("rate limited"), "{}", err.hint);
}

#[test]
fn request_id_comes_from_the_body_or_the_headers() {
    let body = r#"{"type":"error","error":{"type":"not_found_error","message":"model: x"},"request_id":"req_body"}"#;
    assert_eq!(
        error_at(404, &[("request-id", "req_header")], body)
            .request_id
            .as_deref(),
        Some("req_body")
    );
    assert_eq!(
        error_at(404, &[("request-id", "req_header")], "{}")
            .request_id
            .as_deref(),
        Some("req_header")
    );
    assert_eq!(
        error_at(401, &[("x-request-id", "abc")], "{}")
            .request_id
            .as_deref(),
        Some("abc")
    );
    let err = error_at(404, &[], body);
    assert!(err.hint.starts_with("model not found"), "{}", err.hint);
    assert_eq!(
        err.to_string(),
        "p HTTP 404: model: x (not_found_error) – model not found – check the model name (and the base URL path)"
    );
}

#[test]
fn the_snippet_holds_at_most_500_characters() {
    let body = "é".repeat(3000);
    let err = error_at(500, &[], &body);
    let snippet = err.body_snippet.unwrap();
    assert_eq!(snippet.chars().count(), 500);
    assert!(body.starts_with(&snippet));
    assert_eq!(error_at(500, &[], "").body_snippet, None);
}

/// The server sends 16 KiB of an error body and then stalls without ending it: the adapter
/// must stop after 8 KiB instead of waiting for the rest (which would hit the 5 s timeout).
#[tokio::test]
async fn the_error_body_read_stops_at_8_kib() {
    let body = format!(
        "{{\"error\":{{\"message\":\"{}\"}}}}",
        "x".repeat(16 * 1024)
    );
    let server = MockServer::always(Behaviour::json(500, &body).then_hang()).await;
    let mut cfg = config_for(ProviderKind::OpenAi, &server, "gpt-4o");
    cfg.timeout = Duration::from_secs(5);
    let started = Instant::now();
    let err = provider(cfg, "k-123456")
        .complete_decoded(&hello("gpt-4o"), &|_| {})
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.status, Some(500));
    assert!(err.retryable);
    assert_eq!(err.body_snippet.unwrap().chars().count(), 500);
    assert_eq!(
        err.message, "the server answered 500 Internal Server Error",
        "a cut JSON body is not parsed"
    );
}

#[tokio::test]
async fn an_error_event_in_a_200_stream_is_an_error_not_a_short_reply() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-sonnet-4-5\"}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let server = MockServer::always(
        Behaviour::respond(
            200,
            &[
                ("Content-Type", "text/event-stream"),
                ("request-id", "req_s"),
            ],
            body.as_bytes(),
        )
        .chunked(7),
    )
    .await;
    let deltas = Deltas::default();
    let sink = deltas.sink();
    let err = provider(
        config(ProviderKind::Anthropic, &server.url(), "claude-sonnet-4-5"),
        "k-123456",
    )
    .complete_decoded(&hello("claude-sonnet-4-5"), &sink)
    .await
    .unwrap_err();
    assert_eq!(err.class, ProviderUnavailable);
    assert!(err.retryable);
    assert_eq!(err.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(err.message, "Overloaded");
    assert_eq!(
        err.status, None,
        "the HTTP status was 200; the error came in the body"
    );
    assert_eq!(err.request_id.as_deref(), Some("req_s"));
    assert_eq!(deltas.joined(), "Hel");
}

#[tokio::test]
async fn an_openai_error_chunk_in_a_200_stream_is_an_error() {
    let body = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
        data: {\"error\":{\"message\":\"rate limited mid-stream\",\"type\":\"rate_limit_error\",\"code\":\"rate_limit_exceeded\"}}\n\n";
    let server = MockServer::always(Behaviour::sse(body)).await;
    let err = provider(
        config_for(ProviderKind::OpenAi, &server, "gpt-4o"),
        "k-123456",
    )
    .complete_decoded(&hello("gpt-4o"), &|_| {})
    .await
    .unwrap_err();
    assert_eq!(err.class, ProviderRateLimit);
    assert!(err.retryable);
    assert_eq!(err.error_code.as_deref(), Some("rate_limit_exceeded"));
}

#[tokio::test]
async fn a_stream_that_stops_before_its_terminal_event_is_retryable_unavailable() {
    let cases = [
        (
            ProviderKind::OpenAi,
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
        ),
        (
            ProviderKind::Anthropic,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}\n\n",
        ),
        (
            ProviderKind::Ollama,
            "{\"message\":{\"content\":\"Hi\"},\"done\":false}\n",
        ),
    ];
    for (kind, body) in cases {
        let content_type = if kind == ProviderKind::Ollama {
            "application/x-ndjson"
        } else {
            "text/event-stream"
        };
        let server = MockServer::always(Behaviour::respond(
            200,
            &[("Content-Type", content_type)],
            body.as_bytes(),
        ))
        .await;
        let err = provider(
            config(kind, &base_for(kind, &server.url()), "m"),
            "k-123456",
        )
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap_err();
        assert_eq!(err.class, ProviderUnavailable, "{kind}");
        assert!(err.retryable, "{kind}");
        assert!(
            err.message.starts_with("stream ended before"),
            "{kind}: {}",
            err.message
        );
    }
}

#[tokio::test]
async fn a_body_that_is_not_the_protocol_is_not_retried() {
    let server = MockServer::always(Behaviour::respond(
        200,
        &[("Content-Type", "text/html")],
        b"<html>login</html>",
    ))
    .await;
    let mut cfg = config_for(ProviderKind::OpenAi, &server, "m");
    cfg.stream = false;
    let err = provider(cfg, "k-123456")
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap_err();
    assert_eq!(err.class, Unknown);
    assert!(!err.retryable);
    assert!(err.hint.contains("base_url"), "{}", err.hint);
}
