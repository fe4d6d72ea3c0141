//! `runtape worker`: a long-running process that takes runnable runs from a shared PostgreSQL
//! database and drives them, alongside any number of other workers on any number of machines.
//!
//! # The loop
//!
//! While it has a free slot (`--concurrency`), a worker claims one runnable run at a time (see
//! [`PostgresStore::claim`]: `FOR UPDATE SKIP LOCKED`, a lease on the database's clock), then
//! takes it up exactly as `runtape resume` does — the lease is taken by compare-and-swap before
//! anything is read, its setup is checked against its sealed head before any provider or tool
//! is built from it — and drives it until it ends or rests. Each run gets an engine of its own
//! (its providers and tools are its setup's, never another run's), all sharing one store, so
//! every run of the process commits through one writer (group commit).
//!
//! # Where providers and tools come from
//!
//! From the run's stored setup (written by `runtape run SPEC --detach` from the spec file),
//! checked against the run's sealed head; API keys from the worker's environment, by the
//! variable names the setup records. `--spec-dir DIR` is the directory whose spec files this
//! worker serves: it takes only runs whose spec file was in DIR (the directory recorded in the
//! setup, an absolute path), so command tools run where they were written to run, and a worker
//! never runs the programs of a project it was not deployed with. Deploy the same spec
//! directory at the same path on every worker machine.
//!
//! # Timers
//!
//! A run that only sleeps is claimed once its instant has come, not before (a worker would
//! hold it, waiting). A run waiting for a person under a deadline (`[timers.deadlines]`)
//! rests `awaiting_input`, which the queue does not list: every few seconds, and when the
//! earliest deadline it knows of comes, the worker scans for runs whose deadline is due
//! ([`wake::DueScan`]) and claims each as it claims a runnable run
//! ([`PostgresStore::claim_due`]: `FOR UPDATE SKIP LOCKED`, the lease's epoch bumped), so no
//! two workers fire one timer; the machine accepts one firing besides.
//!
//! # Schedules
//!
//! Each worker also fires the schedules whose spec file is in its directory
//! ([`schedules`]): a due instant is claimed once across every worker (the schedule's row
//! locked, the instant inserted under its key) and its run queued, to be claimed like any
//! other.
//!
//! # Stopping
//!
//! The first SIGTERM (or SIGINT, SIGHUP) drains: no new run is claimed, each run's calls in
//! flight get the grace period to finish and their results are committed, then each run is
//! given back to the queue (its lease released, status `running`) for another worker, and the
//! worker exits. A second signal leaves at once. A worker that dies (SIGKILL, power loss)
//! leaves its runs' leases to expire on the database's clock — or, on the same host, to be
//! taken at once, its process being gone — and other workers continue them.
//!
//! # When the database goes away
//!
//! A worker started before its database is up waits for it, saying so on stderr once per
//! attempt (the waits double from 0.1 s to 5 s); a stop signal ends the wait. Once running,
//! the reads and writes of the runs it drives wait up to [`DATABASE_PATIENCE`] for a database
//! that is down, restarting or cut off, then carry on: a restart costs the runs nothing. A
//! write that reaches the database after another worker took its run over (this worker was
//! cut off for longer than the lease) is refused by the lease epoch, and this worker stops
//! driving that run, saying it was taken over (`run.error`, code `fenced`). Its heartbeats and
//! claims never wait, so its loop keeps answering signals; a failed heartbeat is logged
//! (`worker.error`, code `database`) and its return too (`worker.reconnected`).
//!
//! # Health and metrics
//!
//! With `--metrics-addr HOST:PORT`, the worker answers `GET /healthz` and `GET /metrics`
//! (Prometheus text): see [`endpoint`], [`health`] and [`metrics`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::Setup;
use crate::exec::{Engine, EngineConfig, EngineError, RunEnd};
use crate::history::{self, HistoryError};
use crate::ledger::RecordError;
use crate::machine::RunId;
use crate::store::{PostgresStore, RunStatus, Store, StoreError, TimedStore, WorkerInfo, Write};
use health::Health;
use metrics::{Metered, Metrics, error_code, store_error_code};

