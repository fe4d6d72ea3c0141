//! Continuing a stored run: resume it, answer the call that waits for a person (in the run or
//! in the child run it rests on), raise its budgets.

use super::OpsError;
use super::edits::Raise;
use super::start::install_stored;
use super::tree::waiting_below;
use crate::exec::{Engine, RunHandle};
use crate::history;
use crate::machine::{EventBody, HumanInput, RunId};
use crate::store::RunStatus;

/// What a person tells the run as it is resumed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Answer {
    /// Nothing: resume it as it is.
    #[default]
    None,
    /// Answer the call waiting for a person with this text.
    Input(String),
    /// Approve the call waiting for approval (or retry the call in doubt).
    Approve,
    /// Decline the call waiting for a person; the model is told so, with the reason if any.
    Reject(Option<String>),
}

impl Answer {
    fn into_input(self) -> Option<HumanInput> {
        match self {
            Answer::None => None,
            Answer::Input(text) => Some(HumanInput::Answer { text }),
            Answer::Approve => Some(HumanInput::Approve),
            Answer::Reject(reason) => Some(HumanInput::Reject { reason }),
        }
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
pub async fn resume(
    engine: &Engine,
    run: &RunId,
    answer: Answer,
    call: Option<&str>,
    raises: &[Raise],
) -> Result<RunHandle, OpsError> {
    install_stored(engine, run)?;
    let store = engine.store().clone();
    let rec = history::record(store.as_ref(), run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store.as_ref(), run, &spec, rec.seq)?.state;
    let mut raised: Vec<_> = raises.iter().map(|r| r.resolve(&state)).collect();
    let input = answer.into_input();
    // A run resting on a child that waits for a person (it does not wait itself): the answer
    // goes to that child, then the run is driven on and takes the child up.
    let rests_on_child = input.is_some() && RunStatus::of_state(&state) != RunStatus::AwaitingInput;
    let waiting = if rests_on_child {
        waiting_below(store.as_ref(), run)?
    } else {
        Vec::new()
    };
    let input = match (input, waiting.as_slice()) {
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
