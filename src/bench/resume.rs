//! The resume case (`--only resume`): [`crate::ops::resume`] — the path `runtape resume RUN
//! --raise budget.max_turns=N` takes — on a run parked in `BudgetExhausted` at two history
//! lengths, each timed from opening the database to the run's end (the raise, a model turn
//! that answers, the end committed). Printed with their ratio: resuming should cost the same
//! however long the run is, so a ratio well above 1 means something reads the history (or a
//! conversation) per transition or per message again.
//!
//! In-process: the command's own start-up (the binary loading, argument parsing) is the same
//! at both lengths and left out.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::{BenchError, BenchOptions, fresh, median, ms, workload};
use crate::exec::{Engine, EngineConfig};
use crate::machine::RunId;
use crate::ops::{self, Answer, Raise};
use crate::store::RunStatus;

/// What the resume case measured.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ResumeGrowth {
    /// Transitions in the shorter parked run.
    pub(crate) short_transitions: u64,
    /// Resuming it to its end, ms (median).
    pub(crate) short_ms: f64,
    /// Transitions in the longer parked run.
    pub(crate) long_transitions: u64,
    /// Resuming it to its end, ms (median).
    pub(crate) long_ms: f64,
    /// `long_ms / short_ms`.
    pub(crate) ratio: f64,
}

/// Parks a run at each of `opts.resume_rounds` and times [`resume_once`] on a fresh copy of
/// it `reps` times.
pub(super) async fn resume_growth(
    opts: &BenchOptions,
    reps: usize,
) -> Result<ResumeGrowth, BenchError> {
    let mut measured = Vec::new();
    for rounds in opts.resume_rounds {
        let db = fresh(&opts.dir, &format!("resume-{rounds}.db"));
        let run = workload::parked_run(&db, rounds).await?;
        let mut times = Vec::new();
        let mut transitions = 0;
        for i in 0..reps {
            // Each resume ends the run: resume a copy of the parked one.
            let copy = fresh(&opts.dir, &format!("resume-{rounds}-{i}.db"));
            copy_of(&db, &copy)?;
            let (took, seq) = resume_once(&copy, &run, rounds).await?;
            times.push(took);
            transitions = seq;
        }
        measured.push((transitions, median(times)));
    }
    let [(short_transitions, short_ms), (long_transitions, long_ms)] = measured[..] else {
        return Err(BenchError::Process(
            "the resume case measures two runs".into(),
        ));
    };
    Ok(ResumeGrowth {
        short_transitions,
        short_ms,
        long_transitions,
        long_ms,
        ratio: long_ms / short_ms,
    })
}

/// Opens `db`, resumes `run` (parked after `rounds` turns) with its turn budget raised by one
/// through [`ops::resume`], and waits for its end. Returns the milliseconds that took and the
/// transitions the run had when parked.
async fn resume_once(db: &Path, run: &RunId, rounds: usize) -> Result<(f64, u64), BenchError> {
    let started = Instant::now();
    let engine = Engine::open_with(db, EngineConfig::default())?;
    // The script answers on the turn after the parked ones (turn `rounds` of a cap of
    // `rounds + 1`), so the raised run ends.
    workload::equip(&engine, rounds, rounds as u64 + 1);
    let parked = crate::history::record(engine.store().as_ref(), run)
        .map_err(|e| BenchError::Process(e.to_string()))?
        .seq;
    let raise = Raise::parse(&format!("budget.max_turns={}", rounds + 1))
        .map_err(|e| BenchError::Process(e.to_string()))?;
    let end = ops::resume(&engine, run, Answer::None, None, &[raise])
        .await
        .map_err(|e| BenchError::Process(e.to_string()))?
        .wait()
        .await?;
    let took = ms(started.elapsed());
    if end.status != RunStatus::Completed {
        return Err(BenchError::Process(format!(
            "the resumed run ended {}, not completed",
            end.status
        )));
    }
    Ok((took, parked))
}

/// Writes a copy of the database `db` to `copy` as committed now, its WAL included (a plain
/// file copy can miss the latest commits while the parking engine's connections keep the WAL
/// from being checkpointed).
fn copy_of(db: &Path, copy: &Path) -> Result<(), BenchError> {
    let io = |e: rusqlite::Error| BenchError::Process(format!("cannot copy {}: {e}", db.display()));
    let conn = rusqlite::Connection::open(db).map_err(io)?;
    conn.execute("VACUUM INTO ?1", [copy.to_string_lossy()])
        .map_err(io)?;
    Ok(())
}