pub mod endpoint;
mod handoff;
pub mod health;
pub mod metrics;
pub mod schedules;
pub mod wake;

pub use handoff::{Requeued, enqueue, enqueue_in_session, requeue};

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The spec directory it serves (absolute, canonical).
    pub spec_dir: PathBuf,
    /// Runs driven at once at most.
    pub concurrency: usize,
    /// The engines' settings (lease length, receipt signer, clock).
    pub engine: EngineConfig,
    /// How long calls in flight may take to finish after SIGTERM.
    pub grace: Duration,
    /// How often an idle worker looks for runs.
    pub poll: Duration,
    /// How long a run this worker could not take up is left to other workers.
    pub skip_for: Duration,
    /// Its counters (`/metrics`): claims, runs in flight, commits, takeovers, errors.
    pub metrics: Arc<Metrics>,
    /// What `/healthz` judges: the loop's turns and heartbeats.
    pub health: Arc<Health>,
    /// Fires the schedules of its spec directory (see [`schedules`]); none: it fires none.
    pub schedules: Option<Arc<dyn schedules::ScheduleTurns>>,
}

/// How long a read or write of a run this worker drives waits for an unreachable database
/// (down, restarting, the network cut) before it fails (see
/// [`PostgresStore::wait_for_database`]): long enough to ride out a restart or a short
/// partition, short enough that a worker asked to stop during an outage does stop.
pub const DATABASE_PATIENCE: Duration = Duration::from_secs(60);

/// One line of the worker's log: an event name and its fields.
pub type LogLine = Value;

/// How the worker loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerExit {
    /// Drained after a stop signal: every run it drove was committed and handed back.
    Drained,
    /// A second stop signal: left at once.
    Interrupted,
}

/// Why a run's driver stopped with an error: the line, and its code ([`error_code`]).
struct RunError {
    line: String,
    code: &'static str,
}

impl RunError {
    fn of(e: &EngineError) -> RunError {
        RunError {
            line: e.to_string(),
            code: error_code(e),
        }
    }
}

/// What a driving task reports when its run's driver stops.
struct Stopped {
    run: RunId,
    engine: Engine,
    result: Result<RunEnd, RunError>,
    /// The error came from the run itself (tampered, unreadable): it must not be retried.
    bad_run: bool,
    /// The take-up never happened: the claim's lease is still this worker's at this epoch.
    claim_epoch: Option<u64>,
}

