//! A worker cut off from the database loses its leases and stops driving its runs.
//!
//! Worker A takes four runs and is then partitioned: its connections are ended with
//! `pg_terminate_backend` and it is frozen (SIGSTOP) past its lease, as a process behind a
//! broken network would sit. Its leases expire on the database's clock, its heartbeat goes
//! stale (`ls --workers` shows it gone), and worker B takes the runs over and completes them.
//! When A comes back (SIGCONT), every write it tries is fenced by the lease epoch: it commits
//! nothing, stops driving each run, and drives none of them again. Every run verifies, and no
//! idempotency key is performed twice.

use std::collections::HashMap;

use crate::support::cli::signal;
use crate::support::pg::{PgServer, Reaper, effects_spec};
use crate::support::workers::{Queue, all_taken_over, epochs, seqs, stop, wait_long};

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_partitioned_worker_loses_its_leases_and_stops() {
    let server = PgServer::start();
    // Replies take 1.5 s, so a worker spends its time waiting on the model, not in a tool.
    let queue = Queue::new(&server, &effects_spec(2, 1500, ""), 4);
    let store = queue.store();

    let mut workers = Reaper(vec![worker(&queue, "a")]);
    let a_pid = workers.0[0].id();
    let a_process = format!("{}:{a_pid}", runtape::store::owner_host());
    wait_long("worker A drives all four runs", || {
        let ls = queue.runtape(&["ls", "--json"]);
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
    let held: HashMap<String, u64> = epochs(&store);
    wait_long("A's heartbeat has expired", || {
        let ls = queue.runtape(&["ls", "--workers", "--json"]);
        String::from_utf8_lossy(&ls.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|w| w["pid"] == a_pid && w["alive"] == false)
    });

    workers.0.push(worker(&queue, "b"));
    wait_long("worker B has completed every run", || {
        queue.all_completed(&store)
    });
    all_taken_over(&store, &held);
    let seqs_before = seqs(&store);

    // A comes back: its writes are fenced, and it stops driving every run it had.
    signal(a_pid, "CONT");
    wait_long("A has stopped driving all four runs", || {
        queue.events("a", "run.error").len() == 4
    });
    // Why A stops depends on which of its reads or writes meets the partition first (fenced
    // by the epoch, a lost connection, the run already finished by B); what matters is that it
    // stops, and the checks below show it wrote nothing.
    for e in queue.events("a", "run.error") {
        let error = e["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "A says why it stopped: {e}");
        assert!(!error.contains('\n'), "one line: {error}");
    }
    let seqs_after = seqs(&store);
    assert_eq!(
        seqs_before, seqs_after,
        "A committed nothing after the takeover"
    );
    let ls = String::from_utf8_lossy(&queue.runtape(&["ls", "--json"]).stdout).into_owned();
    assert!(!ls.contains(&a_process), "A drives nothing: {ls}");
    assert_eq!(
        queue.events("a", "run.claimed").len(),
        4,
        "A never claims a run again: they are finished"
    );

    queue.all_done_once(2);
    stop(&mut workers);
}

/// A worker named `name` (its events: `DIR/NAME.log`), four runs at a time, 1 s leases.
fn worker(queue: &Queue, name: &str) -> std::process::Child {
    queue.worker(&queue.url, name, 1000, &["--concurrency", "4"])
}
