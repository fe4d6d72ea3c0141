//! The durable engine on a real SQLite file: runs complete, effects wait for their
//! transitions, tools run in parallel with timeouts, pause/cancel/observers behave.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::cli::temp_db;
use crate::support::machine::{answered, failure};
use runtape::exec::{Engine, EngineConfig, Trace};
use runtape::history;
use runtape::machine::*;
use runtape::provider::ScriptedProvider;
use runtape::store::{Durability, RunStatus, SqliteStore, Store};
use runtape::tool::{AsyncFnTool, FnTool, ToolContext, ToolError};
use serde_json::json;
use support::durable::*;

#[tokio::test]
async fn a_run_completes_and_its_history_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path());
    let calls = Arc::new(AtomicUsize::new(0));
    engine.register_provider("p", Arc::new(rounds_provider(3, &["lookup"])));
    engine.register_tool(Arc::new(counting_lookup(calls.clone())));
    let end = run_to_rest(&engine, spec(vec![lookup_spec()], |_| {}), "Find it.").await;
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(end.state.outcome(), Some(&answered("done")));
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Rebuilt from storage alone: same state, same conversation.
    let store = engine.store().as_ref();
    let rec = history::record(store, &end.run_id).expect("recorded");
    assert_eq!(rec.seq, end.state.seq());
    let spec = history::spec_of(&rec).expect("spec loads");
    let rebuilt = history::state_at(store, &end.run_id, &spec, rec.seq).expect("replays");
    assert_eq!(rebuilt.state, end.state);
    let convs = history::conversations(store, &rebuilt.state).expect("bodies load");
    let solo = &convs[&AgentId::from("solo")];
    assert_eq!(
        solo.len(),
        2 + 3 * 2 + 1,
        "system, goal, 3 × (call, result), answer"
    );
    assert_eq!(solo.last().and_then(|m| m.content.as_deref()), Some("done"));
    // Every intermediate state replays too.
    for seq in 0..=rec.seq {
        history::state_at(store, &end.run_id, &spec, seq)
            .unwrap_or_else(|e| panic!("seq {seq}: {e}"));
    }
}

/// A tool that, when it runs, reads (through a connection of its own) whether the transition
/// that asked for it is committed, and logs `seq:true` when it is.
fn checks_its_transition_is_committed(
    db_path: std::path::PathBuf,
    log: Log,
) -> impl runtape::tool::Tool {
    FnTool::new(lookup_spec(), move |_args, ctx: ToolContext| {
        let (run, seq) = {
            let mut parts = ctx.idempotency_key.split(':');
            (
                parts.next().unwrap_or_default().to_owned(),
                parts.next().unwrap_or_default().to_owned(),
            )
        };
        let reader = rusqlite::Connection::open_with_flags(
            &db_path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .map_err(|e| ToolError::new(e.to_string()))?;
        let key: i64 = reader
            .query_row("SELECT key FROM runs WHERE id = ?1", [&run], |r| r.get(0))
            .map_err(|e| ToolError::new(e.to_string()))?;
        let seq: i64 = seq.parse().map_err(|_| ToolError::new("bad key"))?;
        let effects: Vec<u8> = reader
            .query_row(
                "SELECT effects FROM transitions WHERE id = ?1",
                [(key << 32) | seq],
                |r| r.get(0),
            )
            .map_err(|e| ToolError::new(format!("emitting transition {seq} not committed: {e}")))?;
        let effects =
            runtape::format::packed::unpack(&effects).map_err(|e| ToolError::new(e.to_string()))?;
        let text = String::from_utf8_lossy(&effects).into_owned();
        log.push(format!("{seq}:{}", text.contains(&ctx.idempotency_key)));
        Ok(json!("ok"))
    })
}

/// The write-ahead rule: when a tool runs, the transition that asked for it is already in the
/// database (read through a separate connection).
#[tokio::test]
async fn a_tool_runs_only_after_its_transition_is_committed() {
    let (dir, db) = temp_db();
    let engine = engine_in(dir.path());
    let seen = Log::default();
    engine.register_provider("p", Arc::new(rounds_provider(4, &["lookup"])));
    engine.register_tool(Arc::new(checks_its_transition_is_committed(
        db.clone(),
        seen.clone(),
    )));
    let end = run_to_rest(&engine, spec(vec![lookup_spec()], |_| {}), "go").await;
    assert_eq!(end.status, RunStatus::Completed);
    let seen = seen.all();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.iter().all(|s| s.ends_with(":true")),
        "every tool saw its emitting transition committed: {seen:?}"
    );
}

