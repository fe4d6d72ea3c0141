//! The benchmark workloads: a scripted provider with zero latency, every message exactly 200
//! bytes, one call per round to a trivial in-process tool.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::exec::{Engine, EngineConfig, EngineError};
use crate::machine::{
    AgentSpec, Limits, ModelReply, OnExhausted, RunSpec, Spec, ToolCallRequest, ToolSpec,
};
use crate::provider::{ScriptOutcome, ScriptedProvider};
use crate::store::{Durability, MemoryStore, SqliteStore, Store};
use crate::tool::FnTool;

/// Every message's content is exactly this long.
pub(crate) const MESSAGE_BYTES: usize = 200;

/// A 200-byte text tagged with `tag`.
pub(crate) fn text(tag: &str) -> String {
    let mut s = format!("{tag} ");
    while s.len() < MESSAGE_BYTES {
        s.push_str("lorem ipsum ");
    }
    s.truncate(MESSAGE_BYTES);
    s
}

/// The agent's turn cap for a run of `rounds` rounds.
pub(crate) fn turn_cap(rounds: usize) -> u64 {
    (rounds as u64 + 10) * 2
}

/// The spec: one agent, one read-only idempotent tool, caps large enough for `rounds`.
pub(crate) fn spec(rounds: usize, pause_after: Option<u64>) -> RunSpec {
    let cap = turn_cap(rounds);
    let agent = AgentSpec {
        system_prompt: text("system"),
        tools: Some(vec!["lookup".into()]),
        limits: Limits {
            max_turns: Some(pause_after.unwrap_or(cap)),
            max_tool_calls: Some(cap),
            ..Limits::default()
        },
        on_exhausted: if pause_after.is_some() {
            OnExhausted::Pause
        } else {
            OnExhausted::Handoff
        },
        ..AgentSpec::new("bench", "scripted", "bench-model")
    };
    let tool = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("lookup", "returns 200 bytes")
    };
    let spec = Spec {
        agents: vec![agent],
        tools: vec![tool],
        max_transitions: cap * 3 + 10,
        ..Spec::default()
    };
    // Built from constants this module controls; a failure here is a bug in the benchmark.
    RunSpec::build(spec).expect("the benchmark spec is valid")
}

/// Registers the scripted provider (`rounds` tool rounds, then an answer) and the tool. The
/// turn is read off the remaining-turn budget (the spec's cap minus what is left), which is
/// O(1), where counting assistant messages would grow with the run.
pub(crate) fn equip(engine: &Engine, rounds: usize, max_turns: u64) {
    let cap = max_turns;
    let call_text = text("assistant");
    let answer = text("answer");
    engine.register_provider(
        "scripted",
        Arc::new(ScriptedProvider::new("scripted", move |req| {
            let turn = cap.saturating_sub(req.remaining.turns.unwrap_or(cap)) as usize;
            let reply = if turn < rounds {
                let call = ToolCallRequest::new(format!("c{turn}"), "lookup", json!({"q": "x"}));
                ModelReply {
                    text: Some(call_text.clone()),
                    ..ModelReply::tools(vec![call])
                }
            } else {
                ModelReply::text(answer.clone())
            };
            ScriptOutcome {
                result: Ok(reply.with_usage(100, 50)),
                latency: Duration::ZERO,
                chunks: Vec::new(),
            }
        })),
    );
    let result = text("tool result");
    let tool = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("lookup", "returns 200 bytes")
    };
    engine.register_tool(Arc::new(FnTool::new(tool, move |_, _| {
        Ok(json!(result.clone()))
    })));
}

/// What one single-run workload measured.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RunFigures {
    pub(crate) wall: Duration,
    pub(crate) transitions: u64,
    pub(crate) bytes: u64,
}

