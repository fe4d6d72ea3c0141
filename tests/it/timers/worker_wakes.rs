//! `runtape worker --db FILE` wakes a SQLite file's due runs: a run SIGKILLed while it sleeps
//! is taken up when its instant passes, by one process only — two workers racing for it at
//! the same instant commit one `TimerFired`, and `verify` accepts the history. On the stepped
//! clock a worker wakes an hour's sleep at once, its firing stamped at the due instant; and
//! `runtape serve` wakes a due run while it is up.

use crate::support::cli::{runtape, utf8, wait_until_every};
use crate::support::pg::{Reaper, worker};
use crate::support::workers::{events, stop};

use super::{fired, fired_once_not_before, killed_asleep, ms_of, steps, verifies};

/// Starts `runtape worker` on the SQLite file `db` serving `dir` (where the spec is), with
/// `extra` arguments; its log goes to `dir/NAME.log`.
pub(super) fn started(
    db: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> std::process::Child {
    worker(utf8(db), dir, &format!("{name}.log"), extra, &[])
}

/// The run's last step's state, once it moved past the sleep.
fn ended(db: &std::path::Path, run: &str) -> bool {
    steps(db, run).last().is_some_and(|s| s["to"] == "done")
}

#[test]
fn two_workers_racing_for_a_due_run_fire_its_timer_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Killed asleep for 2 s; both workers start before the instant, so both wake for it.
    let (db, run, due) = killed_asleep(dir.path(), 2);
    let dir = dir.path();
    let mut workers = Reaper(vec![
        started(&db, dir, "a", &[]),
        started(&db, dir, "b", &[]),
    ]);
    wait_until_every(
        "a worker woke the run and it ended",
        std::time::Duration::from_millis(50),
        || ended(&db, &run),
    );
    stop(&mut workers);
    let woken = [events(dir, "a", "run.woken"), events(dir, "b", "run.woken")].concat();
    assert_eq!(woken.len(), 1, "one process took the run up: {woken:?}");
    fired_once_not_before(&db, &run, due);
    verifies(&db, &run);
}

#[test]
fn on_the_stepped_clock_a_worker_wakes_an_hours_sleep_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);
    let mut workers = Reaper(vec![started(&db, dir.path(), "w", &["--stepped-clock"])]);
    wait_until_every(
        "the worker woke the run and it ended",
        std::time::Duration::from_millis(50),
        || ended(&db, &run),
    );
    stop(&mut workers);
    let woken = events(dir.path(), "w", "run.woken");
    assert_eq!(woken.len(), 1, "{woken:?}");
    assert_eq!(woken[0]["run"], run.as_str());
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once");
    assert_eq!(
        fired[0]["at_ms"].as_u64(),
        Some(ms_of(due)),
        "stamped at its instant"
    );
    verifies(&db, &run);
}

/// A run resting for a person under a deadline is taken up by the worker once the deadline
/// passed, and the deadline's policy decides (here: reject, then the run completes).
#[test]
fn a_worker_decides_a_deadline_that_came_due_while_the_run_rested() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run) = super::deadline::rests_for_a_person(dir.path(), 1_500);
    assert_eq!(ls_status(&db), "awaiting_input");
    let mut workers = Reaper(vec![started(&db, dir.path(), "w", &[])]);
    wait_until_every(
        "the worker decided the deadline and the run ended",
        std::time::Duration::from_millis(50),
        || ended(&db, &run),
    );
    stop(&mut workers);
    assert_eq!(events(dir.path(), "w", "run.woken").len(), 1);
    assert_eq!(fired(&db, &run).len(), 1, "the deadline fired once");
    assert_eq!(ls_status(&db), "completed");
    verifies(&db, &run);
}

/// The status `ls --json` gives the one run in `db`.
fn ls_status(db: &std::path::Path) -> String {
    let runs = crate::support::cli::json_lines(&runtape(db, &["ls", "--json"]));
    runs[0]["status"].as_str().expect("status").to_owned()
}

/// `runtape serve` wakes due runs while it is up, as a worker does.
#[test]
fn serve_wakes_a_run_whose_sleep_came_due() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 2);
    let server = crate::support::serve::serve(dir.path(), &db);
    let done = server.wait_run(&run, std::time::Duration::from_secs(60), |v| {
        v["status"] == "completed"
    });
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(done["status"], "completed", "{done}");
    fired_once_not_before(&db, &run, due);
    verifies(&db, &run);
}
