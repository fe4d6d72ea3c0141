//! Starting runs from spec files: loaded, made ready (MCP servers started, every provider and
//! tool built once), then started in an engine — or queued for `runtape worker`s.

use std::path::Path;

use super::{EngineSettings, OpsError, Warn, engine_config, open_store_with};
use crate::config::{self, RunFile, Setup};
use crate::exec::{Engine, RunHandle, new_run_id};
use crate::history;
use crate::machine::RunId;
use crate::store::RunRecord;

/// Loads the spec file at `spec`; with `memory`, the run reads and writes that global memory
/// instead of the spec's `[memory] global` (one memory per user or project from one file).
pub fn load(spec: &Path, memory: Option<&str>) -> Result<RunFile, OpsError> {
    let mut file = config::load(spec)?;
    if let Some(name) = memory {
        file.use_global_memory(name)?;
    }
    Ok(file)
}

/// Starts the file's MCP servers and adds their tools to its spec (nothing without
/// `[[mcp]]`); each warning goes to `warn` as `warning: …`.
pub async fn connect_mcp(file: &mut RunFile, warn: Warn) -> Result<(), OpsError> {
    let listing = file.connect_mcp(crate::tool::mcp::McpHub::global()).await?;
    for warning in &listing.warnings {
        warn(&format!("warning: {warning}"));
    }
    Ok(())
}

/// Makes a loaded spec file ready to start: starts its MCP servers, builds every provider and
/// tool once in memory (a missing key or program is reported before any database is
/// touched), and settles the goal (`goal`, else the file's).
pub async fn prepare(
    mut file: RunFile,
    goal: Option<String>,
    warn: Warn,
) -> Result<(RunFile, String), OpsError> {
    connect_mcp(&mut file, warn).await?;
    file.install(&Engine::in_memory())?;
    let goal = goal
        .or_else(|| file.goal.clone())
        .ok_or_else(|| OpsError::NoGoal {
            spec: file.path.clone(),
            detach: false,
        })?;
    Ok((file, goal))
}

/// Starts a run of a [`prepare`]d file under `id` in `engine` (where the file's providers and
/// tools are installed: [`RunFile::install`]), storing its setup so any process can resume
/// it; as the next run of `session` when one is named, kept as the file's `[session]` says. A
/// session that cannot take a next run is refused before anything is written.
pub async fn start(
    engine: &Engine,
    id: RunId,
    file: &RunFile,
    goal: &str,
    session: Option<&str>,
) -> Result<RunHandle, OpsError> {
    if let Some(name) = session {
        // A process racing this one can still take the place first: then the start is refused.
        engine
            .next_in_session(&file.spec, name, &file.session)
            .await?;
    }
    let start = engine
        .start(file.spec.clone(), goal)
        .with_id(id)
        .with_setup(file.setup.to_json()?);
    let start = match session {
        Some(name) => start.in_session(name, file.session.clone()),
        None => start,
    };
    Ok(start.await?)
}

/// Queues a run of `file` in the database `db` for the workers instead of driving it: the
/// run is created, and the `runtape worker` serving the file's directory builds its providers
/// and drives it (so this process needs no provider key). Returns its id. `settings` give the
/// receipt key the run is sealed with and the durability; `goal` defaults to the file's.
pub async fn enqueue(
    db: &Path,
    mut file: RunFile,
    goal: Option<String>,
    session: Option<String>,
    settings: &EngineSettings,
) -> Result<RunId, OpsError> {
    connect_mcp(&mut file, settings.warn).await?;
    let goal = goal
        .or_else(|| file.goal.clone())
        .ok_or_else(|| OpsError::NoGoal {
            spec: file.path.clone(),
            detach: true,
        })?;
    let durability = settings.durability.unwrap_or_default();
    let store = open_store_with(db, true, durability, settings.warn)?;
    let session = session.map(|name| (name, file.session.clone()));
    Ok(crate::worker::enqueue_in_session(
        store.as_ref(),
        engine_config(settings)?.receipts,
        new_run_id(),
        &file.spec,
        &goal,
        file.setup.to_json()?,
        session,
    )
    .await?)
}

/// Rebuilds a stored run's providers and tools in `engine`, once its setup is shown to be what
/// its head sealed (a tampered setup is refused before anything is built from it). Returns
/// the run's row as read.
pub(super) fn install_stored(engine: &Engine, run: &RunId) -> Result<RunRecord, OpsError> {
    let rec = history::record(engine.store().as_ref(), run)?;
    crate::ledger::check_continuable(engine.store().as_ref(), &rec, engine.receipt_signer())?;
    let Some(setup) = &rec.setup else {
        return Err(OpsError::NoStoredSetup { run: run.clone() });
    };
    Setup::from_json(setup)?.install(engine)?;
    Ok(rec)
}
