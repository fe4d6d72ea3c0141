//! What a front end does with a run, done through the operations: start, pause from another
//! task, resume, fork with an edit, read the views back, verify, cancel — and the refusals,
//! each with its code.

use serde_json::Value;

use super::super::{self as ops, Answer, Edit, ErrorKind, OpsError};
use super::{APPROVAL, gated, start_file, started_then_paused};
use crate::exec::{Engine, EngineConfig, ForkMode};
use crate::machine::{Outcome, RunId};
use crate::store::RunStatus;

/// The JSON a front end writes for `v`.
fn json(v: &impl serde::Serialize) -> Value {
    serde_json::from_str(&ops::json::encode(v).expect("encodes")).expect("is JSON")
}

fn answer_of(end: &crate::exec::RunEnd) -> String {
    match end.state.outcome() {
        Some(Outcome::Completed { answer, .. }) => answer.clone().unwrap_or_default(),
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn a_program_starts_pauses_resumes_forks_shows_and_verifies_a_run_on_a_sqlite_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let engine = ops::engine(&db, &ops::EngineSettings::default(), true).expect("opens");
    let (gate, spec) = gated(&engine);
    let run = started_then_paused(&engine, &gate, spec).await;
    let store = engine.store().clone();

    let listed = ops::runs(store.as_ref()).expect("lists");
    assert_eq!(listed.len(), 1);
    let v = json(&listed[0]);
    assert_eq!(
        (&v["type"], &v["id"], &v["status"]),
        (
            &Value::from("run"),
            &Value::from(run.as_str()),
            &Value::from("paused")
        )
    );

    let end = ops::resume(&engine, &run, Answer::None, None, &[])
        .await
        .expect("resumes")
        .wait()
        .await
        .expect("ends");
    assert_eq!(answer_of(&end), "answer to: Which colour?");

    let edits = [Edit::parse("user=Which shape?").expect("an edit")];
    let fork = ops::fork(&engine, &run, 1, &edits, ForkMode::Live)
        .await
        .expect("forks");
    let fork_id = fork.run_id().clone();
    let fork_end = fork.wait().await.expect("the fork ends");
    assert_eq!(answer_of(&fork_end), "answer to: Which shape?");

    let step = ops::show(store.as_ref(), &fork_id, Some(2)).expect("shows");
    let v = json(&step);
    assert_eq!(
        (&v["type"], &v["seq"]),
        (&Value::from("step"), &Value::from(2))
    );
    assert_eq!(v["run"], Value::from(fork_id.as_str()));

    let timeline = ops::timeline(store.as_ref(), &run).expect("a timeline");
    assert_eq!(timeline.len() as u64, end.state.seq());
    assert!(timeline.iter().all(|e| json(e)["type"] == "step"));

    let diff = ops::diff(store.as_ref(), &run, &fork_id).expect("compares");
    assert_eq!(json(&diff)["type"], "diff");
    assert_eq!(
        diff.diff.first_difference.as_ref().map(|p| p.seq),
        Some(2),
        "the edit is the fork's step 2"
    );

    for id in [&run, &fork_id] {
        let view = ops::verify(store.as_ref(), id, None).expect("checks");
        assert_eq!(json(&view)["ok"], true);
        view.check().expect("verifies");
    }
    let tree: Vec<_> = ops::verify_tree(store.as_ref(), &run, None).collect();
    assert_eq!(tree.len(), 1, "a run with no children is the whole tree");
    assert_eq!(
        ops::forks_of(store.as_ref(), &run).expect("forks")[0].run,
        fork_id
    );
}

#[tokio::test]
async fn cancel_ends_a_run_at_rest_and_refuses_what_has_ended() {
    let engine = Engine::in_memory();
    let (gate, spec) = gated(&engine);
    let run = started_then_paused(&engine, &gate, spec).await;

    let said = ops::cancel(&engine, &run, Some("not today".into()))
        .await
        .expect("cancels");
    assert!(matches!(said, ops::Cancelled::Cancelled { .. }), "{said}");
    assert!(
        said.to_string()
            .starts_with(&format!("cancelled {run} at step "))
    );

    let again = ops::cancel(&engine, &run, None).await.expect_err("ended");
    assert_eq!(
        (again.code(), again.kind()),
        ("finished", ErrorKind::Conflict)
    );
    assert!(again.to_string().contains("nothing to cancel"), "{again}");
    let pause = ops::pause(&engine, &run).await.expect_err("not running");
    assert_eq!(pause.code(), "not_running");
    assert_eq!(
        pause.to_string(),
        format!("run {run} is cancelled; only a running run can be paused")
    );
    let resumed = ops::resume(&engine, &run, Answer::None, None, &[])
        .await
        .expect_err("ended");
    assert_eq!(resumed.code(), "finished");
}

#[tokio::test]
async fn an_answer_goes_to_the_call_that_waits_and_a_wrong_one_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::in_memory();
    let end = start_file(&engine, dir.path(), APPROVAL)
        .await
        .wait()
        .await
        .expect("rests");
    assert_eq!(end.status, RunStatus::AwaitingInput);
    let run = end.run_id.clone();

    let e = ops::resume(&engine, &run, Answer::Approve, Some("no-such-call"), &[])
        .await
        .expect_err("no such call");
    assert_eq!((e.code(), e.kind()), ("ambiguous_input", ErrorKind::Input));
    let seq = crate::history::record(engine.store().as_ref(), &run)
        .expect("the run")
        .seq;

    let end = ops::resume(&engine, &run, Answer::Approve, None, &[])
        .await
        .expect("approves")
        .wait()
        .await
        .expect("ends");
    assert_eq!(answer_of(&end), "Deployed.");
    assert!(end.state.seq() > seq);
}

