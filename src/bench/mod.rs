//! `runtape bench`: checkpointing speed, storage, resume and replay, measured on the disk it
//! runs on. Every workload is offline: a scripted provider with zero latency, every message
//! exactly 200 bytes, one call per round to a trivial in-process tool. Figures are medians
//! over repetitions.
//!
//! - **raw**: single-row inserts (~500 bytes, one transaction each, WAL) at `synchronous=FULL`
//!   and `NORMAL`: the disk's commit rate, the yardstick for the rest.
//! - **W1**: one run of R tool rounds then an answer, file database, `FULL`; and the same at
//!   `NORMAL`.
//! - **W1-growth**: W1 at several R: bytes and time per transition must stay flat.
//! - **W2**: many runs of 5 rounds started together on one database (group commit).
//! - **W3**: on a parked 1,001-round run, a new process opens the database, rebuilds the run's
//!   state and conversations and commits one durable step; and `log --json`, `verify` as whole
//!   processes.
//! - **W4**: W1 with the in-memory store: the engine's own overhead.
//! - **resume**: `ops::resume` (what `runtape resume RUN --raise …` runs) on runs parked at
//!   two history lengths (`resume.rs`): both times and their ratio, which should stay near 1;
//!   and `runtape resume` itself, a whole process, on runs of the same lengths from a spec file.
//! - **W5**: 10,000 runs started together on one file at `FULL`, each 3 tool rounds and an
//!   answer from a model that takes 1 s ± 20% per reply (`w5.rs`); each repetition in a
//!   process of its own, so its peak memory is its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::exec::EngineError;
use crate::store::Durability;

mod resume;
pub(crate) mod shared;
mod w5;
mod workload;

pub(crate) use w5::W5;

/// What to measure.
#[derive(Clone, Debug)]
pub(crate) struct BenchOptions {
    /// Where the databases go (a scratch directory on the disk to measure).
    pub(crate) dir: PathBuf,
    /// W1 rounds.
    pub(crate) rounds: usize,
    /// Repetitions; medians are reported.
    pub(crate) reps: usize,
    /// W1-growth sizes.
    pub(crate) growth: Vec<usize>,
    /// W2: runs started together, and rounds each.
    pub(crate) w2_runs: usize,
    /// W2 rounds per run.
    pub(crate) w2_rounds: usize,
    /// W3: rounds of the parked run.
    pub(crate) w3_rounds: usize,
    /// Time travel: rounds of the long run (3,333 rounds ≈ 10,000 transitions).
    pub(crate) travel_rounds: usize,
    /// The resume case: rounds of the two parked runs (3 transitions a round).
    pub(crate) resume_rounds: [usize; 2],
    /// Raw limit: inserts per measurement.
    pub(crate) raw_commits: usize,
    /// The `runtape` binary, for whole-process timings (W3); `None` skips them.
    pub(crate) exe: Option<PathBuf>,
    /// Measure only these workloads (`raw`, `w1`, `growth`, `w2`, `w3`, `w4`, `travel`,
    /// `w5`); empty = all.
    pub(crate) only: Vec<String>,
    /// W5: runs started together, rounds each, and the model's base latency.
    pub(crate) w5: w5::W5Options,
}

/// The workloads `--only` can name (any case). `runtape bench` refuses any other name, so a
/// typo measures nothing only by saying so.
pub(crate) const WORKLOADS: [&str; 9] = [
    "raw", "w1", "growth", "w2", "w3", "w4", "travel", "resume", "w5",
];

impl BenchOptions {
    /// Whether workload `w` (one of [`WORKLOADS`]) is to be measured: every one when `--only`
    /// names none.
    fn wants(&self, w: &str) -> bool {
        debug_assert!(WORKLOADS.contains(&w), "{w} is not in WORKLOADS");
        self.only.is_empty() || self.only.iter().any(|o| o.eq_ignore_ascii_case(w))
    }
}

impl BenchOptions {
    /// The workloads as the issue states them (W1 R=500, growth 125…5,000, W2 200×5, W3 1,001).
    pub(crate) fn full(dir: PathBuf) -> Self {
        BenchOptions {
            dir,
            rounds: 500,
            reps: 3,
            growth: vec![125, 250, 500, 1_000, 5_000],
            w2_runs: 200,
            w2_rounds: 5,
            w3_rounds: 1_001,
            travel_rounds: 3_333,
            resume_rounds: [100, 5_000],
            raw_commits: 1_000,
            exe: None,
            only: Vec::new(),
            w5: w5::W5Options {
                runs: 10_000,
                rounds: 3,
                model_latency: Duration::from_millis(1_000),
            },
        }
    }

