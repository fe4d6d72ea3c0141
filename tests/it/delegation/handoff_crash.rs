//! A crash at the handover of a transfer (revision 5), in process on real SQLite:
//! `examples/team.toml` (two children in parallel, then the lead hands over to the reviewer)
//! runs on a store that fails the write holding the handover step (`conversation_supplied`)
//! as a crash would stop the process there. The step that took the transfer reply into
//! `Handoff` has no effect to wait for, so it is written with the handover in one transaction:
//! the crash loses both, and the run is left in `Generating` with the lead's model call
//! outstanding. A resume on a fresh engine asks again, hands the same conversation over, and
//! finishes the tree in the states of an uninterrupted run — the children are not run again,
//! no committed step changes, and the tree verifies. (A run resting in `Handoff` itself, as a
//! fork at that step does, is resumed in `delegation_handoff.rs`.)

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::cli::example;
use runtape::exec::{Engine, EngineConfig, SteppedClock};
use runtape::machine::{RunId, StateKind};
use runtape::store::{Commit, Durability, SqliteStore, Store, Write};
use support::crash::CrashOnce;

fn team() -> PathBuf {
    example("team.toml")
}

fn store(dir: &Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(&dir.join("runs.db"), Durability::Normal).expect("opens"))
}

/// An engine on `store` with the example's providers and a stepped clock, so state hashes
/// are the same in every process and run.
fn engine(store: Arc<dyn Store>) -> Engine {
    let config = EngineConfig {
        clock: Arc::new(SteppedClock {
            start_ms: 1_700_000_000_000,
            step_ms: 1_000,
        }),
        ..EngineConfig::default()
    };
    let engine = Engine::with_store(store, config);
    runtape::config::load(&team())
        .expect("the example loads")
        .install(&engine)
        .expect("installs");
    engine
}

/// A run's place in its tree, and its committed steps as `(seq, edge, state hash)`.
type Steps = (String, Vec<(u64, String, String)>);

/// Every run of the tree below `root`, parents first.
fn tree(store: &dyn Store, root: &RunId) -> Vec<Steps> {
    runtape::ledger::tree(store, root)
        .expect("reads the tree")
        .into_iter()
        .map(|node| {
            let steps = store
                .transitions(&node.run, 1, u64::MAX)
                .expect("reads")
                .into_iter()
                .map(|t| {
                    (
                        t.seq,
                        t.edge.as_str().to_owned(),
                        t.state_hash.to_hex().to_owned(),
                    )
                })
                .collect();
            (node.path, steps)
        })
        .collect()
}

async fn run_team(engine: &Engine) -> (RunId, Result<(), String>) {
    let file = runtape::config::load(&team()).expect("the example loads");
    let goal = file.goal.clone().expect("the example has a goal");
    let handle = engine.start(file.spec, &goal).await.expect("starts");
    let run = handle.run_id().clone();
    let end = handle.wait().await.map(drop).map_err(|e| e.to_string());
    (run, end)
}

#[tokio::test]
async fn a_crash_at_the_handover_resumes_to_the_same_tree() {
    let reference_dir = tempfile::tempdir().expect("tempdir");
    let reference_store = store(reference_dir.path());
    let (reference, ended) = run_team(&engine(reference_store.clone())).await;
    ended.expect("the uninterrupted run completes");
    let want = tree(reference_store.as_ref(), &reference);
    assert_eq!(want.len(), 3, "the lead and its two children: {want:?}");
    assert!(
        want[0]
            .1
            .iter()
            .any(|(_, e, _)| e == "handoff.conversation.transfer"),
        "the reference hands the conversation over: {want:?}"
    );

    fn handover(w: &Write) -> bool {
        let carries =
            |c: &Commit| String::from_utf8_lossy(&c.event).contains("conversation_supplied");
        match w {
            Write::Commit(c) => carries(c),
            Write::Commits(cs) => cs.iter().any(carries),
            _ => false,
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = store(dir.path());
    let crashing = CrashOnce::wrap(sqlite.clone(), handover);
    let (run, ended) = run_team(&engine(crashing.clone())).await;
    assert!(ended.is_err(), "the injected crash stops the driver");
    assert!(crashing.crashed());
    let rec = sqlite.run(&run).expect("reads").expect("exists");
    // Written with the handover (today), the transfer reply is lost with it; written on its
    // own, the run rests in `Handoff`. Either way the handover itself was not written.
    assert!(
        matches!(rec.state_kind, StateKind::Generating | StateKind::Handoff),
        "stopped before the handover: {:?}",
        rec.state_kind
    );
    let before = tree(sqlite.as_ref(), &run);

    let resumed = engine(sqlite.clone())
        .resume(&run)
        .await
        .expect("resumes")
        .wait()
        .await
        .expect("completes");
    assert_eq!(resumed.state.kind(), StateKind::Done);
    let got = tree(sqlite.as_ref(), &run);
    assert_eq!(
        got, want,
        "the same tree, step for step, as the uninterrupted run"
    );
    for ((path, steps), (_, was)) in got.iter().zip(&before) {
        assert_eq!(
            &steps[..was.len()],
            &was[..],
            "no step of {path:?} committed before the crash changed"
        );
    }
    for node in runtape::ledger::tree(sqlite.as_ref(), &run).expect("reads") {
        let verified = runtape::ledger::verify(sqlite.as_ref(), &node.run, None).expect("reads");
        assert!(verified.is_ok(), "{}: {verified:?}", node.run);
    }
}
