//! `runtape worker --db FILE` wakes a SQLite file's due runs: a run SIGKILLed while it sleeps
//! is taken up when its instant passes, by one process only — two workers racing for it at
//! the same instant commit one `TimerFired`, and `verify` accepts the history. On the stepped
//! clock a worker wakes an hour's sleep at once, its firing stamped at the due instant.

use std::process::{Child, Stdio};

use serde_json::Value;

use crate::support::cli::{on, runtape, signal, text, wait_until_every};

use super::{fired, killed_asleep, ms_of, steps};

/// Starts `runtape worker` on `db` with `extra` arguments, its log on stdout.
fn worker(db: &std::path::Path, extra: &[&str]) -> Child {
    on(db)
        .arg("worker")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
}

/// Stops `w` with SIGTERM (it drains and exits 0) and returns its log lines.
fn stopped(w: Child) -> Vec<Value> {
    signal(w.id(), "TERM");
    let out = w.wait_with_output().expect("worker exits");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("a JSON log line: {l}")))
        .collect()
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
    let (a, b) = (worker(&db, &[]), worker(&db, &[]));
    wait_until_every(
        "a worker woke the run and it ended",
        std::time::Duration::from_millis(50),
        || ended(&db, &run),
    );
    let logs: Vec<Value> = stopped(a).into_iter().chain(stopped(b)).collect();
    let woken: Vec<&Value> = logs.iter().filter(|l| l["event"] == "run.woken").collect();
    assert_eq!(woken.len(), 1, "one process took the run up: {logs:?}");
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once");
    assert!(
        fired[0]["at_ms"]
            .as_u64()
            .is_some_and(|at| at >= ms_of(due)),
        "not before its due instant: {}",
        fired[0]
    );
    let out = runtape(&db, &["verify", &run]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn on_the_stepped_clock_a_worker_wakes_an_hours_sleep_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);
    let w = worker(&db, &["--stepped-clock"]);
    wait_until_every(
        "the worker woke the run and it ended",
        std::time::Duration::from_millis(50),
        || ended(&db, &run),
    );
    let log = stopped(w);
    assert!(
        log.iter()
            .any(|l| l["event"] == "run.woken" && l["run"] == run),
        "{log:?}"
    );
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once");
    assert_eq!(
        fired[0]["at_ms"].as_u64(),
        Some(ms_of(due)),
        "stamped at its instant"
    );
    let out = runtape(&db, &["verify", &run]);
    assert!(out.status.success(), "{}", text(&out));
}
