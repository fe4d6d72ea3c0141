//! `runtape worker`: drive runnable runs from a shared PostgreSQL database (see
//! [`crate::worker`]), or wake the due runs of a SQLite file (see [`crate::ops::due_runs`]),
//! logging one JSON object per line on stdout.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::common::{CliError, age, outln, postgres_url, print_json, shown};
use super::{DEFAULT_GRACE_MS, EXIT_INTERRUPTED, EXIT_OK};
use crate::clock::wall_ms;
use crate::exec::EngineConfig;
use crate::ops::driver;
use crate::ops::env_ms;
use crate::receipt::{DEFAULT_KEY_ENV, ReceiptSigner};
use crate::store::{PostgresStore, Store, WorkerInfo, owner_host, owner_id};
use crate::term::{note, say_line};
use crate::text::rfc3339;
use crate::worker::health::Health;
use crate::worker::metrics::Metrics;
use crate::worker::{WorkerExit, WorkerOptions, endpoint};

/// What `runtape worker` was asked for.
pub(crate) struct Args {
    pub(crate) db: PathBuf,
    pub(crate) spec_dir: Option<PathBuf>,
    pub(crate) concurrency: usize,
    pub(crate) grace_ms: Option<u64>,
    pub(crate) receipt_key: Option<PathBuf>,
    /// `--metrics-addr`: where to answer `/healthz` and `/metrics`, if anywhere.
    pub(crate) metrics_addr: Option<String>,
    /// `--stepped-clock`: every timer is due at once.
    pub(crate) stepped_clock: bool,
}

/// Runs the worker until a stop signal has drained it (exit 0) or a second one interrupted it
/// (exit 130).
pub(crate) async fn worker(args: Args) -> Result<u8, CliError> {
    if args.concurrency == 0 {
        return Err(CliError::usage(
            "--concurrency must be at least 1 (runs driven at once)",
        ));
    }
    let Some(url) = postgres_url(&args.db) else {
        return local(args).await;
    };
    let spec_dir = canonical_dir(args.spec_dir.as_deref().ok_or_else(|| {
        CliError::usage(
            "`runtape worker` on PostgreSQL needs --spec-dir DIR: the directory of the spec files whose runs it may drive",
        )
    })?)?;
    if let Some(path) = &args.receipt_key
        && let Ok(text) = std::fs::read_to_string(path)
    {
        crate::secrets::register_key_text("receipt-key", &text);
    }
    let receipts = ReceiptSigner::from_env_or_file(DEFAULT_KEY_ENV, args.receipt_key.as_deref())
        .map_err(|e| CliError::usage(e.to_string()))?;
    let grace = match args.grace_ms {
        Some(ms) => Duration::from_millis(ms),
        None => env_ms("RUNTAPE_STOP_GRACE_MS", DEFAULT_GRACE_MS, 0)?,
    };
    let engine = EngineConfig {
        receipts: Arc::new(receipts),
        lease_ttl: env_ms("RUNTAPE_LEASE_TTL_MS", 15_000, 100)?,
        max_concurrent_runs: args.concurrency,
        clock: clock_of(args.stepped_clock),
        ..EngineConfig::default()
    };
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::new());
    if let Some(addr) = &args.metrics_addr {
        let addr = endpoint::parse_addr(addr).map_err(CliError::usage)?;
        let listener = endpoint::bind(addr).await.map_err(|e| {
            CliError::usage(format!(
                "cannot listen on {addr} for health and metrics: {e}; pick another address with --metrics-addr"
            ))
        })?;
        let bound = listener
            .local_addr()
            .map_err(|e| CliError::internal(format!("cannot read the bound address: {e}")))?;
        log(
            serde_json::json!({"event": "worker.listening", "addr": bound.to_string(),
            "healthz": format!("http://{bound}/healthz"), "metrics": format!("http://{bound}/metrics")}),
        );
        tokio::spawn(endpoint::run(listener, metrics.clone(), health.clone()));
    }
    // The worker fires the schedules of its spec directory, queueing their runs.
    let schedules = Arc::new(crate::ops::schedule_fire::QueuedSchedules {
        spec_dir: spec_dir.display().to_string(),
        engine: engine.clone(),
    });
    let opts = WorkerOptions {
        spec_dir: spec_dir.clone(),
        concurrency: args.concurrency,
        engine,
        grace,
        poll: env_ms("RUNTAPE_WORKER_POLL_MS", 500, 10)?,
        skip_for: Duration::from_secs(60),
        metrics,
        health: health.clone(),
        schedules: Some(schedules),
    };
    let mut stops = stop_signals()?;
    // A database that is not up yet (the worker started first, or it is restarting) is
    // waited for, one line on stderr per attempt; anything else that keeps the worker from
    // connecting is an error.
    let waiting = |e: &crate::store::StoreError, wait: Duration| {
        health.unreachable_at_start(&e.to_string());
        note(&format!(
            "runtape worker: waiting for the database: {e}; trying again in {:.1} s",
            wait.as_secs_f64()
        ));
    };
    let store = tokio::select! {
        opened = PostgresStore::open_when_reachable(url, waiting) => Arc::new(opened?),
        signal = stops.recv() => {
            note(&format!(
                "runtape worker: {}: stopped before the database could be reached; nothing was claimed",
                signal.unwrap_or("closed")
            ));
            return Ok(EXIT_OK);
        }
    };
    let mut nonce = [0u8; 8];
    // Without OS randomness the nonce only tells workers of one process apart; the pid
    // already tells processes apart.
    let _ = getrandom::fill(&mut nonce);
    let info = WorkerInfo {
        id: owner_id(u64::from_le_bytes(nonce)),
        host: owner_host().to_owned(),
        pid: std::process::id(),
        spec_dir: spec_dir.display().to_string(),
        concurrency: args.concurrency,
        started_ms: wall_ms(),
    };
    let exit = crate::worker::run(store, info, opts, stops, log).await?;
    crate::tool::mcp::McpHub::global().shutdown().await;
    Ok(match exit {
        WorkerExit::Drained => EXIT_OK,
        WorkerExit::Interrupted => EXIT_INTERRUPTED,
    })
}