/// The same when many runs share transactions (group commit, WAL checkpoints on their own
/// thread, no savepoint per write): no run's transition is acknowledged — and no tool it asked
/// for started — before the transaction holding it committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_many_runs_sharing_commits_a_tool_still_runs_only_after_its_transition_is_committed() {
    let (_dir, db) = temp_db();
    let store = Arc::new(SqliteStore::open(&db, Durability::Full).expect("opens"));
    let engine = Engine::with_store(
        store.clone(),
        EngineConfig {
            max_concurrent_runs: 64,
            ..EngineConfig::default()
        },
    );
    let seen = Log::default();
    engine.register_provider("p", Arc::new(rounds_provider(3, &["lookup"])));
    engine.register_tool(Arc::new(checks_its_transition_is_committed(
        db.clone(),
        seen.clone(),
    )));
    let handles = start_together(&engine, 64).await;
    for h in handles {
        assert_eq!(h.wait().await.expect("runs").status, RunStatus::Completed);
    }
    let seen = seen.all();
    assert_eq!(seen.len(), 64 * 3, "every call ran once");
    assert!(
        seen.iter().all(|s| s.ends_with(":true")),
        "every tool saw its emitting transition committed: {seen:?}"
    );
    let stats = store.stats();
    assert!(
        stats.writes.load(Ordering::Relaxed) > stats.transactions.load(Ordering::Relaxed),
        "writes shared transactions"
    );
}

#[tokio::test]
async fn an_in_memory_engine_runs_the_same_way() {
    let engine = Engine::in_memory();
    lookup_rounds(&engine, 2);
    let end = run_to_rest(&engine, spec(vec![lookup_spec()], |_| {}), "go").await;
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(end.state.seq(), 1 + 2 * 3 + 3);
}

/// Two tools of one reply run at the same time: each waits for the other to have started.
#[tokio::test]
async fn parallel_tool_calls_run_concurrently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path());
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    for name in ["left", "right"] {
        let barrier = barrier.clone();
        let spec = ToolSpec {
            idempotent: true,
            ..ToolSpec::new(name, "meets the other")
        };
        engine.register_tool(Arc::new(AsyncFnTool::new(spec, move |_, _| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                Ok(json!("met"))
            }
        })));
    }
    engine.register_provider("p", Arc::new(rounds_provider(1, &["left", "right"])));
    let tools = ["left", "right"]
        .map(|n| ToolSpec {
            idempotent: true,
            ..ToolSpec::new(n, "")
        })
        .to_vec();
    let run = engine
        .start(spec(tools, |_| {}), "meet")
        .await
        .expect("starts");
    let end = ends_within(20, run, "sequential calls would deadlock").await;
    assert_eq!(end.status, RunStatus::Completed);
}

#[tokio::test]
async fn a_slow_tool_times_out_into_an_error_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = EngineConfig {
        tool_timeout: Duration::from_millis(100),
        ..EngineConfig::default()
    };
    let engine = Engine::open_with(&dir.path().join("runs.db"), config).expect("opens");
    engine.register_tool(Arc::new(AsyncFnTool::new(lookup_spec(), |_, _| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(json!("too late"))
    })));
    engine.register_provider("p", Arc::new(rounds_provider(1, &["lookup"])));
    let end = run_to_rest(&engine, spec(vec![lookup_spec()], |_| {}), "go").await;
    assert_eq!(end.status, RunStatus::Completed);
    let convs = history::conversations(engine.store().as_ref(), &end.state).expect("loads");
    let result = convs[&AgentId::from("solo")]
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a tool result");
    assert!(result.is_error);
    assert!(
        result
            .content
            .as_deref()
            .is_some_and(|c| c.contains("timed out after 100 ms")),
        "{result:?}"
    );
}

