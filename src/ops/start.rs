//! Starting runs from spec files: loaded, made ready (MCP servers started, every provider and
//! tool built once), then started in an engine — or queued for `runtape worker`s.

use std::path::Path;

use super::{EngineSettings, OpsError, Warn, engine_config, open_store_with};
use crate::config::{self, RunFile, Setup};
use crate::exec::{Engine, RunHandle, SessionSettings};
use crate::history;
use crate::machine::{RunId, RunSpec};
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
    let setup = file.setup.to_json()?;
    let session = session.map(|name| (name, file.session.clone()));
    let mut start = engine.start(file.spec.clone(), goal).with_id(id);
    start = start.with_setup(setup).with_files(file.files.clone());
    begin(engine, start, session).await
}

/// Starts a run of a spec built in the program (its providers and tools registered in
/// `engine`) under `id`; as the next run of a session when one is named, with its settings.
/// No setup is stored, so only a program whose engine has the same providers and tools can
/// [`resume`](super::resume) or [`fork`](super::fork) it. A spec naming a provider or tool
/// that is not registered, or a session that cannot take a next run, is refused before
/// anything is written.
pub async fn start_spec(
    engine: &Engine,
    id: RunId,
    spec: RunSpec,
    goal: &str,
    session: Option<(&str, SessionSettings)>,
) -> Result<RunHandle, OpsError> {
    launch(engine, id, spec, goal, None, session).await
}

pub(super) async fn launch(
    engine: &Engine,
    id: RunId,
    spec: RunSpec,
    goal: &str,
    setup: Option<String>,
    session: Option<(&str, SessionSettings)>,
) -> Result<RunHandle, OpsError> {
    let mut start = engine.start(spec, goal).with_id(id);
    if let Some(setup) = setup {
        start = start.with_setup(setup);
    }
    begin(engine, start, session).await
}

/// Awaits `start`, as the next run of a session when one is named.
async fn begin(
    engine: &Engine,
    start: crate::exec::StartRun<'_>,
    session: Option<(&str, SessionSettings)>,
) -> Result<RunHandle, OpsError> {
    if let Some((name, settings)) = &session {
        // A process racing this one can still take the place first: then the start is refused.
        engine.next_in_session(start.spec(), name, settings).await?;
    }
    let start = match session {
        Some((name, settings)) => start.in_session(name, settings),
        None => start,
    };
    Ok(start.await?)
}

/// Queues a run of `file` under `id` in the database `db` for the workers instead of driving
/// it (a run with that id existing already is refused, writing nothing): the run is created, and the `runtape worker` serving the file's directory builds its providers
/// and drives it (so this process needs no provider key). Returns its id. `settings` give the
/// receipt key the run is sealed with and the durability; `goal` defaults to the file's.
pub async fn enqueue(
    db: &Path,
    id: RunId,
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
        id,
        &file.spec,
        &goal,
        file.setup.to_json()?,
        session,
    )
    .await?)
}

/// Makes `engine` ready to continue a stored run: a run started from a spec file has its
/// providers and tools rebuilt from its stored setup, once that is shown to be what its head
/// sealed ([`crate::ledger::check_identity`]: a tampered setup is refused before anything is
/// built from it; what the command then acts on is checked by the engine's take-up or fork
/// plan before anything is written); a run started from a program is continued only by an
/// engine where every provider and tool its spec names is registered
/// ([`OpsError::NoStoredSetup`] otherwise). Returns the run's row as read.
pub(super) fn install_stored(engine: &Engine, run: &RunId) -> Result<RunRecord, OpsError> {
    let rec = history::record(engine.store().as_ref(), run)?;
    crate::ledger::check_identity(engine.store().as_ref(), &rec, engine.receipt_signer())?;
    match &rec.setup {
        Some(setup) => Setup::from_json(setup)?.install(engine)?,
        None => {
            let spec = history::spec_of(&rec)?;
            if engine.check_runnable(&spec).is_err() {
                return Err(OpsError::NoStoredSetup { run: run.clone() });
            }
        }
    }
    Ok(rec)
}
