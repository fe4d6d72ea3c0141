//! A trace observer that falls behind never holds a run up and never loses events silently:
//! the trace channel is bounded, and a reader that fell that far behind is told how many
//! events it missed (`trace.lagged`), then reads on. The run itself is unaffected: its
//! history is complete.

use std::sync::Arc;

use runtape::exec::{Engine, Trace};
use runtape::history;
use runtape::machine::{AgentSpec, ModelReply, RunSpec, Spec, ToolCallRequest, ToolSpec};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::RunStatus;
use runtape::tool::FnTool;
use serde_json::json;

/// Tool rounds in the run: each gives several trace events, far more in all than the channel
/// holds.
const ROUNDS: usize = 1_500;

#[tokio::test]
async fn a_reader_that_fell_behind_is_told_what_it_missed() {
    let engine = Engine::in_memory();
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", |req| {
            ScriptOutcome::reply(if req.turn() < ROUNDS {
                ModelReply::tools(vec![ToolCallRequest::new("c", "noop", json!({}))])
            } else {
                ModelReply::text("done")
            })
        })),
    );
    let noop = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("noop", "does nothing")
    };
    engine.register_tool(Arc::new(FnTool::new(noop.clone(), |_, _| Ok(json!("ok")))));
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec {
            tools: Some(vec!["noop".into()]),
            limits: runtape::machine::Limits {
                max_turns: Some(ROUNDS as u64 + 1),
                max_tool_calls: Some(ROUNDS as u64 + 1),
                ..Default::default()
            },
            ..AgentSpec::new("solo", "p", "m")
        }],
        tools: vec![noop],
        max_transitions: 10_000,
        ..Spec::default()
    })
    .expect("valid");
    let mut handle = engine.start(spec, "Busy work.").await.expect("starts");
    let run = handle.run_id().clone();
    // Read nothing until the run is over.
    while engine.is_live(&run) {
        tokio::task::yield_now().await;
    }

    let first = handle.next_event().await.expect("an event");
    let Trace::Lagged { missed } = first.kind else {
        panic!("expected to be told of the gap first, got {first:?}");
    };
    assert!(missed > 0);
    let mut rest = Vec::new();
    while let Some(e) = handle.next_event().await {
        rest.push(e.kind);
    }
    assert!(
        matches!(rest.last(), Some(Trace::RunFinished { .. })),
        "it reads on to the end"
    );
    let rec = history::record(engine.store().as_ref(), &run).expect("reads");
    assert_eq!(rec.status, RunStatus::Completed, "{:?}", rec.outcome);
    assert_eq!(
        history::transitions(engine.store().as_ref(), &run, 1, rec.seq)
            .expect("reads")
            .len() as u64,
        rec.seq,
        "every step is in the history regardless"
    );
}
