//! Commands that change a run from outside: `pause`, `cancel`.
//!
//! Both report what actually happened to the run, never what was merely asked: a run that
//! completed (or failed) before the request took effect is reported as such, with exit
//! status 2 and nothing changed — `cancel` of a run that completed is not a success.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::common::{CliError, Fault, open_existing, parse_whole_run};
use crate::exec::{Engine, EngineConfig, EngineError, wall_ms};
use crate::history;
use crate::machine::RunId;
use crate::store::{RunRecord, RunStatus, Store, owner_is_dead};
use crate::term::say;

/// How long `pause` and `cancel` wait for the process driving a run to act on the request
/// before returning (it acts at its next step boundary, after any call in flight).
const DRIVER_WAIT: Duration = Duration::from_secs(30);

/// How often the run's row is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Attempts `cancel` makes when the driving process stops without cancelling (it paused at
/// the same moment): each later attempt cancels the run at rest.
const CANCEL_ATTEMPTS: usize = 3;

/// The run ended (completed, failed or cancelled otherwise) before a request reached it.
fn ended_first(run: &RunId, rec: &RunRecord, what: &str) -> CliError {
    CliError::usage(format!(
        "run {run} {} at step {} before the {what} took effect; nothing was changed",
        rec.status, rec.seq
    ))
    .with_fault(Fault::Conflict)
}

/// `runtape pause RUN`: asks whichever process drives the run to pause at its next step
/// boundary, and waits (up to [`DRIVER_WAIT`]) until it has, so `resume` can follow at once.
pub(crate) async fn pause(db: &Path, run: &str) -> Result<(), CliError> {
    let run = parse_whole_run(run, "pause stops a run at its next step")?;
    let store = open_existing(db)?;
    let said = pause_run(store, &run).await?;
    say!("{said}");
    Ok(())
}

/// Pauses `run` as `runtape pause` does and returns the line that says what happened.
pub(crate) async fn pause_run(store: Arc<dyn Store>, run: &RunId) -> Result<String, CliError> {
    let rec = history::record(store.as_ref(), run)?;
    if rec.status != RunStatus::Running {
        return Err(CliError::usage(format!(
            "run {run} is {}; only a running run can be paused",
            rec.status
        ))
        .with_fault(Fault::Conflict));
    }
    if rec.is_queued() {
        return Ok(format!(
            "run {run} is queued: no process has taken it up yet, so there is nothing to pause; `runtape cancel {run}` withdraws it"
        ));
    }
    if !is_driven(&rec) {
        return Ok(format!(
            "run {run} is not being driven (its process stopped at step {}); `runtape resume {run}` continues it",
            rec.seq
        ));
    }
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    engine.pause(run).await?;
    Ok(match wait_until_undriven(store.as_ref(), run).await? {
        Some(rec) if rec.status == RunStatus::Paused => format!(
            "paused {run} at step {}; `runtape resume {run}` continues it",
            rec.seq
        ),
        Some(rec) if rec.status.is_terminal() => return Err(ended_first(run, &rec, "pause")),
        Some(rec) => format!(
            "run {run} stopped before it could pause: {} at step {}",
            rec.status, rec.seq
        ),
        None => format!(
            "pause requested: {run} is still finishing a call and pauses at its next step boundary"
        ),
    })
}

/// `runtape cancel RUN`: a run driven by another process is asked to stop (it aborts its
/// in-flight work and commits the cancellation; this waits up to [`DRIVER_WAIT`] for that); a
/// run at rest is cancelled here. Succeeds only once the run is cancelled.
pub(crate) async fn cancel(db: &Path, run: &str, reason: Option<String>) -> Result<(), CliError> {
    let run = parse_whole_run(run, "cancel ends a whole run")?;
    let store = open_existing(db)?;
    let said = cancel_run(store, &run, reason).await?;
    say!("{said}");
    Ok(())
}

/// Cancels `run` as `runtape cancel` does and returns the line that says what happened.
pub(crate) async fn cancel_run(
    store: Arc<dyn Store>,
    run: &RunId,
    reason: Option<String>,
) -> Result<String, CliError> {
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    for _ in 0..CANCEL_ATTEMPTS {
        match engine.cancel(run, reason.clone()).await {
            Ok(Some(handle)) => {
                let end = handle.wait().await?;
                if end.status != RunStatus::Cancelled {
                    let rec = history::record(store.as_ref(), run)?;
                    return Err(ended_first(run, &rec, "cancel"));
                }
                return Ok(format!("cancelled {run} at step {}", end.state.seq()));
            }
            Ok(None) => match wait_until_undriven(store.as_ref(), run).await? {
                Some(rec) if rec.status == RunStatus::Cancelled => {
                    return Ok(format!("cancelled {run} at step {}", rec.seq));
                }
                Some(rec) if rec.status.is_terminal() => {
                    return Err(ended_first(run, &rec, "cancel"));
                }
                // Its driver stopped without cancelling (it paused at that moment): the run
                // is at rest now, so the next attempt cancels it here.
                Some(_) => continue,
                None => {
                    return Ok(format!(
                        "cancel requested: the process driving {run} is stopping it"
                    ));
                }
            },
            Err(EngineError::Finished { status, .. }) => {
                let rec = history::record(store.as_ref(), run)?;
                return Err(CliError::usage(format!(
                    "run {run} has already ended ({status} at step {}); nothing to cancel",
                    rec.seq
                ))
                .with_fault(Fault::Conflict));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(CliError::internal(format!(
        "run {run} kept changing hands while being cancelled; try `runtape cancel {run}` again"
    )))
}

/// True while a live process holds the run's lease: a `running` run for which this is false
/// was interrupted (its process died, or its lease lapsed) and `resume` continues it.
pub(crate) fn is_driven(rec: &RunRecord) -> bool {
    rec.lease_owner
        .as_deref()
        .is_some_and(|owner| !owner_is_dead(owner) && rec.lease_expires_ms > wall_ms())
}

/// Reads the run until no live process drives it; `None` when [`DRIVER_WAIT`] passes first.
async fn wait_until_undriven(
    store: &dyn Store,
    run: &RunId,
) -> Result<Option<RunRecord>, CliError> {
    let deadline = Instant::now() + DRIVER_WAIT;
    loop {
        let rec = history::record(store, run)?;
        if !is_driven(&rec) {
            return Ok(Some(rec));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}
