//! A priced run never ends above its cost cap: before each call the HTTP provider derives the
//! output-token limit the cost left allows (after a byte-level bound of the input) and sends
//! it as the wire's own cap field, or refuses the call when even its input would pass the cap.
//! The local servers behave like a vendor at its worst: they charge the input they were sent
//! and spend every output token the request allows (10,000 when it sets no limit).

use crate::support;

use std::sync::Arc;

use runtape::exec::Engine;
use runtape::machine::*;
use runtape::provider::http::{PriceEntry, ProviderKind};
use support::provider::{Behaviour, MockServer, Recorded, config_for, provider};

const USD: u64 = 1_000_000_000;
/// The run's cap: $0.05.
const CAP_NANOS: u64 = USD / 20;
/// What a server spends when the request sets no output limit.
const UNBOUNDED_OUTPUT: u64 = 10_000;

/// The output-token limit `request` asked for, in `kind`'s own field.
fn asked_limit(kind: ProviderKind, request: &Recorded) -> Option<u64> {
    let body = request.json();
    let field = match kind {
        ProviderKind::OpenAi => &body["max_completion_tokens"],
        ProviderKind::OpenAiResponses => &body["max_output_tokens"],
        ProviderKind::Anthropic => &body["max_tokens"],
        _ => &body["options"]["num_predict"],
    };
    field.as_u64()
}

/// A reply of `kind` that spends `input` and `output` tokens, whole or streamed.
fn reply(kind: ProviderKind, stream: bool, input: u64, output: u64) -> Behaviour {
    let total = input + output;
    match (kind, stream) {
        (ProviderKind::OpenAi, false) => Behaviour::json(
            200,
            &format!(
                r#"{{"id":"c1","object":"chat.completion","created":1,"model":"pricey","choices":[{{"index":0,"message":{{"role":"assistant","content":"done"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{input},"completion_tokens":{output},"total_tokens":{total}}}}}"#
            ),
        ),
        (ProviderKind::OpenAi, true) => Behaviour::sse(&format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"pricey\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"done\"}},\"finish_reason\":null}}]}}\n\n\
             data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"pricey\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
             data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"pricey\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{input},\"completion_tokens\":{output},\"total_tokens\":{total}}}}}\n\n\
             data: [DONE]\n\n"
        )),
        (ProviderKind::OpenAiResponses, stream) => {
            let response = format!(
                r#"{{"id":"resp_1","object":"response","status":"completed","model":"pricey","output":[{{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"done","annotations":[]}}]}}],"usage":{{"input_tokens":{input},"output_tokens":{output},"total_tokens":{total}}}}}"#
            );
            if stream {
                Behaviour::sse(&format!(
                    "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"done\"}}\n\n\
                     event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{response}}}\n\n"
                ))
            } else {
                Behaviour::json(200, &response)
            }
        }
        (ProviderKind::Ollama, false) => Behaviour::json(
            200,
            &format!(
                r#"{{"model":"pricey","created_at":"2025-01-01T00:00:00Z","message":{{"role":"assistant","content":"done"}},"done":true,"done_reason":"stop","prompt_eval_count":{input},"eval_count":{output}}}"#
            ),
        ),
        (ProviderKind::Ollama, true) => Behaviour::respond(
            200,
            &[("Content-Type", "application/x-ndjson")],
            format!(
                "{}\n{}\n",
                r#"{"model":"pricey","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"done"},"done":false}"#,
                format_args!(
                    r#"{{"model":"pricey","created_at":"2025-01-01T00:00:00Z","message":{{"role":"assistant","content":""}},"done":true,"done_reason":"stop","prompt_eval_count":{input},"eval_count":{output}}}"#
                )
            )
            .as_bytes(),
        ),
        (_, false) => Behaviour::json(
            200,
            &format!(
                r#"{{"id":"msg_1","type":"message","role":"assistant","model":"pricey","content":[{{"type":"text","text":"done"}}],"stop_reason":"end_turn","usage":{{"input_tokens":{input},"output_tokens":{output}}}}}"#
            ),
        ),
        (_, true) => Behaviour::sse(&format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"pricey\",\"content\":[],\"usage\":{{\"input_tokens\":{input},\"output_tokens\":1}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"done\"}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":{output}}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )),
    }
}

/// A server of `kind` that charges a quarter token per byte of input (what real tokenizers
/// average on English) and every output token the request allows.
async fn worst_case_server(kind: ProviderKind, stream: bool) -> MockServer {
    MockServer::start(move |request| {
        let input = (request.body.len() as u64).div_ceil(4);
        let output = asked_limit(kind, request).unwrap_or(UNBOUNDED_OUTPUT);
        reply(kind, stream, input, output)
    })
    .await
}