/// Runs the worker until `stops` delivers a stop signal (then drains) and a second one (then
/// leaves at once). `log` receives one structured event per call.
pub async fn run(
    store: Arc<PostgresStore>,
    info: WorkerInfo,
    opts: WorkerOptions,
    mut stops: mpsc::UnboundedReceiver<&'static str>,
    log: impl Fn(LogLine),
) -> Result<WorkerExit, EngineError> {
    let ttl = opts.engine.lease_ttl.as_millis() as u64;
    let spec_dir = opts.spec_dir.display().to_string();
    store.wait_for_database(DATABASE_PATIENCE);
    // Its runs are taken up together: a read connection for each, up to the store's bound.
    store.allow_reads(opts.concurrency);
    let (metrics, health) = (opts.metrics.clone(), opts.health.clone());
    store.heartbeat(&info, ttl, false).await?;
    health.running(opts.engine.lease_ttl);
    log(
        json!({"event": "worker.started", "worker": info.id, "spec_dir": spec_dir,
        "concurrency": opts.concurrency, "lease_ttl_ms": ttl}),
    );
    let metered: Arc<dyn Store> = Arc::new(Metered::new(store.clone(), metrics.clone()));
    let timed = Arc::new(TimedStore::new(metered));
    let dyn_store: Arc<dyn Store> = timed.clone();
    let mut tasks: JoinSet<Stopped> = JoinSet::new();
    let mut live: HashMap<RunId, Engine> = HashMap::new();
    let mut skip: HashMap<RunId, Instant> = HashMap::new();
    let beat = Duration::from_millis((ttl / 3).max(100));
    // The engine's clock paces the loop: heartbeats, skips and polls.
    let clock = opts.engine.clock.clone();
    let mut next_beat = clock.now() + beat;
    let mut store_trouble = false;
    let mut due_scan = wake::DueScan::default();
    let mut next_scan = clock.now();
    let mut next_schedules = clock.now();
    loop {
        health.loop_turned();
        if clock.now() >= next_beat {
            next_beat = clock.now() + beat;
            let beat = store.heartbeat(&info, ttl, false).await;
            health.heartbeat(beat.clone().map_err(|e| e.to_string()));
            match beat {
                Ok(()) if store_trouble => {
                    store_trouble = false;
                    log(json!({"event": "worker.reconnected", "worker": info.id}));
                }
                Ok(()) => {}
                Err(e) => {
                    store_trouble = true;
                    worker_error(&metrics, &info, None, &e, &log);
                }
            }
        }
        let now = clock.now();
        skip.retain(|_, until| *until > now);
        while live.len() < opts.concurrency.max(1) && !store_trouble {
            let engine = Engine::with_store(dyn_store.clone(), opts.engine.clone());
            let skipping: Vec<RunId> = skip.keys().chain(live.keys()).cloned().collect();
            // What the worker would act on is checked before the claim writes anything: a run
            // `verify` would reject is never claimed, only left to others for a while.
            let next = match store.next_runnable(&spec_dir, &skipping).await {
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(e) => {
                    worker_error(&metrics, &info, None, &e, &log);
                    break;
                }
            };
            let checked = match verified(&engine, &next) {
                Ok(checked) => {
                    // A run that only sleeps is not claimed before its instant (it would hold
                    // a slot and its lease, waiting): it is left until then.
                    if let Some(due) = crate::machine::wake::sleeps_until(&checked.rebuilt.state) {
                        let until = clock.until(due);
                        if !until.is_zero() {
                            skip.insert(next, clock.now() + until);
                            continue;
                        }
                    }
                    checked
                }
                Err(HistoryError::Store(e)) => {
                    worker_error(&metrics, &info, Some(&next), &e, &log);
                    break;
                }
                Err(e) => {
                    // Tampered (or a key that is not its own): refused. Anything else the
                    // check could not judge is this worker's trouble with that run; either
                    // way it is left to others for a while and the queue goes on.
                    let e = EngineError::from(e);
                    let code = error_code(&e);
                    metrics.error(code);
                    let event = if code == "tampered" {
                        "run.refused"
                    } else {
                        "run.error"
                    };
                    log(
                        json!({"event": event, "worker": info.id, "run": next, "code": code,
                        "error": e.to_string()}),
                    );
                    skip.insert(next, clock.now() + opts.skip_for);
                    continue;
                }
            };
            match store
                .claim(engine.owner(), &spec_dir, ttl, &skipping, Some(&next))
                .await
            {
                Ok(Some(claim)) => {
                    log(
                        json!({"event": "run.claimed", "worker": info.id, "run": claim.run,
                        "epoch": claim.epoch, "taken_over": claim.taken_over}),
                    );
                    metrics.claimed(claim.taken_over);
                    live.insert(claim.run.clone(), engine.clone());
                    metrics.set_in_flight(live.len());
                    tasks.spawn(drive(engine, claim.run, claim.epoch, checked));
                }
                Ok(None) => break,
                Err(e) => {
                    worker_error(&metrics, &info, None, &e, &log);
                    break;
                }
            }
        }
        if clock.now() >= next_scan && live.len() < opts.concurrency.max(1) && !store_trouble {
            let wait = claim_due(
                &store,
                &dyn_store,
                &info,
                &opts,
                &mut due_scan,
                &mut live,
                &mut tasks,
                &mut skip,
                &log,
            )
            .await;
            next_scan = clock.now() + wait;
        }
        if clock.now() >= next_schedules && !store_trouble {
            let idle = live.is_empty();
            let wait = schedules::fire(&dyn_store, &info, &opts, idle, &log).await;
            next_schedules = clock.now() + wait;
        }
        tokio::select! {
            signal = stops.recv() => {
                health.draining();
                log(json!({"event": "worker.draining", "worker": info.id,
                    "signal": signal.unwrap_or("closed"), "runs": live.len(),
                    "grace_ms": opts.grace.as_millis() as u64}));
                break;
            }
            Some(done) = tasks.join_next() => {
                if let Ok(done) = done {
                    live.remove(&done.run);
                    metrics.set_in_flight(live.len());
                    settle(&store, &info, &opts, done, false, &mut skip, &log).await;
                }
            }
            () = clock.sleep(opts.poll) => {}
        }
    }
    let _ = store.heartbeat(&info, ttl, true).await;
    for engine in live.values() {
        engine.begin_shutdown(opts.grace);
    }
    loop {
        tokio::select! {
            _ = stops.recv() => {
                log(json!({"event": "worker.interrupted", "worker": info.id, "runs": live.len()}));
                return Ok(WorkerExit::Interrupted);
            }
            done = tasks.join_next() => match done {
                Some(Ok(done)) => {
                    live.remove(&done.run);
                    metrics.set_in_flight(live.len());
                    settle(&store, &info, &opts, done, true, &mut skip, &log).await;
                }
                Some(Err(_)) => {}
                None => break,
            }
        }
    }
    let _ = store.deregister(&info.id).await;
    let latency = timed.latency();
    log(
        json!({"event": "worker.stopped", "worker": info.id, "commits": latency.commits,
        "commit_p50_us": latency.p50_us, "commit_p99_us": latency.p99_us}),
    );
    Ok(WorkerExit::Drained)
}

