//! Workers outlive their database going down: restarted under running workers, the runs in
//! flight wait for it and carry on (no run is given up, none is taken over, every one ends and
//! verifies, nothing is performed twice); and a worker started before the database is up
//! waits for it with backoff, saying so on stderr, then claims and completes the runs queued.

mod pg_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use runtape::store::{PostgresStore, RunStatus, Store};

/// Four calls per run, each noting its key in `started.log` when it starts and in
/// `effects.log` once performed, a second later.
const SPEC: &str = r#"goal = "four effects"
[[providers]]
name = "s"
kind = "scripted"
latency_ms = 100
replies = [
  { tool_calls = [{ name = "effect", arguments = { n = 1 } }] },
  { tool_calls = [{ name = "effect", arguments = { n = 2 } }] },
  { tool_calls = [{ name = "effect", arguments = { n = 3 } }] },
  { tool_calls = [{ name = "effect", arguments = { n = 4 } }] },
  { text = "done" },
]
[[tools]]
name = "effect"
description = "a non-idempotent effect"
command = ["sh", "-c", "echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> started.log; sleep 1; echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log; echo ok"]
reconcile = ["sh", "-c", "if grep -qx \"$RUNTAPE_IDEMPOTENCY_KEY\" effects.log 2>/dev/null; then echo '{\"performed\": true, \"result\": \"ok\"}'; else echo '{\"performed\": false}'; fi"]
[[agents]]
id = "a"
provider = "s"
tools = ["effect"]
on_in_doubt = "reconcile"
"#;

fn runtape(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_runtape"))
        .args(["--db", url])
        .args(args)
        .output()
        .expect("runs")
}

/// A worker whose leases (30 s) outlast any restart here: a run is taken over only if its
/// worker gave it up.
fn worker(url: &str, dir: &Path, name: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let err = std::fs::File::create(dir.join(format!("{name}.err"))).expect("log file");
    Command::new(env!("CARGO_BIN_EXE_runtape"))
        .args(["--db", url, "worker", "--concurrency", "4", "--spec-dir"])
        .arg(dir)
        .env("RUNTAPE_LEASE_TTL_MS", "30000")
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

fn events(dir: &Path, name: &str, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

fn performed(dir: &Path) -> Vec<String> {
    keys(&dir.join("effects.log"))
}

fn keys(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The calls started and not yet performed.
fn in_flight(dir: &Path) -> Vec<String> {
    let done = performed(dir);
    keys(&dir.join("started.log"))
        .into_iter()
        .filter(|k| !done.contains(k))
        .collect()
}

/// A fresh database with runtape's schema and `n` runs of [`SPEC`] queued; the spec's
/// directory and the runs.
fn queued(server: &pg_support::PgServer, n: usize) -> (String, tempfile::TempDir, Vec<String>) {
    let url = server.fresh_db();
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = tmp
        .path()
        .canonicalize()
        .expect("resolves")
        .join("spec.toml");
    std::fs::write(&spec, SPEC).expect("writes the spec");
    let m = runtape(&url, &["migrate"]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let runs = (0..n)
        .map(|_| {
            let o = runtape(&url, &["run", spec.to_str().expect("utf-8"), "--detach"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
        .collect();
    (url, tmp, runs)
}

/// Every run completed and verifies, and every call was performed once.
fn all_done_once(url: &str, dir: &Path, runs: &[String]) {
    let store = PostgresStore::open(url).expect("opens");
    for r in store.runs().expect("lists") {
        assert_eq!(r.status, RunStatus::Completed, "{}", r.id);
    }
    for run in runs {
        let v = runtape(url, &["verify", run]);
        assert!(
            v.status.success(),
            "verify {run}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
    let keys = performed(dir);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for key in &keys {
        *seen.entry(key).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "performed twice: {seen:?}");
    assert_eq!(seen.len(), runs.len() * 4, "four effects per run");
}

fn stop(workers: &mut pg_support::Reaper) {
    for w in &mut workers.0 {
        let _ = Command::new("kill")
            .args(["-TERM", &w.id().to_string()])
            .status();
        assert!(w.wait().expect("exits").success(), "drains and exits 0");
    }
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn runs_in_flight_ride_out_a_database_restart() {
    const RUNS: usize = 6;
    let server = pg_support::PgServer::start();
    let (url, tmp, runs) = queued(&server, RUNS);
    let dir = tmp.path().canonicalize().expect("resolves");
    let mut workers = pg_support::Reaper(vec![worker(&url, &dir, "w0"), worker(&url, &dir, "w1")]);

    // A restart with calls in flight (every connection ended, the server back at once) ...
    wait_until("calls are in flight", || in_flight(&dir).len() >= 2);
    server.restart();
    // ... and an outage during which calls finish: their results wait for the database.
    wait_until("calls are in flight", || in_flight(&dir).len() >= 2);
    server.stop();
    let flying = in_flight(&dir);
    wait_until(
        "those calls have finished while the database is down",
        || {
            let done = performed(&dir);
            flying.iter().all(|k| done.contains(k))
        },
    );
    server.start_again();

    let store = PostgresStore::open(&url).expect("opens");
    wait_until("every run has completed", || {
        store
            .runs()
            .expect("lists")
            .iter()
            .all(|r| r.status == RunStatus::Completed)
    });
    for name in ["w0", "w1"] {
        assert!(
            events(&dir, name, "run.error").is_empty(),
            "{name} gave up no run: {:?}",
            events(&dir, name, "run.error")
        );
    }
    let claims = events(&dir, "w0", "run.claimed").len() + events(&dir, "w1", "run.claimed").len();
    assert_eq!(
        claims, RUNS,
        "each run was claimed once: none was taken over"
    );
    all_done_once(&url, &dir, &runs);
    stop(&mut workers);
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_started_before_the_database_waits_for_it() {
    let server = pg_support::PgServer::start();
    let (url, tmp, runs) = queued(&server, 2);
    let dir = tmp.path().canonicalize().expect("resolves");
    server.stop();

    let mut workers = pg_support::Reaper(vec![worker(&url, &dir, "w")]);
    let waits = || -> Vec<f64> {
        std::fs::read_to_string(dir.join("w.err"))
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
    wait_until("the worker has said three times that it waits", || {
        let exited = workers.0[0].try_wait().expect("polls");
        assert!(
            exited.is_none(),
            "the worker waits, it does not exit ({exited:?}): {}",
            std::fs::read_to_string(dir.join("w.err")).unwrap_or_default()
        );
        waits().len() >= 3
    });
    let said = waits();
    assert!(
        said.windows(2).all(|w| w[1] >= w[0]) && said[2] > said[0],
        "the waits grow (backoff): {said:?}"
    );
    let err = std::fs::read_to_string(dir.join("w.err")).unwrap_or_default();
    assert!(
        err.lines()
            .next()
            .unwrap_or_default()
            .contains("cannot connect to postgres://runtape@127.0.0.1:"),
        "each line says what it waits for: {err}"
    );
    assert!(
        events(&dir, "w", "worker.started").is_empty(),
        "nothing is claimed before the database is up"
    );

    server.start_again();
    let store = PostgresStore::open(&url).expect("opens");
    wait_until("the worker has completed the queued runs", || {
        store
            .runs()
            .expect("lists")
            .iter()
            .all(|r| r.status == RunStatus::Completed)
    });
    assert_eq!(events(&dir, "w", "worker.started").len(), 1);
    all_done_once(&url, &dir, &runs);
    stop(&mut workers);
}
