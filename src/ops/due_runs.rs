//! `runtape worker --db FILE`: on a SQLite file, the worker wakes the runs whose timers are
//! due — a sleep whose instant passed while no process held the run (it was killed, or
//! handed back), a deadline on a call still waiting for a person — and drives each on until
//! it ends or rests, as `runtape resume` would.
//!
//! # The loop
//!
//! Scan ([`DueScan`]), take each due run up ([`ops::resume`]: its lease by compare-and-swap
//! before anything is read, its setup checked against its sealed head), then wait until the
//! earliest timer not yet due, at most [`MAX_WAKE_POLL`] (a run put to sleep by another
//! process since is noticed within that), or until a run it drives stops. Two workers, or a
//! worker and a person's `runtape resume`, racing for a run: one takes the lease, the others
//! are refused (`lease_held`) and leave it; the machine accepts one firing of a timer besides.
//!
//! Each turn also fires the database's schedules ([`schedule_fire::turn`]) and drives the runs
//! they start; the wait before the next turn is also cut to the next instant a schedule
//! fires at.
//!
//! # Stopping
//!
//! As on PostgreSQL: the first SIGTERM (SIGINT, SIGHUP) stops taking runs up, gives calls in
//! flight the grace period, and hands each run back (`running`, no lease) so the next worker
//! wakes it; a second signal leaves at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::exec::{Engine, EngineConfig, EngineError, RunEnd};
use crate::machine::RunId;
use crate::machine::wake::MAX_WAKE_POLL;
use crate::ops::{self, Answer, OpsError, schedule_fire};
use crate::store::{RunStatus, Store};
use crate::worker::wake::DueScan;
use crate::worker::{LogLine, Requeued, WorkerExit, requeue};

/// The runs a worker drives, each ending with its engine and how it ended.
type Tasks = JoinSet<(RunId, Engine, Result<RunEnd, EngineError>)>;

/// How a worker on a SQLite file runs.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// Wake only runs started from spec files in this directory (absolute, canonical); all
    /// runs when `None`.
    pub spec_dir: Option<String>,
    /// Runs driven at once at most.
    pub concurrency: usize,
    /// The engines' settings (lease length, receipt signer, clock).
    pub engine: EngineConfig,
    /// How long calls in flight may take to finish after SIGTERM.
    pub grace: Duration,
    /// The longest wait between two scans (at most [`MAX_WAKE_POLL`] is used).
    pub poll: Duration,
    /// How long a run this worker could not take up is left alone.
    pub skip_for: Duration,
}

/// The statuses a worker wakes: runs left `running` (killed asleep, handed back) and runs
/// waiting for a person under a deadline. A `paused` run is a person's to continue.
pub const WOKEN_STATUSES: [RunStatus; 2] = [RunStatus::Running, RunStatus::AwaitingInput];