#[tokio::test]
async fn refusals_name_their_reason_with_a_stable_code() {
    let engine = Engine::in_memory();
    let (gate, spec) = gated(&engine);
    let run = started_then_paused(&engine, &gate, spec).await;
    let store = engine.store().clone();

    let unknown = RunId::new("nosuchrun");
    let e = ops::show(store.as_ref(), &unknown, None).expect_err("unknown");
    assert_eq!((e.code(), e.kind()), ("run_not_found", ErrorKind::NotFound));
    let e = ops::show(store.as_ref(), &run, Some(999)).expect_err("no such step");
    assert_eq!(
        (e.code(), e.kind()),
        ("step_not_found", ErrorKind::NotFound)
    );

    // The program's providers are registered in `engine` only: another engine over the same
    // store cannot continue the run, and says why.
    let other = Engine::with_store(store.clone(), EngineConfig::default());
    let e = ops::resume(&other, &run, Answer::None, None, &[])
        .await
        .expect_err("no providers");
    assert!(matches!(e, OpsError::NoStoredSetup { .. }), "{e}");
    assert_eq!(e.code(), "no_stored_setup");

    let e = ops::resume(&engine, &run, Answer::Approve, None, &[])
        .await
        .expect_err("nothing waits");
    assert_eq!(
        (e.code(), e.kind()),
        ("no_input_expected", ErrorKind::Conflict)
    );
    assert_eq!(
        crate::history::record(store.as_ref(), &run)
            .expect("run")
            .status,
        RunStatus::Paused,
        "a refused answer changed nothing"
    );
    let e = ops::fork(
        &engine,
        &run,
        1,
        &[Edit::parse("tool:c9=x").expect("parses")],
        ForkMode::Live,
    )
    .await
    .expect_err("no call c9");
    assert_eq!(e.code(), "bad_edit");
    assert_eq!(
        ops::runs(store.as_ref()).expect("lists").len(),
        1,
        "a refused fork wrote no run"
    );
    let e = ops::parse_whole_run("abc@2", "cancel ends a whole run").expect_err("a step");
    assert_eq!((e.code(), e.kind()), ("step_not_wanted", ErrorKind::Input));
}
