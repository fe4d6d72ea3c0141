//! How often the operations that continue a run read its history: every take-up reads it
//! once, in the check made before the lease ([`crate::ledger::check_continuable`], from the
//! newest snapshot before the end), and drives from the state that check folded; under the
//! lease it reads it again only when something was written in between. `resume` with an answer
//! or a raise makes that check itself, before the take-up, to refuse what does not fit before
//! anything is written, and hands what it found to the take-up, which does not read the history
//! again, as `wake` does with the check that finds the timer it fires; `fork` does not read it before the plan: the engine's plan checks the parent through the fork point (folded from its first
//! step, not counted here: no snapshot is looked up) and rebuilds the state there once.
//! Counted on the real in-memory store ([`super::counting::Counting`]).

use std::sync::Arc;

use super::super::{self as ops, Answer, Edit, Raise};
use super::counting::Counting;
use super::{APPROVAL, BUDGET, gated, start_file, started_then_paused};
use crate::exec::{Engine, EngineConfig, ForkMode};
use crate::store::{MemoryStore, RunStatus};

/// An engine over a counted in-memory store.
fn counted() -> (Engine, Arc<Counting>) {
    let store = Counting::over(Arc::new(MemoryStore::new()));
    (
        Engine::with_store(store.clone(), EngineConfig::default()),
        store,
    )
}

#[tokio::test]
async fn an_answer_reads_the_history_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, store) = counted();
    let end = start_file(&engine, dir.path(), APPROVAL)
        .await
        .wait()
        .await
        .expect("rests");
    assert_eq!(end.status, RunStatus::AwaitingInput);
    let run = end.run_id;

    let before = store.rebuilds(&run);
    let handle = ops::resume(&engine, &run, Answer::Approve, None, &[])
        .await
        .expect("approves");
    // Twice when the take-up checked again what `resume` had just checked.
    assert_eq!(store.rebuilds(&run) - before, 1);
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_budget_raise_reads_the_history_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, store) = counted();
    let end = start_file(&engine, dir.path(), BUDGET)
        .await
        .wait()
        .await
        .expect("rests");
    assert_eq!(end.status, RunStatus::BudgetExhausted);
    let run = end.run_id;

    let raise = [Raise::parse("budget.max_turns=3").expect("a raise")];
    let before = store.rebuilds(&run);
    let handle = ops::resume(&engine, &run, Answer::None, None, &raise)
        .await
        .expect("raises");
    assert_eq!(store.rebuilds(&run) - before, 1);
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_plain_resume_reads_the_history_once_to_take_it_up() {
    let (engine, store) = counted();
    let (gate, spec) = gated(&engine);
    let run = started_then_paused(&engine, &gate, spec).await;

    let before = store.rebuilds(&run);
    let handle = ops::resume(&engine, &run, Answer::None, None, &[])
        .await
        .expect("resumes");
    assert_eq!(store.rebuilds(&run) - before, 1);
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_fork_reads_its_parents_history_once() {
    let (engine, store) = counted();
    let (gate, spec) = gated(&engine);
    let run = started_then_paused(&engine, &gate, spec).await;

    let edits = [Edit::parse("user=Which shape?").expect("an edit")];
    let before = store.rebuilds(&run);
    let fork = ops::fork(&engine, &run, 1, &edits, ForkMode::Live)
        .await
        .expect("forks");
    assert_eq!(store.rebuilds(&run) - before, 1);
    assert_eq!(
        fork.wait().await.expect("ends").status,
        RunStatus::Completed
    );
}

/// A spec file whose agent sleeps an hour, then answers.
const NAP: &str = r#"
goal = "Check back later."
[timers]
max_sleep_ms = 7200000
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [{ name = "sleep_for", arguments = { seconds = 3600 } }] },
  { text = "awake" },
]
[[agents]]
id = "a"
provider = "s"
"#;

#[tokio::test]
async fn a_wake_reads_the_history_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, store) = counted();
    let handle = start_file(&engine, dir.path(), NAP).await;
    let run = handle.run_id().clone();
    // Asleep for the hour: stopped at once, its lease given back, resting paused.
    let asleep = || {
        crate::store::Store::run(store.as_ref(), &run)
            .expect("reads")
            .is_some_and(|r| r.state_kind == crate::machine::StateKind::CallingTools)
    };
    for _ in 0..6000 {
        if asleep() {
            break;
        }
        crate::clock::system()
            .sleep(std::time::Duration::from_millis(10))
            .await;
    }
    assert!(asleep(), "the run sleeps");
    engine.begin_shutdown(std::time::Duration::ZERO);
    assert_eq!(
        handle.wait().await.expect("rests").status,
        RunStatus::Paused
    );

    let waker = Engine::with_store(store.clone(), EngineConfig::default());
    let before = store.rebuilds(&run);
    let (handle, woken) = ops::wake::wake(&waker, &run).await.expect("wakes");
    assert!(woken.early, "{woken:?}");
    // Twice when the take-up checked again what `wake` had just checked.
    assert_eq!(store.rebuilds(&run) - before, 1);
    assert_eq!(
        handle.wait().await.expect("ends").status,
        RunStatus::Completed
    );
}
