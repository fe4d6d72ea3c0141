//! A worker cut off from the database loses its leases and stops driving its runs.
//!
//! Worker A takes four runs and is then partitioned: its connections are ended with
//! `pg_terminate_backend` and it is frozen (SIGSTOP) past its lease, as a process behind a
//! broken network would sit. Its leases expire on the database's clock, its heartbeat goes
//! stale (`ls --workers` shows it gone), and worker B takes the runs over and completes them.
//! When A comes back (SIGCONT), every write it tries is fenced by the lease epoch: it commits
//! nothing, stops driving each run, and drives none of them again. Every run verifies, and no
//! idempotency key is performed twice.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::support::cli::{runtape, signal, utf8, wait_until_every, write};
use runtape::store::{PostgresStore, RunStatus, Store};

/// The log's events for `event`, by run.
fn events(dir: &Path, name: &str, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_partitioned_worker_loses_its_leases_and_stops() {
    let server = support::pg::PgServer::start();
    let url = server.fresh_db();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("resolves");
    // Replies take 1.5 s, so a worker spends its time waiting on the model, not in a tool.
    let spec = write(&dir, "spec.toml", &support::pg::effects_spec(2, 1500, ""));
    let m = runtape(Path::new(&url), &["migrate"]);
    assert!(
        String::from_utf8_lossy(&m.stdout).contains("created runtape's schema"),
        "{}",
        String::from_utf8_lossy(&m.stderr)
    );
    let mut runs = Vec::new();
    for _ in 0..4 {
        let o = runtape(Path::new(&url), &["run", utf8(&spec), "--detach"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        runs.push(String::from_utf8_lossy(&o.stdout).trim().to_owned());
    }
    let store = PostgresStore::open(&url).expect("opens");

    let mut workers = support::pg::Reaper(vec![worker(&url, &dir, "a")]);
    let a_pid = workers.0[0].id();
    let a_process = format!("{}:{a_pid}", runtape::store::owner_host());
    wait_until("worker A drives all four runs", || {
        let ls = runtape(Path::new(&url), &["ls", "--json"]);
        String::from_utf8_lossy(&ls.stdout)
            .matches(&a_process)
            .count()
            == 4
    });

    // The partition: A's connections are cut and A can say nothing until its leases expire.
    signal(a_pid, "STOP");
    assert!(
        server.terminate_connections_of(a_pid) > 0,
        "A had connections to end"
    );
    let held: HashMap<String, u64> = store
        .runs()
        .expect("lists")
        .into_iter()
        .map(|r| (r.id.to_string(), r.lease_epoch))
        .collect();
    wait_until("A's heartbeat has expired", || {
        let ls = runtape(Path::new(&url), &["ls", "--workers", "--json"]);
        String::from_utf8_lossy(&ls.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|w| w["pid"] == a_pid && w["alive"] == false)
    });

    workers.0.push(worker(&url, &dir, "b"));
    wait_until("worker B has completed every run", || {
        store
            .runs()
            .expect("lists")
            .iter()
            .all(|r| r.status == RunStatus::Completed)
    });
    for r in store.runs().expect("lists") {
        assert!(
            r.lease_epoch > held[r.id.as_str()],
            "{} was taken over (epoch {} → {})",
            r.id,
            held[r.id.as_str()],
            r.lease_epoch
        );
    }
    let seqs_before: Vec<(String, u64)> = store
        .runs()
        .expect("lists")
        .iter()
        .map(|r| (r.id.to_string(), r.seq))
        .collect();

    // A comes back: its writes are fenced, and it stops driving every run it had.
    signal(a_pid, "CONT");
    wait_until("A has stopped driving all four runs", || {
        events(&dir, "a", "run.error").len() == 4
    });
    // Why A stops depends on which of its reads or writes meets the partition first (fenced
    // by the epoch, a lost connection, the run already finished by B); what matters is that it
    // stops, and the checks below show it wrote nothing.
    for e in events(&dir, "a", "run.error") {
        let error = e["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "A says why it stopped: {e}");
        assert!(!error.contains('\n'), "one line: {error}");
    }
    let seqs_after: Vec<(String, u64)> = store
        .runs()
        .expect("lists")
        .iter()
        .map(|r| (r.id.to_string(), r.seq))
        .collect();
    assert_eq!(
        seqs_before, seqs_after,
        "A committed nothing after the takeover"
    );
    let ls =
        String::from_utf8_lossy(&runtape(Path::new(&url), &["ls", "--json"]).stdout).into_owned();
    assert!(!ls.contains(&a_process), "A drives nothing: {ls}");
    assert_eq!(
        events(&dir, "a", "run.claimed").len(),
        4,
        "A never claims a run again: they are finished"
    );

    for run in &runs {
        let v = runtape(Path::new(&url), &["verify", run]);
        assert!(
            v.status.success(),
            "verify {run}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
    let log = std::fs::read_to_string(dir.join("effects.log")).expect("effects happened");
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for key in log.lines() {
        *seen.entry(key).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "performed twice: {seen:?}");
    assert_eq!(seen.len(), 8, "two effects per run");

    for w in &mut workers.0 {
        signal(w.id(), "TERM");
        assert!(w.wait().expect("exits").success(), "drains and exits 0");
    }
}

/// A worker named `name` (its log: `dir/NAME.log`), four runs at a time, 1 s leases.
fn worker(url: &str, dir: &Path, name: &str) -> Child {
    let log = format!("{name}.log");
    let env = [("RUNTAPE_LEASE_TTL_MS", "1000")];
    support::pg::worker(url, dir, &log, &["--concurrency", "4"], &env)
}

/// [`wait_until_every`], checking every 50 ms (each check runs the binary).
fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_every(what, Duration::from_millis(50), cond);
}
