//! A worker's loop waits on its engine's clock: with a poll of a minute on a clock where long
//! waits pass at once, a run queued after the worker found the queue empty is claimed and
//! completed without a real minute passing, and each wait between polls was that minute on the
//! engine's clock. A worker in this process on a real PostgreSQL database.

use std::sync::Arc;
use std::time::Duration;

use runtape::exec::EngineConfig;
use runtape::store::{PostgresStore, RunStatus, Store, WorkerInfo, owner_id};
use runtape::worker::{WorkerOptions, health::Health, metrics::Metrics};

use crate::support::cli::wait_until_within;
use crate::support::clock::FastForward;
use crate::support::pg::PgServer;
use crate::support::workers::Queue;

/// One scripted reply, no tools.
fn spec() -> String {
    [
        "goal = \"one reply\"\n",
        &crate::support::spec::scripted_as("s", r#"{ text = "done" }"#),
        &crate::support::spec::agent("a", "s", &[], ""),
    ]
    .concat()
}

const POLL: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn the_worker_polls_on_its_engines_clock() {
    let server = PgServer::start();
    let queue = Queue::new(&server, &spec(), 0);
    let store = Arc::new(PostgresStore::open(&queue.url).expect("opens"));
    let clock = Arc::new(FastForward::new());
    let opts = WorkerOptions {
        spec_dir: queue.dir.clone(),
        concurrency: 1,
        engine: EngineConfig {
            clock: clock.clone(),
            ..EngineConfig::default()
        },
        grace: Duration::from_secs(1),
        poll: POLL,
        skip_for: Duration::from_secs(60),
        metrics: Arc::new(Metrics::default()),
        health: Arc::new(Health::new()),
        schedules: None,
    };
    let info = WorkerInfo {
        id: owner_id(7),
        host: "test".into(),
        pid: std::process::id(),
        spec_dir: queue.dir.display().to_string(),
        concurrency: 1,
        started_ms: 0,
    };
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let (stop, stops) = tokio::sync::mpsc::unbounded_channel();
    let worker = rt.spawn(runtape::worker::run(
        store.clone(),
        info,
        opts,
        stops,
        |_| {},
    ));
    // The queue is empty: the worker waits a poll, on its engine's clock.
    wait_until_within(
        "the worker's first wait between polls",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || !clock.skips().is_empty(),
    );
    let run = queue.push();
    let done = || {
        store
            .run(&runtape::RunId::new(run.as_str()))
            .ok()
            .flatten()
            .is_some_and(|r| r.status == RunStatus::Completed)
    };
    wait_until_within(
        "the run queued later is claimed and completed",
        Duration::from_secs(30),
        Duration::from_millis(20),
        done,
    );
    stop.send("test").expect("the worker listens");
    rt.block_on(worker)
        .expect("the worker task")
        .expect("the worker ends cleanly");
    let skips = clock.skips();
    assert!(
        skips
            .iter()
            .any(|s| *s > POLL - Duration::from_secs(1) && *s <= POLL),
        "the waits between polls were the worker's minute on its engine's clock: {skips:?}"
    );
}
