//! The API key never leaves the request header: not in a `ProviderError` (fields, Display,
//! Debug, the machine's failure), not in a log line, not in `Debug` of the provider or its
//! config, even when a hostile server echoes the key back in every error shape.

use crate::support;

use std::process::Command;
use std::time::Duration;

use runtape::provider::ProviderError;
use runtape::provider::http::{HttpProviderConfig, ProviderKind, build};
use support::provider::*;

const KEY: &str = "sk-RUNTAPE-leak-canary-4f9c2e7a";

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(KEY), "{what} leaks the key: {text}");
    assert!(
        !text.contains("leak-canary"),
        "{what} leaks part of the key: {text}"
    );
}

fn assert_error_clean(err: &ProviderError) {
    assert_clean("Display", &err.to_string());
    assert_clean("Debug", &format!("{err:?}"));
    assert_clean("JSON", &serde_json::to_string(err).unwrap());
    assert_clean("failure", &format!("{:?}", err.to_failure()));
}

/// Every way a server can answer badly, echoing the key where it can.
fn hostile_answers() -> Vec<(ProviderKind, Behaviour)> {
    let echo_json = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error","code":"{KEY}"}},"request_id":"{KEY}"}}"#
    );
    let echo_anthropic = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
    );
    let echo_text = format!("{}Bearer {KEY} was refused", "x".repeat(480));
    let inline_openai = format!(
        "data: {{\"error\":{{\"message\":\"key {KEY} revoked\",\"type\":\"server_error\"}}}}\n\n"
    );
    let inline_anthropic = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"{KEY}\"}}}}\n\n"
    );
    let echo_ollama = format!("{{\"error\":\"unauthorized {KEY}\"}}\n");
    vec![
        (ProviderKind::OpenAi, Behaviour::json(401, &echo_json)),
        (
            ProviderKind::Anthropic,
            Behaviour::json(401, &echo_anthropic),
        ),
        (
            ProviderKind::OpenAi,
            Behaviour::respond(
                500,
                &[("Content-Type", "text/plain"), ("x-request-id", KEY)],
                echo_text.as_bytes(),
            ),
        ),
        (ProviderKind::OpenAi, Behaviour::sse(&inline_openai)),
        (ProviderKind::Anthropic, Behaviour::sse(&inline_anthropic)),
        (
            ProviderKind::Anthropic,
            Behaviour::respond(
                307,
                &[("Location", &format!("https://evil.example/{KEY}"))],
                b"",
            ),
        ),
        (
            ProviderKind::Ollama,
            Behaviour::respond(
                200,
                &[("Content-Type", "application/x-ndjson")],
                echo_ollama.as_bytes(),
            ),
        ),
        (ProviderKind::OpenAi, Behaviour::Silent),
    ]
}

#[tokio::test]
async fn the_key_appears_in_no_error_log_line_or_debug_output() {
    let capture = Capture::default();
    let _installed = capture.install();
    for (i, (kind, behaviour)) in hostile_answers().into_iter().enumerate() {
        let server = MockServer::always(behaviour).await;
        let mut cfg = config(kind, &base_for(kind, &server.url()), "unpriced-model");
        cfg.api_key_env = Some(KEY_VAR.into());
        cfg.timeout = Duration::from_millis(300);
        let provider = provider(cfg.clone(), KEY);
        assert_clean("config Debug", &format!("{cfg:?}"));
        assert_clean("provider Debug", &format!("{provider:?}"));
        let err = provider
            .complete_decoded(&hello("unpriced-model"), &|_| {})
            .await
            .unwrap_err();
        assert_error_clean(&err);
        let sent = &server.requests()[0];
        let credential = sent
            .header("authorization")
            .or(sent.header("x-api-key"))
            .unwrap_or_default();
        assert!(
            credential.contains(KEY),
            "answer {i}: the key was sent, so it was at risk"
        );
        if i < 3 {
            let shown = err.to_string() + err.body_snippet.as_deref().unwrap_or_default();
            assert!(shown.contains("[redacted]"), "answer {i}: {shown}");
        }
    }
    // A successful but unpriced call logs a warning; it names the model, not the key.
    let ok = MockServer::always(Behaviour::json(200, r#"{"model":"unpriced-model","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#)).await;
    let mut cfg = config_for(ProviderKind::OpenAi, &ok, "unpriced-model");
    cfg.stream = false;
    provider(cfg, KEY)
        .complete_decoded(&hello("unpriced-model"), &|_| {})
        .await
        .unwrap();
    let lines = capture.lines();
    assert!(
        lines.iter().any(|l| l.contains("unpriced-model")),
        "expected log lines: {lines:?}"
    );
    for line in &lines {
        assert_clean("log line", line);
    }
}

#[test]
fn build_errors_never_show_a_key_value() {
    let mut cfg = HttpProviderConfig::new(ProviderKind::OpenAi, "gpt-4o");
    cfg.api_key_env = Some(KEY_VAR.into());
    for value in [format!("{KEY}\nsecond-line"), format!("{KEY}\u{7f}")] {
        let err = runtape::provider::http::HttpProvider::with_env(
            cfg.clone(),
            env_with(&[(KEY_VAR, &value)]),
        )
        .unwrap_err();
        assert_clean("build error", &err.to_string());
        assert_clean("build error Debug", &format!("{err:?}"));
    }
}

/// `build` reads the real process environment. Setting a variable in this process needs
/// `unsafe` (forbidden in this crate), so the check runs in a child copy of this test binary
/// started with the variable set.
#[test]
fn build_reads_the_key_from_the_process_environment() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            crate::libtest_name(concat!(
                module_path!(),
                "::child_calls_with_the_process_key"
            )),
            "--include-ignored",
            "--nocapture",
        ])
        .env("RUNTAPE_SECRETS_CHILD", "1")
        .env("RUNTAPE_TEST_PROCESS_KEY", KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(
        stdout.contains("child: server saw the process key"),
        "{stdout}"
    );
}

// Ignored on purpose: this is the child half of
// `build_reads_the_key_from_the_process_environment`, which runs this test binary again with
// `--exact child_calls_with_the_process_key --include-ignored` and the key set in the child's own
// environment (setting it in this process needs `unsafe`, which the crate forbids). Run directly, it
// returns at once because `RUNTAPE_SECRETS_CHILD` is unset; the parent asserts its outcome.
#[tokio::test]
// Ignored so it runs only as the child its parent test starts (see above), never on its own.
#[ignore = "runs in a child process started by build_reads_the_key_from_the_process_environment"]
async fn child_calls_with_the_process_key() {
    if std::env::var_os("RUNTAPE_SECRETS_CHILD").is_none() {
        return;
    }
    let server = MockServer::ok_chat().await;
    let mut cfg = HttpProviderConfig::new(ProviderKind::OpenAi, "gpt-4o");
    cfg.base_url = base_for(ProviderKind::OpenAi, &server.url());
    cfg.api_key_env = Some("RUNTAPE_TEST_PROCESS_KEY".into());
    cfg.stream = false;
    let provider = build(cfg).expect("the key is in the process environment");
    assert_clean("describe", &provider.describe());
    provider.complete(&hello("gpt-4o"), &|_| {}).await.unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    println!("child: server saw the process key");
}