/// Claims and drives (up to the free slots) the runs waiting for a person whose deadline is
/// due, found by a [`wake::DueScan`] of the runs whose spec file is in this worker's
/// directory; returns how long until the next scan. A run that only sleeps is claimed by the
/// ordinary claim once its instant has come.
#[allow(clippy::too_many_arguments)]
async fn claim_due(
    store: &Arc<PostgresStore>,
    dyn_store: &Arc<dyn Store>,
    info: &WorkerInfo,
    opts: &WorkerOptions,
    scan: &mut wake::DueScan,
    live: &mut HashMap<RunId, Engine>,
    tasks: &mut JoinSet<Stopped>,
    skip: &mut HashMap<RunId, Instant>,
    log: &impl Fn(LogLine),
) -> Duration {
    let skipping: std::collections::HashSet<RunId> =
        skip.keys().chain(live.keys()).cloned().collect();
    let (s, clock) = (store.clone(), opts.engine.clock.clone());
    let spec_dir = opts.spec_dir.display().to_string();
    let taken = std::mem::take(scan);
    let dir = spec_dir.clone();
    let scanned = tokio::task::spawn_blocking(move || {
        let mut taken = taken;
        let found = taken.scan(
            s.as_ref(),
            clock.as_ref(),
            Some(&dir),
            &[RunStatus::AwaitingInput],
            &skipping,
            crate::machine::wake::MAX_WAKE_POLL,
        );
        (taken, found)
    })
    .await;
    let found = match scanned {
        Ok((kept, found)) => {
            *scan = kept;
            found
        }
        Err(_) => return crate::machine::wake::MAX_WAKE_POLL,
    };
    let found = match found {
        Ok(found) => found,
        Err(e) => {
            log(
                json!({"event": "worker.error", "worker": info.id, "code": "history",
                "error": e.to_string()}),
            );
            return crate::machine::wake::MAX_WAKE_POLL;
        }
    };
    let ttl = opts.engine.lease_ttl.as_millis() as u64;
    for run in found.plan.due {
        if live.len() >= opts.concurrency.max(1) {
            break;
        }
        let engine = Engine::with_store(dyn_store.clone(), opts.engine.clone());
        // As for a runnable run: what the worker would act on is checked before the claim
        // writes anything; a run `verify` would reject (or this worker cannot judge) is
        // logged and left to others for a while.
        let checked = match verified(&engine, &run) {
            Ok(checked) => checked,
            Err(e) => {
                let e = EngineError::from(e);
                opts.metrics.error(error_code(&e));
                log(
                    json!({"event": "run.refused", "worker": info.id, "run": run,
                    "code": error_code(&e), "error": e.to_string()}),
                );
                skip.insert(run, opts.engine.clock.now() + opts.skip_for);
                continue;
            }
        };
        match store.claim_due(engine.owner(), &spec_dir, ttl, &run).await {
            Ok(Some(claim)) => {
                log(
                    json!({"event": "run.claimed", "worker": info.id, "run": claim.run,
                    "epoch": claim.epoch, "taken_over": claim.taken_over, "timer": "due"}),
                );
                opts.metrics.claimed(claim.taken_over);
                live.insert(claim.run.clone(), engine.clone());
                opts.metrics.set_in_flight(live.len());
                tasks.spawn(drive(engine, claim.run, claim.epoch, checked));
            }
            Ok(None) => {}
            Err(e) => {
                worker_error(&opts.metrics, info, Some(&run), &e, log);
                break;
            }
        }
    }
    found.plan.wait
}

