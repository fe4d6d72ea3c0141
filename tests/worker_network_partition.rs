//! The network between a running worker and PostgreSQL is cut while both keep running.
//!
//! Worker A reaches the database through a TCP proxy the test controls
//! ([`pg_support::proxy::Proxy`]). A takes three runs; while each run's first tool call is in
//! flight (the tool sleeps), the proxy cuts every connection of A and refuses new ones. A
//! keeps running: its runs' leases expire on the database's clock, worker B (connected
//! directly) takes them over — killing the calls A left running, asking the tool whether each
//! was performed — and completes them. Then the network heals: A's writes reach the database
//! and are refused by the lease epoch, so A stops driving each run and says it was taken over,
//! commits nothing, and claims none of them again. Every run verifies, and no idempotency key
//! is performed twice.
//!
//! `worker_partition.rs` makes the partition by freezing A (SIGSTOP) instead.

mod pg_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pg_support::proxy::Proxy;
use runtape::store::{PostgresStore, RunStatus, Store};

/// Each call notes its key in `started.log` when it starts and in `effects.log` when it has
/// been performed, 3 s later.
const SPEC: &str = r#"goal = "two slow effects"
[[providers]]
name = "s"
kind = "scripted"
latency_ms = 20
replies = [
  { tool_calls = [{ name = "effect", arguments = { n = 1 } }] },
  { tool_calls = [{ name = "effect", arguments = { n = 2 } }] },
  { text = "done" },
]
[[tools]]
name = "effect"
description = "a slow, non-idempotent effect"
command = ["sh", "-c", "echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> started.log; sleep 3; echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log; echo ok"]
reconcile = ["sh", "-c", "if grep -qx \"$RUNTAPE_IDEMPOTENCY_KEY\" effects.log 2>/dev/null; then echo '{\"performed\": true, \"result\": \"ok\"}'; else echo '{\"performed\": false}'; fi"]
[[agents]]
id = "a"
provider = "s"
tools = ["effect"]
on_in_doubt = "reconcile"
"#;

const RUNS: usize = 3;

fn runtape(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_runtape"))
        .args(["--db", url])
        .args(args)
        .output()
        .expect("runs")
}

fn worker(url: &str, dir: &Path, name: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let err = std::fs::File::create(dir.join(format!("{name}.err"))).expect("log file");
    Command::new(env!("CARGO_BIN_EXE_runtape"))
        .args(["--db", url, "worker", "--concurrency", "4", "--spec-dir"])
        .arg(dir)
        .env("RUNTAPE_LEASE_TTL_MS", "1000")
        .env("RUNTAPE_WORKER_POLL_MS", "50")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .expect("starts a worker")
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The log's events named `event`.
fn events(dir: &Path, name: &str, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn seqs(store: &PostgresStore) -> Vec<(String, u64)> {
    let mut s: Vec<(String, u64)> = store
        .runs()
        .expect("lists")
        .iter()
        .map(|r| (r.id.to_string(), r.seq))
        .collect();
    s.sort();
    s
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_cut_off_mid_call_is_fenced_when_the_network_heals() {
    let server = pg_support::PgServer::start();
    let url = server.fresh_db();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("resolves");
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, SPEC).expect("writes the spec");
    let m = runtape(&url, &["migrate"]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let o = runtape(&url, &["run", spec.to_str().expect("utf-8"), "--detach"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        runs.push(String::from_utf8_lossy(&o.stdout).trim().to_owned());
    }
    let store = PostgresStore::open(&url).expect("opens");

    let proxy = Proxy::start(server.port());
    let mut workers = pg_support::Reaper(vec![worker(&proxy.url(&url), &dir, "a")]);
    wait_until("worker A has started every run's first call", || {
        lines(&dir.join("started.log")).len() == RUNS
    });
    let held: HashMap<String, u64> = store
        .runs()
        .expect("lists")
        .into_iter()
        .map(|r| (r.id.to_string(), r.lease_epoch))
        .collect();

    // The partition, with the calls in flight: A runs on, but reaches nothing.
    assert!(proxy.cut() > 0, "A had connections through the proxy");
    workers.0.push(worker(&url, &dir, "b"));
    wait_until("worker B has completed every run", || {
        store
            .runs()
            .expect("lists")
            .iter()
            .all(|r| r.status == RunStatus::Completed)
    });
    assert!(
        workers.0[0].try_wait().expect("polls").is_none(),
        "A is still running: a cut network is not a crash"
    );
    assert!(
        proxy.refused() > 0,
        "A tried to reach the database meanwhile"
    );
    for r in store.runs().expect("lists") {
        assert!(
            r.lease_epoch > held[r.id.as_str()],
            "{} was taken over (epoch {} → {})",
            r.id,
            held[r.id.as_str()],
            r.lease_epoch
        );
    }
    assert!(
        events(&dir, "a", "run.error").is_empty(),
        "A gave up no run while cut off: it waits for the database ({:?})",
        events(&dir, "a", "run.error")
    );
    let before = seqs(&store);

    // The network heals: A's writes arrive, and the lease epoch refuses every one.
    proxy.heal();
    wait_until("A has stopped driving every run", || {
        events(&dir, "a", "run.error").len() == RUNS
    });
    for e in events(&dir, "a", "run.error") {
        let error = e["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("was taken over by another process") && !error.contains('\n'),
            "A says in one line that it was fenced: {e}"
        );
    }
    wait_until("A's heartbeat reaches the database again", || {
        !events(&dir, "a", "worker.reconnected").is_empty()
    });
    assert_eq!(
        seqs(&store),
        before,
        "A committed nothing after the takeover"
    );
    assert_eq!(
        events(&dir, "a", "run.claimed").len(),
        RUNS,
        "A never claims a run again: they are finished"
    );

    for run in &runs {
        let v = runtape(&url, &["verify", run]);
        assert!(
            v.status.success(),
            "verify {run}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
    let performed = lines(&dir.join("effects.log"));
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for key in &performed {
        *seen.entry(key).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "performed twice: {seen:?}");
    assert_eq!(seen.len(), RUNS * 2, "two effects per run");

    for w in &mut workers.0 {
        let _ = Command::new("kill")
            .args(["-TERM", &w.id().to_string()])
            .status();
        assert!(w.wait().expect("exits").success(), "drains and exits 0");
    }
}
