//! The network between a running worker and PostgreSQL is cut while both keep running.
//!
//! Worker A reaches the database through a TCP proxy the test controls
//! ([`crate::support::pg::proxy::Proxy`]). A takes three runs; while each run's first tool call is in
//! flight (the tool sleeps), the proxy cuts every connection of A and refuses new ones. A
//! keeps running: its runs' leases expire on the database's clock, worker B (connected
//! directly) takes them over — killing the calls A left running, asking the tool whether each
//! was performed — and completes them. Then the network heals: A's writes reach the database
//! and are refused by the lease epoch, so A stops driving each run and says it was taken over,
//! commits nothing, and claims none of them again. Every run verifies, and no idempotency key
//! is performed twice.
//!
//! `partition.rs` makes the partition by freezing A (SIGSTOP) instead.

use std::collections::HashMap;

use crate::support::pg::proxy::Proxy;
use crate::support::pg::{PgServer, Reaper, effects_spec};
use crate::support::workers::{Queue, all_taken_over, epochs, seqs, stop, wait_long};

/// Each call notes its key in `started.log` when it starts and in `effects.log` when it has
/// been performed, 3 s later.
fn spec() -> String {
    effects_spec(
        2,
        20,
        r#"echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> started.log; sleep 3; "#,
    )
}

const RUNS: usize = 3;

fn worker(queue: &Queue, url: &str, name: &str) -> std::process::Child {
    queue.worker(url, name, 1000, &["--concurrency", "4"])
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_cut_off_mid_call_is_fenced_when_the_network_heals() {
    let server = PgServer::start();
    let queue = Queue::new(&server, &spec(), RUNS);
    let store = queue.store();

    let proxy = Proxy::start(server.port());
    let mut workers = Reaper(vec![worker(&queue, &proxy.url(&queue.url), "a")]);
    wait_long("worker A has started every run's first call", || {
        queue.lines("started.log").len() == RUNS
    });
    let held: HashMap<String, u64> = epochs(&store);

    // The partition, with the calls in flight: A runs on, but reaches nothing.
    assert!(proxy.cut() > 0, "A had connections through the proxy");
    workers.0.push(worker(&queue, &queue.url, "b"));
    wait_long("worker B has completed every run", || {
        queue.all_completed(&store)
    });
    assert!(
        workers.0[0].try_wait().expect("polls").is_none(),
        "A is still running: a cut network is not a crash"
    );
    assert!(
        proxy.refused() > 0,
        "A tried to reach the database meanwhile"
    );
    all_taken_over(&store, &held);
    assert!(
        queue.events("a", "run.error").is_empty(),
        "A gave up no run while cut off: it waits for the database ({:?})",
        queue.events("a", "run.error")
    );
    let before = seqs(&store);

    // The network heals: A's writes arrive, and the lease epoch refuses every one.
    proxy.heal();
    wait_long("A has stopped driving every run", || {
        queue.events("a", "run.error").len() == RUNS
    });
    for e in queue.events("a", "run.error") {
        let error = e["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("was taken over by another process") && !error.contains('\n'),
            "A says in one line that it was fenced: {e}"
        );
    }
    wait_long("A's heartbeat reaches the database again", || {
        !queue.events("a", "worker.reconnected").is_empty()
    });
    assert_eq!(
        seqs(&store),
        before,
        "A committed nothing after the takeover"
    );
    assert_eq!(
        queue.events("a", "run.claimed").len(),
        RUNS,
        "A never claims a run again: they are finished"
    );

    queue.all_done_once(2);
    stop(&mut workers);
}
