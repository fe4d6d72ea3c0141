//! Typed provider errors: parsing error bodies, classifying by HTTP status and error type
//! (never by message text), `Retry-After`, `x-should-retry`, hints for a person, and keeping
//! the API key out of everything an error carries.
//!
//! Retryable: 408, 409, 429, 5xx and 529, or whatever `x-should-retry` says when sent; an
//! error inside a 200 response is retryable when its class is (rate limit, unavailable);
//! a stream cut before its terminal event, or a reply with nothing in it, is a retryable
//! `provider_unavailable`. Every status the providers document is classified by
//! [`classify`]: 400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504 and
//! Anthropic's 529.

use std::time::SystemTime;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::codec::{DecodeError, ReportedError};
use super::common::string_of;
use crate::machine::{ModelFailure, ProviderErrorClass};
use crate::provider::ProviderError;

/// The most of an error body that is read (8 KiB); the rest is never downloaded.
pub const ERROR_BODY_LIMIT: usize = 8 * 1024;

/// The longest body snippet kept in a [`ProviderError`], in characters.
pub const SNIPPET_CHARS: usize = 500;

const REDACTED: &str = "[redacted]";

/// The error a provider reported in `body`, in any of the shapes seen in the wild: OpenAI
/// `{error: {message, type, code}}`, Anthropic `{type: error, error: {type, message},
/// request_id}`, Ollama `{error: "..."}`, OpenRouter's integer codes, `{message}` or
/// `{detail}`. `None` when the body is not JSON or holds no error.
pub fn parse_error_body(body: &[u8]) -> Option<ReportedError> {
    let v: Value = serde_json::from_slice(body).ok()?;
    parse_error_value(&v)
}

/// The error a reply body, stream event or line (`v`) reports of itself, as a decode
/// failure. Call it once `v` is known to be an error report (see [`fail_if_reported`]).
pub(crate) fn reported_error(v: &Value) -> DecodeError {
    DecodeError::Reported(Box::new(parse_error_value(v).unwrap_or_default()))
}

/// Fails with [`reported_error`] when `v` carries a non-null `error` field (which a provider
/// may send with status 200). Call it on each parsed body, event or line before reading the
/// reply out of it.
pub(crate) fn fail_if_reported(v: &Value) -> Result<(), DecodeError> {
    match v.get("error") {
        Some(error) if !error.is_null() => Err(reported_error(v)),
        _ => Ok(()),
    }
}

/// [`parse_error_body`] on a parsed document.
pub(crate) fn parse_error_value(v: &Value) -> Option<ReportedError> {
    let request_id = string_of(v, "request_id");
    match v.get("error") {
        Some(e @ Value::Object(_)) => Some(ReportedError {
            error_type: string_of(e, "type"),
            code: e.get("code").and_then(code_text),
            message: string_of(e, "message").unwrap_or_default(),
            request_id,
            param: string_of(e, "param"),
            metadata: e.get("metadata").cloned(),
        }),
        Some(Value::String(message)) => Some(ReportedError {
            message: message.clone(),
            request_id,
            ..ReportedError::default()
        }),
        _ => {
            let message = string_of(v, "message").or_else(|| string_of(v, "detail"))?;
            Some(ReportedError {
                message,
                request_id,
                ..ReportedError::default()
            })
        }
    }
}

