//! Forking a stored run at a step, with edits, live or from its parent's recording.

use super::OpsError;
use super::edits::Edit;
use super::start::install_stored;
use crate::exec::{Engine, ForkMode, RunHandle};
use crate::history;
use crate::machine::RunId;

/// Forks `run` at `seq` in `engine` as `runtape fork RUN@SEQ` does and returns the handle of
/// the new run, driven in `engine`: rebuilds the parent's stored providers and tools (once its
/// setup matches its sealed head), applies `edits` against the state at `seq`, and starts the
/// fork live or from the parent's tape (`mode`: `--live`, `--tape`, `--tape
/// --stop-on-divergence`). Forking at the step where the run ended, or with an
/// edit that does not apply, is refused with nothing written.
pub async fn fork(
    engine: &Engine,
    run: &RunId,
    seq: u64,
    edits: &[Edit],
    mode: ForkMode,
) -> Result<RunHandle, OpsError> {
    install_stored(engine, run)?;
    let store = engine.store().clone();
    let rec = history::record(store.as_ref(), run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store.as_ref(), run, &spec, seq)?.state;
    let edits = edits.iter().map(|e| e.resolve(&state)).collect();
    Ok(engine.fork(run, seq, edits, mode).await?)
}
