//! Delegation through the library's engine on a real SQLite file: child runs are driven
//! outside the engine's run slots, so an engine with a single slot still finishes a run whose
//! model delegates two tasks at once (a parent waiting on children never starves them).

use std::sync::Arc;

use crate::support::delegation::{lead_of_two, lead_of_two_model};
use crate::support::durable::{ended, ends_within};
use runtape::exec::{Engine, EngineConfig, RunHandle};
use runtape::machine::*;
use runtape::store::RunStatus;

/// An engine on `DIR/runs.db` with `config`, driving [`lead_of_two`] with its model.
async fn start_lead_of_two(dir: &std::path::Path, config: EngineConfig) -> (Engine, RunHandle) {
    let engine = Engine::open_with(&dir.join("runs.db"), config).expect("opens");
    engine.register_provider("script", Arc::new(lead_of_two_model()));
    let handle = engine
        .start(lead_of_two(), "do both")
        .await
        .expect("starts");
    (engine, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_slot_is_enough_for_a_parent_and_its_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = EngineConfig {
        max_concurrent_runs: 1,
        ..EngineConfig::default()
    };
    let (engine, handle) = start_lead_of_two(dir.path(), config).await;
    let end = ends_within(
        60,
        handle,
        "a parent waiting on its children does not starve them of slots",
    )
    .await;
    assert_eq!(end.status, RunStatus::Completed);
    let Some(Outcome::Completed { answer, .. }) = end.state.outcome() else {
        panic!("completed")
    };
    assert_eq!(answer.as_deref(), Some("both done"));
    let runs = engine.store().runs().expect("lists");
    assert_eq!(runs.len(), 3);
    let statuses: Vec<_> = runs
        .iter()
        .map(|r| (r.id.to_string(), r.status, r.goal.clone()))
        .collect();
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Completed),
        "{statuses:?}"
    );
}

/// A child run whose row was created but whose first step was never committed (its process
/// was killed in between) is resumed with its receipts chained under its parent's, like a
/// child that started: before, a resume at seq 0 found no receipt tip and sealed the child's
/// first receipt under `null`, which `verify` then reported as edited after sealing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_created_but_never_started_resumes_with_its_receipts_under_its_parents() {
    use runtape::ledger::{HeadKeeper, first_head, receipts, record, verify};
    use runtape::store::{NewRun, Write};

    let dir = tempfile::tempdir().expect("tempdir");
    let config = EngineConfig::default();
    let signer = config.receipts.clone();
    let (engine, handle) = start_lead_of_two(dir.path(), config).await;
    let parent = handle.run_id().clone();
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
    let store = engine.store().clone();
    let started = RunId::new(format!("{parent}.3.0"));
    let child = record(store.as_ref(), &started).expect("the first child");

    // The same child again, as a killed process leaves it: created, lease expired, seq 0.
    let unstarted = RunId::new(format!("{parent}.unstarted"));
    let mut new = NewRun::new(
        unstarted.clone(),
        child.spec.clone(),
        child.goal.clone(),
        "a killed process".into(),
        1,
        1,
        Default::default(),
    );
    new.setup = child.setup.clone();
    new.head = HeadKeeper::new(first_head(&new, Digest::ZERO, Digest::ZERO, None), signer)
        .sealed(store.as_ref());
    runtape::store::write(store.as_ref(), Write::CreateRun(new))
        .await
        .expect("creates the run");

    let end = ended(engine.resume(&unstarted)).await;
    assert_eq!(end.status, RunStatus::Completed);
    let anchor = |run: &RunId| {
        receipts(store.as_ref(), run).expect("receipts")[0]
            .body
            .parent_sig
            .clone()
    };
    assert!(
        anchor(&started).is_some(),
        "a child's receipts hang under its parent's"
    );
    assert_eq!(anchor(&unstarted), anchor(&started));
    let verified = verify(store.as_ref(), &unstarted, None).expect("reads");
    assert!(verified.is_ok(), "{verified:?}");
}
