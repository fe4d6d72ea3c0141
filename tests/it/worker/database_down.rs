//! Workers outlive their database going down: restarted under running workers, the runs in
//! flight wait for it and carry on (no run is given up, none is taken over, every one ends and
//! verifies, nothing is performed twice); and a worker started before the database is up
//! waits for it with backoff, saying so on stderr, then claims and completes the runs queued.

use crate::support::pg::{PgServer, Reaper, effects_spec};
use crate::support::workers::{Queue, stop, wait_long};

/// Four calls per run, each noting its key in `started.log` when it starts and in
/// `effects.log` once performed, a second later.
fn spec() -> String {
    effects_spec(
        4,
        100,
        r#"echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> started.log; sleep 1; "#,
    )
}

/// A worker whose leases (30 s) outlast any restart here: a run is taken over only if its
/// worker gave it up.
fn worker(queue: &Queue, name: &str) -> std::process::Child {
    queue.worker(&queue.url, name, 30_000, &["--concurrency", "4"])
}

/// The calls started and not yet performed.
fn in_flight(queue: &Queue) -> Vec<String> {
    let done = queue.lines("effects.log");
    queue
        .lines("started.log")
        .into_iter()
        .filter(|k| !done.contains(k))
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn runs_in_flight_ride_out_a_database_restart() {
    const RUNS: usize = 6;
    let server = PgServer::start();
    let queue = Queue::new(&server, &spec(), RUNS);
    let mut workers = Reaper(vec![worker(&queue, "w0"), worker(&queue, "w1")]);

    // A restart with calls in flight (every connection ended, the server back at once) ...
    wait_long("calls are in flight", || in_flight(&queue).len() >= 2);
    server.restart();
    // ... and an outage during which calls finish: their results wait for the database.
    wait_long("calls are in flight", || in_flight(&queue).len() >= 2);
    server.stop();
    let flying = in_flight(&queue);
    wait_long(
        "those calls have finished while the database is down",
        || {
            let done = queue.lines("effects.log");
            flying.iter().all(|k| done.contains(k))
        },
    );
    server.start_again();

    let store = queue.store();
    wait_long("every run has completed", || queue.all_completed(&store));
    // A connection the restart ends while its COMMIT is on the way leaves the outcome unknown
    // to the worker; it gives that run back (run.error, code database, the connection lost)
    // and the run is claimed again and goes on from what the database holds. No other error
    // is allowed, and no run is taken over that was not given back.
    let mut given_back = 0;
    for name in ["w0", "w1"] {
        for e in queue.events(name, "run.error") {
            assert!(
                e["code"] == "database"
                    && e["error"].as_str().is_some_and(|l| {
                        l.contains("connection to the database was lost")
                            || l.contains(
                                "the server stopped or an administrator ended this connection",
                            )
                    }),
                "{name} gave up a run only for a connection the restart ended: {e:?}"
            );
            given_back += 1;
        }
    }
    let claims = queue.events("w0", "run.claimed").len() + queue.events("w1", "run.claimed").len();
    assert!(
        (RUNS..=RUNS + given_back).contains(&claims),
        "each run was claimed once, and again only after it was given back: {claims} claims, {given_back} given back"
    );
    queue.all_done_once(4);
    stop(&mut workers);
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_started_before_the_database_waits_for_it() {
    let server = PgServer::start();
    let queue = Queue::new(&server, &spec(), 2);
    server.stop();

    let mut workers = Reaper(vec![worker(&queue, "w")]);
    let waits = || -> Vec<f64> {
        std::fs::read_to_string(queue.dir.join("w.err"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("runtape worker: waiting for the database: "))
            .filter_map(|l| {
                l.rsplit("trying again in ")
                    .next()?
                    .strip_suffix(" s")?
                    .parse()
                    .ok()
            })
            .collect()
    };
    wait_long("the worker has said three times that it waits", || {
        let exited = workers.0[0].try_wait().expect("polls");
        assert!(
            exited.is_none(),
            "the worker waits, it does not exit ({exited:?}): {}",
            std::fs::read_to_string(queue.dir.join("w.err")).unwrap_or_default()
        );
        waits().len() >= 3
    });
    let said = waits();
    assert!(
        said.windows(2).all(|w| w[1] >= w[0]) && said[2] > said[0],
        "the waits grow (backoff): {said:?}"
    );
    let err = std::fs::read_to_string(queue.dir.join("w.err")).unwrap_or_default();
    assert!(
        err.lines()
            .next()
            .unwrap_or_default()
            .contains("cannot connect to postgres://runtape@127.0.0.1:"),
        "each line says what it waits for: {err}"
    );
    assert!(
        queue.events("w", "worker.started").is_empty(),
        "nothing is claimed before the database is up"
    );

    server.start_again();
    let store = queue.store();
    wait_long("the worker has completed the queued runs", || {
        queue.all_completed(&store)
    });
    assert_eq!(queue.events("w", "worker.started").len(), 1);
    queue.all_done_once(4);
    stop(&mut workers);
}
