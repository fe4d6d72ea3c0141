//! What a worker counts, and the Prometheus text it is read as (`GET /metrics` on
//! `runtape worker --metrics-addr`, [`super::endpoint`]).
//!
//! | metric | type | what |
//! |---|---|---|
//! | `runtape_worker_runs_claimed_total` | counter | runs this worker claimed from the queue |
//! | `runtape_worker_runs_in_flight` | gauge | runs it drives now |
//! | `runtape_worker_transitions_committed_total` | counter | transitions of its runs made durable |
//! | `runtape_worker_commit_seconds` | histogram | from a commit's submission to the transaction that made it durable |
//! | `runtape_worker_lease_takeovers_total` | counter | claims of a run whose lease another worker held and lost (it expired, or its process was gone) |
//! | `runtape_worker_errors_total{code}` | counter | errors met, by [`error_code`] |
//!
//! Counters start at zero when the process does (Prometheus' `rate()` expects that). The text
//! is the Prometheus exposition format 0.0.4, which every Prometheus-compatible scraper reads;
//! it is written here rather than with `prometheus-client`, which writes only OpenMetrics and
//! brings a registry and derive macros for what is six metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::exec::EngineError;
use crate::ledger::{HistoryError, RecordError};
use crate::store::{Ack, Durable, Store, StoreError, Write};

/// The upper bounds of the commit latency histogram's buckets, in seconds (`+Inf` follows).
pub const COMMIT_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A worker's counters. Shared by its loop, its store (commits) and its endpoint; every update
/// is one atomic operation (errors: a short lock).
#[derive(Debug, Default)]
pub struct Metrics {
    claimed: AtomicU64,
    in_flight: AtomicU64,
    transitions: AtomicU64,
    takeovers: AtomicU64,
    /// Commits per bucket of [`COMMIT_BUCKETS`] (not cumulative; the last one is `+Inf`).
    commit_buckets: [AtomicU64; COMMIT_BUCKETS.len() + 1],
    commit_count: AtomicU64,
    commit_sum_us: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// A run was claimed; `taken_over` when its lease was another worker's.
    pub fn claimed(&self, taken_over: bool) {
        self.claimed.fetch_add(1, Ordering::Relaxed);
        if taken_over {
            self.takeovers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The runs driven now.
    pub fn set_in_flight(&self, runs: usize) {
        self.in_flight.store(runs as u64, Ordering::Relaxed);
    }

    /// `transitions` transitions became durable in one commit that took `took`.
    pub fn committed(&self, transitions: u64, took: Duration) {
        self.transitions.fetch_add(transitions, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = COMMIT_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(COMMIT_BUCKETS.len());
        self.commit_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.commit_count.fetch_add(1, Ordering::Relaxed);
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        self.commit_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// An error with this code was met.
    pub fn error(&self, code: &'static str) {
        *self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(code)
            .or_insert(0) += 1;
    }

    /// Runs driven now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut scalar = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        scalar(
            "runtape_worker_runs_claimed_total",
            "counter",
            "Runs this worker claimed from the queue.",
            load(&self.claimed),
        );
        scalar(
            "runtape_worker_runs_in_flight",
            "gauge",
            "Runs this worker drives now.",
            load(&self.in_flight),
        );
        scalar(
            "runtape_worker_transitions_committed_total",
            "counter",
            "Transitions of this worker's runs made durable.",
            load(&self.transitions),
        );
        scalar(
            "runtape_worker_lease_takeovers_total",
            "counter",
            "Runs claimed whose lease another worker held and lost (expired, or its process gone).",
            load(&self.takeovers),
        );
        let name = "runtape_worker_commit_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a commit's submission to the transaction that made it durable.\n# TYPE {name} histogram"
        );
        let mut cumulative = 0;
        for (i, bucket) in self.commit_buckets.iter().enumerate() {
            cumulative += load(bucket);
            let le = COMMIT_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = load(&self.commit_sum_us) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
        let name = "runtape_worker_errors_total";
        let _ = writeln!(
            out,
            "# HELP {name} Errors this worker met, by code.\n# TYPE {name} counter"
        );
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        for (code, n) in errors.iter() {
            // Codes are this module's own identifiers: nothing to escape.
            let _ = writeln!(out, "{name}{{code=\"{code}\"}} {n}");
        }
        out
    }
}

/// The code an error is counted under (`runtape_worker_errors_total{code}`) and logged with
/// (`"code"` in a `run.error` or `worker.error` line): what kind of trouble, not which run.
pub fn error_code(e: &EngineError) -> &'static str {
    match e {
        EngineError::Store(e) => store_error_code(e),
        EngineError::History(HistoryError::Tampered { .. } | HistoryError::WrongKey(_)) => {
            "tampered"
        }
        // Reading the history failed in the store (a connection the database ended): the
        // store's trouble, counted as the store's, not a fault of the history.
        EngineError::History(HistoryError::Store(e)) => store_error_code(e),
        EngineError::History(_) => "history",
        EngineError::Machine(_) => "machine",
        EngineError::MissingProvider { .. } | EngineError::MissingTool(_) => "setup",
        EngineError::Finished { .. } => "finished",
        EngineError::Spec(_) | EngineError::NoRetriever | EngineError::Unencodable { .. } => "spec",
        EngineError::Record(RecordError::Receipt { .. })
        | EngineError::ReceiptKeyMismatch { .. } => "receipts",
        EngineError::LeaseExpired { .. } => "lease_expired",
        EngineError::ShuttingDown
        | EngineError::TaskDropped
        | EngineError::ReadStopped { .. }
        | EngineError::NotRecorded { .. }
        | EngineError::ConversationMismatch { .. }
        | EngineError::Stalled { .. }
        | EngineError::Record(RecordError::Encode(_)) => "driver",
        _ => "other",
    }
}

/// [`error_code`] of a store error.
pub fn store_error_code(e: &StoreError) -> &'static str {
    match e {
        StoreError::Fenced { .. } => "fenced",
        StoreError::StaleHead { .. } => "stale_head",
        StoreError::AlreadyAnswered { .. } => "already_answered",
        StoreError::LeaseHeld { .. } => "lease_held",
        StoreError::Finished { .. } => "finished",
        StoreError::Full { .. } => "disk_full",
        StoreError::Damaged { .. } | StoreError::Corrupt { .. } => "damaged",
        StoreError::UnknownRun(_) => "unknown_run",
        StoreError::Io(_) | StoreError::Closed => "database",
        _ => "store",
    }
}

