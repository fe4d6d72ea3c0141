//! W5: many concurrent, model-bound runs in one process on one SQLite file at
//! `synchronous=FULL`. Every run is started at once; each makes `rounds` tool rounds and a
//! final answer, the model answering each turn after a latency drawn from a seeded generator
//! (the base latency ± 20%), the tool answering at once in-process.
//!
//! Reply-to-durable is measured without touching the engine: the bench's provider notes when
//! each reply arrives (per run) — the instant its latency has passed, whenever the engine
//! gets to it — and a [`TimedStore`] times the next commit of that run from then until the
//! SQLite writer has committed it ([`crate::store::Store::submit_timed`]). Every other write
//! goes straight to the SQLite store.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::workload::{spec, text, turn_cap};
use crate::exec::{Engine, EngineConfig};
use crate::machine::{ModelReply, Role, RunId, ToolCallRequest, ToolSpec};
use crate::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};
use crate::store::{Durability, SqliteStore, Store, TimedStore, Write};
use crate::tool::FnTool;

/// The seed of the latency generator: the same runs get the same latencies every time.
const SEED: u64 = 0x5EED_0005;

/// What W5 runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct W5Options {
    /// Runs started together.
    pub(crate) runs: usize,
    /// Tool rounds per run (then a final answer).
    pub(crate) rounds: usize,
    /// The model's base latency; each reply takes 80–120% of it.
    pub(crate) model_latency: Duration,
}

/// What W5 measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct W5 {
    /// Runs started together.
    pub(crate) runs: usize,
    /// Tool rounds per run.
    pub(crate) rounds: usize,
    /// Wall time from the first start to the last end, ms.
    pub(crate) wall_ms: f64,
    /// The runs' model latency alone: the longest run's sum of reply latencies, ms.
    pub(crate) ideal_ms: f64,
    /// `wall_ms / ideal_ms`.
    pub(crate) wall_over_ideal: f64,
    /// From the first start until every run had made its first model call, ms: the ideal
    /// counts model latency only, as if every run called its model at once, so this is part
    /// of what the wall has over the ideal.
    #[serde(default)]
    pub(crate) all_calling_ms: f64,
    /// Transitions committed, all runs.
    pub(crate) transitions: u64,
    /// Transitions per second of wall time.
    pub(crate) per_s: f64,
    /// SQLite transactions committed (one WAL fsync each at `FULL`).
    pub(crate) commits: u64,
    /// Commits per second of wall time.
    pub(crate) commits_per_s: f64,
    /// Transitions per commit, i.e. per fsync.
    pub(crate) transitions_per_fsync: f64,
    /// Replies followed to durability.
    pub(crate) replies: usize,
    /// Median delay from a model reply arriving to its transition being durable, ms.
    pub(crate) reply_p50_ms: f64,
    /// 99th percentile of the same, ms.
    pub(crate) reply_p99_ms: f64,
    /// Resident memory just before the runs started, bytes.
    pub(crate) base_rss: u64,
    /// Peak resident memory while they ran, bytes.
    pub(crate) peak_rss: u64,
    /// `(peak_rss - base_rss) / runs`: every run is in flight at the peak.
    pub(crate) rss_per_run: f64,
    /// Database bytes per transition (after a WAL checkpoint).
    pub(crate) bytes_per_transition: f64,
    /// Bytes the process handed to `write` calls while the runs ran (WAL frames and the
    /// checkpoints copying them back), per transition: what the pages each write touches
    /// cost. 0 where there is no procfs.
    #[serde(default)]
    pub(crate) written_per_transition: f64,
    /// The nice value the SQLite writer thread ran at (`store::sqlite_priority`); `None`
    /// where a thread's priority is not its own.
    #[serde(default)]
    pub(crate) writer_nice: Option<i32>,
    /// The nice value of the thread that opened the store, for comparison.
    #[serde(default)]
    pub(crate) process_nice: Option<i32>,
    /// Whether the WAL checkpointer gave way (ran at nice 19 until the WAL was twice its
    /// threshold long; `SqliteStore::checkpointer_gives_way`).
    #[serde(default)]
    pub(crate) checkpointer_gives_way: bool,
}

