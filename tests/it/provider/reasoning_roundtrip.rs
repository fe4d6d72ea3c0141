//! Reasoning survives a tool-use loop, through the engine and real HTTP on 127.0.0.1: the
//! reasoning a provider returns with a tool call is stored with the assistant message and
//! sent back in the next request exactly as the provider requires — Anthropic `thinking`
//! (signature intact) and `redacted_thinking` blocks before the `tool_use`, an
//! OpenAI-compatible server's `reasoning_content`, Responses reasoning items by encrypted
//! content — reasoning tokens are counted, and a cassette replays the reasoning unchanged.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::durable::run_to_rest;
use runtape::exec::Engine;
use runtape::history;
use runtape::machine::*;
use runtape::provider::http::ProviderKind;
use runtape::store::RunStatus;
use runtape::tool::FnTool;
use serde_json::{Value, json};
use support::provider::{Behaviour, MockServer, base_for, config, provider};

/// The one tool: read-only, idempotent, answers every lookup at once.
fn lookup() -> ToolSpec {
    let mut tool = ToolSpec::new("lookup", "Look a word up");
    tool.read_only = true;
    tool.idempotent = true;
    tool.schema =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    tool
}

fn spec() -> RunSpec {
    let tool = lookup();
    RunSpec::build(Spec {
        agents: vec![AgentSpec {
            model_settings: ModelSettings {
                reasoning: Some(ReasoningSettings {
                    effort: ReasoningEffort::Low,
                    budget_tokens: None,
                }),
                ..ModelSettings::default()
            },
            ..AgentSpec::new("solo", "p", "m")
        }],
        tools: vec![tool],
        ..Spec::default()
    })
    .expect("valid")
}

/// Serves `first` to the first request and `second` to every later one.
async fn two_step(first: &'static str, second: &'static str) -> MockServer {
    let n = Arc::new(AtomicUsize::new(0));
    MockServer::start(move |_| {
        let body = if n.fetch_add(1, Ordering::SeqCst) == 0 {
            first
        } else {
            second
        };
        Behaviour::json(200, body)
    })
    .await
}

/// A completed run of [`spec`] against a server answering `first`, then `then`.
struct Ran {
    _dir: tempfile::TempDir,
    engine: Engine,
    end: runtape::exec::RunEnd,
    server: MockServer,
    /// The body of each request the provider sent, in order.
    sent: Vec<Value>,
}

async fn run(kind: ProviderKind, first: &'static str, then: &'static str) -> Ran {
    let server = two_step(first, then).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("runs.db")).expect("opens");
    let mut cfg = config(kind, &base_for(kind, &server.url()), "m");
    cfg.stream = false;
    engine.register_provider("p", Arc::new(provider(cfg, "k")));
    engine.register_tool(Arc::new(FnTool::new(lookup(), |_, _| {
        Ok(json!("found it"))
    })));
    let end = run_to_rest(&engine, spec(), "Look up x.").await;
    assert_eq!(end.status, RunStatus::Completed, "{end:?}");
    let sent = server.requests().iter().map(|r| r.json()).collect();
    Ran {
        _dir: dir,
        engine,
        end,
        server,
        sent,
    }
}