fn code_text(code: &Value) -> Option<String> {
    match code {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The class the machine acts on, from the HTTP status first and the provider's error type
/// or code second. Message text is never consulted.
pub fn classify(
    status: Option<u16>,
    error_type: Option<&str>,
    code: Option<&str>,
) -> ProviderErrorClass {
    use ProviderErrorClass::*;
    let filtered =
        |s: Option<&str>| matches!(s, Some("content_filter" | "content_policy_violation"));
    if filtered(code) || filtered(error_type) {
        return ContentFilter;
    }
    match status {
        Some(401 | 403) => return ProviderAuth,
        Some(429) => return ProviderRateLimit,
        Some(s) if s == 408 || s == 409 || (500..=599).contains(&s) => return ProviderUnavailable,
        Some(400 | 404 | 413 | 422) => return BadRequest,
        _ => {}
    }
    match error_type {
        Some("authentication_error" | "permission_error") => ProviderAuth,
        Some("rate_limit_error") => ProviderRateLimit,
        Some("overloaded_error" | "api_error" | "server_error" | "timeout_error") => {
            ProviderUnavailable
        }
        Some("invalid_request_error" | "not_found_error" | "request_too_large") => BadRequest,
        _ => Unknown,
    }
}

/// Whether a status is worth retrying: 408, 409, 429, 5xx (which includes 529).
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// The wait a server asks for: `retry-after-ms`, else `Retry-After` as seconds (integer or
/// decimal) or as an HTTP date (measured from `now`; a past date means 0).
pub fn retry_after_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(ms.ceil() as u64);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).ceil() as u64);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).map_or(0, |d| d.as_millis() as u64))
}

