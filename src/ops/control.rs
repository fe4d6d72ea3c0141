//! Changing a run from outside, whichever process drives it: [`pause`] and [`cancel`].
//!
//! Both report what actually happened to the run, never what was merely asked: a run that
//! completed (or failed) before the request took effect is refused as such
//! ([`OpsError::EndedFirst`]), with nothing changed — a cancel of a run that completed is not
//! a success.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::OpsError;
use crate::exec::{Clock, Engine, EngineError};
use crate::history;
use crate::machine::RunId;
use crate::store::{RunRecord, RunStatus, Store, owner_is_dead};

/// How long `pause` and `cancel` wait for the process driving a run to act on the request
/// before returning (it acts at its next step boundary, after any call in flight).
const DRIVER_WAIT: Duration = Duration::from_secs(30);

/// How often the run's row is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Attempts `cancel` makes when the driving process stops without cancelling (it paused at
/// the same moment): each later attempt cancels the run at rest.
const CANCEL_ATTEMPTS: usize = 3;

/// What [`pause`] did. `Display` is the line `runtape pause` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Paused {
    /// The run rests paused at `seq`.
    Paused {
        /// The run.
        run: RunId,
        /// Its last step.
        seq: u64,
    },
    /// The run is queued: no process has taken it up yet, so there is nothing to pause.
    Queued {
        /// The run.
        run: RunId,
    },
    /// No live process drives the run (its process stopped at `seq`): there was nothing to
    /// pause, and `resume` continues it.
    NotDriven {
        /// The run.
        run: RunId,
        /// Its last step.
        seq: u64,
    },
    /// The run stopped otherwise before it could pause (it rests waiting for a person, or out
    /// of budget).
    Stopped {
        /// The run.
        run: RunId,
        /// How it rests.
        status: RunStatus,
        /// Its last step.
        seq: u64,
    },
    /// The request is written; the run is still finishing a call and pauses at its next step
    /// boundary.
    Requested {
        /// The run.
        run: RunId,
    },
}

impl fmt::Display for Paused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Paused::Paused { run, seq } => write!(
                f,
                "paused {run} at step {seq}; `runtape resume {run}` continues it"
            ),
            Paused::Queued { run } => write!(
                f,
                "run {run} is queued: no process has taken it up yet, so there is nothing to pause; `runtape cancel {run}` withdraws it"
            ),
            Paused::NotDriven { run, seq } => write!(
                f,
                "run {run} is not being driven (its process stopped at step {seq}); `runtape resume {run}` continues it"
            ),
            Paused::Stopped { run, status, seq } => write!(
                f,
                "run {run} stopped before it could pause: {status} at step {seq}"
            ),
            Paused::Requested { run } => write!(
                f,
                "pause requested: {run} is still finishing a call and pauses at its next step boundary"
            ),
        }
    }
}

/// What [`cancel`] did. `Display` is the line `runtape cancel` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Cancelled {
    /// The run is cancelled at `seq`.
    Cancelled {
        /// The run.
        run: RunId,
        /// Its last step.
        seq: u64,
    },
    /// The process driving the run was asked to cancel it and is still stopping it.
    Requested {
        /// The run.
        run: RunId,
    },
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cancelled::Cancelled { run, seq } => write!(f, "cancelled {run} at step {seq}"),
            Cancelled::Requested { run } => write!(
                f,
                "cancel requested: the process driving {run} is stopping it"
            ),
        }
    }
}

/// Asks whichever process drives `run` to pause at its next step boundary, and waits (up to
/// 30 s) until it has, so `resume` can follow at once: [`request_pause`], then
/// [`PauseRequest::wait`]. Only a running run can be paused ([`OpsError::NotRunning`]); one
/// that ends before the pause takes effect is refused ([`OpsError::EndedFirst`]).
pub async fn pause(engine: &Engine, run: &RunId) -> Result<Paused, OpsError> {
    request_pause(engine, run).await?.wait().await
}

/// A pause asked for: [`wait`](Self::wait) for the run to rest.
#[must_use = "the run pauses whether or not this is waited for; wait() says when and where"]
pub struct PauseRequest {
    store: Arc<dyn Store>,
    /// The engine's clock, which the wait runs on.
    clock: Arc<dyn Clock>,
    run: RunId,
    /// What happened already, when there was nothing to wait for.
    settled: Option<Paused>,
}

/// Asks whichever process drives `run` to pause at its next step boundary and returns once
/// the request is made, without waiting for the run: a run `engine` drives has its driver
/// told at once; a run another engine or process drives finds the request in the database
/// (within its engine's control poll, 200 ms by default). A run that is queued or that no
/// live process drives needs no pause (the request is settled at once); a run that is not
/// running is refused ([`OpsError::NotRunning`]).
pub async fn request_pause(engine: &Engine, run: &RunId) -> Result<PauseRequest, OpsError> {
    let store = engine.store().clone();
    let rec = history::record(store.as_ref(), run)?;
    if rec.status != RunStatus::Running {
        return Err(OpsError::NotRunning {
            run: run.clone(),
            status: rec.status,
        });
    }
    let settled = if rec.is_queued() {
        Some(Paused::Queued { run: run.clone() })
    } else if !is_driven_at(&rec, engine.clock().wall_ms()) {
        Some(Paused::NotDriven {
            run: run.clone(),
            seq: rec.seq,
        })
    } else {
        engine.pause(run).await?;
        None
    };
    Ok(PauseRequest {
        store,
        clock: engine.clock().clone(),
        run: run.clone(),
        settled,
    })
}