/// Cancel aborts the in-flight tool (its cancellation token fires) and commits the cancellation.
#[tokio::test]
async fn cancel_aborts_in_flight_work_and_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path());
    let started = Arc::new(tokio::sync::Notify::new());
    let aborted = Arc::new(AtomicUsize::new(0));
    /// Counts the tool's future being dropped.
    struct OnDrop(Arc<AtomicUsize>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (notify, count) = (started.clone(), aborted.clone());
    engine.register_tool(Arc::new(AsyncFnTool::new(
        lookup_spec(),
        move |_, ctx: ToolContext| {
            let (started, count) = (notify.clone(), count.clone());
            async move {
                let _guard = OnDrop(count);
                started.notify_one();
                ctx.cancel.cancelled().await;
                Err(ToolError::new("cancelled"))
            }
        },
    )));
    engine.register_provider("p", Arc::new(rounds_provider(1, &["lookup"])));
    let handle = engine
        .start(spec(vec![lookup_spec()], |_| {}), "go")
        .await
        .expect("starts");
    let run = handle.run_id().clone();
    started.notified().await;
    engine
        .cancel(&run, Some("enough".into()))
        .await
        .expect("cancel accepted");
    let end = ends_within(20, handle, "cancel is prompt").await;
    assert_eq!(end.status, RunStatus::Cancelled);
    assert_eq!(
        aborted.load(Ordering::SeqCst),
        1,
        "the tool's future was dropped"
    );
    let rec = history::record(engine.store().as_ref(), &run).expect("recorded");
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert!(rec.outcome.is_some_and(|o| o.contains("enough")));
}

/// Pause takes effect at the next step boundary; budgets are state, so a run paused after 40
/// of its 50 turns has exactly 10 left when resumed.
#[tokio::test]
async fn pause_then_resume_keeps_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine_in(dir.path());
    let model_calls = Arc::new(AtomicUsize::new(0));
    let counter = model_calls.clone();
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", move |req| {
            counter.fetch_add(1, Ordering::SeqCst);
            runtape::provider::ScriptOutcome::reply(ModelReply::tools(vec![ToolCallRequest::new(
                format!("c{}", req.turn()),
                "lookup",
                json!({"q": "again"}),
            )]))
        })),
    );
    let pauser = engine.clone();
    let tool_calls = Arc::new(AtomicUsize::new(0));
    let seen = tool_calls.clone();
    engine.register_tool(Arc::new(FnTool::new(lookup_spec(), move |_args, ctx| {
        if seen.fetch_add(1, Ordering::SeqCst) + 1 == 40 {
            let engine = pauser.clone();
            let run = ctx.run_id.clone();
            tokio::spawn(async move { engine.pause(&run).await });
        }
        Ok(json!("more"))
    })));
    let spec = spec(vec![lookup_spec()], |s| {
        s.agents[0].limits.max_turns = Some(50)
    });
    let end = run_to_rest(&engine, spec, "loop").await;
    assert_eq!(end.status, RunStatus::Paused);
    assert_eq!(
        end.state.kind(),
        StateKind::Preparing,
        "paused at a step boundary"
    );
    let turns = end.state.data().map(|d| d.usage.turns).unwrap_or(0);
    assert!(
        (40..=41).contains(&turns),
        "paused right after the 40th tool call, at {turns} turns"
    );
    let before = model_calls.load(Ordering::SeqCst);

    let end = ended(engine.resume(&end.run_id)).await;
    assert_eq!(end.status, RunStatus::Failed);
    let error = failure(&end.state);
    assert_eq!(error.class, ErrorClass::TurnLimit);
    assert_eq!(
        model_calls.load(Ordering::SeqCst) - before,
        50 - turns as usize,
        "only the turns left were taken"
    );
}

/// An observer that never reads, and one that panics, do not slow or break a run.
#[tokio::test]
async fn observers_that_lag_or_fail_never_block_the_run() {
    let engine = Engine::in_memory();
    lookup_rounds(&engine, 1_500);
    let _never_reads = engine.subscribe();
    let mut panicky = engine.subscribe();
    let observer = tokio::spawn(async move {
        let _ = panicky.recv().await;
        panic!("observer bug");
    });
    let spec = spec(vec![lookup_spec()], |s| {
        s.agents[0].limits.max_turns = Some(10_000);
        s.agents[0].limits.max_tool_calls = Some(10_000);
    });
    let mut handle = engine.start(spec, "many events").await.expect("starts");
    let first = handle.next_event().await.expect("events flow");
    assert!(matches!(first.kind, Trace::RunStarted { .. }));
    let end = handle.wait().await.expect("runs");
    assert_eq!(end.status, RunStatus::Completed);
    assert!(
        observer.await.is_err(),
        "the observer's panic stayed in its task"
    );
}