/// A uniform draw in `[0, 1)` for `(run, turn)`: splitmix64 over the seed and both indices.
fn draw(run: usize, turn: usize) -> f64 {
    let mut z = SEED ^ ((run as u64) << 16) ^ turn as u64;
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The latency of `run`'s reply to `turn`: the base ± 20%.
fn latency(base: Duration, run: usize, turn: usize) -> Duration {
    base.mul_f64(0.8 + 0.4 * draw(run, turn))
}

/// When each run's latest reply arrived (ns since `origin`, 0 = none outstanding).
struct Replies {
    origin: Instant,
    at: Vec<AtomicU64>,
    /// When the last run to make its first model call made it (ns since `origin`).
    last_first_call: AtomicU64,
}

impl Replies {
    fn now_ns(&self) -> u64 {
        (self.origin.elapsed().as_nanos() as u64).max(1)
    }
}

/// The run index a W5 run id or goal carries (`w5-0000042`).
fn index_of(tagged: &str) -> Option<usize> {
    tagged
        .split_whitespace()
        .next()?
        .strip_prefix("w5-")?
        .parse()
        .ok()
}

fn run_id(i: usize) -> String {
    format!("w5-{i:07}")
}

/// The scripted model: `rounds` tool calls, then an answer, each after its seeded latency.
struct SlowModel {
    replies: Arc<Replies>,
    rounds: usize,
    cap: u64,
    base: Duration,
    call_text: String,
    answer: String,
}

impl ModelProvider for SlowModel {
    fn describe(&self) -> String {
        "bench:w5".into()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        _tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let run = request
                .messages
                .iter()
                .find(|m| m.role == Role::User)
                .and_then(|m| index_of(m.content.as_deref()?))
                .unwrap_or(0);
            let turn = self
                .cap
                .saturating_sub(request.remaining.turns.unwrap_or(self.cap))
                as usize;
            if turn == 0 {
                let now = self.replies.now_ns();
                self.replies
                    .last_first_call
                    .fetch_max(now, Ordering::AcqRel);
            }
            // The reply arrives when its latency has passed: timed from then, not from when
            // this future is next polled, so a run the engine is slow to get back to counts
            // that wait too.
            let arrives = self.replies.now_ns() + latency(self.base, run, turn).as_nanos() as u64;
            tokio::time::sleep_until((self.replies.origin + Duration::from_nanos(arrives)).into())
                .await;
            if let Some(slot) = self.replies.at.get(run) {
                slot.store(arrives, Ordering::Release);
            }
            let reply = if turn < self.rounds {
                let call = ToolCallRequest::new(format!("c{turn}"), "lookup", json!({"q": "x"}));
                ModelReply {
                    text: Some(self.call_text.clone()),
                    ..ModelReply::tools(vec![call])
                }
            } else {
                ModelReply::text(self.answer.clone())
            };
            Ok(reply.with_usage(100, 50))
        })
    }
}

/// A line of `/proc/self/status` (`VmRSS`, `VmHWM`) in bytes; 0 where there is no procfs.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Bytes this process has passed to `write` calls so far (`wchar` of `/proc/self/io`,
/// whatever the page cache then did with them); 0 where there is no procfs.
fn bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The `q` quantile of sorted microsecond samples, in ms.
fn quantile_ms(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    f64::from(sorted[((sorted.len() - 1) as f64 * q).round() as usize]) / 1000.0
}