/// A store that tells [`Metrics`] of every commit made durable through it: how many
/// transitions and how long from submission. The worker's engines commit through it.
pub struct Metered {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Metered {
    /// `inner`, its commits counted in `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Metered {
        Metered { inner, metrics }
    }

    /// For a commit: what tells the metrics when it is durable (how many transitions, how
    /// long from now). `None` for any other write.
    fn on_durable(&self, write: &Write) -> Option<Durable> {
        let transitions = match write {
            Write::Commit(_) => 1,
            Write::Commits(cs) => cs.len() as u64,
            _ => return None,
        };
        let metrics = self.metrics.clone();
        let started = crate::clock::stopwatch();
        Some(Box::new(move |at: Instant| {
            metrics.committed(transitions, at.saturating_duration_since(started));
        }))
    }
}

impl Store for Metered {
    fn submit(&self, write: Write) -> Ack {
        match self.on_durable(&write) {
            Some(count) => self.inner.submit_timed(write, count),
            None => self.inner.submit(write),
        }
    }

    fn submit_timed(&self, write: Write, durable: Durable) -> Ack {
        let durable = match self.on_durable(&write) {
            Some(count) => Box::new(move |at: Instant| {
                count(at);
                durable(at);
            }),
            None => durable,
        };
        self.inner.submit_timed(write, durable)
    }

    crate::forward_store_reads!(inner);

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        self.inner.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_read_the_database_broke_off_counts_as_the_databases() {
        let lost = StoreError::Io("connection to the database was lost".into());
        let e = EngineError::History(HistoryError::Store(lost));
        assert_eq!(error_code(&e), "database");
        let unknown = EngineError::History(HistoryError::UnknownRun("r".into()));
        assert_eq!(error_code(&unknown), "history");
    }

    #[test]
    fn the_text_is_prometheus_exposition_format() {
        let m = Metrics::default();
        m.claimed(false);
        m.claimed(true);
        m.set_in_flight(1);
        m.committed(3, Duration::from_millis(3));
        m.committed(1, Duration::from_secs(60));
        m.error("fenced");
        m.error("database");
        m.error("fenced");
        let text = m.render();
        for line in [
            "# TYPE runtape_worker_runs_claimed_total counter",
            "runtape_worker_runs_claimed_total 2",
            "runtape_worker_lease_takeovers_total 1",
            "runtape_worker_runs_in_flight 1",
            "runtape_worker_transitions_committed_total 4",
            "# TYPE runtape_worker_commit_seconds histogram",
            "runtape_worker_commit_seconds_bucket{le=\"0.0025\"} 0",
            "runtape_worker_commit_seconds_bucket{le=\"0.005\"} 1",
            "runtape_worker_commit_seconds_bucket{le=\"30\"} 1",
            "runtape_worker_commit_seconds_bucket{le=\"+Inf\"} 2",
            "runtape_worker_commit_seconds_sum 60.003",
            "runtape_worker_commit_seconds_count 2",
            "runtape_worker_errors_total{code=\"database\"} 1",
            "runtape_worker_errors_total{code=\"fenced\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn store_errors_are_counted_by_what_went_wrong() {
        let fenced = StoreError::Fenced {
            run: "r".into(),
            ours: 1,
            current: 2,
        };
        assert_eq!(error_code(&EngineError::Store(fenced)), "fenced");
        assert_eq!(store_error_code(&StoreError::Io("x".into())), "database");
        assert_eq!(store_error_code(&StoreError::Closed), "database");
        assert_eq!(error_code(&EngineError::MissingTool("t".into())), "setup");
    }
}