impl PauseRequest {
    /// Waits (up to 30 s) until no process drives the run any more and says how it rests:
    /// [`Paused::Paused`] at its step boundary, [`Paused::Stopped`] when it came to rest
    /// otherwise, [`Paused::Requested`] when it is still finishing a call. A run that ended
    /// first is refused ([`OpsError::EndedFirst`]).
    pub async fn wait(self) -> Result<Paused, OpsError> {
        if let Some(settled) = self.settled {
            return Ok(settled);
        }
        let run = &self.run;
        Ok(
            match wait_until_undriven(self.store.as_ref(), self.clock.as_ref(), run).await? {
                Some(rec) if rec.status == RunStatus::Paused => Paused::Paused {
                    run: run.clone(),
                    seq: rec.seq,
                },
                Some(rec) if rec.status.is_terminal() => {
                    return Err(ended_first(run, &rec, "pause"));
                }
                Some(rec) => Paused::Stopped {
                    run: run.clone(),
                    status: rec.status,
                    seq: rec.seq,
                },
                None => Paused::Requested { run: run.clone() },
            },
        )
    }
}

/// Cancels `run`: a run `engine` drives, or another engine or process drives, is asked to
/// stop (it aborts its in-flight work and commits the cancellation; this waits up to 30 s for
/// that); a run at rest is cancelled here, by `engine`. Succeeds only once the run is
/// cancelled (or its driver is stopping it); a run that has ended, or ends otherwise first, is
/// refused.
pub async fn cancel(
    engine: &Engine,
    run: &RunId,
    reason: Option<String>,
) -> Result<Cancelled, OpsError> {
    let store = engine.store().clone();
    for _ in 0..CANCEL_ATTEMPTS {
        match engine.cancel(run, reason.clone()).await {
            Ok(Some(handle)) => {
                let end = handle.wait().await?;
                if end.status != RunStatus::Cancelled {
                    let rec = history::record(store.as_ref(), run)?;
                    return Err(ended_first(run, &rec, "cancel"));
                }
                return Ok(Cancelled::Cancelled {
                    run: run.clone(),
                    seq: end.state.seq(),
                });
            }
            Ok(None) => {
                match wait_until_undriven(store.as_ref(), engine.clock().as_ref(), run).await? {
                    Some(rec) if rec.status == RunStatus::Cancelled => {
                        return Ok(Cancelled::Cancelled {
                            run: run.clone(),
                            seq: rec.seq,
                        });
                    }
                    Some(rec) if rec.status.is_terminal() => {
                        return Err(ended_first(run, &rec, "cancel"));
                    }
                    // Its driver stopped without cancelling (it paused at that moment): the run
                    // is at rest now, so the next attempt cancels it here.
                    Some(_) => continue,
                    None => return Ok(Cancelled::Requested { run: run.clone() }),
                }
            }
            Err(EngineError::Finished { status, .. }) => {
                let rec = history::record(store.as_ref(), run)?;
                return Err(OpsError::AlreadyEnded {
                    run: run.clone(),
                    status,
                    seq: rec.seq,
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(OpsError::ChangingHands { run: run.clone() })
}

/// The run ended (completed, failed or cancelled otherwise) before a request reached it.
fn ended_first(run: &RunId, rec: &RunRecord, what: &'static str) -> OpsError {
    OpsError::EndedFirst {
        run: run.clone(),
        status: rec.status,
        seq: rec.seq,
        what,
    }
}

/// True while a live process holds the run's lease: a `running` run for which this is false
/// was interrupted (its process died, or its lease lapsed) and `resume` continues it.
pub fn is_driven(rec: &RunRecord) -> bool {
    is_driven_at(rec, crate::clock::wall_ms())
}

/// [`is_driven`] at wall time `now_ms` (an engine's [`Clock::wall_ms`]).
fn is_driven_at(rec: &RunRecord, now_ms: u64) -> bool {
    rec.lease_owner
        .as_deref()
        .is_some_and(|owner| !owner_is_dead(owner) && rec.lease_expires_ms > now_ms)
}

/// Reads the run until no live process drives it, polling on `clock`; `None` when
/// [`DRIVER_WAIT`] passes first.
async fn wait_until_undriven(
    store: &dyn Store,
    clock: &dyn Clock,
    run: &RunId,
) -> Result<Option<RunRecord>, OpsError> {
    let deadline = clock.now() + DRIVER_WAIT;
    loop {
        let rec = history::record(store, run)?;
        if !is_driven_at(&rec, clock.wall_ms()) {
            return Ok(Some(rec));
        }
        if clock.now() >= deadline {
            return Ok(None);
        }
        clock.sleep(POLL).await;
    }
}
