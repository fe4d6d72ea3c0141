//! Commands that drive runs: `run`, `resume`, `fork` (`replay` is in [`super::replay`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::DEFAULT_GRACE_MS;
use super::common::{
    CliError, db_path, open_existing, outln, parse_run_at, parse_whole_run, postgres_url,
};
use super::drive::{announce, announce_fork, follow};
use crate::config::{self, Setup};
use crate::exec::{
    Engine, EngineConfig, ForkEdit, ForkMode, RunHandle, SteppedClock, TapeEnd, new_run_id,
};
use crate::history;
use crate::machine::{BudgetKey, EventBody, HumanInput, RunId, RunState, Scope, ToolOutcome};
use crate::receipt::{DEFAULT_KEY_ENV, ReceiptSigner};
use crate::store::{Durability, PostgresStore, SqliteStore};
use crate::term::StopSignals;

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
            None => env_ms("RUNTAPE_STOP_GRACE_MS", DEFAULT_GRACE_MS, 0),
        }
    }
}

/// A duration in ms from the environment variable `name` (unset or empty: `default`); a value
/// that is not a whole number of at least `min` ms is a usage error naming the variable.
pub(crate) fn env_ms(name: &str, default: u64, min: u64) -> Result<Duration, CliError> {
    let Some(raw) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
        return Ok(Duration::from_millis(default));
    };
    match raw.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(ms) if ms >= min => Ok(Duration::from_millis(ms)),
        _ => Err(CliError::usage(format!(
            "${name} must be a whole number of milliseconds, at least {min}; unset it for the default ({default})"
        ))),
    }
}

/// `$RUNTAPE_DB_MAX_BYTES`: a cap on the database's size, if set.
pub(crate) fn db_cap() -> Result<Option<u64>, CliError> {
    let Some(raw) = std::env::var_os("RUNTAPE_DB_MAX_BYTES").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    raw.to_str()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            CliError::usage(
                "$RUNTAPE_DB_MAX_BYTES must be a whole number of bytes; unset it for no cap",
            )
        })
}

/// `$RUNTAPE_WRITER_NICE`: the SQLite writer thread's nice value, if set
/// ([`crate::store::sqlite_priority`]).
pub(crate) fn writer_nice() -> Result<Option<i32>, CliError> {
    crate::store::sqlite_priority::nice_from_env().map_err(CliError::usage)
}

/// The engine settings the options ask for: the receipt signer (`--receipt-key`, else
/// `$RUNTAPE_RECEIPT_KEY`), the clock (`--stepped-clock`) and the lease TTL
/// (`$RUNTAPE_LEASE_TTL_MS`). The key file's text is registered as a secret first.
pub(crate) fn engine_config(common: &Common) -> Result<EngineConfig, CliError> {
    if let Some(path) = &common.receipt_key
        && let Ok(text) = std::fs::read_to_string(path)
    {
        crate::secrets::register_key_text("receipt-key", &text);
    }
    let receipts = ReceiptSigner::from_env_or_file(DEFAULT_KEY_ENV, common.receipt_key.as_deref())
        .map_err(|e| CliError::usage(e.to_string()))?;
    let mut config = EngineConfig {
        receipts: Arc::new(receipts),
        lease_ttl: env_ms("RUNTAPE_LEASE_TTL_MS", 15_000, 100)?,
        ..EngineConfig::default()
    };
    if common.stepped_clock {
        config.clock = Arc::new(SteppedClock {
            start_ms: 1_700_000_000_000,
            step_ms: 1,
        });
    }
    Ok(config)
}

/// The store at `db`: a PostgreSQL database, or a SQLite file (created only when `create`).
pub(crate) fn open_store(
    db: &Path,
    create: bool,
) -> Result<Arc<dyn crate::store::Store>, CliError> {
    open_store_with(db, create, Durability::Full)
}