/// `runtape worker --db FILE` on a SQLite file: wakes the runs whose timers are due.
async fn local(args: Args) -> Result<u8, CliError> {
    if args.metrics_addr.is_some() {
        return Err(CliError::usage(
            "--metrics-addr is for a worker on PostgreSQL; a worker on a SQLite file answers no health or metrics requests",
        ));
    }
    let spec_dir = match &args.spec_dir {
        Some(dir) => Some(canonical_dir(dir)?.display().to_string()),
        None => None,
    };
    crate::ops::open_existing(&args.db)?;
    let settings = crate::ops::EngineSettings {
        receipt_key: args.receipt_key.clone(),
        stepped_clock: args.stepped_clock,
        warn: note,
        ..crate::ops::EngineSettings::default()
    };
    let config = crate::ops::engine_config(&settings)?;
    let store = crate::ops::open_store(&args.db, false)?;
    let grace = match args.grace_ms {
        Some(ms) => Duration::from_millis(ms),
        None => env_ms("RUNTAPE_STOP_GRACE_MS", DEFAULT_GRACE_MS, 0)?,
    };
    let opts = crate::ops::due_runs::LocalOptions {
        spec_dir,
        concurrency: args.concurrency,
        engine: EngineConfig {
            max_concurrent_runs: args.concurrency,
            ..config
        },
        grace,
        poll: env_ms(
            "RUNTAPE_WORKER_POLL_MS",
            crate::machine::wake::MAX_WAKE_POLL.as_millis() as u64,
            10,
        )?,
        skip_for: Duration::from_secs(60),
    };
    let stops = stop_signals()?;
    let exit = crate::ops::due_runs::run(store, opts, stops, log).await?;
    crate::tool::mcp::McpHub::global().shutdown().await;
    Ok(match exit {
        WorkerExit::Drained => EXIT_OK,
        WorkerExit::Interrupted => EXIT_INTERRUPTED,
    })
}

/// The engine's clock: the stepped one (`--stepped-clock`), else the system's.
fn clock_of(stepped: bool) -> Arc<dyn crate::exec::Clock> {
    if stepped {
        Arc::new(crate::exec::SteppedClock {
            start_ms: 1_700_000_000_000,
            step_ms: 1,
        })
    } else {
        EngineConfig::default().clock
    }
}

