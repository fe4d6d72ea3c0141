//! `runtape bench --db postgres://…`: the workloads on a shared database, and the same rows on
//! a SQLite file on this machine for comparison.
//!
//! - **W1** one run of R tool rounds, in this process.
//! - **W2** N runs of 5 rounds started together, in this process (group commit across runs).
//! - **W2 × k workers** (PostgreSQL only): the N runs queued (`run --detach`), then driven by k
//!   `runtape worker` processes; wall time from the workers' start until every run completed.
//!   Their tool is a command (`cat`), so each call starts a process, which the in-process rows
//!   do not pay.
//!
//! Each row reports transitions per second and the commit latency (from submitting a
//! transition to its acknowledgement as durable), p50 and p99; worker processes report theirs
//! when they stop, and the row shows the median p50 and the worst p99 of its workers.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::workload::{equip, runs_together, spec, text, turn_cap};
use super::{BenchError, BenchOptions};
use crate::exec::{Engine, EngineConfig};
use crate::machine::RunId;
use crate::receipt::ReceiptSigner;
use crate::store::{Durability, Latency, PostgresStore, RunStatus, SqliteStore, Store, TimedStore};

/// One measured row.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SharedRow {
    /// What was measured.
    pub(crate) workload: String,
    /// The store: `postgres` or `sqlite`.
    pub(crate) store: &'static str,
    /// Runs driven.
    pub(crate) runs: usize,
    /// Transitions committed.
    pub(crate) transitions: u64,
    /// Wall time, ms.
    pub(crate) wall_ms: f64,
    /// Transitions per second.
    pub(crate) per_s: f64,
    /// Commit latency.
    pub(crate) latency: Latency,
}

/// Every row.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SharedReport {
    /// The rows, PostgreSQL first.
    pub(crate) rows: Vec<SharedRow>,
}

/// Measures W1, W2 and W2 with 1, 2 and 4 worker processes on the database at `url`, then W1
/// and W2 on a SQLite file in `opts.dir`.
pub(crate) async fn run(
    url: &str,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<SharedReport, BenchError> {
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| BenchError::Process(format!("cannot create {}: {e}", opts.dir.display())))?;
    let pg: Arc<dyn Store> = Arc::new(PostgresStore::open(url)?);
    let mut rows = Vec::new();
    progress("W1 on PostgreSQL");
    rows.push(w1(pg.clone(), "postgres", opts.rounds).await?);
    progress("W2 on PostgreSQL");
    rows.push(w2(pg.clone(), "postgres", opts.w2_runs, opts.w2_rounds).await?);
    if let Some(exe) = &opts.exe {
        for workers in [1, 2, 4] {
            progress(&format!("W2 with {workers} worker process(es)"));
            rows.push(with_workers(url, exe, opts, workers).await?);
        }
    }
    let sqlite = |name: &str| -> Result<Arc<dyn Store>, BenchError> {
        let path = opts.dir.join(name);
        let _ = std::fs::remove_file(&path);
        Ok(Arc::new(SqliteStore::open(&path, Durability::Full)?))
    };
    progress("W1 on SQLite");
    rows.push(w1(sqlite("shared-w1.db")?, "sqlite", opts.rounds).await?);
    progress("W2 on SQLite");
    rows.push(
        w2(
            sqlite("shared-w2.db")?,
            "sqlite",
            opts.w2_runs,
            opts.w2_rounds,
        )
        .await?,
    );
    for name in ["shared-w1.db", "shared-w2.db"] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(opts.dir.join(format!("{name}{suffix}")));
        }
    }
    Ok(SharedReport { rows })
}

fn row(
    workload: String,
    store: &'static str,
    runs: usize,
    transitions: u64,
    wall: Duration,
    latency: Latency,
) -> SharedRow {
    SharedRow {
        workload,
        store,
        runs,
        transitions,
        wall_ms: wall.as_secs_f64() * 1e3,
        per_s: transitions as f64 / wall.as_secs_f64(),
        latency,
    }
}

async fn w1(
    store: Arc<dyn Store>,
    name: &'static str,
    rounds: usize,
) -> Result<SharedRow, BenchError> {
    let timed = Arc::new(TimedStore::new(store));
    let engine = Engine::with_store(timed.clone(), EngineConfig::default());
    equip(&engine, rounds, turn_cap(rounds));
    let started = Instant::now();
    let end = engine
        .start(spec(rounds, None), &text("goal"))
        .await?
        .wait()
        .await?;
    let wall = started.elapsed();
    Ok(row(
        format!("W1 one run, {rounds} rounds"),
        name,
        1,
        end.state.seq(),
        wall,
        timed.latency(),
    ))
}

