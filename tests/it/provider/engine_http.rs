//! The engine with real HTTP providers against local servers: a fallback chain survives a
//! primary returning 529, a fallback returning 503 and one returning 429, visibly in the
//! history; cancel tears down an in-flight HTTP request; the API key never reaches the
//! database, a trace or an error message.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use crate::support::durable::{ends_within, run_to_rest};
use crate::support::machine::{answered, failure};
use runtape::exec::{Engine, EngineConfig};
use runtape::history;
use runtape::machine::*;
use runtape::provider::http::ProviderKind;
use runtape::store::RunStatus;
use support::provider::{Behaviour, MockServer, config, config_for, provider};

const KEY: &str = "sk-test-runtape-SECRET-7f3e9a";

const OPENAI_OK: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"the answer is 42"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#;

fn spec(routes: Vec<Route>) -> RunSpec {
    RunSpec::build(Spec {
        agents: vec![AgentSpec {
            routes,
            ..AgentSpec::new("solo", "unused", "m")
        }],
        ..Spec::default()
    })
    .expect("valid spec")
}

fn route(provider: &str, model: &str, attempts: u32) -> Route {
    Route {
        max_attempts: attempts,
        backoff: Backoff {
            initial_ms: 1,
            max_ms: 5,
        },
        ..Route::new(provider, model)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_chain_survives_529_503_and_429() {
    let overloaded = MockServer::always(Behaviour::json(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ))
    .await;
    let unavailable = MockServer::always(Behaviour::json(
        503,
        r#"{"error":{"message":"down","type":"server_error"}}"#,
    ))
    .await;
    let limited = {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        MockServer::start(move |_| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Behaviour::respond(
                    429,
                    &[("Content-Type", "application/json"), ("Retry-After", "0")],
                    br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
                )
            } else {
                Behaviour::json(200, OPENAI_OK)
            }
        })
        .await
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("runs.db")).expect("opens");
    engine.register_provider(
        "anthropic",
        Arc::new(provider(
            config(ProviderKind::Anthropic, &overloaded.url(), "claude-x"),
            KEY,
        )),
    );
    engine.register_provider(
        "down",
        Arc::new(provider(
            config_for(ProviderKind::OpenAi, &unavailable, "gpt-x"),
            KEY,
        )),
    );
    engine.register_provider(
        "openai",
        Arc::new(provider(
            config_for(ProviderKind::OpenAi, &limited, "gpt-4o-mini"),
            KEY,
        )),
    );
    let spec = spec(vec![
        route("anthropic", "claude-x", 2),
        route("down", "gpt-x", 1),
        route("openai", "gpt-4o-mini", 3),
    ]);
    let mut traces = Vec::new();
    let end = engine
        .start(spec, "What is the answer?")
        .await
        .expect("starts")
        .wait_with(|e| traces.push(serde_json::to_string(e).unwrap_or_default()))
        .await
        .expect("runs");
    assert_eq!(end.status, RunStatus::Completed, "{end:?}");
    assert_eq!(end.state.outcome(), Some(&answered("the answer is 42")));
    assert_eq!(
        overloaded.requests().len(),
        2,
        "529 is retryable: two attempts on the primary"
    );
    assert_eq!(unavailable.requests().len(), 1);
    assert_eq!(
        limited.requests().len(),
        2,
        "the 429 was retried on the same route"
    );

    let edges: Vec<String> = history::timeline(engine.store().as_ref(), &end.run_id)
        .expect("reads")
        .into_iter()
        .map(|e| e.edge.to_owned())
        .collect();
    let wanted = [
        "generating.failed.retry",
        "generating.failed.fallback",
        "generating.failed.fallback",
        "generating.failed.retry",
    ];
    let failures: Vec<&str> = edges
        .iter()
        .map(String::as_str)
        .filter(|e| e.starts_with("generating.failed"))
        .collect();
    assert_eq!(
        failures, wanted,
        "the history shows each retry and fallback"
    );

    // The key is in no file of the database, no trace and no error text.
    let mut haystack: Vec<String> = traces;
    for f in std::fs::read_dir(dir.path()).expect("lists").flatten() {
        haystack
            .push(String::from_utf8_lossy(&std::fs::read(f.path()).expect("reads")).into_owned());
    }
    for t in history::timeline(engine.store().as_ref(), &end.run_id).expect("reads") {
        haystack.push(t.summary);
    }
    assert!(
        haystack.iter().all(|h| !h.contains(KEY)),
        "the API key leaked"
    );
    assert!(
        overloaded
            .requests()
            .iter()
            .all(|r| r.header("x-api-key") == Some(KEY)),
        "the key was sent, to the provider only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_failure_ends_the_run_without_showing_the_key() {
    let server = MockServer::always(Behaviour::json(401, &format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error","code":"invalid_api_key"}}}}"#))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("runs.db")).expect("opens");
    engine.register_provider(
        "openai",
        Arc::new(provider(
            config_for(ProviderKind::OpenAi, &server, "gpt-4o-mini"),
            KEY,
        )),
    );
    let end = run_to_rest(&engine, spec(vec![route("openai", "gpt-4o-mini", 3)]), "hi").await;
    let error = failure(&end.state);
    assert_eq!(error.class, ErrorClass::ProviderAuth);
    assert!(!error.message.contains(KEY), "{}", error.message);
    assert_eq!(server.requests().len(), 1, "auth errors are not retried");
    for f in std::fs::read_dir(dir.path()).expect("lists").flatten() {
        assert!(
            !String::from_utf8_lossy(&std::fs::read(f.path()).expect("reads")).contains(KEY),
            "key in {}",
            f.path().display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_tears_down_the_in_flight_http_request() {
    let server = MockServer::always(Behaviour::Silent).await;
    let engine = Engine::with_store(
        Arc::new(runtape::store::MemoryStore::new()),
        EngineConfig::default(),
    );
    engine.register_provider(
        "openai",
        Arc::new(provider(
            config_for(ProviderKind::OpenAi, &server, "gpt-4o-mini"),
            KEY,
        )),
    );
    let handle = engine
        .start(spec(vec![route("openai", "gpt-4o-mini", 1)]), "hang")
        .await
        .expect("starts");
    let run = handle.run_id().clone();
    for _ in 0..500 {
        if !server.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.requests().len(), 1, "the request reached the server");
    engine.cancel(&run, None).await.expect("cancels");
    let end = ends_within(10, handle, "prompt").await;
    assert_eq!(end.status, RunStatus::Cancelled);
    assert!(
        server.wait_client_close(Duration::from_secs(10)).await,
        "the HTTP connection was closed by the client"
    );
}
