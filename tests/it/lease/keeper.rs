//! The engine's lease keeper: one read for all the runs an engine drives tells each driver of
//! requests made from another process, and keeps the leases of runs in long calls alive. A
//! second store on the same SQLite file stands for the other process.

use crate::support;
use crate::support::cli::temp_db;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use runtape::exec::{Engine, EngineConfig, RunHandle};
use runtape::machine::RunId;
use runtape::store::{Control, Durability, RunStatus, SqliteStore, Store, Write};
use runtape::tool::{AsyncFnTool, Tool, ToolContext, ToolError};
use serde_json::json;
use support::durable::*;
use tokio::sync::{Notify, watch};

/// A lookup that counts and announces its start, then waits until the gate opens (or its call
/// is cancelled).
fn gated(
    started: Arc<AtomicUsize>,
    started_note: Arc<Notify>,
    gate: watch::Receiver<bool>,
) -> impl Tool {
    AsyncFnTool::new(lookup_spec(), move |_, ctx: ToolContext| {
        let (started, started_note, mut gate) =
            (started.clone(), started_note.clone(), gate.clone());
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            started_note.notify_one();
            tokio::select! {
                _ = gate.wait_for(|open| *open) => Ok(json!("found")),
                () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
            }
        }
    })
}

struct Setup {
    engine: Engine,
    other: SqliteStore,
    started: Arc<AtomicUsize>,
    started_note: Arc<Notify>,
    gate: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

fn setup(lease_ttl: Duration) -> Setup {
    let (dir, path) = temp_db();
    let config = EngineConfig {
        control_poll: Duration::from_millis(20),
        lease_ttl,
        ..EngineConfig::default()
    };
    let engine = Engine::open_with(&path, config).expect("opens");
    let (gate, gate_rx) = watch::channel(false);
    let started = Arc::new(AtomicUsize::new(0));
    let started_note = Arc::new(Notify::new());
    engine.register_provider("p", Arc::new(rounds_provider(1, &["lookup"])));
    engine.register_tool(Arc::new(gated(
        started.clone(),
        started_note.clone(),
        gate_rx,
    )));
    let other = SqliteStore::open(&path, Durability::Full).expect("a second handle opens");
    Setup {
        engine,
        other,
        started,
        started_note,
        gate,
        _dir: dir,
    }
}

async fn start(s: &Setup, n: usize) -> Vec<RunHandle> {
    let mut handles = Vec::new();
    for i in 0..n {
        let h = s
            .engine
            .start(spec(vec![lookup_spec()], |_| {}), "look it up")
            .with_id(RunId::new(format!("run-{i}")))
            .await
            .expect("starts");
        handles.push(h);
    }
    while s.started.load(Ordering::SeqCst) < n {
        s.started_note.notified().await;
    }
    handles
}

async fn ask(store: &SqliteStore, run: &str, control: Control) {
    let write = Write::SetControl {
        run: RunId::new(run),
        control: Some(control),
    };
    runtape::store::write(store, write)
        .await
        .expect("the request is written");
}

#[tokio::test]
async fn requests_from_another_process_reach_only_the_runs_they_name() {
    let s = setup(Duration::from_secs(15));
    let mut handles = start(&s, 12).await;
    ask(&s.other, "run-3", Control::Pause).await;
    ask(&s.other, "run-8", Control::Cancel(None)).await;

    // The cancel aborts run-8's call while every other call still waits on the gate.
    let cancelled = handles.remove(8);
    let end = ends_within(30, cancelled, "the cancel is seen while the call waits").await;
    assert_eq!(end.status, RunStatus::Cancelled);

    s.gate.send_replace(true);
    for (i, h) in handles.into_iter().enumerate() {
        let id = h.run_id().to_string();
        let end = h.wait().await.expect("ends");
        let want = if id == "run-3" {
            RunStatus::Paused
        } else {
            RunStatus::Completed
        };
        assert_eq!(end.status, want, "{id} (handle {i})");
    }
    let paused = s
        .other
        .run(&RunId::new("run-3"))
        .expect("reads")
        .expect("exists");
    assert_eq!(paused.status, RunStatus::Paused);
    assert_eq!(paused.control, None, "the request was taken");
    assert_eq!(paused.lease_owner, None, "the lease was given back");
    assert_eq!(s.started.load(Ordering::SeqCst), 12, "one call per run");
}

#[tokio::test]
async fn leases_of_runs_in_long_calls_are_renewed_and_given_back() {
    let ttl = Duration::from_millis(600);
    let s = setup(ttl);
    let handles = start(&s, 3).await;
    let id = RunId::new("run-1");
    let first = s.other.run(&id).expect("reads").expect("exists");
    // Without renewal the lease would lapse at `first.lease_expires_ms`, the call still
    // running: wait until the stored expiry has moved a whole ttl past it.
    let renewed = async {
        loop {
            let now = s.other.run(&id).expect("reads").expect("exists");
            if now.lease_expires_ms >= first.lease_expires_ms + ttl.as_millis() as u64 {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let now = tokio::time::timeout(Duration::from_secs(60), renewed)
        .await
        .expect("the lease is renewed while the call runs");
    assert_eq!(now.lease_epoch, first.lease_epoch);
    assert!(now.lease_owner.is_some());
    s.gate.send_replace(true);
    for h in handles {
        assert_eq!(h.wait().await.expect("ends").status, RunStatus::Completed);
    }
    for lease in s
        .other
        .leases(&[id.clone(), RunId::new("run-0"), RunId::new("run-2")])
        .expect("reads")
    {
        assert_eq!(lease.lease_expires_ms, 0, "{}: released", lease.id);
    }
}
