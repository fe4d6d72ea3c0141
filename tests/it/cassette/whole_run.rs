//! Whole-run replay: a two-agent run with parallel tool calls is recorded once through an
//! OpenAI adapter talking to a local server that plays a scripted model, then replayed from its
//! cassette with no server; every state hash is reproduced, verify passes on both runs, and the
//! API key never appears in the cassette. Through the CLI (run, cassette export, replay, all
//! with `--stepped-clock`) every replay reproduces every state hash, including the steps
//! between the results of two parallel shell tools.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::support::cli::{err, example, export, first_id, out, run_id, runtape, temp_db, utf8};
use crate::support::durable::run_to_rest;
use crate::support::machine::{edge, plan, when_contains};
use runtape::cassette::{
    CassetteProvider, LoadOptions, RecordOptions, RecordingProvider, ReplayOptions,
};
use runtape::exec::{Engine, EngineConfig, SteppedClock};
use runtape::history;
use runtape::machine::*;
use runtape::provider::ModelProvider;
use runtape::provider::http::ProviderKind;
use runtape::store::{RunStatus, Store};
use runtape::tool::FnTool;
use serde_json::{Value, json};
use support::provider::{Behaviour, MockServer, config_for, provider};

const KEY: &str = "sk-test-cassette-SECRET-41c2";

/// The local "model": replies by agent (system prompt) and turn (assistant messages so far).
fn scripted_model(req: &support::provider::Recorded) -> Behaviour {
    let body = req.json();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
    let message = match (system.as_str(), turn) {
        ("You research.", 0) => json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"events\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"weather\"}"}}]}),
        ("You research.", _) => {
            json!({"role": "assistant", "content": "FOUND: Lisbon, mild in April"})
        }
        (_, _) => json!({"role": "assistant", "content": "Lisbon; pack a light jacket."}),
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    let reply = json!({"id": format!("chatcmpl-{turn}"), "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 40 + turn * 10, "completion_tokens": 9, "total_tokens": 49 + turn * 10}});
    Behaviour::json(200, &reply.to_string())
}

fn spec() -> RunSpec {
    let tool = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("search", "search")
    };
    RunSpec::build(Spec {
        agents: vec![
            AgentSpec {
                system_prompt: "You research.".into(),
                tools: Some(vec!["search".into()]),
                ..AgentSpec::new("researcher", "openai", "gpt-4o-mini")
            },
            AgentSpec {
                system_prompt: "You write.".into(),
                tools: Some(vec![]),
                ..AgentSpec::new("writer", "openai", "gpt-4o-mini")
            },
        ],
        tools: vec![tool],
        plan: plan(
            "researcher",
            vec![edge("researcher", "writer", when_contains("FOUND"))],
            &["writer"],
            4,
        ),
        ..Spec::default()
    })
    .expect("valid")
}

