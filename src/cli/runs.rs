//! Commands that drive runs: `run`, `resume`, `fork` (`replay` is in [`super::replay`]). Each
//! parses its arguments, calls [`crate::ops`], and follows the run it drives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::DEFAULT_GRACE_MS;
use super::common::{CliError, db_path, open_existing, outln, parse_run_at, parse_whole_run};
use super::drive::{announce, announce_fork, follow};
use crate::config::RunFile;
use crate::exec::{Engine, ForkMode, TapeEnd, new_run_id};
use crate::machine::RunId;
use crate::ops::{self, Answer, Edit, EngineSettings, Raise};
use crate::store::Durability;
use crate::term::{StopSignals, note};

/// Options every run-driving command shares.
pub(crate) struct Common {
    pub(crate) db: Option<PathBuf>,
    pub(crate) json: bool,
    pub(crate) receipt_key: Option<PathBuf>,
    pub(crate) stepped_clock: bool,
    pub(crate) grace_ms: Option<u64>,
    /// `--durability`, or (for a command given a spec file) the file's `[run] durability`.
    pub(crate) durability: Option<Durability>,
}

impl Common {
    /// The grace period of a graceful stop: `--grace-ms`, else `$RUNTAPE_STOP_GRACE_MS`, else
    /// [`DEFAULT_GRACE_MS`].
    pub(crate) fn grace(&self) -> Result<Duration, CliError> {
        match self.grace_ms {
            Some(ms) => Ok(Duration::from_millis(ms)),
            None => Ok(ops::env_ms("RUNTAPE_STOP_GRACE_MS", DEFAULT_GRACE_MS, 0)?),
        }
    }

    /// The engine settings the options ask for; warnings go to stderr.
    pub(crate) fn settings(&self) -> EngineSettings {
        EngineSettings {
            receipt_key: self.receipt_key.clone(),
            stepped_clock: self.stepped_clock,
            durability: self.durability,
            warn: note,
        }
    }
}

/// An engine over `db` with the receipt signer, clock and durability the options ask for,
/// its runs exported over OTLP when `$OTEL_EXPORTER_OTLP_ENDPOINT` is set.
pub(crate) fn engine(db: &Path, common: &Common, create: bool) -> Result<Engine, CliError> {
    let engine = ops::engine(db, &common.settings(), create)?;
    super::otel::observe_engine(&engine);
    Ok(engine)
}

/// `runtape run SPEC [GOAL] [--detach] [--session S] [--model …] [--run-id ID] …`.
pub(crate) async fn run(
    spec: &Path,
    goal: Option<String>,
    detach: bool,
    session: Option<String>,
    memory: Option<String>,
    mut overrides: super::RunOverrides,
    common: Common,
) -> Result<u8, CliError> {
    let env_file = overrides.env_file.take();
    let overrides = ops::Overrides::from(overrides);
    if detach && !overrides.attach.is_empty() {
        return Err(CliError::usage(
            "--attach is for a run driven here; a --detach run is driven by `runtape worker`, which is not given the files",
        ));
    }
    if detach && env_file.is_some() {
        return Err(CliError::usage(
            "--env-file is for a run driven here; a --detach run is driven by `runtape worker`, whose environment must hold the variables",
        ));
    }
    // Installed before the spec is loaded (loading may start an MCP server that reads them);
    // a bad file is refused before anything is written.
    let names = install_env_file(env_file.as_deref())?;
    let mut file = ops::load(spec, memory.as_deref())?;
    let id = overrides.apply(&mut file)?.unwrap_or_else(new_run_id);
    file.setup.env_file = names;
    if detach {
        return enqueue(id, file, goal, session, common).await;
    }
    let (file, goal) = ops::prepare(file, goal, note).await?;
    let db = db_path(common.db.as_deref(), file.database.as_deref());
    let common = Common {
        durability: common.durability.or(file.durability),
        ..common
    };
    let engine = engine(&db, &common, true)?;
    file.install(&engine)?;
    let grace = common.grace()?;
    let signals = StopSignals::install()?;
    // A session that cannot take a next run is refused before a run id is announced.
    let handle = ops::start(&engine, id.clone(), &file, &goal, session.as_deref()).await?;
    // Announced once the run's row exists, so a command given the id at once (`runtape pause
    // ID` after `runtape run … &`) finds the run. A stdout already closed stops it gracefully:
    // `follow` sees the failed write, the run pauses, and the exit status is 4.
    announce(id.as_str(), "started", common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}

/// `runtape run SPEC --detach`: the run is created and queued for the workers, not driven
/// here; its providers are built by the worker that takes it (so this process needs no key).
async fn enqueue(
    id: RunId,
    file: RunFile,
    goal: Option<String>,
    session: Option<String>,
    common: Common,
) -> Result<u8, CliError> {
    let db = db_path(common.db.as_deref(), file.database.as_deref());
    let spec_dir = file.setup.spec_dir.clone();
    let settings = EngineSettings {
        durability: common.durability.or(file.durability),
        ..common.settings()
    };
    let id = ops::enqueue(&db, id, file, goal, session, &settings).await?;
    if common.json {
        crate::term::say_json(&serde_json::json!({"type": "run.queued", "run": id}))?;
    } else {
        outln!("{id}");
        note(&format!(
            "queued run {id}: a `runtape worker --spec-dir {}` takes it up; `runtape ls` shows who drives it",
            spec_dir.display()
        ));
    }
    Ok(super::EXIT_OK)
}

/// Reads and installs `--env-file`'s variables ([`crate::secrets::env_file`]), when given;
/// returns their names, for the run's setup. A bad file is one line, exit 2.
fn install_env_file(path: Option<&Path>) -> Result<Option<Vec<String>>, CliError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let file = crate::secrets::env_file::EnvFile::read(path).map_err(CliError::usage)?;
    let names = file.names();
    file.install().map_err(CliError::usage)?;
    Ok(Some(names))
}

