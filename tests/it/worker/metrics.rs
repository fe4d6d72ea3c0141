//! `runtape worker --metrics-addr`: a real worker against a real PostgreSQL answers
//! `/healthz` and `/metrics`, and the counters move as runs complete.
//!
//! Worker X takes two runs and is killed mid-call; worker Y (the one scraped) takes both over
//! at once (X's process is gone) and completes them: two claims, two lease takeovers. A third
//! run queued later is claimed without a takeover, and every transition of it is counted as
//! committed. With the database stopped, `/healthz` says 503 and why, and the failed
//! heartbeats are counted under `database`; started again, 200.

use crate::support::spec::{agent, tool};
use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::support::cli::signal;
use crate::support::pg::{PgServer, Reaper};
use crate::support::serve::request;
use crate::support::workers::{Queue, wait_long};
use runtape::store::{RunStatus, Store};

const SPEC: &str = r#"goal = "two effects"
[[providers]]
name = "s"
kind = "scripted"
latency_ms = 10
replies = [
  { tool_calls = [{ name = "effect", arguments = { n = 1 } }] },
  { tool_calls = [{ name = "effect", arguments = { n = 2 } }] },
  { text = "done" },
]
"#;

/// Two calls of an idempotent effect that takes a second, each appending its key to
/// `started.log`.
fn spec() -> String {
    let effect =
        r#"["sh", "-c", "echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> started.log; sleep 1; echo ok"]"#;
    let rest = "description = \"an idempotent effect that takes a while\"\nidempotent = true";
    [
        SPEC,
        &tool("effect", effect, rest),
        &agent("a", "s", &["effect"], ""),
    ]
    .concat()
}

/// A worker with 1.5 s leases, `extra` arguments and its events in `DIR/NAME.log`.
fn worker(queue: &Queue, name: &str, extra: &[&str]) -> std::process::Child {
    queue.worker(&queue.url, name, 1500, extra)
}

fn healthz(addr: SocketAddr) -> (u16, serde_json::Value, String) {
    let a = request(addr, "GET", "/healthz", &[], None);
    let text = a.text();
    (a.status, a.json(), text)
}

/// `/metrics` as sample name (with labels) → value, checking the text's shape on the way:
/// each sample's family is announced by `# TYPE` before it.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let a = request(addr, "GET", "/metrics", &[], None);
    assert_eq!(a.status, 200);
    assert_eq!(
        a.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let mut typed = Vec::new();
    let mut samples = BTreeMap::new();
    for line in a.text().lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.push(rest.split(' ').next().unwrap_or_default().to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, value) = line.rsplit_once(' ').expect("NAME VALUE");
        let family = name.split('{').next().unwrap_or_default();
        assert!(
            typed.iter().any(|t| family.starts_with(t.as_str())),
            "{family} has a # TYPE line before it"
        );
        samples.insert(name.to_owned(), value.parse().expect("a number"));
    }
    samples
}

fn get(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    *m.get(name)
        .unwrap_or_else(|| panic!("{name} is among the metrics: {m:?}"))
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_answers_healthz_and_metrics_and_its_counters_move() {
    let server = PgServer::start();
    let queue = Queue::new(&server, &spec(), 2);
    let first = &queue.runs;
    let store = queue.store();

    // X takes both runs and dies mid-call.
    let mut workers = Reaper(vec![worker(&queue, "x", &[])]);
    wait_long("X has started a call of each run", || {
        queue.lines("started.log").len() >= 2
    });
    workers.0[0].kill().expect("SIGKILL");
    let _ = workers.0[0].wait();

    workers
        .0
        .push(worker(&queue, "y", &["--metrics-addr", "127.0.0.1:0"]));
    let mut addr = None;
    wait_long("Y says where it listens", || {
        addr = queue
            .events("y", "worker.listening")
            .first()
            .and_then(|v| v["addr"].as_str()?.parse().ok());
        addr.is_some()
    });
    let addr: SocketAddr = addr.expect("an address");
    wait_long("Y has completed X's runs", || {
        first.iter().all(|r| {
            store
                .run(&runtape::RunId::new(r.as_str()))
                .expect("reads")
                .is_some_and(|r| r.status == RunStatus::Completed)
        })
    });
    let (status, body, text) = healthz(addr);
    assert_eq!(status, 200, "{text}");
    assert_eq!(body["status"], "ok");
    assert_eq!(text.trim_end().lines().count(), 1, "one line: {text}");

    // A run's row says completed a moment before the worker's loop reaps its task and lowers
    // the gauge: wait for the gauge, then read every figure from one scrape.
    let mut m = scrape(addr);
    wait_long("Y's gauge shows no run in flight", || {
        m = scrape(addr);
        get(&m, "runtape_worker_runs_in_flight") == 0.0
    });
    assert_eq!(get(&m, "runtape_worker_runs_claimed_total"), 2.0);
    assert_eq!(get(&m, "runtape_worker_lease_takeovers_total"), 2.0);
    assert_eq!(get(&m, "runtape_worker_runs_in_flight"), 0.0);
    let committed = get(&m, "runtape_worker_transitions_committed_total");
    assert!(committed > 0.0, "{m:?}");
    let count = get(&m, "runtape_worker_commit_seconds_count");
    assert!(count > 0.0 && count <= committed, "{m:?}");
    assert_eq!(
        get(&m, "runtape_worker_commit_seconds_bucket{le=\"+Inf\"}"),
        count
    );
    let buckets: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("runtape_worker_commit_seconds_bucket"))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(buckets.len(), 15, "14 bounds and +Inf");
    assert!(get(&m, "runtape_worker_commit_seconds_sum") > 0.0);

    // A run queued now: claimed without a takeover, each of its transitions committed by Y.
    let third = queue.push();
    let id = runtape::RunId::new(third.as_str());
    let seq_at_queue = store.run(&id).expect("reads").expect("exists").seq;
    wait_long("Y has completed the third run", || {
        store
            .run(&id)
            .expect("reads")
            .is_some_and(|r| r.status == RunStatus::Completed)
    });
    let seq = store.run(&id).expect("reads").expect("exists").seq;
    let after = scrape(addr);
    assert_eq!(get(&after, "runtape_worker_runs_claimed_total"), 3.0);
    assert_eq!(get(&after, "runtape_worker_lease_takeovers_total"), 2.0);
    assert_eq!(
        get(&after, "runtape_worker_transitions_committed_total") - committed,
        (seq - seq_at_queue) as f64,
        "every transition of the third run, once"
    );
    assert!(get(&after, "runtape_worker_commit_seconds_count") > count);
    assert!(
        !after
            .keys()
            .any(|k| k.starts_with("runtape_worker_errors_total")),
        "no errors yet: {after:?}"
    );

    // The database goes away: unhealthy, saying why, and counted; back: healthy.
    server.stop();
    wait_long("/healthz says the database cannot be reached", || {
        let (status, body, _) = healthz(addr);
        status == 503
            && body["status"] == "unavailable"
            && body["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("the database cannot be reached: ")
    });
    let down = scrape(addr);
    assert!(get(&down, "runtape_worker_errors_total{code=\"database\"}") >= 1.0);
    server.start_again();
    wait_long("/healthz is 200 again", || healthz(addr).0 == 200);

    let y = &mut workers.0[1];
    signal(y.id(), "TERM");
    assert!(y.wait().expect("exits").success(), "drains and exits 0");
    for run in first.iter().chain([&third]) {
        let v = queue.runtape(&["verify", run]);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    }
}