fn engine(db: &std::path::Path, model: Arc<dyn ModelProvider>) -> Engine {
    let config = EngineConfig {
        clock: Arc::new(SteppedClock {
            start_ms: 1_800_000_000_000,
            step_ms: 5,
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::open_with(db, config).expect("opens");
    engine.register_provider("openai", model);
    let calls = Arc::new(AtomicUsize::new(0));
    engine.register_tool(Arc::new(FnTool::new(
        ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("search", "search")
        },
        move |args: Value, _| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(json!({"hit": format!("result for {}", args["q"])}))
        },
    )));
    engine
}

fn hashes(store: &dyn Store, run: &RunId) -> Vec<String> {
    history::transitions(store, run, 1, 10_000)
        .expect("reads")
        .iter()
        .map(|t| t.state_hash.to_hex())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_replays_to_the_same_state_hashes() {
    let server = MockServer::start(scripted_model).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let http: Arc<dyn ModelProvider> = Arc::new(provider(
        config_for(ProviderKind::OpenAi, &server, "gpt-4o-mini"),
        KEY,
    ));
    let recorder =
        Arc::new(RecordingProvider::new(http, RecordOptions::default()).expect("recorder"));

    let recorded = engine(&dir.path().join("recorded.db"), recorder.clone());
    let goal = "Which city, and what weather?";
    let end = run_to_rest(&recorded, spec(), goal).await;
    assert_eq!(end.status, RunStatus::Completed, "{end:?}");
    let calls_while_recording = server.requests().len();
    assert_eq!(calls_while_recording, 3);
    let cassette = recorder.finish("2026-11-21T00:00:00Z").expect("cassette");
    let file = dir.path().join("run.cassette.json");
    cassette.save(&file).expect("saves");
    let text = std::fs::read_to_string(&file).expect("reads");
    assert!(!text.contains(KEY), "the key is not in the cassette");
    assert_eq!(cassette.len(), 3);

    let replay = Arc::new(
        CassetteProvider::load(
            &file,
            &LoadOptions {
                require_integrity: true,
                ..LoadOptions::default()
            },
            ReplayOptions::default(),
        )
        .expect("loads"),
    );
    let replayed = engine(&dir.path().join("replayed.db"), replay.clone());
    let again = run_to_rest(&replayed, spec(), goal).await;
    assert_eq!(again.status, RunStatus::Completed);
    assert_eq!(
        server.requests().len(),
        calls_while_recording,
        "no request reached the server on replay"
    );
    assert!(replay.is_finished() && replay.last_error().is_none());

    let (a, b) = (
        hashes(recorded.store().as_ref(), &end.run_id),
        hashes(replayed.store().as_ref(), &again.run_id),
    );
    assert_eq!(a.len(), b.len());
    assert_eq!(a, b, "every state hash is reproduced");
    history::verify(recorded.store().as_ref(), &end.run_id, None)
        .expect("reads")
        .expect("the recorded run verifies");
    history::verify(replayed.store().as_ref(), &again.run_id, None)
        .expect("reads")
        .expect("the replayed run verifies");
}

/// Through the CLI: a run with a deterministic clock, its cassette, a replay of it.
#[test]
fn cli_run_export_replay_reproduces_the_run() {
    let (dir, db) = temp_db();
    let spec = example("handoff.toml");
    let spec = utf8(&spec);
    let o = runtape(&db, &["run", "--stepped-clock", spec]);
    assert!(o.status.success(), "{}", err(&o));
    let run = run_id(&o);
    let cassette = dir.path().join("handoff.json");
    let o = export(&db, &run, &cassette);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("wrote 4 model turns"));
    let replay = |extra: &[&str]| {
        let args = [
            &[
                "replay",
                "--stepped-clock",
                spec,
                "--cassette",
                utf8(&cassette),
            ],
            extra,
        ];
        runtape(&db, &args.concat())
    };
    let o = replay(&[]);
    assert!(o.status.success(), "{}", err(&o));
    let printed = out(&o);
    assert!(
        printed.contains("replayed 4 of 4 recorded model turns"),
        "{printed}"
    );
    let replayed = first_id(&printed);
    // Every step reproduces the recorded state hash, including the steps between the results
    // of the two parallel shell tools: under a stepped clock results are committed in call
    // order, whichever tool answers first. Replayed three times, so an order that depended on
    // timing would show.
    let hashes_of = |id: &str| -> Vec<String> {
        let store =
            runtape::store::SqliteStore::open_existing(&db, Default::default()).expect("opens");
        history::transitions(&store, &RunId::new(id), 1, 10_000)
            .expect("reads")
            .iter()
            .map(|t| t.state_hash.to_hex())
            .collect()
    };
    let recorded = hashes_of(&run);
    assert!(recorded.len() > 8, "{recorded:?}");
    assert_eq!(hashes_of(&replayed), recorded, "replay {replayed}");
    for _ in 0..2 {
        let o = replay(&[]);
        assert!(o.status.success(), "{}", err(&o));
        let again = run_id(&o);
        assert_eq!(hashes_of(&again), recorded, "replay {again}");
    }
    // A drifted request is refused mid-replay, naming the turn, with a diff.
    let o = replay(&["A different goal."]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    // The error is one line naming the turn; the request diff is printed as a report on
    // stdout.
    let stderr = err(&o);
    assert!(
        stderr.contains("turn 0") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let stdout = out(&o);
    assert!(stdout.contains("A different goal."), "{stdout}");
}
