//! A model call over HTTP waits on the engine's clock, not the wall's: given a clock on which
//! long waits pass at once (and are recorded), a 429 whose `Retry-After` date lies 100 s ahead
//! on that clock is waited out on it — the backoff is read against the engine's time, skipped
//! there and the retry succeeds — and a request to a server that never answers times out at
//! the provider's 60 s deadline on that clock, with no real minute passing. The provider is a
//! real `HttpProvider` against a server on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use runtape::exec::{Engine, EngineConfig, RunEnd};
use runtape::machine::*;
use runtape::provider::http::ProviderKind;
use runtape::store::{MemoryStore, RunStatus};

use crate::support::clock::FastForward;
use crate::support::provider::{Behaviour, MockServer, config_for, provider};

const OPENAI_OK: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

fn spec(attempts: u32) -> RunSpec {
    RunSpec::build(Spec {
        agents: vec![AgentSpec {
            routes: vec![Route {
                max_attempts: attempts,
                backoff: Backoff {
                    initial_ms: 1,
                    max_ms: 5,
                },
                ..Route::new("p", "m")
            }],
            ..AgentSpec::new("solo", "p", "m")
        }],
        ..Spec::default()
    })
    .expect("valid spec")
}

/// Runs one agent against `server` on `clock`, with the provider's whole-request `timeout` and
/// `attempts` on its one route, to its end.
async fn run_on(
    clock: Arc<FastForward>,
    server: &MockServer,
    timeout: Duration,
    attempts: u32,
) -> RunEnd {
    let engine = Engine::with_store(
        Arc::new(MemoryStore::new()),
        EngineConfig {
            clock,
            ..EngineConfig::default()
        },
    );
    let mut config = config_for(ProviderKind::OpenAi, server, "m");
    config.timeout = timeout;
    engine.register_provider("p", Arc::new(provider(config, "k-1")));
    let started = engine.start(spec(attempts), "Answer.").await;
    started.expect("starts").wait().await.expect("runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_date_is_waited_out_on_the_engines_clock() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let server = MockServer::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            // ORIGIN_MS + 100 s: a date in the engine's time, years before the wall's.
            Behaviour::respond(
                429,
                &[
                    ("Content-Type", "application/json"),
                    ("Retry-After", "Tue, 14 Nov 2023 22:15:00 GMT"),
                ],
                br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
            )
        } else {
            Behaviour::json(200, OPENAI_OK)
        }
    })
    .await;
    let clock = Arc::new(FastForward::new());
    let end = run_on(clock.clone(), &server, Duration::from_secs(10), 2).await;
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the call and its retry");
    // The backoff the server asked for, read against the engine's clock: the date is ~100 s
    // after the engine's now (less the moments the run took), so one wait of that length was
    // made — on the engine's clock, which skipped it. Read against the wall, the date would
    // have passed years ago and the retry would have gone out after the route's 1 ms backoff.
    let skips = clock.skips();
    assert_eq!(skips.len(), 1, "one long wait: {skips:?}");
    assert!(
        skips[0] > Duration::from_secs(90) && skips[0] <= Duration::from_secs(100),
        "the wait was the Retry-After date's distance on the engine's clock: {skips:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_times_out_at_its_deadline_on_the_engines_clock() {
    let server = MockServer::always(Behaviour::Silent).await;
    let clock = Arc::new(FastForward::new());
    let end = run_on(clock.clone(), &server, Duration::from_secs(60), 1).await;
    assert_eq!(end.status, RunStatus::Failed);
    let why = format!("{:?}", end.state.outcome());
    assert!(why.contains("no response within 60s"), "{why}");
    // The provider's 60 s deadline was one wait on the engine's clock, which passed it at once.
    let skips = clock.skips();
    assert_eq!(skips.len(), 1, "one long wait: {skips:?}");
    assert!(
        skips[0] > Duration::from_secs(59) && skips[0] <= Duration::from_secs(60),
        "the wait was the request's deadline: {skips:?}"
    );
}