/// One log line: the event with its time and level first.
fn log(mut event: Value) {
    let level = match event.get("event").and_then(Value::as_str) {
        Some(e) if e.ends_with(".error") => "error",
        Some("run.left" | "worker.interrupted") => "warn",
        _ => "info",
    };
    let mut line = serde_json::Map::new();
    line.insert("ts".into(), Value::String(rfc3339(wall_ms())));
    line.insert("level".into(), Value::String(level.into()));
    if let Some(fields) = event.as_object_mut() {
        line.append(fields);
    }
    let _ = say_line(&Value::Object(line).to_string());
}

/// `--spec-dir`, absolute and resolved, as spec files record their directory.
fn canonical_dir(dir: &Path) -> Result<PathBuf, CliError> {
    let resolved = dir.canonicalize().map_err(|e| {
        CliError::usage(format!(
            "--spec-dir {}: {e}; give the directory holding the spec files this worker serves",
            dir.display()
        ))
    })?;
    if !resolved.is_dir() {
        return Err(CliError::usage(format!(
            "--spec-dir {} is not a directory; give the directory holding the spec files",
            dir.display()
        )));
    }
    Ok(resolved)
}

/// SIGINT, SIGTERM and SIGHUP, each delivered as its name.
fn stop_signals() -> Result<mpsc::UnboundedReceiver<&'static str>, CliError> {
    let (tx, rx) = mpsc::unbounded_channel();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        for (kind, name) in [
            (SignalKind::interrupt(), "SIGINT"),
            (SignalKind::terminate(), "SIGTERM"),
            (SignalKind::hangup(), "SIGHUP"),
        ] {
            let mut stream = signal(kind)
                .map_err(|e| CliError::internal(format!("cannot handle {name}: {e}")))?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if tx.send(name).is_err() {
                        break;
                    }
                }
            });
        }
    }
    Ok(rx)
}

/// `runtape ls --workers`: every registered worker — live ones first, with the runs each
/// drives — and those whose heartbeat stopped (dead, or cut off from the database).
pub(crate) fn list(db: &Path, json: bool) -> Result<(), CliError> {
    let Some(url) = postgres_url(db) else {
        if json {
            return Ok(());
        }
        outln!(
            "no workers: `runtape worker` runs against a PostgreSQL database (--db postgres://…), and {} is a SQLite file",
            db.display()
        );
        return Ok(());
    };
    let store = PostgresStore::open(url)?;
    let workers = store.workers()?;
    let runs = store.runs()?;
    let now = wall_ms();
    let driving = |w: &crate::store::WorkerRecord| -> Vec<String> {
        let process = format!("{}:{}", w.host, w.pid);
        runs.iter()
            .filter(|r| w.alive && driver(r, now).as_deref() == Some(process.as_str()))
            .map(|r| r.id.to_string())
            .collect()
    };
    if json {
        for w in &workers {
            print_json(&serde_json::json!({
                "type": "worker",
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "alive": w.alive,
                "draining": w.draining,
                "spec_dir": w.spec_dir,
                "concurrency": w.concurrency,
                "started_ms": w.started_ms,
                "heartbeat_age_ms": w.heartbeat_age_ms,
                "runs": driving(w),
            }))?;
        }
        return Ok(());
    }
    if workers.is_empty() {
        outln!("no workers have registered in {}", shown(db));
        return Ok(());
    }
    outln!(
        "{:<28}  {:<9}  {:>9}  {:>5}  {:>7}  RUNS",
        "WORKER",
        "STATE",
        "HEARTBEAT",
        "SLOTS",
        "UP"
    );
    for w in &workers {
        let state = match (w.alive, w.draining) {
            (false, _) => "gone",
            (true, true) => "draining",
            (true, false) => "live",
        };
        let runs = driving(w);
        outln!(
            "{:<28}  {:<9}  {:>8}s  {:>2}/{:<2}  {:>7}  {}",
            format!("{}:{}", w.host, w.pid),
            state,
            w.heartbeat_age_ms / 1000,
            runs.len(),
            w.concurrency,
            age(now, w.started_ms),
            if runs.is_empty() {
                "-".into()
            } else {
                runs.join(" ")
            }
        );
    }
    Ok(())
}
