//! Retries stay bounded and honest, through the real binary: a `Retry-After` far beyond the
//! documented maximum is not slept on (the route is cooled down and the fallback answers); a
//! retry is announced (`model.request`, attempt 2) only when it is sent, after its wait;
//! empty replies (`choices: []`, `content: null`) are retried as provider errors, never taken
//! as an answer; a scripted `latency_ms` that would hang is refused at load in one line.

use crate::support;
use crate::support::spec::{agent, scripted_as};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::cli::{utf8, write};
use serde_json::Value;
use support::provider::{Behaviour, MockServer};

/// A spec whose provider `primary` fails with `error` (a TOML inline table) and whose fallback
/// `spare` answers `answer`; the agent tries `primary` `max_attempts` times with `backoff`.
fn fallback_spec(
    dir: &Path,
    primary: &str,
    error: &str,
    max_attempts: u32,
    backoff: &str,
    answer: &str,
) -> PathBuf {
    let route = format!(
        "max_attempts = {max_attempts}\nbackoff = {backoff}\n[[agents.fallbacks]]\nprovider = \"spare\""
    );
    let spec = [
        "goal = \"answer\"\n",
        &scripted_as(primary, &format!("{{ error = {error} }}")),
        &scripted_as("spare", &format!("{{ text = \"{answer}\" }}")),
        &agent("a", primary, &[], &route),
    ]
    .concat();
    write(dir, "spec.toml", &spec)
}

/// [`fallback_spec`] written to a new directory and run there with [`run_json`].
fn ran_with_fallback(
    primary: &str,
    error: &str,
    max_attempts: u32,
    backoff: &str,
    answer: &str,
) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = fallback_spec(dir.path(), primary, error, max_attempts, backoff, answer);
    run_json(&dir.path().join("runs.db"), &spec)
}

/// `runtape --db DB run SPEC --json`, guarded by a minute.
fn run_json(db: &Path, spec: &Path) -> Output {
    crate::support::cli::runtape_within(db, &["run", utf8(spec), "--json"], Duration::from_secs(60))
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_retry_after_beyond_the_maximum_moves_to_the_fallback_instead_of_sleeping() {
    let out = ran_with_fallback(
        "busy",
        r#"{ class = "provider_rate_limit", message = "slow down", retry_after_ms = 3600000 }"#,
        3,
        "{ initial_ms = 10, max_ms = 1000 }",
        "from the spare",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&out);
    let edges: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "transition")
        .filter_map(|e| e["edge"].as_str())
        .collect();
    assert!(
        edges.contains(&"generating.failed.fallback"),
        "the route gave up at once: {edges:?}"
    );
    assert!(
        !edges.contains(&"generating.failed.retry"),
        "no hour-long retry was scheduled: {edges:?}"
    );
    let end = events.last().expect("a summary");
    assert_eq!(end["outcome"]["answer"], "from the spare");
}

#[test]
fn a_retry_is_announced_when_it_is_sent_not_when_it_is_scheduled() {
    let out = ran_with_fallback(
        "flaky",
        r#"{ class = "provider_unavailable", message = "try later", retry_after_ms = 1500 }"#,
        2,
        "{ initial_ms = 10, max_ms = 20 }",
        "ok",
    );
    assert_eq!(out.status.code(), Some(0));
    let events = lines(&out);
    // `at` is past 2^53, so --json writes it as a string.
    let ms = |e: &Value| {
        e["at"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .expect("an HLC time, as a string")
            >> 16
    };
    let retry = events
        .iter()
        .find(|e| e["type"] == "transition" && e["edge"] == "generating.failed.retry")
        .expect("the first failure schedules attempt 2");
    let second = events
        .iter()
        .find(|e| e["type"] == "model.request" && e["attempt"] == 2)
        .expect("attempt 2 is announced");
    assert!(
        ms(second) >= ms(retry) + 1500,
        "attempt 2 was announced {} ms after it was scheduled, before its 1500 ms wait was over",
        ms(second) - ms(retry)
    );
}

const OK: &str = r#"{"id":"c3","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"finally"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
const NO_CHOICES: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[]}"#;
const NULL_CONTENT: &str = r#"{"id":"c2","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_replies_are_retried_as_provider_errors_not_taken_as_answers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let server = MockServer::start(move |_| {
        let body = match seen.fetch_add(1, Ordering::SeqCst) {
            0 => NO_CHOICES,
            1 => NULL_CONTENT,
            _ => OK,
        };
        Behaviour::json(200, body)
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(
        dir.path(),
        "spec.toml",
        &format!(
            "goal = \"answer\"\n[[providers]]\nname = \"local\"\nkind = \"openai\"\nmodel = \"m\"\n\
             base_url = \"{}/v1\"\napi_key_env = \"\"\nstream = false\n\
             [[agents]]\nid = \"a\"\nprovider = \"local\"\nbackoff = {{ initial_ms = 1, max_ms = 5 }}\n",
            server.url()
        ),
    );
    let db = dir.path().join("runs.db");
    let spec_path = spec.to_str().unwrap().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        crate::support::cli::runtape_within(
            &db,
            &["run", &spec_path, "--json"],
            Duration::from_secs(60),
        )
    })
    .await
    .expect("joins");
    assert_eq!(out.status.code(), Some(0));
    let events = lines(&out);
    let retries = events
        .iter()
        .filter(|e| e["type"] == "transition" && e["edge"] == "generating.failed.retry")
        .count();
    assert_eq!(retries, 2, "each empty reply was retried");
    let errors: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "model.error")
        .filter_map(|e| e["error"].as_str())
        .collect();
    assert!(
        errors.iter().all(|e| e.contains("empty reply")),
        "{errors:?}"
    );
    assert_eq!(events.last().unwrap()["outcome"]["answer"], "finally");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_scripted_latency_that_would_hang_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (at, field) in [
        (
            "latency_ms = 18446744073709551615\nreplies = [{ text = \"x\" }]",
            "providers[0].latency_ms",
        ),
        (
            "replies = [{ text = \"x\", latency_ms = 18446744073709551615 }]",
            "providers[0].replies[0].latency_ms",
        ),
    ] {
        let spec = write(
            dir.path(),
            "spec.toml",
            &format!(
                "[[providers]]\nname = \"s\"\nkind = \"scripted\"\n{at}\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n"
            ),
        );
        let db = dir.path().join("runs.db");
        let out = crate::support::cli::runtape_within(
            &db,
            &["run", spec.to_str().unwrap(), "go"],
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(field), "{stderr}");
        assert!(
            stderr.contains("latency_ms must be at most 600000"),
            "{stderr}"
        );
        assert!(!db.exists(), "nothing was written");
    }
}