/// W1 (and W4 with `None`): one run of `rounds` tool rounds then an answer.
pub(crate) async fn one_run(
    db: Option<&Path>,
    rounds: usize,
    durability: Durability,
) -> Result<RunFigures, EngineError> {
    let store: Arc<dyn Store> = match db {
        Some(path) => Arc::new(SqliteStore::open(path, durability)?),
        None => Arc::new(MemoryStore::new()),
    };
    let empty = store.size_bytes()?;
    let engine = Engine::with_store(
        store.clone(),
        EngineConfig {
            durability,
            ..EngineConfig::default()
        },
    );
    equip(&engine, rounds, turn_cap(rounds));
    let started = Instant::now();
    let end = engine
        .start(spec(rounds, None), &text("goal"))
        .await?
        .wait()
        .await?;
    let wall = started.elapsed();
    if db.is_some() {
        checkpoint(db)?;
    }
    Ok(RunFigures {
        wall,
        transitions: end.state.seq(),
        bytes: store.size_bytes()?.saturating_sub(empty),
    })
}

/// W2: `runs` runs of `rounds` rounds started together on one database.
pub(crate) async fn many_runs(
    db: &Path,
    runs: usize,
    rounds: usize,
) -> Result<RunFigures, EngineError> {
    let store = Arc::new(SqliteStore::open(db, Durability::Full)?);
    let (wall, transitions) = runs_together(store.clone(), runs, rounds).await?;
    Ok(RunFigures {
        wall,
        transitions,
        bytes: store.size_bytes()?,
    })
}

/// Starts `runs` runs of `rounds` rounds together on one engine over `store` (each may be in
/// flight at once) and waits for all: the wall time from the first start to the last end, and
/// the transitions they made. What W2 measures, on whichever store (timed or not) it is given.
pub(crate) async fn runs_together(
    store: Arc<dyn Store>,
    runs: usize,
    rounds: usize,
) -> Result<(Duration, u64), EngineError> {
    let engine = Engine::with_store(
        store,
        EngineConfig {
            max_concurrent_runs: runs,
            ..EngineConfig::default()
        },
    );
    equip(&engine, rounds, turn_cap(rounds));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(runs);
    for _ in 0..runs {
        handles.push(engine.start(spec(rounds, None), &text("goal")).await?);
    }
    let mut transitions = 0;
    for h in handles {
        transitions += h.wait().await?.state.seq();
    }
    Ok((started.elapsed(), transitions))
}

/// A run of `rounds` rounds left resting in `BudgetExhausted` (for the resume probe).
pub(crate) async fn parked_run(
    db: &Path,
    rounds: usize,
) -> Result<crate::machine::RunId, EngineError> {
    let engine = Engine::open_with(
        db,
        EngineConfig {
            durability: Durability::Normal,
            ..EngineConfig::default()
        },
    )?;
    equip(&engine, rounds + 1, rounds as u64);
    let end = engine
        .start(spec(rounds + 1, Some(rounds as u64)), &text("goal"))
        .await?
        .wait()
        .await?;
    checkpoint(Some(db))?;
    Ok(end.run_id)
}

/// Moves the WAL into the database file so its size is the data's.
pub(crate) fn checkpoint(db: Option<&Path>) -> Result<(), EngineError> {
    let Some(db) = db else { return Ok(()) };
    let conn =
        rusqlite::Connection::open(db).map_err(|e| crate::store::StoreError::Io(e.to_string()))?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .map_err(|e| crate::store::StoreError::Io(e.to_string()))?;
    Ok(())
}

/// The raw limit: `n` single-row inserts of ~500 bytes, one transaction each, WAL mode.
pub(crate) fn raw_commits(
    db: &Path,
    n: usize,
    durability: Durability,
) -> Result<Duration, crate::store::StoreError> {
    let io = |e: rusqlite::Error| crate::store::StoreError::Io(e.to_string());
    let conn = rusqlite::Connection::open(db).map_err(io)?;
    let sync = if durability == Durability::Full {
        "FULL"
    } else {
        "NORMAL"
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, payload BLOB NOT NULL);"
    ))
    .map_err(io)?;
    let payload = vec![7u8; 500];
    let mut stmt = conn
        .prepare("INSERT INTO raw (payload) VALUES (?1)")
        .map_err(io)?;
    let started = Instant::now();
    for _ in 0..n {
        stmt.execute([&payload]).map_err(io)?;
    }
    Ok(started.elapsed())
}
