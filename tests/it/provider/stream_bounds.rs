//! A reply is bounded whatever the server does, over real HTTP on 127.0.0.1: a stream that
//! never ends (one chunk, then `: keepalive` every second) fails at the whole-request timeout;
//! silence fails at the idle timeout; a 50 MB stream is refused at the size cap and nothing of
//! it reaches the database; an agent's remaining wall-time budget bounds a request.

use crate::support;
use crate::support::cli::on;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::cli::write;
use runtape::machine::ProviderErrorClass;
use runtape::provider::http::{MAX_BODY_BYTES, ProviderKind};
use support::provider::*;

const FIRST: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n";

fn endless(every: Duration) -> Behaviour {
    Behaviour::Endless {
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        first: FIRST.as_bytes().to_vec(),
        tick: b": keepalive\n\n".to_vec(),
        every,
    }
}

/// A server answering every request with the event stream `body`, sent in random chunks of up
/// to 1 MiB (`seed`) without pauses.
async fn streaming(body: Vec<u8>, seed: u64) -> MockServer {
    MockServer::always(Behaviour::Respond {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        body,
        chunking: Chunking::Random { seed, max: 1 << 20 },
        end: End::Finish,
    })
    .await
}

#[tokio::test]
async fn a_stream_that_never_ends_fails_at_the_total_timeout() {
    let server = MockServer::always(endless(Duration::from_secs(1))).await;
    let kind = ProviderKind::OpenAi;
    let mut cfg = config(kind, &base_for(kind, &server.url()), "m");
    cfg.timeout = Duration::from_millis(3000);
    let deltas = Deltas::default();
    let sink = deltas.sink();
    // A guard far beyond the bound, so a regression fails instead of hanging the suite.
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        provider(cfg, "k").complete_decoded(&hello("m"), &sink),
    )
    .await
    .expect("the call ends: keep-alive comments do not extend a request forever");
    let err = outcome.expect_err("an endless stream is an error");
    assert_eq!(err.class, ProviderErrorClass::ProviderUnavailable);
    assert!(err.retryable);
    assert!(err.message.contains("did not finish within 3s"), "{err:?}");
    assert_eq!(
        deltas.joined(),
        "partial",
        "the text before it was streamed"
    );
    assert!(
        server.wait_client_close(Duration::from_secs(5)).await,
        "the connection is closed"
    );
}

#[tokio::test]
async fn silence_fails_at_the_idle_timeout_long_before_the_total() {
    let server = MockServer::always(Behaviour::sse(FIRST).then_hang()).await;
    let kind = ProviderKind::Anthropic;
    let mut cfg = config(kind, &base_for(kind, &server.url()), "m");
    cfg.timeout = Duration::from_secs(600);
    cfg.idle_timeout = Duration::from_millis(200);
    let err = provider(cfg, "k")
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .expect_err("silence is an error");
    assert_eq!(err.class, ProviderErrorClass::ProviderUnavailable);
    assert!(err.message.contains("went silent"), "{}", err.message);
    assert!(err.message.contains("200ms"), "{}", err.message);
}

/// A stream of `total` bytes of OpenAI text deltas.
fn huge_stream(total: usize) -> Vec<u8> {
    let event = format!(
        "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        "x".repeat(64 * 1024)
    );
    let mut body = Vec::with_capacity(total + event.len());
    while body.len() < total {
        body.extend_from_slice(event.as_bytes());
    }
    body.extend_from_slice(b"data: [DONE]\n\n");
    body
}

#[tokio::test]
async fn a_stream_past_the_cap_is_refused_not_kept() {
    let body = huge_stream(MAX_BODY_BYTES + (1 << 20));
    let server = streaming(body, 7).await;
    let kind = ProviderKind::OpenAi;
    let cfg = config(kind, &base_for(kind, &server.url()), "m");
    let err = provider(cfg, "k")
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .expect_err("too large");
    assert_eq!(err.class, ProviderErrorClass::Unknown);
    assert!(!err.retryable, "the same answer would come again");
    assert!(err.message.contains("too large"), "{}", err.message);
}

fn run(db: &Path, spec: &Path) -> Output {
    on(db)
        .arg("run")
        .arg(spec)
        .output()
        .expect("runs the binary")
}

fn db_bytes(db: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db.display())).ok())
        .map(|m| m.len())
        .sum()
}

fn spec_for(
    dir: &Path,
    base_url: &str,
    extra_agent: &str,
    extra_provider: &str,
) -> std::path::PathBuf {
    let spec = format!(
        "goal = \"say hi\"\n[[providers]]\nname = \"local\"\nkind = \"openai\"\nmodel = \"m\"\n\
         base_url = \"{base_url}\"\napi_key_env = \"\"\n{extra_provider}\n\
         [[agents]]\nid = \"a\"\nprovider = \"local\"\nmax_attempts = 1\n{extra_agent}\n"
    );

    write(dir, "spec.toml", &spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_stream_fails_the_run_and_the_database_stays_small() {
    let body = huge_stream(50 << 20);
    let server = streaming(body, 3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec_for(dir.path(), &format!("{}/v1", server.url()), "", "");
    let db = dir.path().join("runs.db");
    let spec2 = spec.clone();
    let db2 = db.clone();
    let out = tokio::task::spawn_blocking(move || run(&db2, &spec2))
        .await
        .expect("joins");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("too large"), "{stdout}");
    let size = db_bytes(&db);
    assert!(
        size < 2 << 20,
        "the database holds {size} bytes: the refused stream was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remaining_wall_budget_bounds_a_request() {
    let server = MockServer::always(Behaviour::Silent).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec_for(
        dir.path(),
        &format!("{}/v1", server.url()),
        "[agents.budget]\nmax_wall_ms = 1500\n",
        "timeout_ms = 600000\n",
    );
    let db = dir.path().join("runs.db");
    let child = on(&db)
        .arg("run")
        .arg(&spec)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    // A guard far beyond the budget, so a regression fails instead of waiting ten minutes.
    let out = match tokio::time::timeout(Duration::from_secs(60), waited).await {
        Ok(joined) => joined.expect("joins").expect("waits"),
        Err(_) => {
            let _ = crate::support::cli::try_signal(pid, "KILL");
            panic!("the run outlived its wall-time budget: the request was not bounded by it");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("wall_time"),
        "the agent's wall-time budget ended it: {stdout}"
    );
}
