//! Commands that change a run from outside: `pause`, `cancel`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::common::{CliError, open_existing, outln, parse_run_at};
use crate::exec::{Engine, EngineConfig, wall_ms};
use crate::history;
use crate::machine::RunId;
use crate::store::{RunRecord, RunStatus, Store, owner_is_dead};

/// How long `pause` and `cancel` wait for the process driving a run to act on the request
/// before returning (it acts at its next step boundary, after any call in flight).
const DRIVER_WAIT: Duration = Duration::from_secs(30);

/// How often the run's row is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// `runtape pause RUN`: asks whichever process drives the run to pause at its next step
/// boundary, and waits (up to [`DRIVER_WAIT`]) until it has, so `resume` can follow at once.
pub(crate) async fn pause(db: &Path, run: &str) -> Result<(), CliError> {
    let (run, _) = parse_run_at(run)?;
    let store = open_existing(db)?;
    let rec = history::record(store.as_ref(), &run)?;
    if rec.status != RunStatus::Running {
        return Err(CliError::usage(format!(
            "run {run} is {}; only a running run can be paused",
            rec.status
        )));
    }
    if !is_driven(&rec) {
        outln!(
            "run {run} is not being driven (its process stopped at step {}); `runtape resume {run}` continues it",
            rec.seq
        );
        return Ok(());
    }
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    engine.pause(&run).await?;
    match wait_until_undriven(store.as_ref(), &run).await? {
        Some(rec) if rec.status == RunStatus::Paused => outln!(
            "paused {run} at step {}; `runtape resume {run}` continues it",
            rec.seq
        ),
        Some(rec) => outln!(
            "run {run} stopped before it could pause: {} at step {}",
            rec.status,
            rec.seq
        ),
        None => outln!(
            "pause requested: {run} is still finishing a call and pauses at its next step boundary"
        ),
    }
    Ok(())
}

/// `runtape cancel RUN`: a run driven by another process is asked to stop (it aborts its
/// in-flight work and commits the cancellation; this waits up to [`DRIVER_WAIT`] for that); a
/// run at rest is cancelled here.
pub(crate) async fn cancel(db: &Path, run: &str, reason: Option<String>) -> Result<(), CliError> {
    let (run, _) = parse_run_at(run)?;
    let store = open_existing(db)?;
    let engine = Engine::with_store(store.clone(), EngineConfig::default());
    match engine.cancel(&run, reason).await? {
        Some(handle) => {
            let end = handle.wait().await?;
            outln!("cancelled {run} at step {}", end.state.seq());
        }
        None => match wait_until_undriven(store.as_ref(), &run).await? {
            Some(rec) => outln!("cancelled {run}: {} at step {}", rec.status, rec.seq),
            None => outln!("cancel requested: the process driving {run} is stopping it"),
        },
    }
    Ok(())
}

/// True while a live process holds the run's lease.
fn is_driven(rec: &RunRecord) -> bool {
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
