//! Transport rules: a hung server times out as a retryable `provider_unavailable`; dropping
//! the call's future closes the connection; a redirect is never followed, so the key never
//! reaches another host; the key is read at call time.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runtape::machine::ProviderErrorClass;
use runtape::provider::ModelProvider;
use runtape::provider::http::{HttpProvider, ProviderKind};
use support::provider::*;
use tokio::sync::Notify;

const KEY: &str = "sk-transport-test-key";

fn quick(kind: ProviderKind, server: &MockServer, timeout_ms: u64) -> HttpProvider {
    let mut cfg = config(kind, &base_for(kind, &server.url()), "m");
    cfg.timeout = Duration::from_millis(timeout_ms);
    provider(cfg, KEY)
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_as_retryable_unavailable() {
    let server = MockServer::always(Behaviour::Silent).await;
    let started = Instant::now();
    let err = quick(ProviderKind::OpenAi, &server, 300)
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    assert_eq!(err.class, ProviderErrorClass::ProviderUnavailable);
    assert!(err.retryable);
    assert_eq!(err.status, None);
    assert!(err.message.contains("no response within 300ms"), "{err:?}");
    assert!(
        server.wait_client_close(Duration::from_secs(5)).await,
        "the abandoned connection is closed"
    );
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out_after_the_text_so_far() {
    let body =
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n";
    let server = MockServer::always(Behaviour::sse(body).then_hang()).await;
    let deltas = Deltas::default();
    let sink = deltas.sink();
    let mut cfg = config_for(ProviderKind::OpenAi, &server, "m");
    cfg.timeout = Duration::from_secs(30);
    cfg.idle_timeout = Duration::from_millis(300);
    let err = provider(cfg, "k")
        .complete_decoded(&hello("m"), &sink)
        .await
        .unwrap_err();
    assert_eq!(err.class, ProviderErrorClass::ProviderUnavailable);
    assert!(err.retryable);
    assert!(err.message.contains("the stream went silent"), "{err:?}");
    assert_eq!(deltas.joined(), "partial");
}

/// The server sends one delta and then waits; the caller drops the future as soon as the
/// delta arrives; the server must then see its connection closed.
#[tokio::test]
async fn dropping_the_call_closes_the_connection() {
    for kind in [
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::Ollama,
    ] {
        let body = match kind {
            ProviderKind::OpenAiResponses => {
                "data: {\"type\":\"response.output_text.delta\",\"delta\":\"first\"}\n\n"
            }
            ProviderKind::OpenAi | ProviderKind::AzureOpenAi => {
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n"
            }
            ProviderKind::Anthropic => {
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"first\"}}\n\n"
            }
            ProviderKind::Ollama => "{\"message\":{\"content\":\"first\"},\"done\":false}\n",
        };
        let server = MockServer::always(Behaviour::sse(body).then_hang()).await;
        let provider = quick(kind, &server, 30_000);
        let first = Arc::new(Notify::new());
        let signal = first.clone();
        let sink = move |_: &str| signal.notify_one();
        let request = hello("m");
        let call = provider.complete(&request, &sink);
        tokio::select! {
            result = call => panic!("{kind}: the call finished: {result:?}"),
            _ = first.notified() => {}
        }
        // `call` was dropped when `select!` returned.
        assert!(
            server.wait_client_close(Duration::from_secs(5)).await,
            "{kind}: the server never saw the connection close"
        );
    }
}

/// Server A redirects to server B on another host name (`localhost` vs `127.0.0.1`). The
/// redirect is not followed: B never sees a connection, let alone the key.
#[tokio::test]
async fn a_redirect_never_carries_the_key_to_another_host() {
    let b = MockServer::always(Behaviour::json(200, "{}")).await;
    let location = format!("http://localhost:{}/v1/chat/completions", b.addr.port());
    for status in [301, 302, 307, 308] {
        let loc = location.clone();
        let a = MockServer::start(move |_| {
            Behaviour::respond(status, &[("Location", loc.as_str())], b"")
        })
        .await;
        let err = quick(ProviderKind::OpenAi, &a, 2_000)
            .complete_decoded(&hello("m"), &|_| {})
            .await
            .unwrap_err();
        assert_eq!(
            a.requests()[0].header("authorization"),
            Some(format!("Bearer {KEY}").as_str()),
            "A got the key"
        );
        assert_eq!(err.status, Some(status));
        assert!(!err.retryable);
        assert!(err.message.contains(&location), "{}", err.message);
    }
    assert_eq!(b.connections(), 0, "the redirect target was contacted");
}

#[tokio::test]
async fn the_key_is_read_at_every_call() {
    let server = MockServer::ok_chat().await;
    let env: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(Some("key-one-1234".into())));
    let reader = env.clone();
    let lookup = Arc::new(move |name: &str| {
        (name == KEY_VAR)
            .then(|| reader.lock().unwrap().clone())
            .flatten()
    });
    let mut cfg = config_for(ProviderKind::OpenAi, &server, "m");
    cfg.stream = false;
    let provider = HttpProvider::with_env(cfg, lookup).unwrap();

    provider
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap();
    *env.lock().unwrap() = Some("key-two-5678".into());
    provider
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap();
    let seen: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_owned())
        .collect();
    assert_eq!(seen, ["Bearer key-one-1234", "Bearer key-two-5678"]);

    *env.lock().unwrap() = None;
    let err = provider
        .complete_decoded(&hello("m"), &|_| {})
        .await
        .unwrap_err();
    assert_eq!(err.class, ProviderErrorClass::ProviderAuth);
    assert!(!err.retryable);
    assert!(
        err.message.contains(KEY_VAR) && err.message.contains("unset"),
        "{}",
        err.message
    );
    assert_eq!(server.requests().len(), 2, "no request without a key");
}

