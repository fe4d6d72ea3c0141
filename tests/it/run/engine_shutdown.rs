//! `Engine::shutdown` stops every run it drives and returns only once they have stopped: the
//! call in flight finished within the grace period and its result is committed, the run
//! rests paused with its lease given back, and nothing of it is still being driven — all on a
//! real SQLite file, checked the moment `shutdown` returns.

use std::sync::Arc;
use std::time::Duration;

use crate::support::durable::ended;
use runtape::exec::Engine;
use runtape::history;
use runtape::machine::{
    AgentSpec, EventBody, ModelReply, RunSpec, Spec, ToolCallRequest, ToolSpec,
};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::RunStatus;
use runtape::tool::{AsyncFnTool, Tool};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

/// A tool that says it started, then finishes when the test lets it.
fn gate(started: Arc<Notify>, release: Arc<Semaphore>) -> impl Tool {
    let spec = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("gate", "waits for the test")
    };
    AsyncFnTool::new(spec, move |_, _| {
        let (started, release) = (started.clone(), release.clone());
        async move {
            started.notify_one();
            let _permit = release.acquire().await;
            Ok(json!("opened"))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_once_the_call_in_flight_is_committed_and_the_run_rests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("runs.db")).expect("opens");
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    engine.register_tool(Arc::new(gate(started.clone(), release.clone())));
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", |req| {
            ScriptOutcome::reply(if req.turn() == 0 {
                ModelReply::tools(vec![ToolCallRequest::new("c1", "gate", json!({}))])
            } else {
                ModelReply::text("done")
            })
        })),
    );
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec {
            tools: Some(vec!["gate".into()]),
            ..AgentSpec::new("solo", "p", "m")
        }],
        tools: vec![ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("gate", "waits for the test")
        }],
        ..Spec::default()
    })
    .expect("valid");
    let handle = engine.start(spec, "Open the gate.").await.expect("starts");
    let run = handle.run_id().clone();
    started.notified().await;

    // The call is in flight: ask to stop, let the call finish within the grace period.
    let stopping = engine.shutdown(Duration::from_secs(30));
    release.add_permits(1);
    stopping.await;

    assert!(!engine.is_live(&run), "no driver is left");
    let rec = history::record(engine.store().as_ref(), &run).expect("reads");
    assert_eq!(rec.status, RunStatus::Paused);
    assert_eq!(rec.lease_owner, None, "the lease was given back");
    let last = history::transitions(engine.store().as_ref(), &run, rec.seq, rec.seq)
        .expect("reads")
        .pop()
        .expect("a last step");
    let event: runtape::machine::Event = serde_json::from_slice(&last.event).expect("decodes");
    assert!(
        matches!(event.body, EventBody::ToolReturned { .. }),
        "the result of the call in flight was committed: {:?}",
        event.body
    );
    let end = handle.wait().await.expect("stopped cleanly");
    assert_eq!(end.status, RunStatus::Paused);
    history::verify(engine.store().as_ref(), &run, None)
        .expect("reads")
        .expect("verifies");

    // It resumes and completes; a later run is not affected by the earlier shutdown.
    let end = ended(engine.resume(&run)).await;
    assert_eq!(end.status, RunStatus::Completed);
}