/// [`open_store`] committing with `durability`. `normal` is for SQLite files only: with a
/// PostgreSQL database it is refused (the server's `synchronous_commit` decides there). A
/// SQLite file opened at `normal` says so on stderr, from the mode its connection reports.
pub(crate) fn open_store_with(
    db: &Path,
    create: bool,
    durability: Durability,
) -> Result<Arc<dyn crate::store::Store>, CliError> {
    Ok(match postgres_url(db) {
        Some(_) if durability == Durability::Normal => {
            return Err(CliError::usage(
                "durability \"normal\" is for SQLite files: a PostgreSQL database commits as its server's synchronous_commit says (set that on the server to trade durability for speed) – drop --durability normal or the spec's [run] durability",
            ));
        }
        Some(url) => Arc::new(PostgresStore::open(url)?),
        None => {
            if !create && !db.exists() {
                SqliteStore::open_existing(db, durability)?;
            }
            let nice = writer_nice()?;
            let store = SqliteStore::open_capped(db, durability, db_cap()?)?;
            if let Some(nice) = nice {
                store
                    .set_writer_nice(nice)
                    .map_err(|e| CliError::usage(e.to_string()))?;
            }
            if store.durability() == Durability::Normal {
                crate::term::note(&format!(
                    "{}: durability \"normal\": a process crash loses nothing, a power loss can lose the latest commits",
                    db.display()
                ));
            }
            Arc::new(store)
        }
    })
}

/// An engine over `db` with the receipt signer, clock and durability the options ask for.
pub(crate) fn engine(db: &Path, common: &Common, create: bool) -> Result<Engine, CliError> {
    let mut config = engine_config(common)?;
    config.durability = common.durability.unwrap_or_default();
    let engine = Engine::with_store(open_store_with(db, create, config.durability)?, config);
    crate::tool::mcp::forward_progress(&engine);
    super::otel::observe_engine(&engine);
    Ok(engine)
}

/// Rebuilds a stored run's providers and tools in `engine`, once its setup is shown to be what
/// its head sealed (a tampered setup is refused before anything is built from it).
pub(crate) fn install_stored(engine: &Engine, run: &RunId) -> Result<(), CliError> {
    let rec = history::record(engine.store().as_ref(), run)?;
    crate::ledger::check_continuable(engine.store().as_ref(), &rec, engine.receipt_signer())?;
    let Some(setup) = rec.setup else {
        return Err(CliError::usage(format!(
            "run {run} was started from a program, not a spec file, so its providers are not stored; continue it from that program"
        )));
    };
    Setup::from_json(&setup)?.install(engine)?;
    Ok(())
}