/// Runs W5 once on a fresh database at `db`. Peak memory is the process's: run it in a
/// process of its own for a clean figure.
pub(crate) async fn w5(db: &Path, o: W5Options) -> Result<W5, super::BenchError> {
    let sqlite = Arc::new(SqliteStore::open(db, Durability::Full)?);
    if let Some(nice) =
        crate::store::sqlite_priority::nice_from_env().map_err(super::BenchError::Process)?
    {
        sqlite.set_writer_nice(nice)?;
    }
    let empty = sqlite.size_bytes()?;
    let replies = Arc::new(Replies {
        origin: Instant::now(),
        at: (0..o.runs).map(|_| AtomicU64::new(0)).collect(),
        last_first_call: AtomicU64::new(0),
    });
    let origin = replies.origin;
    let first_calls = replies.clone();
    // The first commit of a run after a reply is timed from the reply's arrival.
    let stamps = replies.clone();
    let store = Arc::new(TimedStore::timed_from(sqlite.clone(), move |write| {
        let run = match write {
            Write::Commit(c) => &c.run,
            Write::Commits(cs) => &cs.first()?.run,
            _ => return None,
        };
        let slot = stamps.at.get(index_of(run.as_str())?)?;
        let replied = slot.swap(0, Ordering::AcqRel);
        (replied != 0).then(|| stamps.origin + Duration::from_nanos(replied))
    }));
    let engine = Engine::with_store(
        store.clone(),
        EngineConfig {
            max_concurrent_runs: o.runs,
            ..EngineConfig::default()
        },
    );
    let cap = turn_cap(o.rounds);
    engine.register_provider(
        "scripted",
        Arc::new(SlowModel {
            replies,
            rounds: o.rounds,
            cap,
            base: o.model_latency,
            call_text: text("assistant"),
            answer: text("answer"),
        }),
    );
    let result = text("tool result");
    let tool = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("lookup", "returns 200 bytes")
    };
    engine.register_tool(Arc::new(FnTool::new(tool, move |_, _| {
        Ok(json!(result.clone()))
    })));
    let ideal = (0..o.runs)
        .map(|r| (0..=o.rounds).map(|t| latency(o.model_latency, r, t)).sum())
        .max()
        .unwrap_or(Duration::ZERO);
    let spec = spec(o.rounds, None);
    let goals: Vec<String> = (0..o.runs).map(|i| text(&run_id(i))).collect();
    let commits_before = sqlite.stats().transactions.load(Ordering::Relaxed);

    // Forget the peak so far (Linux: writing 5 to clear_refs resets VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let base_rss = status_bytes("VmRSS");
    let written_before = bytes_written();
    let started = Instant::now();
    // Each run is started and waited for in one future: nobody holds a run's handle (and its
    // trace subscription) while the others start.
    let ends = join_all(goals.iter().enumerate().map(|(i, goal)| {
        let start = engine
            .start(spec.clone(), goal)
            .with_id(RunId::new(run_id(i)));
        async move { start.await?.wait().await }
    }))
    .await;
    let mut transitions = 0;
    for end in ends {
        transitions += end?.state.seq();
    }
    let wall = started.elapsed();
    let all_calling = (origin
        + Duration::from_nanos(first_calls.last_first_call.load(Ordering::Acquire)))
    .saturating_duration_since(started);
    let peak_rss = status_bytes("VmHWM").max(base_rss);
    let written = bytes_written().saturating_sub(written_before);
    let commits = sqlite.stats().transactions.load(Ordering::Relaxed) - commits_before;
    drop(engine);
    super::workload::checkpoint(Some(db))?;
    let bytes = sqlite.size_bytes()?.saturating_sub(empty);
    let s = store.samples();
    let secs = wall.as_secs_f64();
    Ok(W5 {
        runs: o.runs,
        rounds: o.rounds,
        wall_ms: secs * 1000.0,
        ideal_ms: ideal.as_secs_f64() * 1000.0,
        wall_over_ideal: secs / ideal.as_secs_f64().max(f64::MIN_POSITIVE),
        all_calling_ms: all_calling.as_secs_f64() * 1000.0,
        transitions,
        per_s: transitions as f64 / secs,
        commits,
        commits_per_s: commits as f64 / secs,
        transitions_per_fsync: transitions as f64 / commits.max(1) as f64,
        replies: s.len(),
        reply_p50_ms: quantile_ms(&s, 0.5),
        reply_p99_ms: quantile_ms(&s, 0.99),
        writer_nice: sqlite.writer_nice(),
        process_nice: crate::store::sqlite_priority::own_nice(),
        checkpointer_gives_way: sqlite.checkpointer_gives_way(),
        base_rss,
        peak_rss,
        rss_per_run: peak_rss.saturating_sub(base_rss) as f64 / o.runs.max(1) as f64,
        bytes_per_transition: bytes as f64 / transitions.max(1) as f64,
        written_per_transition: written as f64 / transitions.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_stay_within_twenty_percent_and_repeat() {
        let base = Duration::from_millis(1000);
        for run in 0..200 {
            for turn in 0..4 {
                let l = latency(base, run, turn);
                assert!(l >= Duration::from_millis(800) && l < Duration::from_millis(1200));
                assert_eq!(l, latency(base, run, turn));
            }
        }
        assert_ne!(latency(base, 1, 0), latency(base, 2, 0), "runs differ");
    }

    #[test]
    fn bytes_written_count_what_this_process_writes() {
        if !Path::new("/proc/self/io").exists() {
            assert_eq!(bytes_written(), 0);
            return;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let before = bytes_written();
        std::fs::write(dir.path().join("f"), vec![7u8; 64 * 1024]).expect("writes");
        let after = bytes_written();
        assert!(after >= before + 64 * 1024, "{before} then {after}");
    }

    #[test]
    fn a_run_index_is_read_back_from_its_id_and_goal() {
        assert_eq!(index_of(&run_id(42)), Some(42));
        assert_eq!(index_of(&text(&run_id(9_999_999))), Some(9_999_999));
        assert_eq!(index_of("goal lorem"), None);
    }
}