    /// A fast pass with small sizes (seconds), for checking the command works.
    pub(crate) fn quick(dir: PathBuf) -> Self {
        BenchOptions {
            dir,
            rounds: 20,
            reps: 1,
            growth: vec![10, 40],
            w2_runs: 10,
            w2_rounds: 2,
            w3_rounds: 30,
            travel_rounds: 40,
            resume_rounds: [10, 100],
            raw_commits: 50,
            exe: None,
            only: Vec::new(),
            w5: w5::W5Options {
                runs: 20,
                rounds: 3,
                model_latency: Duration::from_millis(20),
            },
        }
    }
}

/// Everything measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    /// Raw single-row commits per second.
    pub(crate) raw: Raw,
    /// One durable run at `synchronous=FULL`.
    pub(crate) w1: W1,
    /// The same at `synchronous=NORMAL`.
    pub(crate) w1_normal: W1,
    /// W1 at several sizes.
    pub(crate) growth: Vec<Growth>,
    /// Many runs at once.
    pub(crate) w2: W2,
    /// Resume, log and verify.
    pub(crate) w3: W3,
    /// In memory.
    pub(crate) w4: W4,
    /// Time travel on a long run.
    pub(crate) travel: Travel,
    /// Resume at two history lengths.
    pub(crate) resume: resume::ResumeGrowth,
    /// Many concurrent model-bound runs.
    pub(crate) w5: W5,
}

/// Time travel on a run of about 10,000 transitions: each a whole `runtape` process.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Travel {
    /// Transitions in the run.
    pub(crate) transitions: u64,
    /// `log --json` to /dev/null, ms.
    pub(crate) log_ms: Option<f64>,
    /// `show RUN@SEQ` at a step in the middle, ms.
    pub(crate) show_ms: Option<f64>,
    /// `verify`, ms.
    pub(crate) verify_ms: Option<f64>,
}

/// The disk's commit rate.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Raw {
    /// Commits per second at `synchronous=FULL`.
    pub(crate) full_per_s: f64,
    /// Commits per second at `synchronous=NORMAL`.
    pub(crate) normal_per_s: f64,
}

/// W1.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct W1 {
    /// Rounds.
    pub(crate) rounds: usize,
    /// Whole-run wall time, ms.
    pub(crate) wall_ms: f64,
    /// Transitions committed.
    pub(crate) transitions: u64,
    /// Transitions per second.
    pub(crate) per_s: f64,
    /// Transitions per second as a fraction of raw commits per second (at the same durability).
    pub(crate) fraction_of_raw: f64,
    /// Database bytes.
    pub(crate) bytes: u64,
    /// Bytes per transition.
    pub(crate) bytes_per_transition: f64,
}

/// One W1-growth size.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Growth {
    /// Rounds.
    pub(crate) rounds: usize,
    /// Transitions.
    pub(crate) transitions: u64,
    /// Bytes per transition.
    pub(crate) bytes_per_transition: f64,
    /// Microseconds per transition.
    pub(crate) us_per_transition: f64,
}

/// W2.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct W2 {
    /// Runs started together.
    pub(crate) runs: usize,
    /// Wall time, ms.
    pub(crate) wall_ms: f64,
    /// Runs per second.
    pub(crate) runs_per_s: f64,
    /// Transitions per second, all runs together.
    pub(crate) per_s: f64,
    /// Transitions per second as a multiple of raw `FULL` commits per second.
    pub(crate) multiple_of_raw: f64,
}

/// W3.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct W3 {
    /// Transitions in the parked run.
    pub(crate) transitions: u64,
    /// New process: open, rebuild, one durable step — whole-process wall, ms.
    pub(crate) resume_process_ms: Option<f64>,
    /// The same, in-process part only, ms.
    pub(crate) resume_in_process_ms: f64,
    /// `runtape log --json` of the run to /dev/null, whole process, ms.
    pub(crate) log_process_ms: Option<f64>,
    /// `runtape verify` of the run, whole process, ms.
    pub(crate) verify_process_ms: Option<f64>,
}