const ANTHROPIC_TOOL: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"I need the lookup tool.","signature":"SIG-abc=="},{"type":"redacted_thinking","data":"ENCRYPTED=="},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"x"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":30}}"#;
const ANTHROPIC_DONE: &str = r#"{"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"x is found"}],"stop_reason":"end_turn","usage":{"input_tokens":50,"output_tokens":5}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_goes_back_with_the_tool_use_signature_intact() {
    // Bound whole: a destructured Ran would drop its directory, and the database with it.
    let r = run(ProviderKind::Anthropic, ANTHROPIC_TOOL, ANTHROPIC_DONE).await;
    let (engine, end, sent) = (&r.engine, &r.end, &r.sent);
    let assistant = &sent[1]["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "I need the lookup tool.", "signature": "SIG-abc=="},
            {"type": "redacted_thinking", "data": "ENCRYPTED=="},
            // The turn before the newest ends the cached prefix (prompt caching is on by
            // default); the mark goes on its last block, never on a thinking block.
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"},
             "cache_control": {"type": "ephemeral"}}
        ])
    );
    assert_eq!(
        sent[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    // Stored with the message, so `show` and a resumed run see it.
    let step = (1..=end.state.seq())
        .rev()
        .filter_map(|s| history::show(engine.store().as_ref(), &end.run_id, Some(s)).ok())
        .find_map(|v| v.request)
        .expect("a model request");
    let kept = step
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .expect("the tool-use turn");
    assert_eq!(kept.reasoning.len(), 2);
    assert_eq!(
        step.settings.reasoning.map(|r| r.effort),
        Some(ReasoningEffort::Low),
        "the settings are part of the exact request shown"
    );
}

const DEEPSEEK_TOOL: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"Use the tool.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"completion_tokens_details":{"reasoning_tokens":8}}}"#;
const DEEPSEEK_DONE: &str = r#"{"id":"c2","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x is found","reasoning_content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":4}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_content_goes_back_within_the_tool_loop_and_is_counted() {
    let r = run(ProviderKind::OpenAi, DEEPSEEK_TOOL, DEEPSEEK_DONE).await;
    let (end, sent) = (&r.end, &r.sent);
    let assistant = &sent[1]["messages"][1];
    assert_eq!(assistant["reasoning_content"], "Use the tool.");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        sent[0]["reasoning_effort"], "low",
        "reasoning effort is sent"
    );
    assert_eq!(end.state.data().unwrap().usage.reasoning_tokens, 8);
}

const RESPONSES_TOOL: &str = r#"{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Use the tool."}],"encrypted_content":"gAAAA-secret"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"lookup","arguments":"{\"q\":\"x\"}","status":"completed"}],"usage":{"input_tokens":9,"output_tokens":12,"output_tokens_details":{"reasoning_tokens":6}}}"#;
const RESPONSES_DONE: &str = r#"{"id":"resp_2","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_2","role":"assistant","content":[{"type":"output_text","text":"x is found","annotations":[]}]}],"usage":{"input_tokens":20,"output_tokens":4}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reasoning_items_go_back_by_encrypted_content() {
    let r = run(
        ProviderKind::OpenAiResponses,
        RESPONSES_TOOL,
        RESPONSES_DONE,
    )
    .await;
    assert_eq!(r.server.requests()[0].path, "/v1/responses");
    let second = &r.sent[1];
    assert_eq!(second["store"], false);
    assert_eq!(second["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        second["input"][1],
        json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use the tool."}], "encrypted_content": "gAAAA-secret"})
    );
    assert_eq!(second["input"][2]["type"], "function_call");
    assert_eq!(second["input"][3]["type"], "function_call_output");
    assert_eq!(second["input"][3]["output"], "found it");
    assert_eq!(r.end.state.data().unwrap().usage.reasoning_tokens, 6);
}

#[tokio::test]
async fn a_cassette_replays_reasoning_unchanged() {
    use runtape::cassette::{
        CassetteProvider, LoadOptions, RecordOptions, RecordingProvider, ReplayOptions,
    };
    use runtape::provider::{ModelProvider, ProviderRequest, ScriptedProvider};
    let reply = ModelReply {
        reasoning: vec![Reasoning::Thinking {
            text: "hmm".into(),
            signature: "sig".into(),
        }],
        thinking: Some("hmm".into()),
        ..ModelReply::text("ok")
    };
    let request = ProviderRequest {
        agent: AgentId::from("solo"),
        model: "m".into(),
        messages: Arc::new(vec![Message::text(Role::User, "hi")]),
        attempt: 1,
        ..ProviderRequest::default()
    };
    let recorder = RecordingProvider::new(
        Arc::new(ScriptedProvider::replies("s", vec![reply.clone()])),
        RecordOptions::default(),
    )
    .expect("records");
    let live = recorder.complete(&request, &|_| {}).await.expect("replies");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.json");
    recorder
        .finish("2025-01-01T00:00:00Z")
        .expect("finishes")
        .save(&path)
        .expect("saves");
    let replay = CassetteProvider::load(&path, &LoadOptions::default(), ReplayOptions::default())
        .expect("loads");
    let replayed = replay.complete(&request, &|_| {}).await.expect("replays");
    assert_eq!(replayed, live);
    assert_eq!(replayed.reasoning, reply.reasoning);
}