#[tokio::test]
async fn a_keyless_openai_compatible_server_gets_no_authorization_header() {
    let server = MockServer::ok_chat().await;
    let mut cfg = config_for(ProviderKind::OpenAi, &server, "local-model");
    cfg.api_key_env = None;
    cfg.stream = false;
    let provider = HttpProvider::with_env(cfg, env_with(&[])).unwrap();
    let deltas = Deltas::default();
    let sink = deltas.sink();
    let reply = provider
        .complete(&hello("local-model"), &sink)
        .await
        .unwrap();
    assert_eq!(reply.text.as_deref(), Some("ok"));
    assert_eq!(
        deltas.joined(),
        "ok",
        "a whole-body reply's text still reaches the sink"
    );
    assert_eq!(server.requests()[0].header("authorization"), None);
    assert_eq!(
        server.requests()[0].header("accept"),
        Some("application/json")
    );
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_decoded_as_a_whole_body() {
    let server = MockServer::always(Behaviour::json(
        200,
        r#"{"choices":[{"index":0,"message":{"content":"whole"},"finish_reason":"stop"}]}"#,
    ))
    .await;
    let reply = quick(ProviderKind::OpenAi, &server, 2_000)
        .complete(&hello("m"), &|_| {})
        .await
        .unwrap();
    assert_eq!(reply.text.as_deref(), Some("whole"));
    assert_eq!(
        server.requests()[0].header("accept"),
        Some("text/event-stream")
    );
}

#[tokio::test]
async fn nothing_listening_is_a_retryable_connect_failure() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let mut cfg = config(ProviderKind::Ollama, &url, "llama3");
    cfg.timeout = Duration::from_secs(2);
    let err = provider(cfg, KEY)
        .complete_decoded(&hello("llama3"), &|_| {})
        .await
        .unwrap_err();
    assert_eq!(err.class, ProviderErrorClass::ProviderUnavailable);
    assert!(err.retryable);
    assert!(err.hint.contains("could not connect"), "{}", err.hint);
}