/// W4.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct W4 {
    /// Transitions.
    pub(crate) transitions: u64,
    /// Transitions per second.
    pub(crate) per_s: f64,
}

/// A benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A child process failed.
    #[error("{0}")]
    Process(String),
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A fresh database path in `dir`.
fn fresh(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
    }
    p
}

/// Runs every workload; `progress` hears what is being measured.
pub(crate) async fn run(
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, BenchError> {
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| BenchError::Process(format!("cannot create {}: {e}", opts.dir.display())))?;
    let reps = opts.reps.max(1);

    let mut full = Vec::new();
    let mut normal = Vec::new();
    if opts.wants("raw") || opts.wants("w1") || opts.wants("w2") {
        progress("raw commit rate");
    }
    for i in 0..if opts.wants("raw") || opts.wants("w1") || opts.wants("w2") {
        reps
    } else {
        0
    } {
        let d = workload::raw_commits(
            &fresh(&opts.dir, &format!("raw-full-{i}.db")),
            opts.raw_commits,
            Durability::Full,
        )?;
        full.push(opts.raw_commits as f64 / d.as_secs_f64());
        let d = workload::raw_commits(
            &fresh(&opts.dir, &format!("raw-normal-{i}.db")),
            opts.raw_commits,
            Durability::Normal,
        )?;
        normal.push(opts.raw_commits as f64 / d.as_secs_f64());
    }
    let raw = Raw {
        full_per_s: median(full),
        normal_per_s: median(normal),
    };

    if opts.wants("w1") {
        progress("W1 durable run, FULL and NORMAL");
    }
    let w1 = w1_at(opts, reps, Durability::Full, raw.full_per_s).await?;
    let w1_normal = w1_at(opts, reps, Durability::Normal, raw.normal_per_s).await?;

    let mut growth = Vec::new();
    for &rounds in opts.growth.iter().filter(|_| opts.wants("growth")) {
        progress(&format!("W1-growth R={rounds}"));
        let mut runs = Vec::new();
        for i in 0..reps {
            runs.push(
                workload::one_run(
                    Some(&fresh(&opts.dir, &format!("growth-{rounds}-{i}.db"))),
                    rounds,
                    Durability::Full,
                )
                .await?,
            );
        }
        runs.sort_by_key(|f| f.wall);
        let f = runs[runs.len() / 2];
        growth.push(Growth {
            rounds,
            transitions: f.transitions,
            bytes_per_transition: f.bytes as f64 / f.transitions as f64,
            us_per_transition: f.wall.as_secs_f64() * 1e6 / f.transitions as f64,
        });
    }

    let mut w2s = vec![workload::RunFigures::default()];
    if opts.wants("w2") {
        progress("W2 many runs");
        w2s.clear();
    }
    for i in 0..if opts.wants("w2") { reps } else { 0 } {
        w2s.push(
            workload::many_runs(
                &fresh(&opts.dir, &format!("w2-{i}.db")),
                opts.w2_runs,
                opts.w2_rounds,
            )
            .await?,
        );
    }
    w2s.sort_by_key(|f| f.wall);
    let f = w2s[w2s.len() / 2];
    let per_s = f.transitions as f64 / f.wall.as_secs_f64();
    let w2 = W2 {
        runs: opts.w2_runs,
        wall_ms: ms(f.wall),
        runs_per_s: opts.w2_runs as f64 / f.wall.as_secs_f64(),
        per_s,
        multiple_of_raw: per_s / raw.full_per_s,
    };

    let w3 = if opts.wants("w3") {
        progress("W3 resume, log, verify");
        w3(opts, reps).await?
    } else {
        W3 {
            transitions: 0,
            resume_process_ms: None,
            resume_in_process_ms: 0.0,
            log_process_ms: None,
            verify_process_ms: None,
        }
    };

    let mut w4s = vec![workload::RunFigures::default()];
    if opts.wants("w4") {
        progress("W4 in memory");
        w4s.clear();
    }
    for _ in 0..if opts.wants("w4") { reps } else { 0 } {
        w4s.push(workload::one_run(None, opts.rounds, Durability::Full).await?);
    }
    w4s.sort_by_key(|f| f.wall);
    let f = w4s[w4s.len() / 2];
    let w4 = W4 {
        transitions: f.transitions,
        per_s: f.transitions as f64 / f.wall.as_secs_f64(),
    };

    let travel = if opts.wants("travel") {
        progress("time travel on a long run");
        travel(opts, reps).await?
    } else {
        Travel::default()
    };

    let resume = if opts.wants("resume") {
        progress("resume at two history lengths");
        resume::resume_growth(opts, reps).await?
    } else {
        resume::ResumeGrowth::default()
    };

    let w5 = if opts.wants("w5") {
        progress(&format!(
            "W5 {} model-bound runs × {} rounds together",
            opts.w5.runs, opts.w5.rounds
        ));
        w5_median(opts, reps).await?
    } else {
        W5::default()
    };

    for entry in std::fs::read_dir(&opts.dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().contains(".db") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(Report {
        raw,
        w1,
        w1_normal,
        growth,
        w2,
        w3,
        w4,
        travel,
        resume,
        w5,
    })
}

/// W1 at `durability`, the median repetition by wall time (zeros unless W1 is wanted);
/// `raw_per_s` is the raw commit rate at the same durability.
async fn w1_at(
    opts: &BenchOptions,
    reps: usize,
    durability: Durability,
    raw_per_s: f64,
) -> Result<W1, BenchError> {
    let mut w1s = vec![workload::RunFigures::default()];
    if opts.wants("w1") {
        w1s.clear();
    }
    for i in 0..if opts.wants("w1") { reps } else { 0 } {
        let name = format!("w1-{}-{i}.db", durability.name());
        w1s.push(workload::one_run(Some(&fresh(&opts.dir, &name)), opts.rounds, durability).await?);
    }
    w1s.sort_by_key(|f| f.wall);
    let f = w1s[w1s.len() / 2];
    let per_s = f.transitions as f64 / f.wall.as_secs_f64();
    Ok(W1 {
        rounds: opts.rounds,
        wall_ms: ms(f.wall),
        transitions: f.transitions,
        per_s,
        fraction_of_raw: per_s / raw_per_s,
        bytes: f.bytes,
        bytes_per_transition: f.bytes as f64 / f.transitions as f64,
    })
}

/// W5, the median repetition by wall time. With the binary at hand and more than one
/// repetition, each runs in a child process (`bench --only w5 --reps 1 --json`), so that no
/// repetition's peak memory is inflated or hidden by the memory an earlier one left behind.
async fn w5_median(opts: &BenchOptions, reps: usize) -> Result<W5, BenchError> {
    let mut all = Vec::new();
    for i in 0..reps {
        let db = fresh(&opts.dir, &format!("w5-{i}.db"));
        let figures = match &opts.exe {
            Some(exe) if reps > 1 => w5_child(exe, opts, &db)?,
            _ => w5::w5(&db, opts.w5).await?,
        };
        let _ = std::fs::remove_file(&db);
        all.push(figures);
    }
    all.sort_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms));
    Ok(all.swap_remove(all.len() / 2))
}