/// Takes the claimed run up and drives it until its driver stops. `checked` is what the
/// check before the claim found ([`verified`]): the take-up does not fold the run's history a
/// second time while its head is still the one checked (the claim does not write it).
async fn drive(
    engine: Engine,
    run: RunId,
    claim_epoch: u64,
    checked: crate::ledger::Continuable,
) -> Stopped {
    let stopped = |result: Result<RunEnd, RunError>, bad_run: bool, claimed: bool| Stopped {
        run: run.clone(),
        engine: engine.clone(),
        result,
        bad_run,
        claim_epoch: claimed.then_some(claim_epoch),
    };
    if let Err((line, bad_run)) = install(&engine, &run) {
        let code = if bad_run { "bad_run" } else { "setup" };
        return stopped(Err(RunError { line, code }), bad_run, true);
    }
    let handle = match engine.resume_checked(&run, checked, Vec::new()).await {
        Ok(h) => h,
        Err(e) => {
            let bad_run = matches!(
                e,
                EngineError::History(HistoryError::Tampered { .. } | HistoryError::WrongKey(_))
                    | EngineError::Spec(_)
                    | EngineError::NoRetriever
                    | EngineError::Unencodable { .. }
                    | EngineError::Record(RecordError::Receipt { .. })
                    | EngineError::ReceiptKeyMismatch { .. }
            );
            return stopped(Err(RunError::of(&e)), bad_run, true);
        }
    };
    let result = handle.wait().await.map_err(|e| RunError::of(&e));
    stopped(result, false, false)
}

/// Checks `run` as every command that acts on a run does, before this worker claims it
/// ([`crate::ledger::check_continuable`]), and returns what the check found (its head, its
/// latest state); reads only.
fn verified(engine: &Engine, run: &RunId) -> Result<crate::ledger::Continuable, HistoryError> {
    let store = engine.store().as_ref();
    let rec = history::record(store, run)?;
    let end = crate::ledger::ActFrom::End;
    crate::ledger::check_continuable(store, &rec, engine.receipt_signer(), end)
}