async fn w2(
    store: Arc<dyn Store>,
    name: &'static str,
    runs: usize,
    rounds: usize,
) -> Result<SharedRow, BenchError> {
    let timed = Arc::new(TimedStore::new(store));
    let (wall, transitions) = runs_together(timed.clone(), runs, rounds).await?;
    Ok(row(
        format!("W2 {runs} runs × {rounds} rounds, one process"),
        name,
        runs,
        transitions,
        wall,
        timed.latency(),
    ))
}

/// The spec file the worker rows run: R rounds of a `cat` tool call, then an answer.
fn worker_spec(rounds: usize) -> String {
    let mut replies = String::new();
    for i in 0..rounds {
        replies.push_str(&format!(
            "  {{ tool_calls = [{{ name = \"echo\", arguments = {{ n = {i} }} }}] }},\n"
        ));
    }
    format!(
        "goal = \"bench\"\n[[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [\n{replies}  {{ text = \"done\" }},\n]\n\
         [[tools]]\nname = \"echo\"\ndescription = \"echo\"\ncommand = [\"cat\"]\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"echo\"]\n[agents.budget]\nmax_turns = {}\n",
        rounds + 2
    )
}

async fn with_workers(
    url: &str,
    exe: &Path,
    opts: &BenchOptions,
    workers: usize,
) -> Result<SharedRow, BenchError> {
    let dir = opts.dir.join(format!("workers-{workers}"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Process(format!("cannot create {}: {e}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| BenchError::Process(format!("{}: {e}", dir.display())))?;
    let path = dir.join("bench.toml");
    std::fs::write(&path, worker_spec(opts.w2_rounds))
        .map_err(|e| BenchError::Process(format!("cannot write {}: {e}", path.display())))?;
    let file = crate::config::load(&path).map_err(|e| BenchError::Process(e.to_string()))?;
    let store = PostgresStore::open(url)?;
    let signer = Arc::new(ReceiptSigner::unsigned());
    let mut ids = Vec::new();
    for _ in 0..opts.w2_runs {
        let setup = file
            .setup
            .to_json()
            .map_err(|e| BenchError::Process(e.to_string()))?;
        ids.push(
            crate::worker::enqueue(
                &store,
                signer.clone(),
                crate::exec::new_run_id(),
                &file.spec,
                "bench",
                setup,
            )
            .await?,
        );
    }
    let concurrency = opts.w2_runs.div_ceil(workers).max(1).to_string();
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..workers {
        let child = Command::new(exe)
            .args([
                "--db",
                url,
                "worker",
                "--concurrency",
                &concurrency,
                "--spec-dir",
            ])
            .arg(&dir)
            .env("RUNTAPE_WORKER_POLL_MS", "20")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BenchError::Process(format!("cannot start a worker: {e}")))?;
        children.push(child);
    }
    let done = |store: &PostgresStore, ids: &[RunId]| -> Result<Option<u64>, BenchError> {
        let mut transitions = 0;
        for id in ids {
            match store.run(id)? {
                Some(r) if r.status == RunStatus::Completed => transitions += r.seq,
                Some(r) if r.status.is_terminal() => {
                    return Err(BenchError::Process(format!(
                        "bench run {id} ended {}",
                        r.status
                    )));
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(transitions))
    };
    let transitions = loop {
        if let Some(t) = done(&store, &ids)? {
            break t;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(BenchError::Process(
                "the workers did not finish in 10 minutes".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let wall = started.elapsed();
    let mut p50s = Vec::new();
    let mut p99 = 0;
    let mut commits = 0;
    for child in children {
        // SIGTERM drains the worker. kill(2) itself, not the `kill` program, which a slim
        // machine may lack (the worker would then never stop). A worker already gone is fine.
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let out = child
            .wait_with_output()
            .map_err(|e| BenchError::Process(e.to_string()))?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["event"] == "worker.stopped" {
                let n = v["commits"].as_u64().unwrap_or(0);
                if n > 0 {
                    commits += n as usize;
                    p50s.push(v["commit_p50_us"].as_u64().unwrap_or(0) as u32);
                    p99 = p99.max(v["commit_p99_us"].as_u64().unwrap_or(0) as u32);
                }
            }
        }
    }
    p50s.sort_unstable();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(row(
        format!(
            "W2 {} runs × {} rounds, {workers} worker process(es)",
            opts.w2_runs, opts.w2_rounds
        ),
        "postgres",
        opts.w2_runs,
        transitions,
        wall,
        Latency {
            commits,
            p50_us: p50s.get(p50s.len() / 2).copied().unwrap_or(0),
            p99_us: p99,
        },
    ))
}
