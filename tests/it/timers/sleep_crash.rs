//! A run SIGKILLed while it sleeps, on the system clock. The due instant was committed with
//! the call, so whoever resumes the run knows when it wakes: resumed after that instant it
//! fires at once; resumed before it, nothing is taken up and it stays asleep. However many
//! processes take it up, `TimerFired` is committed once, never before its due instant, and
//! `verify` accepts the history.

use std::time::Duration;

use crate::support::cli::{runtape, text};

use super::{fired, fired_once_not_before, killed_asleep, ms_of, state_kind, steps, verifies};

#[test]
fn resumed_after_its_due_instant_a_killed_sleep_fires_once_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 2);
    // Let the due instant pass while nobody holds the run.
    let now = runtape::exec::wall_ms();
    std::thread::sleep(Duration::from_millis(ms_of(due).saturating_sub(now) + 50));

    let out = runtape(&db, &["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    fired_once_not_before(&db, &run, due);
    assert_eq!(steps(&db, &run).last().expect("steps")["to"], "done");
    verifies(&db, &run);
}

#[test]
fn resumed_before_its_due_instant_the_run_is_left_asleep_and_fires_once_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);

    // A resume an hour early takes nothing up: taken up, the run would only wait (`resume`
    // says when it wakes; `wake_now` checks the line).
    let out = runtape(&db, &["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(fired(&db, &run).is_empty(), "an hour early, nothing fired");
    assert_eq!(state_kind(&db), "calling_tools");

    // A clock that does not wait (`--stepped-clock`) stands for the hour passing: the run
    // wakes at once, its firing stamped at the due instant.
    let out = runtape(&db, &["resume", &run, "--stepped-clock"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once over two processes");
    assert_eq!(fired[0]["at_ms"].as_u64(), Some(ms_of(due)));
    verifies(&db, &run);
}