/// `runtape run SPEC [GOAL] [--detach] [--session S]`.
pub(crate) async fn run(
    spec: &Path,
    goal: Option<String>,
    detach: bool,
    session: Option<String>,
    memory: Option<String>,
    common: Common,
) -> Result<u8, CliError> {
    let load = || -> Result<config::RunFile, CliError> {
        let mut file = config::load(spec)?;
        if let Some(name) = &memory {
            file.use_global_memory(name)?;
        }
        Ok(file)
    };
    if detach {
        let mut file = load()?;
        connect_mcp(&mut file).await?;
        return enqueue(spec, file, goal, session, common).await;
    }
    let (file, goal) = prepare(load()?, goal).await?;
    let db = db_path(common.db.as_deref(), file.database.as_deref());
    let common = Common {
        durability: common.durability.or(file.durability),
        ..common
    };
    let engine = engine(&db, &common, true)?;
    file.install(&engine)?;
    let grace = common.grace()?;
    if let Some(name) = &session {
        // A session that cannot take a next run is refused before a run id is announced (a
        // process racing this one can still take the place first: then the start is refused).
        engine
            .next_in_session(&file.spec, name, &file.session)
            .await?;
    }
    let signals = StopSignals::install()?;
    let id = new_run_id();
    let handle = start_prepared(&engine, id.clone(), &file, &goal, session.as_deref()).await?;
    // Announced once the run's row exists, so a command given the id at once (`runtape pause
    // ID` after `runtape run … &`) finds the run. A stdout already closed stops it gracefully:
    // `follow` sees the failed write, the run pauses, and the exit status is 4.
    announce(id.as_str(), "started", common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}

/// `runtape run SPEC --detach`: the run is created and queued for the workers, not driven
/// here; its providers are built by the worker that takes it (so this process needs no key).
async fn enqueue(
    spec: &Path,
    file: config::RunFile,
    goal: Option<String>,
    session: Option<String>,
    common: Common,
) -> Result<u8, CliError> {
    let goal = goal.or_else(|| file.goal.clone()).ok_or_else(|| {
        CliError::usage(format!(
            "no goal: give one (`runtape run {} \"GOAL\" --detach`) or set `goal` in the spec file",
            spec.display()
        ))
    })?;
    let db = db_path(common.db.as_deref(), file.database.as_deref());
    let durability = common.durability.or(file.durability).unwrap_or_default();
    let store = open_store_with(&db, true, durability)?;
    let session = session.map(|name| (name, file.session.clone()));
    let id = crate::worker::enqueue_in_session(
        store.as_ref(),
        engine_config(&common)?.receipts,
        new_run_id(),
        &file.spec,
        &goal,
        file.setup.to_json()?,
        session,
    )
    .await?;
    if common.json {
        crate::term::say_json(&serde_json::json!({"type": "run.queued", "run": id}))?;
    } else {
        outln!("{id}");
        crate::term::note(&format!(
            "queued run {id}: a `runtape worker --spec-dir {}` takes it up; `runtape ls` shows who drives it",
            file.setup.spec_dir.display()
        ));
    }
    Ok(super::EXIT_OK)
}

/// Makes a loaded spec file ready to start: starts its MCP servers, builds every provider and
/// tool once in memory (a missing key or program is reported before any database is
/// touched), and settles the goal (`goal`, else the file's).
pub(crate) async fn prepare(
    mut file: config::RunFile,
    goal: Option<String>,
) -> Result<(config::RunFile, String), CliError> {
    connect_mcp(&mut file).await?;
    file.install(&Engine::in_memory())?;
    let goal = goal.or_else(|| file.goal.clone()).ok_or_else(|| {
        CliError::usage(format!(
            "no goal: give one (`runtape run {} \"GOAL\"`) or set `goal` in the spec file",
            file.path.display()
        ))
    })?;
    Ok((file, goal))
}

/// Starts a run of a [`prepare`]d file under `id` in `engine` (where the file's providers and
/// tools are installed), storing its setup so any process can resume it; as the next run of
/// `session` when one is named, kept as the file's `[session]` says.
pub(crate) async fn start_prepared(
    engine: &Engine,
    id: RunId,
    file: &config::RunFile,
    goal: &str,
    session: Option<&str>,
) -> Result<RunHandle, CliError> {
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

/// Starts the file's MCP servers and adds their tools to its spec (nothing without `[[mcp]]`);
/// warnings go to stderr.
pub(crate) async fn connect_mcp(file: &mut config::RunFile) -> Result<(), CliError> {
    let listing = file.connect_mcp(crate::tool::mcp::McpHub::global()).await?;
    for warning in &listing.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// What `resume` should tell the run first.
pub(crate) enum Answer {
    None,
    Input(String),
    Approve,
    Reject(Option<String>),
}

/// `runtape resume RUN [--input|--approve|--reject] [--raise KEY=VALUE]...`.
pub(crate) async fn resume(
    run: &str,
    answer: Answer,
    call: Option<String>,
    raises: Vec<String>,
    common: Common,
) -> Result<u8, CliError> {
    let run = parse_whole_run(run, "resume goes on from where the run stopped")?;
    let db = db_path(common.db.as_deref(), None);
    open_existing(&db)?;
    let grace = common.grace()?;
    let engine = engine(&db, &common, false)?;
    let signals = StopSignals::install()?;
    let handle = take_up(&engine, &run, answer, call.as_deref(), &raises).await?;
    // Announced once this process holds the run, so a refused resume prints only its error.
    announce(run.as_str(), "resumed", common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}

/// Takes `run` up in `engine` as `resume` does: rebuilds its stored providers and tools (once
/// its setup matches its sealed head), commits every budget raise but the last on its own,
/// then answers the waiting call (`answer`, to `call` when several wait), raises the last
/// budget, or simply resumes, and returns the handle of the driven run.
pub(crate) async fn take_up(
    engine: &Engine,
    run: &RunId,
    answer: Answer,
    call: Option<&str>,
    raises: &[String],
) -> Result<RunHandle, CliError> {
    install_stored(engine, run)?;
    let store = engine.store().clone();
    let rec = history::record(store.as_ref(), run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store.as_ref(), run, &spec, rec.seq)?.state;
    let mut raised = Vec::new();
    for r in raises {
        raised.push(parse_raise(r, &state, "--raise")?);
    }
    let input = match answer {
        Answer::None => None,
        Answer::Input(text) => Some(HumanInput::Answer { text }),
        Answer::Approve => Some(HumanInput::Approve),
        Answer::Reject(reason) => Some(HumanInput::Reject { reason }),
    };
    // A run resting on a child that waits for a person (it does not wait itself): the answer
    // goes to that child, then the run is driven on and takes the child up.
    let rests_on_child = input.is_some()
        && crate::store::RunStatus::of_state(&state) != crate::store::RunStatus::AwaitingInput;
    let waiting = if rests_on_child {
        super::tree::waiting_below(store.as_ref(), run)?
    } else {
        Vec::new()
    };
    let input = match (input, waiting.as_slice()) {
        (Some(input), [child]) => {
            engine.answer_at_rest(&child.run, call, input).await?;
            None
        }
        (Some(_), [_, _, ..]) => {
            let names: Vec<&str> = waiting.iter().map(|w| w.run.as_str()).collect();
            return Err(CliError::usage(format!(
                "run {run} does not wait for a person itself; its child runs {} do: answer each with `runtape resume CHILD --approve` (or --reject, --input), then `runtape resume {run}`",
                names.join(", ")
            )));
        }
        (input, _) => input,
    };
    // Every raise but the last is committed on its own; the last (or the input) drives the run.
    let last = if input.is_none() { raised.pop() } else { None };
    for (scope, key, limit) in raised {
        engine
            .apply(run, EventBody::BudgetRaised { scope, key, limit })
            .await?;
    }
    Ok(match (input, last) {
        (Some(input), _) => engine.provide_input(run, call, input).await?,
        (None, Some((scope, key, limit))) => engine.raise_budget(run, scope, key, limit).await?,
        (None, None) => engine.resume(run).await?,
    })
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
    let db = db_path(common.db.as_deref(), None);
    open_existing(&db)?;
    let grace = common.grace()?;
    let engine = engine(&db, &common, false)?;
    let signals = StopSignals::install()?;
    let handle = fork_at(&engine, &run, seq, &edits, tape, stop_on_divergence).await?;
    announce_fork(handle.run_id().as_str(), run.as_str(), seq, common.json)?;
    follow(&engine, handle, common.json, grace, signals).await
}

/// Forks `run` at `seq` in `engine` as `fork` does: rebuilds the parent's stored providers and
/// tools, parses `edits` (`user=TEXT`, `tool:CALL_ID=VALUE`, `budget.KEY=VALUE`) against the
/// state at `seq`, and starts the fork live or from the parent's tape.
pub(crate) async fn fork_at(
    engine: &Engine,
    run: &RunId,
    seq: u64,
    edits: &[String],
    tape: bool,
    stop_on_divergence: bool,
) -> Result<RunHandle, CliError> {
    install_stored(engine, run)?;
    let store = engine.store().clone();
    let rec = history::record(store.as_ref(), run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store.as_ref(), run, &spec, seq)?.state;
    let edits = edits
        .iter()
        .map(|e| parse_edit(e, &state))
        .collect::<Result<Vec<_>, _>>()?;
    let mode = match (tape, stop_on_divergence) {
        (false, _) => ForkMode::Live,
        (true, false) => ForkMode::Tape(TapeEnd::GoLive),
        (true, true) => ForkMode::Tape(TapeEnd::Stop),
    };
    Ok(engine.fork(run, seq, edits, mode).await?)
}

/// `KEY=VALUE` for a budget: `budget.max_turns=80` (the exhausted scope, else the active
/// agent), `run.max_turns=80`, or `AGENT.max_turns=80`; costs in US dollars. `flag` is the
/// option it came with (`--raise`, or `--edit` for a fork), named in the error.
fn parse_raise(s: &str, state: &RunState, flag: &str) -> Result<(Scope, BudgetKey, u64), CliError> {
    let bad = |why: String| {
        CliError::usage(format!(
            "{flag} `{s}`: {why}; write budget.KEY=VALUE, run.KEY=VALUE or AGENT.KEY=VALUE with KEY one of max_turns, max_tool_calls, max_tokens, max_cost_usd, max_wall_ms"
        ))
    };
    let (lhs, value) = s.split_once('=').ok_or_else(|| bad("no `=`".into()))?;
    let (who, key) = lhs
        .split_once('.')
        .ok_or_else(|| bad("no scope before the key".into()))?;
    let key = BudgetKey::ALL
        .into_iter()
        .find(|k| k.field() == key)
        .ok_or_else(|| {
            bad(format!(
                "unknown budget `{key}`{}",
                crate::machine::did_you_mean(key, BudgetKey::ALL.iter().map(|k| k.field()))
            ))
        })?;
    let limit = if key == BudgetKey::Cost {
        let usd: f64 = value
            .parse()
            .map_err(|_| bad("the value is not a number of dollars".into()))?;
        if !(0.0..=1e9).contains(&usd) {
            return Err(bad(
                "the value must be between 0 and 1000000000 dollars".into()
            ));
        }
        (usd * 1e9).round() as u64
    } else {
        value
            .parse()
            .map_err(|_| bad("the value is not a whole number".into()))?
    };
    let scope = match who {
        "run" => Scope::Run,
        "budget" => match state {
            RunState::BudgetExhausted { scope, .. } => scope.clone(),
            _ => Scope::Agent(state.data().map(|d| d.active.clone()).unwrap_or_default()),
        },
        agent => Scope::Agent(agent.into()),
    };
    Ok((scope, key, limit))
}

/// A fork edit: `user=TEXT`, `tool:CALL_ID=VALUE` (JSON if it parses, else text), or a budget
/// as for `--raise`.
fn parse_edit(s: &str, state: &RunState) -> Result<ForkEdit, CliError> {
    if let Some(text) = s.strip_prefix("user=") {
        return Ok(ForkEdit::ReplaceLastUserMessage {
            agent: None,
            text: text.to_owned(),
        });
    }
    if let Some(rest) = s.strip_prefix("tool:") {
        let (call_id, value) = rest
            .split_once('=')
            .ok_or_else(|| CliError::usage(format!("--edit `{s}`: write tool:CALL_ID=VALUE")))?;
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
        return Ok(ForkEdit::ReplaceToolResult {
            call_id: call_id.to_owned(),
            result: ToolOutcome::Ok { value },
        });
    }
    if let Some(rest) = s.strip_prefix("memory:") {
        return parse_memory_edit(s, rest);
    }
    if s.contains('=') && s.contains('.') {
        let (scope, key, limit) = parse_raise(s, state, "--edit")?;
        return Ok(ForkEdit::SetLimit { scope, key, limit });
    }
    Err(CliError::usage(format!(
        "--edit `{s}`: write user=TEXT, tool:CALL_ID=VALUE, budget.KEY=VALUE or memory:SCOPE:KEY=VALUE"
    )))
}

/// `memory:SCOPE:KEY=VALUE` sets a memory key at the fork point, `memory:SCOPE:KEY` forgets
/// it; SCOPE is `agent` (the active agent's notes), `agent@AGENT`, `shared` or `global`.
fn parse_memory_edit(s: &str, rest: &str) -> Result<ForkEdit, CliError> {
    let bad = || {
        CliError::usage(format!(
            "--edit `{}`: write memory:SCOPE:KEY=VALUE (or memory:SCOPE:KEY to forget it), SCOPE being agent, agent@AGENT, shared or global",
            super::common::quoted(s)
        ))
    };
    let (scope, target) = rest.split_once(':').ok_or_else(bad)?;
    let (scope, agent) = match scope.split_once('@') {
        Some(("agent", agent)) if !agent.is_empty() => {
            ("agent", Some(crate::machine::AgentId::from(agent)))
        }
        Some(_) => return Err(bad()),
        None => (scope, None),
    };
    let scope = crate::machine::MemoryScope::parse(scope).ok_or_else(bad)?;
    let (key, value) = match target.split_once('=') {
        Some((key, value)) => (key, Some(value.to_owned())),
        None => (target, None),
    };
    if key.is_empty() {
        return Err(bad());
    }
    Ok(ForkEdit::SetMemory {
        scope,
        agent,
        key: key.to_owned(),
        value,
    })
}