/// A run that never has to wait — writes acknowledged as they are made (the in-memory store),
/// tools and a model that answer at once — still yields to other tasks now and then: on a
/// single-threaded runtime another task gets to run long before the run ends, not after it.
#[tokio::test]
async fn a_run_that_never_waits_still_lets_other_tasks_run() {
    let engine = Engine::in_memory();
    engine.register_provider("p", Arc::new(rounds_provider(1_500, &["lookup"])));
    let calls = Arc::new(AtomicUsize::new(0));
    engine.register_tool(Arc::new(counting_lookup(calls.clone())));
    let seen = calls.clone();
    // Waits until the run has made a call, then reports how many it had made by then.
    let other = tokio::spawn(async move {
        loop {
            let made = seen.load(Ordering::SeqCst);
            if made > 0 {
                return made;
            }
            tokio::task::yield_now().await;
        }
    });
    let spec = spec(vec![lookup_spec()], |s| {
        s.agents[0].limits.max_turns = Some(10_000);
        s.agents[0].limits.max_tool_calls = Some(10_000);
    });
    let end = run_to_rest(&engine, spec, "busy").await;
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 1_500);
    let made_when_it_ran = other.await.expect("the other task ends");
    assert!(
        made_when_it_ran < 1_000,
        "the other task ran only after {made_when_it_ran} of the run's 1,500 calls"
    );
}

/// Trace timestamps never go backwards within a run.
#[tokio::test]
async fn trace_events_carry_increasing_hlc_timestamps() {
    let engine = Engine::in_memory();
    lookup_rounds(&engine, 3);
    let handle = engine
        .start(spec(vec![lookup_spec()], |_| {}), "go")
        .await
        .expect("starts");
    let mut events = Vec::new();
    let end = handle
        .wait_with(|e| events.push(e.clone()))
        .await
        .expect("runs");
    assert_eq!(end.status, RunStatus::Completed);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e.kind {
            Trace::RunStarted { .. } => "run.started",
            Trace::ModelRequest { .. } => "model.request",
            Trace::ModelReply { .. } => "model.reply",
            Trace::ToolCall { .. } => "tool.call",
            Trace::ToolResult { .. } => "tool.result",
            Trace::RunFinished { .. } => "run.finished",
            _ => "",
        })
        .collect();
    for k in [
        "run.started",
        "model.request",
        "model.reply",
        "tool.call",
        "tool.result",
        "run.finished",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let seqs: Vec<u64> = events.iter().filter_map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "{seqs:?}");
    let ats: Vec<Hlc> = events
        .iter()
        .filter(|e| e.seq.is_some())
        .map(|e| e.at)
        .collect();
    assert!(ats.windows(2).all(|w| w[0] <= w[1]));
}

/// Many runs on one database share transactions (group commit) and all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_share_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Arc::new(SqliteStore::open(&dir.path().join("runs.db"), Durability::Full).expect("opens"));
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    lookup_rounds(&engine, 5);
    let handles = start_together(&engine, 40).await;
    for h in handles {
        assert_eq!(h.wait().await.expect("runs").status, RunStatus::Completed);
    }
    let stats = store.stats();
    let (tx, writes) = (
        stats.transactions.load(Ordering::Relaxed),
        stats.writes.load(Ordering::Relaxed),
    );
    let transitions: u64 = store.runs().expect("lists").iter().map(|r| r.seq).sum();
    assert_eq!(
        transitions,
        40 * (1 + 5 * 3 + 3),
        "every run committed every step"
    );
    // How many writes share a transaction depends on timing (how many arrive while one is
    // being made durable): a figure for `runtape bench` (W5's transitions per fsync), not a
    // property. What must hold is that they are shared at all.
    assert!(
        writes > tx,
        "group commit: {writes} writes ({transitions} transitions) in {tx} transactions"
    );
    assert_eq!(store.runs().expect("lists").len(), 40);
}

/// Starts `n` runs of the lookup spec on `engine` at once; their handles.
async fn start_together(engine: &Engine, n: usize) -> Vec<runtape::exec::RunHandle> {
    let mut handles = Vec::new();
    for _ in 0..n {
        let spec = spec(vec![lookup_spec()], |_| {});
        handles.push(engine.start(spec, "together").await.expect("starts"));
    }
    handles
}
