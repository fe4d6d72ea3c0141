//! Continuing a stored run: resume it, answer the call that waits for a person (in the run or
//! in the child run it rests on), raise its budgets.

use super::OpsError;
use super::edits::Raise;
use super::start::install_stored;
use super::tree::waiting_below;
use crate::exec::{Engine, EngineError, RunHandle, answer_event, fits};
use crate::history;
use crate::machine::{EventBody, HumanInput, RunId};
use crate::store::{RunRecord, RunStatus};

/// What a person tells the run as it is resumed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Answer {
    /// Nothing: resume it as it is.
    #[default]
    None,
    /// Answer the call waiting for a person with this text.
    Input(String),
    /// Answer it with this text and these files (images or PDFs, checked as `run --attach`
    /// checks them).
    InputWithFiles(String, Vec<std::path::PathBuf>),
    /// Approve the call waiting for approval (or retry the call in doubt).
    Approve,
    /// Decline the call waiting for a person; the model is told so, with the reason if any.
    Reject(Option<String>),
}

impl Answer {
    /// The input, and the bytes of its files (read and checked; a bad file refuses the
    /// answer before anything is written).
    fn into_input(self) -> Result<(Option<HumanInput>, Vec<Vec<u8>>), OpsError> {
        Ok(match self {
            Answer::None => (None, Vec::new()),
            Answer::Input(text) => (
                Some(HumanInput::Answer {
                    text,
                    files: Vec::new(),
                }),
                Vec::new(),
            ),
            Answer::InputWithFiles(text, paths) => {
                let (files, bytes) = super::attachments::read_all(&paths)?.into_iter().unzip();
                (Some(HumanInput::Answer { text, files }), bytes)
            }
            Answer::Approve => (Some(HumanInput::Approve), Vec::new()),
            Answer::Reject(reason) => (Some(HumanInput::Reject { reason }), Vec::new()),
        })
    }
}

/// Takes `run` up in `engine` as `runtape resume` does and returns the handle of the driven
/// run: rebuilds its stored providers and tools (once its setup matches its sealed head),
/// commits every budget raise but the last on its own, then answers the waiting call
/// (`answer`, to `call` when several wait), raises the last budget, or simply resumes.
///
/// A run that does not wait for a person itself but rests on one child run that does: the
/// answer goes to that child, then the run is driven on and takes the child up. Several such
/// children are refused ([`OpsError::ChildrenWaiting`]): each must be answered on its own.
///
/// The run's history is checked once before anything is written (by the take-up itself when
/// there is nothing to answer or raise); under the lease, that check stands while the run's
/// stored head is the one it checked, and is made again otherwise.
pub async fn resume(
    engine: &Engine,
    run: &RunId,
    answer: Answer,
    call: Option<&str>,
    raises: &[Raise],
) -> Result<RunHandle, OpsError> {
    let rec = install_stored(engine, run)?;
    let (input, files) = answer.into_input()?;
    if input.is_none() && raises.is_empty() {
        // Nothing to check before the take-up, which reads the state under the lease.
        return Ok(engine.resume(run).await?);
    }
    let store = engine.store().clone();
    // The answer and the raises are checked against the state the check of what the run acts
    // on folds: a run `verify` would reject is refused with its line before anything else.
    let end = crate::ledger::ActFrom::End;
    let checked =
        crate::ledger::check_continuable(store.as_ref(), &rec, engine.receipt_signer(), end)?;
    let spec = history::spec_of(&rec)?;
    let mut state = checked.rebuilt.state.clone();
    let mut raised: Vec<_> = raises.iter().map(|r| r.resolve(&state)).collect();
    // A run resting on a child that waits for a person (it does not wait itself): the answer
    // goes to that child, then the run is driven on and takes the child up.
    let rests_on_child = input.is_some() && RunStatus::of_state(&state) != RunStatus::AwaitingInput;
    let waiting = if rests_on_child {
        waiting_below(store.as_ref(), run)?
    } else {
        Vec::new()
    };
    let input = match (input, waiting.as_slice()) {
        (Some(_), [child]) if !files.is_empty() => {
            return Err(OpsError::BadOverride(format!(
                "--attach: run {run} rests on child run {} that waits for a person; resume that run with the files",
                child.run
            )));
        }
        (Some(input), [child]) => {
            engine.answer_at_rest(&child.run, call, input).await?;
            None
        }
        (Some(_), [_, _, ..]) => {
            return Err(OpsError::ChildrenWaiting {
                run: run.clone(),
                children: waiting.into_iter().map(|w| w.run).collect(),
            });
        }
        (input, _) => input,
    };
    // Every raise but the last is committed on its own (each a take-up of its own, which
    // returns the state it left); the last (or the input) drives the run.
    let last = if input.is_none() { raised.pop() } else { None };
    for (scope, key, limit) in raised {
        state = engine
            .apply(run, EventBody::BudgetRaised { scope, key, limit })
            .await?;
    }
    let first = match (input, last) {
        (Some(input), _) => {
            refuse_if_ended(&rec)?;
            answer_event(run, &state, &spec, call, input)?
        }
        (None, Some((scope, key, limit))) => {
            refuse_if_ended(&rec)?;
            let body = EventBody::BudgetRaised { scope, key, limit };
            fits(run, &state, &spec, &body)?;
            body
        }
        // The answer went to the child: the run is driven on and takes the child up.
        (None, None) => return Ok(engine.resume(run).await?),
    };
    // What the check above found stands for the take-up's own check while nothing was written
    // to the run since (a raise committed above moves its head, and the take-up checks again).
    Ok(engine
        .resume_checked_with_files(run, checked, vec![first], files)
        .await?)
}

/// Refuses a run that has ended, as the engine does before it reads a run's state to check
/// an event ([`EngineError::Finished`]).
fn refuse_if_ended(rec: &RunRecord) -> Result<(), OpsError> {
    if rec.status.is_terminal() {
        return Err(EngineError::Finished {
            run: rec.id.to_string(),
            status: rec.status,
        }
        .into());
    }
    Ok(())
}
