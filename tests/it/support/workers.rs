//! `runtape worker` processes on a real PostgreSQL database ([`super::pg::PgServer`]): runs
//! queued for them, workers whose events and stderr each go to a file of their own, what they
//! logged read back, and the end every worker test checks (every run completed and verified,
//! every call of the non-idempotent tool performed once).
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use runtape::store::{PostgresStore, RunStatus, Store};

use super::cli::{bin, runtape, utf8, wait_until_within, write};
use super::pg::{PgServer, Reaper};

/// A fresh database with runtape's schema and runs queued on it (`run --detach`), the spec in
/// a temporary directory the workers read (`--spec-dir`) and write their logs into.
pub struct Queue {
    /// The database's URL.
    pub url: String,
    /// The spec's directory, canonical.
    pub dir: PathBuf,
    /// The runs queued, in order.
    pub runs: Vec<String>,
    _tmp: tempfile::TempDir,
}

impl Queue {
    /// `n` runs of `spec` (a spec's text) on a fresh database of `server`.
    pub fn new(server: &PgServer, spec: &str, n: usize) -> Queue {
        let url = server.fresh_db();
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().canonicalize().expect("resolves");
        write(&dir, "spec.toml", spec);
        let m = runtape(Path::new(&url), &["migrate"]);
        assert!(
            String::from_utf8_lossy(&m.stdout).contains("created runtape's schema"),
            "{}",
            String::from_utf8_lossy(&m.stderr)
        );
        let mut queue = Queue {
            url,
            dir,
            runs: Vec::new(),
            _tmp: tmp,
        };
        for _ in 0..n {
            let run = queue.push();
            queue.runs.push(run);
        }
        queue
    }

    /// Queues one more run of the spec and returns its id (not added to [`Queue::runs`]).
    pub fn push(&self) -> String {
        let spec = self.dir.join("spec.toml");
        let o = runtape(Path::new(&self.url), &["run", utf8(&spec), "--detach"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    /// `runtape --db URL ARGS…` on this queue's database.
    pub fn runtape(&self, args: &[&str]) -> std::process::Output {
        runtape(Path::new(&self.url), args)
    }

    /// A store open on the database, to read the runs as the workers leave them.
    pub fn store(&self) -> PostgresStore {
        PostgresStore::open(&self.url).expect("opens")
    }

    /// Starts worker `name` on `url` (this queue's, or a proxy's in front of it), leases of
    /// `lease_ms`, polling every 50 ms, with `extra` arguments: its JSON events go to
    /// `DIR/NAME.log` (read them with [`Queue::events`]), its stderr to `DIR/NAME.err`.
    pub fn worker(&self, url: &str, name: &str, lease_ms: u64, extra: &[&str]) -> Child {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        let err = std::fs::File::create(self.dir.join(format!("{name}.err"))).expect("log file");
        bin()
            .args(["--db", url, "worker", "--spec-dir"])
            .arg(&self.dir)
            .args(extra)
            .env("RUNTAPE_LEASE_TTL_MS", lease_ms.to_string())
            .env("RUNTAPE_WORKER_POLL_MS", "50")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("starts a worker")
    }

    /// Worker `name`'s events named `event`, in the order it logged them.
    pub fn events(&self, name: &str, event: &str) -> Vec<serde_json::Value> {
        events(&self.dir, name, event)
    }

    /// The lines of `DIR/FILE` (none while it does not exist).
    pub fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Whether every run on the database has completed.
    pub fn all_completed(&self, store: &PostgresStore) -> bool {
        store
            .runs()
            .expect("lists")
            .iter()
            .all(|r| r.status == RunStatus::Completed)
    }

    /// Every run completed and verifies, and every call of `effects.log`'s tool was performed
    /// once: `per_run` keys for each run queued.
    pub fn all_done_once(&self, per_run: usize) {
        for r in self.store().runs().expect("lists") {
            assert_eq!(r.status, RunStatus::Completed, "{}", r.id);
        }
        for run in &self.runs {
            let v = self.runtape(&["verify", run]);
            assert!(
                v.status.success(),
                "verify {run}: {}",
                String::from_utf8_lossy(&v.stdout)
            );
        }
        let performed = self.lines("effects.log");
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for key in &performed {
            *seen.entry(key).or_insert(0) += 1;
        }
        assert!(seen.values().all(|n| *n == 1), "performed twice: {seen:?}");
        assert_eq!(
            seen.len(),
            self.runs.len() * per_run,
            "{per_run} effects per run"
        );
    }
}

/// The events named `event` in `DIR/NAME.log`, a worker's JSON lines.
pub fn events(dir: &Path, name: &str, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

/// Each run's id and last seq, sorted: what a fenced worker must leave unchanged.
pub fn seqs(store: &PostgresStore) -> Vec<(String, u64)> {
    let mut s: Vec<(String, u64)> = store
        .runs()
        .expect("lists")
        .iter()
        .map(|r| (r.id.to_string(), r.seq))
        .collect();
    s.sort();
    s
}

/// Each run's lease epoch, to show later that another worker took it over.
pub fn epochs(store: &PostgresStore) -> HashMap<String, u64> {
    store
        .runs()
        .expect("lists")
        .into_iter()
        .map(|r| (r.id.to_string(), r.lease_epoch))
        .collect()
}

/// Every run's lease epoch is past the one `held` recorded: each was taken over.
pub fn all_taken_over(store: &PostgresStore, held: &HashMap<String, u64>) {
    for r in store.runs().expect("lists") {
        assert!(
            r.lease_epoch > held[r.id.as_str()],
            "{} was taken over (epoch {} → {})",
            r.id,
            held[r.id.as_str()],
            r.lease_epoch
        );
    }
}

/// Waits up to two minutes, checking every 50 ms: for what a lease expiry, a database restart
/// or a worker's backoff decides.
pub fn wait_long(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(
        what,
        Duration::from_secs(120),
        Duration::from_millis(50),
        cond,
    );
}

/// Stops every worker with SIGTERM and checks each drains and exits 0.
pub fn stop(workers: &mut Reaper) {
    for w in &mut workers.0 {
        super::cli::signal(w.id(), "TERM");
        assert!(w.wait().expect("exits").success(), "drains and exits 0");
    }
}

/// Every table a claim or a take-up could write, as text.
const TABLES: [&str; 9] = [
    "runs",
    "run_specs",
    "transitions",
    "snapshots",
    "blobs",
    "outbox",
    "session_runs",
    "memory_global",
    "memory_removals",
];

/// Every row of every table in [`TABLES`] of database `db`, as text: compared before and after
/// a process that must write nothing.
pub fn dump(server: &PgServer, db: &str) -> String {
    TABLES
        .iter()
        .map(|t| {
            let rows = server.sql(db, &format!("SELECT * FROM runtape.{t} ORDER BY 1"));
            format!("{t}:\n{rows}\n")
        })
        .collect()
}
