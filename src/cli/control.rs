//! Commands that change a run from outside: `pause`, `cancel`.

use std::path::Path;

use super::common::{CliError, open_existing, outln, parse_run_at};
use crate::exec::{Engine, EngineConfig};
use crate::history;
use crate::store::RunStatus;

/// `runtape pause RUN`: asks whichever process drives the run to pause at its next step
/// boundary.
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
    let engine = Engine::with_store(store, EngineConfig::default());
    engine.pause(&run).await?;
    outln!(
        "pause requested: {run} pauses at its next step boundary; `runtape resume {run}` continues it"
    );
    Ok(())
}

/// `runtape cancel RUN`: a run driven by another process is asked to stop (it aborts its
/// in-flight work and commits the cancellation); a run at rest is cancelled here.
pub(crate) async fn cancel(db: &Path, run: &str, reason: Option<String>) -> Result<(), CliError> {
    let (run, _) = parse_run_at(run)?;
    let store = open_existing(db)?;
    let engine = Engine::with_store(store, EngineConfig::default());
    match engine.cancel(&run, reason).await? {
        Some(handle) => {
            let end = handle.wait().await?;
            outln!("cancelled {run} at step {}", end.state.seq());
        }
        None => outln!("cancel requested: the process driving {run} stops it now"),
    }
    Ok(())
}