/// One W5 repetition in a child process.
fn w5_child(exe: &Path, opts: &BenchOptions, db: &Path) -> Result<W5, BenchError> {
    let dir = db.with_extension("dir");
    let out = Command::new(exe)
        .args(["bench", "--only", "w5", "--reps", "1", "--json"])
        .arg("--runs")
        .arg(opts.w5.runs.to_string())
        .arg("--rounds")
        .arg(opts.w5.rounds.to_string())
        .arg("--dir")
        .arg(&dir)
        .output()
        .map_err(|e| BenchError::Process(format!("cannot run {}: {e}", exe.display())))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(BenchError::Process(format!(
            "W5 repetition failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| BenchError::Process(format!("W5 repetition printed no report: {e}")))?;
    serde_json::from_value(report["w5"].clone())
        .map_err(|e| BenchError::Process(format!("W5 repetition printed no W5 figures: {e}")))
}

async fn w3(opts: &BenchOptions, reps: usize) -> Result<W3, BenchError> {
    let db = fresh(&opts.dir, "w3.db");
    let run = workload::parked_run(&db, opts.w3_rounds).await?;
    let store = crate::store::SqliteStore::open_existing(&db, Durability::Full)?;
    let transitions = crate::history::record(&store, &run)
        .map_err(|e| BenchError::Process(e.to_string()))?
        .seq;
    drop(store);
    let mut in_process = Vec::new();
    let mut process = Vec::new();
    let (mut log, mut verify) = (Vec::new(), Vec::new());
    for i in 0..reps {
        // Each probe needs a run at rest in BudgetExhausted: park a fresh copy.
        let copy = fresh(&opts.dir, &format!("w3-{i}.db"));
        std::fs::copy(&db, &copy).map_err(|e| BenchError::Process(e.to_string()))?;
        match &opts.exe {
            Some(exe) => {
                let started = Instant::now();
                let out = Command::new(exe)
                    .args(["bench", "--probe-resume", run.as_str(), "--db"])
                    .arg(&copy)
                    .output()
                    .map_err(|e| {
                        BenchError::Process(format!("cannot run {}: {e}", exe.display()))
                    })?;
                process.push(ms(started.elapsed()));
                if !out.status.success() {
                    return Err(BenchError::Process(format!(
                        "resume probe failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                let inner: f64 = String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(f64::NAN);
                in_process.push(inner);
                for (args, sink) in [
                    (vec!["log", run.as_str(), "--json"], &mut log),
                    (vec!["verify", run.as_str()], &mut verify),
                ] {
                    let started = Instant::now();
                    let status = Command::new(exe)
                        .args(&args)
                        .arg("--db")
                        .arg(&db)
                        .stdout(std::process::Stdio::null())
                        .status()
                        .map_err(|e| BenchError::Process(e.to_string()))?;
                    sink.push(ms(started.elapsed()));
                    if !status.success() {
                        return Err(BenchError::Process(format!(
                            "`runtape {}` failed",
                            args.join(" ")
                        )));
                    }
                }
            }
            None => in_process.push(probe_resume(&copy, &run).await?),
        }
    }
    let whole = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
    Ok(W3 {
        transitions,
        resume_process_ms: whole(process),
        resume_in_process_ms: median(in_process),
        log_process_ms: whole(log),
        verify_process_ms: whole(verify),
    })
}

/// `log --json`, `show RUN@SEQ` and `verify` of a long run, each a whole process.
async fn travel(opts: &BenchOptions, reps: usize) -> Result<Travel, BenchError> {
    let db = fresh(&opts.dir, "travel.db");
    let run = workload::parked_run(&db, opts.travel_rounds).await?;
    let store = crate::store::SqliteStore::open_existing(&db, Durability::Full)?;
    let transitions = crate::history::record(&store, &run)
        .map_err(|e| BenchError::Process(e.to_string()))?
        .seq;
    drop(store);
    let Some(exe) = &opts.exe else {
        return Ok(Travel {
            transitions,
            ..Travel::default()
        });
    };
    let middle = format!("{run}@{}", transitions / 2 + 1);
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..reps {
        for (i, args) in [
            vec!["log", run.as_str(), "--json"],
            vec!["show", &middle],
            vec!["verify", run.as_str()],
        ]
        .iter()
        .enumerate()
        {
            let started = Instant::now();
            let status = Command::new(exe)
                .args(args)
                .arg("--db")
                .arg(&db)
                .stdout(std::process::Stdio::null())
                .status()
                .map_err(|e| BenchError::Process(e.to_string()))?;
            times[i].push(ms(started.elapsed()));
            if !status.success() {
                return Err(BenchError::Process(format!(
                    "`runtape {}` failed",
                    args.join(" ")
                )));
            }
        }
    }
    let [log, show, verify] = times;
    Ok(Travel {
        transitions,
        log_ms: Some(median(log)),
        show_ms: Some(median(show)),
        verify_ms: Some(median(verify)),
    })
}

/// The in-process part of W3: open the database, rebuild the parked run's state and
/// conversations, commit one durable step (a budget raise). Returns milliseconds.
pub(crate) async fn probe_resume(
    db: &Path,
    run: &crate::machine::RunId,
) -> Result<f64, BenchError> {
    use crate::machine::{BudgetKey, EventBody, Scope};
    let started = Instant::now();
    let engine = crate::exec::Engine::open_with(db, crate::exec::EngineConfig::default())?;
    let rec = crate::history::record(engine.store().as_ref(), run)
        .map_err(|e| BenchError::Process(e.to_string()))?;
    let limit = rec.seq; // comfortably above the turns used
    engine
        .apply(
            run,
            EventBody::BudgetRaised {
                scope: Scope::Agent("bench".into()),
                key: BudgetKey::Turns,
                limit,
            },
        )
        .await?;
    Ok(ms(started.elapsed()))
}