/// `runtape resume RUN [--input|--approve|--reject] [--raise KEY=VALUE]...`.
pub(crate) async fn resume(
    run: &str,
    answer: Answer,
    call: Option<String>,
    raises: Vec<String>,
    env_file: Option<&Path>,
    common: Common,
) -> Result<u8, CliError> {
    let run = parse_whole_run(run, "resume goes on from where the run stopped")?;
    install_env_file(env_file)?;
    let raises = raises
        .iter()
        .map(|r| Raise::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    let db = db_path(common.db.as_deref(), None);
    open_existing(&db)?;
    let grace = common.grace()?;
    let engine = engine(&db, &common, false)?;
    if answer == Answer::None
        && raises.is_empty()
        && let Some(asleep) = ops::wake::asleep(&engine, &run)?
    {
        // Taken up now, it would only wait: say when it wakes, and how to wake it now.
        note(&format!(
            "run {run} sleeps until {} (in {}); `runtape worker` or `runtape serve` wakes it then, `runtape wake {run}` wakes it now",
            crate::text::utc(asleep.due.ms()),
            super::common::age(asleep.wait.as_millis() as u64, 0)
        ));
        return Ok(super::EXIT_OK);
    }
    let signals = StopSignals::install()?;
    let handle = ops::resume(&engine, &run, answer, call.as_deref(), &raises).await?;
    // Announced once this process holds the run, so a refused resume prints only its error.
    announce(run.as_str(), "resumed", common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}

/// `runtape wake RUN`: fires the run's earliest timer now and drives it on.
pub(crate) async fn wake(run: &str, common: Common) -> Result<u8, CliError> {
    let run = parse_whole_run(run, "wake fires the run's timer now")?;
    let db = db_path(common.db.as_deref(), None);
    open_existing(&db)?;
    let grace = common.grace()?;
    let engine = engine(&db, &common, false)?;
    let signals = StopSignals::install()?;
    let (handle, woken) = ops::wake::wake(&engine, &run).await?;
    announce(run.as_str(), "woke", common.json)?;
    if !common.json {
        let what = match woken.timer.kind {
            crate::machine::wake::TimerKind::Sleep => "sleep",
            crate::machine::wake::TimerKind::Deadline => "deadline",
        };
        let when = if woken.early { "early" } else { "on time" };
        note(&format!(
            "fired its {what} due at {} {when}",
            crate::text::utc(woken.timer.due.ms())
        ));
    }
    follow(&engine, handle, common.json, grace, signals).await
}

/// `runtape fork RUN@SEQ [--edit ...]... [--live|--tape]`.
pub(crate) async fn fork(
    at: &str,
    edits: Vec<String>,
    tape: bool,
    stop_on_divergence: bool,
    common: Common,
) -> Result<u8, CliError> {
    let (run, seq) = parse_run_at(at)?;
    let seq = seq.ok_or_else(|| {
        CliError::usage(format!(
            "`fork` needs a step: write {run}@SEQ (see `runtape log {run}`)"
        ))
    })?;
    let edits = edits
        .iter()
        .map(|e| Edit::parse(e))
        .collect::<Result<Vec<_>, _>>()?;
    let mode = match (tape, stop_on_divergence) {
        (false, _) => ForkMode::Live,
        (true, false) => ForkMode::Tape(TapeEnd::GoLive),
        (true, true) => ForkMode::Tape(TapeEnd::Stop),
    };
    let db = db_path(common.db.as_deref(), None);
    open_existing(&db)?;
    let grace = common.grace()?;
    let engine = engine(&db, &common, false)?;
    let signals = StopSignals::install()?;
    let handle = ops::fork(&engine, &run, seq, &edits, mode).await?;
    announce_fork(handle.run_id().as_str(), run.as_str(), seq, common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}
