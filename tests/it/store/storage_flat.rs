//! Storage per transition stays flat as a run grows: messages are content-addressed blobs and
//! snapshots hold conversation heads, never whole conversations. Measured on real SQLite files
//! with the scripted provider: a 5,000-round run (15,000 transitions) against a 500-round run.

use crate::support;
use crate::support::cli::temp_db;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use runtape::exec::{Engine, EngineConfig, SteppedClock};
use runtape::machine::{ModelReply, ToolCallRequest};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::{Durability, RunStatus, SqliteStore, Store};
use serde_json::json;
use support::durable::*;

/// Every message 200 bytes, one tool call per round, then an answer.
fn provider(rounds: usize) -> ScriptedProvider {
    ScriptedProvider::new("p", move |req| {
        let turn = req.turn();
        let text = format!("{turn:0>200}");
        if turn < rounds {
            let call = ToolCallRequest::new(
                format!("c{turn}"),
                "lookup",
                json!({"q": text[..150].to_string()}),
            );
            ScriptOutcome::reply(ModelReply {
                text: Some(text),
                ..ModelReply::tools(vec![call])
            })
        } else {
            ScriptOutcome::reply(ModelReply::text(text))
        }
    })
}

async fn bytes_per_transition(rounds: usize) -> (f64, u64) {
    let (_dir, path) = temp_db();
    // NORMAL only makes the test faster; the bytes written are the same as with FULL.
    let store = Arc::new(SqliteStore::open(&path, Durability::Normal).expect("opens"));
    let empty = store.size_bytes().expect("size");
    let config = EngineConfig {
        clock: Arc::new(SteppedClock {
            start_ms: 1,
            step_ms: 1,
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::with_store(store.clone(), config);
    engine.register_provider("p", Arc::new(provider(rounds)));
    engine.register_tool(Arc::new(counting_lookup(Arc::new(AtomicUsize::new(0)))));
    let spec = spec(vec![lookup_spec()], |s| {
        s.max_transitions = 40_000;
        s.agents[0].limits.max_turns = Some(20_000);
        s.agents[0].limits.max_tool_calls = Some(20_000);
    });
    let end = run_to_rest(&engine, spec, &"g".repeat(200)).await;
    assert_eq!(end.status, RunStatus::Completed);
    let transitions = end.state.seq();
    let bytes = store.size_bytes().expect("size") - empty;
    (bytes as f64 / transitions as f64, transitions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_per_transition_do_not_grow_with_the_run() {
    let (small, n_small) = bytes_per_transition(500).await;
    let (large, n_large) = bytes_per_transition(5_000).await;
    println!(
        "500 rounds: {n_small} transitions, {small:.0} B/transition; 5,000 rounds: {n_large} transitions, {large:.0} B/transition"
    );
    assert!(
        large <= small * 1.5,
        "storage grows with the run: {small:.0} → {large:.0} bytes per transition"
    );
}
