//! Forking a stored run at a step, with edits, live or from its parent's recording.

use super::OpsError;
use super::edits::Edit;
use super::start::install_stored;
use crate::exec::{Engine, ForkMode, RunHandle};
use crate::machine::RunId;

/// Forks `run` at `seq` in `engine` as `runtape fork RUN@SEQ` does and returns the handle of
/// the new run, driven in `engine`: rebuilds the parent's stored providers and tools (once its
/// setup matches its sealed head), applies `edits` against the state at `seq` (the parent's
/// history is read once, to plan the fork), and starts the
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
    // The parent's history is read once, by the engine as it plans the fork; the edits are
    // settled against the state it reads there.
    let edits = edits.to_vec();
    let resolve = Box::new(move |state: &_| edits.iter().map(|e| e.resolve(state)).collect());
    Ok(engine.fork_resolving(run, seq, resolve, mode).await?)
}