fn should_retry(headers: &HeaderMap) -> Option<bool> {
    let value = headers.get("x-should-retry")?.to_str().ok()?.trim();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn header_request_id(headers: &HeaderMap) -> Option<String> {
    ["request-id", "x-request-id", "anthropic-request-id"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
}

/// What to do about an error, for a person.
fn hint(class: ProviderErrorClass, status: Option<u16>, error_type: Option<&str>) -> String {
    use ProviderErrorClass::*;
    let text = match class {
        ProviderAuth => "auth rejected – check the key for this base URL",
        ProviderRateLimit => "rate limited – backing off",
        ContentFilter => "blocked by the provider's content filter – change the input",
        ProviderUnavailable => match status {
            Some(408) => "the provider timed out – retrying",
            Some(409) => "conflict at the provider – retrying",
            _ => "provider unavailable – retrying with backoff",
        },
        BadRequest if status == Some(404) || error_type == Some("not_found_error") => {
            "model not found – check the model name (and the base URL path)"
        }
        BadRequest if status == Some(413) || error_type == Some("request_too_large") => {
            "request too large – shorten the conversation or the tool results"
        }
        BadRequest => "request rejected – the provider could not accept it; see the message",
        Unknown => "unexpected response – see the body snippet",
    };
    text.to_owned()
}

/// The error for a response with a non-2xx `status`. `body` is what was read of it (at
/// most [`ERROR_BODY_LIMIT`] bytes); `secret`, when given, is replaced by `[redacted]`
/// before anything is taken from the body.
pub fn http_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    secret: Option<&str>,
) -> ProviderError {
    let text = String::from_utf8_lossy(body);
    let text = match secret {
        Some(s) if s.len() >= 4 => text.replace(s, REDACTED),
        _ => text.into_owned(),
    };
    let reported = parse_error_body(text.as_bytes()).unwrap_or_default();
    let retry_after = retry_after_ms(headers, now);
    let should_retry = should_retry(headers);
    let mut err = ProviderError::new(provider, ProviderErrorClass::Unknown, "");
    err.status = Some(status);
    err.request_id = reported.request_id.or_else(|| header_request_id(headers));
    err.retry_after_ms = retry_after;
    err.should_retry = should_retry;
    err.body_snippet = (!text.is_empty()).then(|| text.chars().take(SNIPPET_CHARS).collect());
    if (300..400).contains(&status) {
        let location = headers.get("location").and_then(|l| l.to_str().ok());
        err.message = format!(
            "the server redirected to `{}`; redirects are not followed",
            location.unwrap_or("?")
        );
        err.retryable = false;
        err.hint = "set base_url to the final address – redirects are never followed, so the key stays with the configured host".into();
        return err;
    }
    err.class = classify(
        Some(status),
        reported.error_type.as_deref(),
        reported.code.as_deref(),
    );
    err.retryable = should_retry.unwrap_or_else(|| retryable_status(status));
    err.message = if reported.message.is_empty() {
        let reason = StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error");
        format!("the server answered {status} {reason}")
    } else {
        reported.message
    };
    err.hint = hint(err.class, Some(status), reported.error_type.as_deref());
    err.error_type = reported.error_type;
    err.error_code = reported.code;
    err.param = reported.param;
    err
}

/// Names the setting a 400 or 422 refused, when the error points at a request field that
/// carries one of `settings` (see [`fields::refused_setting`](super::fields::refused_setting)):
/// sets `err.setting` and puts it first in the hint. Call it on the error of a request sent
/// with `settings`; any other error is left as it is.
pub fn name_refused_setting(
    err: &mut ProviderError,
    kind: super::config::ProviderKind,
    settings: &crate::machine::ModelSettings,
) {
    if err.class != ProviderErrorClass::BadRequest || !matches!(err.status, Some(400 | 422)) {
        return;
    }
    let Some(row) =
        super::fields::refused_setting(kind, settings, err.param.as_deref(), &err.message)
    else {
        return;
    };
    err.setting = Some(row.setting.to_owned());
    err.hint = format!(
        "request rejected: the provider refused setting `{}` (sent as `{}`) – change or remove it in [agents.model_settings], or route the agent to a model that takes it",
        row.setting, row.field
    );
}

/// The error for a response or stream that arrived with a 2xx status but could not be
/// turned into a reply (including an error the provider reported inside it).
pub fn decode_failure(provider: &str, failure: DecodeError, headers: &HeaderMap) -> ProviderError {
    use ProviderErrorClass::*;
    let request_id = header_request_id(headers);
    let mut err = match failure {
        DecodeError::Reported(reported) => {
            let reported = *reported;
            let class = classify(
                None,
                reported.error_type.as_deref(),
                reported.code.as_deref(),
            );
            let message = if reported.message.is_empty() {
                "the provider reported an error inside the response".to_owned()
            } else {
                reported.message
            };
            let mut err = ProviderError::new(provider, class, message);
            err.retryable = ModelFailure::new(class, "").retryable;
            err.hint = hint(class, None, reported.error_type.as_deref());
            err.error_type = reported.error_type;
            err.error_code = reported.code;
            err.request_id = reported.request_id;
            err
        }
        DecodeError::Empty => {
            let mut err = ProviderError::new(provider, ProviderUnavailable, failure.to_string());
            err.retryable = true;
            err.hint = "the provider answered with nothing – retrying".into();
            err
        }
        DecodeError::TooLarge { .. } => {
            let mut err = ProviderError::new(provider, Unknown, failure.to_string());
            err.retryable = false;
            err.hint = "the reply is far larger than any model answer – refused and not stored; check base_url points at a model API".into();
            err
        }
        DecodeError::Truncated { .. }
        | DecodeError::InvalidJson {
            truncated: true, ..
        } => {
            let mut err = ProviderError::new(provider, ProviderUnavailable, failure.to_string());
            err.retryable = true;
            err.hint = "the response broke off – retrying".into();
            err
        }
        other => {
            let mut err = ProviderError::new(provider, Unknown, other.to_string());
            err.retryable = false;
            err.hint = "the response is not in the protocol's format – check that base_url points at the right kind of API".into();
            err
        }
    };
    err.request_id = err.request_id.take().or(request_id);
    err
}

/// Replaces every occurrence of `secret` in the error's text fields (keys shorter than 4
/// characters are too short to redact meaningfully and are left alone).
pub(crate) fn redact(err: &mut ProviderError, secret: &str) {
    if secret.len() < 4 {
        return;
    }
    let scrub = |s: &mut String| {
        if s.contains(secret) {
            *s = s.replace(secret, REDACTED);
        }
    };
    scrub(&mut err.provider);
    scrub(&mut err.message);
    scrub(&mut err.hint);
    let optional = [
        &mut err.error_type,
        &mut err.error_code,
        &mut err.request_id,
        &mut err.body_snippet,
    ];
    for s in optional.into_iter().flatten() {
        scrub(s);
    }
}
