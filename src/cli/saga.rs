//! A run's saga in words (see [`crate::machine::saga`]): one line per completed call that
//! declared an undo, original call → undo and where the undo stands, for `show` and the
//! summary a run prints when it ends.

use super::common::outln;
use crate::machine::{RunData, RunState, SagaEnd, SagaEntry, SagaStatus, saga_end};
use crate::term::say;

/// What became of one entry's undo, in words; `ended` when the run is over (a pending undo
/// is then one the saga never reached).
pub(crate) fn status_text(e: &SagaEntry, ended: bool) -> String {
    match &e.status {
        SagaStatus::Pending if ended => "not performed".to_owned(),
        SagaStatus::Pending => "pending".to_owned(),
        SagaStatus::Running { effect } => {
            format!("running (effect {}/{})", effect.seq, effect.index)
        }
        SagaStatus::Undone { result } => {
            format!("undone: {}", result.chars().take(60).collect::<String>())
        }
        SagaStatus::Failed { reason } => format!("FAILED: {reason}"),
        SagaStatus::InDoubt => "IN DOUBT: interrupted, outcome unknown".to_owned(),
    }
}

fn line(e: &SagaEntry, ended: bool) -> String {
    format!(
        "{} {} (step {}) → {} {} — {}",
        e.call_id,
        e.tool,
        e.origin.seq,
        e.undo,
        e.args
            .as_ref()
            .map_or_else(|| "(arguments unfilled)".to_owned(), |a| a.to_string()),
        status_text(e, ended)
    )
}

/// The saga's end in one sentence, when an undo was attempted.
pub(crate) fn end_text(state: &RunState) -> Option<String> {
    let run = state.data()?;
    let undone = count(run, |s| matches!(s, SagaStatus::Undone { .. }));
    Some(match saga_end(state)? {
        SagaEnd::Compensated => format!("compensated: {undone} call(s) undone, latest first"),
        SagaEnd::CompensationFailed => format!(
            "compensation_failed: {undone} of {} call(s) undone; an undo failed or is in doubt and nothing retries it: `runtape show` lists what is left for a person",
            run.saga.len()
        ),
    })
}

fn count(run: &RunData, f: impl Fn(&SagaStatus) -> bool) -> usize {
    run.saga.iter().filter(|e| f(&e.status)).count()
}

/// `show`'s saga lines: the end, then each entry, latest first (the order undos run in).
pub(crate) fn describe(state: &RunState) {
    let Some(run) = state.data() else { return };
    if run.saga.is_empty() {
        return;
    }
    if let Some(end) = end_text(state) {
        outln!("saga    {end}");
    }
    for e in run.saga.iter().rev() {
        outln!("undo    {}", line(e, state.is_done()));
    }
}

/// The summary's saga lines, for a run that ended after attempting undos.
pub(crate) fn summarise(state: &RunState) {
    let Some(end) = end_text(state) else { return };
    say!("saga: {end}");
    if let Some(run) = state.data() {
        for e in run.saga.iter().rev() {
            say!("  {}", line(e, true));
        }
    }
}