/// Runs a one-agent spec capped at [`CAP_NANOS`] against `server`, the model priced at
/// `input_usd` and `output_usd` per million tokens. Returns the run's end state.
async fn capped_run(
    kind: ProviderKind,
    stream: bool,
    server: &MockServer,
    input_usd: f64,
    output_usd: f64,
) -> RunState {
    let mut config = config_for(kind, server, "pricey");
    config.stream = stream;
    config.pricing = vec![PriceEntry {
        model: "pricey".into(),
        input: input_usd,
        output: output_usd,
        cached_input: None,
        cache_write: None,
    }];
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("runs.db")).expect("opens");
    engine.register_provider("vendor", Arc::new(provider(config, "sk-test")));
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec::new("solo", "vendor", "pricey")],
        limits: Limits {
            max_cost_nanos: Some(CAP_NANOS),
            ..Limits::default()
        },
        ..Spec::default()
    })
    .expect("valid spec");
    let end = engine
        .start(spec, "Say done.")
        .await
        .expect("starts")
        .wait()
        .await
        .expect("runs");
    end.state
}

const KINDS: [ProviderKind; 4] = [
    ProviderKind::OpenAi,
    ProviderKind::OpenAiResponses,
    ProviderKind::Anthropic,
    ProviderKind::Ollama,
];

/// Input at $10/M leaves most of the $0.05 for output at $10,000/M ($0.01 a token): the
/// request asks for the few tokens that fit, the server spends them all, and the run ends
/// done at or under its cap. Without the limit the server spends 10,000 tokens: $100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priced_call_asks_for_no_more_output_than_the_cost_left_buys() {
    for kind in KINDS {
        for stream in [false, true] {
            let server = worst_case_server(kind, stream).await;
            let state = capped_run(kind, stream, &server, 10.0, 10_000.0).await;
            let case = format!("{kind} stream={stream}");
            let requests = server.requests();
            assert_eq!(requests.len(), 1, "{case}: one call");
            let limit = asked_limit(kind, &requests[0]);
            assert!(
                limit.is_some_and(|l| (1..5).contains(&l)),
                "{case}: the request asks for the 1 to 4 tokens $0.05 buys after its input, got {limit:?}"
            );
            let run = state.data().expect("a started run");
            assert!(
                run.usage.cost_nanos <= CAP_NANOS,
                "{case}: spent {} nanodollars against a cap of {CAP_NANOS}",
                run.usage.cost_nanos
            );
            assert!(
                matches!(state.outcome(), Some(Outcome::Completed { .. })),
                "{case}: the call fitted, so the run completes: {state:?}"
            );
        }
    }
}

/// Input at $10,000/M: the request's input alone would cost more than $0.05, so the call is
/// never sent; the run ends on its cost budget, as when the budget is spent, and the refusal
/// is in the history as the call's failure naming the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_input_alone_would_pass_the_cap_is_not_made() {
    for kind in KINDS {
        let server = worst_case_server(kind, false).await;
        let state = capped_run(kind, false, &server, 10_000.0, 10_000.0).await;
        assert!(
            server.requests().is_empty(),
            "{kind}: nothing reached the vendor"
        );
        let run = state.data().expect("a started run");
        assert_eq!(run.usage.cost_nanos, 0, "{kind}: nothing was spent");
        match state.outcome() {
            Some(Outcome::Failed { error }) => {
                assert_eq!(
                    error.class,
                    ErrorClass::for_budget(BudgetKey::Cost),
                    "{kind}: {error:?}"
                );
            }
            other => panic!("{kind}: the run fails on its cost budget, got {other:?}"),
        }
    }
}

/// Anthropic counts thinking inside `max_tokens`, so the cost budget's limit bounds the two
/// together: a thinking budget that no longer fits below it is lowered, and dropped when
/// what is left is under Anthropic's minimum of 1,024.
#[test]
fn anthropic_thinking_fits_under_the_cost_budgets_limit() {
    use runtape::provider::http::{EncodeOptions, encode_request};
    let mut request = support::provider::request("m", vec![Message::text(Role::User, "hi")]);
    request.settings.reasoning = Some(ReasoningSettings {
        effort: ReasoningEffort::Low,
        budget_tokens: Some(3000),
    });
    let body = |budget_cap| {
        let options = EncodeOptions {
            budget_cap,
            ..EncodeOptions::default()
        };
        encode_request(ProviderKind::Anthropic, &request, &options)
    };
    let free = body(None);
    assert_eq!(
        free["max_tokens"],
        4096 + 3000,
        "no budget: visible + thinking"
    );
    let roomy = body(Some(10_000));
    assert_eq!(
        roomy["max_tokens"],
        4096 + 3000,
        "a limit above both changes nothing"
    );
    let tight = body(Some(2000));
    assert_eq!(tight["max_tokens"], 2000);
    assert_eq!(tight["thinking"]["budget_tokens"], 1999);
    let tiny = body(Some(800));
    assert_eq!(tiny["max_tokens"], 800);
    assert!(tiny.get("thinking").is_none(), "{tiny}");
}