/// Registers the run's providers and tools with its engine, from its stored setup once the
/// setup is shown to be what its head sealed. An error says whether the run itself is at
/// fault (true) or this worker's environment (a key variable unset, a program missing).
fn install(engine: &Engine, run: &RunId) -> Result<(), (String, bool)> {
    let store = engine.store().as_ref();
    let rec = history::record(store, run).map_err(|e| (e.to_string(), false))?;
    // What it acts on was checked before the claim; the engine's take-up checks it again.
    crate::ledger::check_identity(store, &rec, engine.receipt_signer()).map_err(|e| {
        let bad = matches!(e, HistoryError::Tampered { .. } | HistoryError::WrongKey(_));
        (e.to_string(), bad)
    })?;
    let Some(setup) = rec.setup else {
        return Err((
            "the run was started from a program: no setup is stored".into(),
            true,
        ));
    };
    let setup = Setup::from_json(&setup).map_err(|e| (e.to_string(), true))?;
    setup.install(engine).map_err(|e| (e.to_string(), false))?;
    crate::exec::forward_mcp_progress(engine);
    Ok(())
}

/// Logs how a run's driver stopped and puts the run where it belongs: handed back to the
/// queue when this worker stopped it (a drain, an error), paused when the run itself cannot
/// be driven, skipped for a while when this worker cannot drive it.
async fn settle(
    store: &PostgresStore,
    info: &WorkerInfo,
    opts: &WorkerOptions,
    done: Stopped,
    draining: bool,
    skip: &mut HashMap<RunId, Instant>,
    log: &impl Fn(LogLine),
) {
    let Stopped {
        run,
        engine,
        result,
        bad_run,
        claim_epoch,
    } = done;
    let hand_back = match &result {
        Ok(end) => {
            log(
                json!({"event": "run.stopped", "worker": info.id, "run": run,
                "status": end.status, "seq": end.state.seq()}),
            );
            end.status == RunStatus::Paused && draining
        }
        Err(error) => {
            opts.metrics.error(error.code);
            log(json!({"event": "run.error", "worker": info.id, "run": run,
                "code": error.code, "error": error.line}));
            true
        }
    };
    if let Some(epoch) = claim_epoch {
        // Never taken up: give the claim's lease back. A run at fault rests paused (no worker
        // could drive it; `runtape verify` says why); otherwise another worker may try.
        let status = if bad_run {
            RunStatus::Paused
        } else {
            skip.insert(run.clone(), opts.engine.clock.now() + opts.skip_for);
            RunStatus::Running
        };
        let release = Write::ReleaseLease {
            run: run.clone(),
            epoch,
            status,
            head: None,
        };
        match crate::store::write(store, release).await {
            Ok(_) | Err(StoreError::Fenced { .. }) => {}
            Err(e) => worker_error(&opts.metrics, info, Some(&run), &e, log),
        }
        return;
    }
    if !hand_back {
        return;
    }
    match requeue(&engine, &run).await {
        Ok(Requeued::Queued) => {
            log(json!({"event": "run.handed_back", "worker": info.id, "run": run}))
        }
        Ok(Requeued::Left(why)) => {
            log(json!({"event": "run.left", "worker": info.id, "run": run, "reason": why}))
        }
        Err(e) => {
            opts.metrics.error(error_code(&e));
            log(
                json!({"event": "worker.error", "worker": info.id, "run": run,
                "code": error_code(&e), "error": e.to_string()}),
            );
        }
    }
}

/// Counts and logs a store error the worker met outside a run's driver (a heartbeat, a claim,
/// a release).
fn worker_error(
    metrics: &Metrics,
    info: &WorkerInfo,
    run: Option<&RunId>,
    e: &StoreError,
    log: &impl Fn(LogLine),
) {
    let code = store_error_code(e);
    metrics.error(code);
    let mut line = json!({"event": "worker.error", "worker": info.id, "code": code,
        "error": e.to_string()});
    if let Some(run) = run {
        line["run"] = json!(run);
    }
    log(line);
}
