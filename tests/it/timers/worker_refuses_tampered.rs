//! On SQLite, `runtape worker --db FILE` never wakes a due run whose history `verify` rejects:
//! the run is checked before anything is written, the worker logs one `run.error` line with
//! `verify`'s words, and the file is left as it was — no lease, no `TimerFired`. The same run
//! with its goal put back is woken and completes, which shows the worker did see it as due.

use crate::support::cli::{runtape, text, wait_until_every};
use crate::support::pg::Reaper;
use crate::support::tamper::dump;
use crate::support::workers::{events, stop};

use super::{fired, fired_once_not_before, killed_asleep, steps, verifies};

/// Sets the stored goal of `run` in `db` to `goal`, as someone with the file could.
fn set_goal(db: &std::path::Path, run: &str, goal: &str) {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let changed = conn
        .execute(
            "UPDATE run_specs SET goal = ?1 WHERE run = (SELECT key FROM runs WHERE id = ?2)",
            rusqlite::params![goal, run],
        )
        .expect("updates");
    assert_eq!(changed, 1, "one run's goal");
}

#[test]
fn a_worker_does_not_wake_a_due_run_whose_history_was_tampered() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Killed asleep for 1 s: due by the time the worker scans.
    let (db, run, due) = killed_asleep(dir.path(), 1);
    set_goal(&db, &run, "Check back never.");
    let verified = runtape(&db, &["verify", &run]);
    assert_eq!(verified.status.code(), Some(1), "{}", text(&verified));
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let before = dump(&db);

    let mut workers = Reaper(vec![super::worker_wakes::started(
        &db,
        dir.path(),
        "a",
        &[],
    )]);
    wait_until_every(
        "the worker refused the due run (or woke it)",
        std::time::Duration::from_millis(50),
        || {
            !events(dir.path(), "a", "run.error").is_empty()
                || !events(dir.path(), "a", "run.woken").is_empty()
        },
    );
    stop(&mut workers);
    let woken = events(dir.path(), "a", "run.woken");
    assert!(woken.is_empty(), "woke a tampered run: {woken:?}");
    let refused = events(dir.path(), "a", "run.error");
    assert_eq!(refused[0]["run"], run.as_str(), "{refused:?}");
    let said = refused[0]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("does not verify") && !said.contains('\n'),
        "one line with verify's words: {said}"
    );
    assert_eq!(dump(&db), before, "the worker wrote to a tampered run");
    assert!(fired(&db, &run).is_empty(), "no timer fired");

    // Put back, the same run is woken for its due timer and completes.
    set_goal(&db, &run, "Check back later.");
    let mut workers = Reaper(vec![super::worker_wakes::started(
        &db,
        dir.path(),
        "b",
        &[],
    )]);
    wait_until_every(
        "the untampered run was woken and ended",
        std::time::Duration::from_millis(50),
        || steps(&db, &run).last().is_some_and(|s| s["to"] == "done"),
    );
    stop(&mut workers);
    assert_eq!(events(dir.path(), "b", "run.woken").len(), 1);
    fired_once_not_before(&db, &run, due);
    verifies(&db, &run);
}