/// Runs the worker on `store` until `stops` delivers a stop signal (then drains) and a second
/// one (then leaves at once). `log` receives one structured event per call.
pub async fn run(
    store: Arc<dyn Store>,
    opts: LocalOptions,
    mut stops: mpsc::UnboundedReceiver<&'static str>,
    log: impl Fn(LogLine),
) -> Result<WorkerExit, EngineError> {
    let clock = opts.engine.clock.clone();
    let cap = opts.poll.min(MAX_WAKE_POLL);
    log(json!({"event": "worker.started", "spec_dir": opts.spec_dir,
        "concurrency": opts.concurrency, "wakes": "due timers"}));
    let mut scan = DueScan::driving_every_run();
    let mut tasks: Tasks = JoinSet::new();
    let mut live: HashMap<RunId, Engine> = HashMap::new();
    let mut skip: HashMap<RunId, Instant> = HashMap::new();
    loop {
        let now = clock.now();
        skip.retain(|_, until| *until > now);
        let skipping: HashSet<RunId> = skip.keys().chain(live.keys()).cloned().collect();
        let scanned = scan
            .scan_blocking(
                store.clone(),
                clock.clone(),
                opts.spec_dir.clone(),
                &WOKEN_STATUSES,
                skipping,
                cap,
            )
            .await;
        let mut wait = cap;
        match scanned {
            Ok((kept, found)) => {
                scan = kept;
                match found {
                    Ok(found) => {
                        for (run, why) in found.unreadable {
                            log(json!({"event": "run.error", "run": run, "code": "history",
                                "error": why}));
                        }
                        wait = found.plan.wait;
                        for run in found.plan.due {
                            if live.len() >= opts.concurrency.max(1) {
                                break;
                            }
                            let engine = Engine::with_store(store.clone(), opts.engine.clone());
                            match ops::resume(&engine, &run, Answer::None, None, &[]).await {
                                Ok(handle) => {
                                    log(json!({"event": "run.woken", "run": run}));
                                    live.insert(run.clone(), engine.clone());
                                    tasks.spawn(async move {
                                        let end = handle.wait().await;
                                        (run, engine, end)
                                    });
                                }
                                Err(e) => {
                                    // Another process took it first, or it cannot be driven
                                    // here: left alone for a while either way.
                                    let held = e.code() == "lease_held";
                                    let event = if held { "run.skipped" } else { "run.error" };
                                    log(json!({"event": event, "run": run, "code": e.code(),
                                        "error": e.to_string()}));
                                    let pause = if held { cap } else { opts.skip_for };
                                    skip.insert(run, clock.now() + pause);
                                }
                            }
                        }
                    }
                    Err(e) => log(json!({"event": "worker.error", "code": "history",
                        "error": e.to_string()})),
                }
            }
            Err(e) => {
                return Err(EngineError::ReadStopped {
                    reason: format!("the scan for due runs: {e}"),
                });
            }
        }
        let dir = opts.spec_dir.as_deref();
        wait = fire_schedules(&store, &opts.engine, dir, &log, &mut live, &mut tasks, wait).await;
        tokio::select! {
            signal = stops.recv() => {
                log(json!({"event": "worker.draining", "signal": signal.unwrap_or("closed"),
                    "runs": live.len(), "grace_ms": opts.grace.as_millis() as u64}));
                break;
            }
            Some(done) = tasks.join_next() => {
                if let Ok((run, _, end)) = done {
                    live.remove(&run);
                    log(stopped_line(&run, &end));
                }
            }
            () = clock.sleep(wait) => {}
        }
    }
    for engine in live.values() {
        engine.begin_shutdown(opts.grace);
    }
    loop {
        tokio::select! {
            _ = stops.recv() => {
                log(json!({"event": "worker.interrupted", "runs": live.len()}));
                return Ok(WorkerExit::Interrupted);
            }
            done = tasks.join_next() => match done {
                Some(Ok((run, engine, end))) => {
                    live.remove(&run);
                    log(stopped_line(&run, &end));
                    hand_back(&engine, &run, &log).await;
                }
                Some(Err(_)) => {}
                None => break,
            }
        }
    }
    log(json!({"event": "worker.stopped"}));
    Ok(WorkerExit::Drained)
}

/// One turn of the schedules in `spec_dir` ([`schedule_fire::turn`]): the runs it starts are
/// driven here like woken ones. Returns `wait`, shortened to the next instant a schedule fires
/// at.
async fn fire_schedules(
    store: &Arc<dyn Store>,
    engine: &EngineConfig,
    spec_dir: Option<&str>,
    log: &impl Fn(LogLine),
    live: &mut HashMap<RunId, Engine>,
    tasks: &mut Tasks,
    wait: Duration,
) -> Duration {
    let make = || Ok(Engine::with_store(store.clone(), engine.clone()));
    let Some(at) = schedule_fire::at(engine.clock.as_ref(), live.is_empty()) else {
        return wait;
    };
    let look = schedule_fire::Look {
        at,
        spec_dir,
        queue: None,
    };
    match schedule_fire::turn(store.clone(), look, &make).await {
        Ok(turn) => {
            for line in turn.lines {
                log(line);
            }
            for fired in turn.started {
                let (run, engine) = (fired.run, fired.engine);
                live.insert(run.clone(), engine.clone());
                let handle = fired.handle;
                tasks.spawn(async move {
                    let end = handle.wait().await;
                    (run, engine, end)
                });
            }
            turn.wait.map_or(wait, |next| wait.min(next))
        }
        Err(e) => {
            log(json!({"event": "worker.error", "code": e.code(), "error": e.to_string()}));
            wait
        }
    }
}

/// The log line of a run whose driver stopped: how it rests or ended, or the error.
fn stopped_line(run: &RunId, end: &Result<RunEnd, EngineError>) -> LogLine {
    match end {
        Ok(end) => json!({"event": "run.stopped", "run": run, "status": end.status.as_str(),
            "seq": end.state.seq()}),
        Err(e) => {
            let e = OpsError::from(e.clone());
            json!({"event": "run.error", "run": run, "code": e.code(), "error": e.to_string()})
        }
    }
}

/// Gives a run the drain stopped back (`running`, no lease), so the next worker wakes it.
async fn hand_back(engine: &Engine, run: &RunId, log: &impl Fn(LogLine)) {
    match requeue(engine, run).await {
        Ok(Requeued::Queued) => log(json!({"event": "run.handed_back", "run": run})),
        Ok(Requeued::Left(why)) => log(json!({"event": "run.left", "run": run, "reason": why})),
        Err(e) => {
            let e = OpsError::from(e);
            log(
                json!({"event": "worker.error", "run": run, "code": e.code(),
                "error": e.to_string()}),
            );
        }
    }
}
