//! Performing `RunChild` (revision 4): the child run is created if absent — under an id
//! derived from the parent's effect, so performing the effect again after a crash finds the
//! child it started — driven (or resumed, or waited for) to its end, and its end reported to
//! the parent as `ChildFinished`.
//!
//! The child is a run like any other: its own id, history, receipts and status, its spec
//! carrying the link to the parent's effect. The parent's driver only waits for it; dropping
//! this future (the parent stops, pauses or is cancelled) leaves the child as it is, and
//! whoever performs the effect again picks it up where it stands.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::handle::RunHandle;
use super::perform::Completion;
use super::reads::off_thread;
use super::{EngineError, Shared};
use crate::ledger::{record, spec_of, state_at};
use crate::machine::{
    CHILD_RECEIPT_SEMANTICS, ChildOutcome, ChildReport, Effect, EffectId, ErrorClass, EventBody,
    Failure, RunId, RunSpec, RunState,
};
use crate::store::{RunRecord, RunStatus};

/// What the child run stands at, read from the store.
enum Found {
    /// No such run yet.
    Absent,
    /// It ended in this state.
    Ended(Box<RunState>),
    /// Nobody drives it and it may be driven on (crashed or paused): take it up.
    Resumable,
    /// It rests waiting for a person: its parent stops waiting on it.
    AwaitsPerson,
    /// It waits for something (a person, another process's driver): look again later.
    Waiting,
}

/// The future performing `effect` (a `RunChild` of the run `spec` belongs to).
pub(super) fn run_child(
    shared: Arc<Shared>,
    spec: RunSpec,
    effect: Effect,
) -> BoxFuture<'static, Completion> {
    Box::pin(async move {
        let Effect::RunChild { id, task, .. } = &effect else {
            return Completion::Abandoned;
        };
        let child_spec = match spec.child_spec(&effect) {
            Ok(s) => s,
            Err(e) => {
                let error = Failure::new(
                    ErrorClass::ToolFailed,
                    format!("the child run could not be set up: {e}"),
                );
                return finished(id, ChildOutcome::Failed { error }, Default::default());
            }
        };
        let child = id.child_run_id();
        loop {
            let handle = match look(&shared, &child).await {
                Err(e) => return Completion::Fatal(e),
                Ok(Found::Ended(state)) => return report(&shared, &spec, id, &state).await,
                Ok(Found::Absent) => {
                    match start(&shared, id, &child, &child_spec, task).await {
                        Ok(h) => Some(h),
                        // Someone created it meanwhile: look again.
                        Err(_) if matches!(look(&shared, &child).await, Ok(Found::Resumable)) => {
                            None
                        }
                        Err(e) => return Completion::Fatal(e),
                    }
                }
                Ok(Found::Resumable) => super::takeup::resume(&shared, &child, Vec::new())
                    .await
                    .ok(),
                Ok(Found::AwaitsPerson) => return Completion::ChildWaiting(child),
                Ok(Found::Waiting) => None,
            };
            if let Some(handle) = handle
                && let Ok(end) = handle.wait().await
            {
                if end.state.is_done() {
                    return report(&shared, &spec, id, &end.state).await;
                }
                if end.status == RunStatus::AwaitingInput {
                    return Completion::ChildWaiting(child);
                }
            }
            if shared.stop.borrow().is_some() {
                // The engine is stopping: the child rests, and so will its parent.
                return Completion::Abandoned;
            }
            shared.config.clock.sleep(shared.config.control_poll).await;
        }
    })
}

async fn look(shared: &Arc<Shared>, child: &RunId) -> Result<Found, EngineError> {
    let id = child.clone();
    let rec: Option<RunRecord> = off_thread(&shared.store, move |s| s.run(&id)).await?;
    let Some(rec) = rec else {
        return Ok(Found::Absent);
    };
    if rec.status.is_terminal() {
        let id = child.clone();
        let state = off_thread(&shared.store, move |s| {
            let spec = spec_of(&rec)?;
            state_at(s, &id, &spec, rec.seq)
        })
        .await?
        .state;
        return Ok(Found::Ended(Box::new(state)));
    }
    let live_here = super::lock(&shared.live).contains_key(child);
    Ok(match rec.status {
        RunStatus::Running | RunStatus::Paused if !live_here => Found::Resumable,
        RunStatus::AwaitingInput if !live_here => Found::AwaitsPerson,
        _ => Found::Waiting,
    })
}

/// Creates the child run (with its parent's setup, so any process can resume it) and starts
/// driving it.
async fn start(
    shared: &Arc<Shared>,
    effect: &EffectId,
    child: &RunId,
    spec: &RunSpec,
    task: &str,
) -> Result<RunHandle, EngineError> {
    let parent = effect.run.clone();
    let setup = off_thread(&shared.store, move |s| record(s, &parent))
        .await?
        .setup;
    super::start::start(
        shared,
        child.clone(),
        spec.clone(),
        task,
        setup,
        None,
        Vec::new(),
    )
    .await
}

/// Cancels `children` (and, through them, their own children) and waits until each has
/// ended: the run that waited on them ended without their answers.
pub(super) async fn end_children(shared: &Arc<Shared>, children: Vec<RunId>, why: String) {
    let engine = super::Engine::from_shared(shared.clone());
    for child in children {
        match engine.cancel(&child, Some(why.clone())).await {
            Ok(Some(handle)) => {
                let _ = handle.wait().await;
            }
            // Asked its live driver (here, or in another process): wait for it here.
            Ok(None) => {
                if let Ok(handle) = super::takeup::resume(shared, &child, Vec::new()).await {
                    let _ = handle.wait().await;
                }
            }
            // It ended already (or was never created).
            Err(_) => {}
        }
    }
}

/// Asks `children` (and theirs) to pause and waits until each driven here has stopped.
pub(super) async fn pause_children(shared: &Arc<Shared>, children: Vec<RunId>) {
    let engine = super::Engine::from_shared(shared.clone());
    for child in children {
        // A child that ended, or was never created, has nothing to pause.
        let _ = engine.pause(&child).await;
        if super::lock(&shared.live).contains_key(&child)
            && let Ok(handle) = super::takeup::resume(shared, &child, Vec::new()).await
        {
            let _ = handle.wait().await;
        }
    }
}

/// The parent's `ChildFinished` for a child that ended in `state`; from revision 5 of the
/// parent's rules it names where the child's record ends ([`crate::ledger::child_proof`]).
async fn report(
    shared: &Arc<Shared>,
    parent: &RunSpec,
    effect: &EffectId,
    state: &RunState,
) -> Completion {
    let Some(outcome) = state.outcome() else {
        return Completion::Abandoned;
    };
    let usage = state.data().map(|d| d.usage).unwrap_or_default();
    let proof = if parent.spec().semantics >= CHILD_RECEIPT_SEMANTICS {
        let child = effect.child_run_id();
        match off_thread(&shared.store, move |s| {
            crate::ledger::child_proof(s, &child)
        })
        .await
        {
            Ok(p) => Some(p),
            Err(e) => return Completion::Fatal(e),
        }
    } else {
        None
    };
    let mut done = finished(effect, ChildOutcome::of(outcome), usage);
    if let Completion::Event(EventBody::ChildFinished {
        proof: p, report, ..
    }) = &mut done
    {
        *p = proof;
        report.label = ChildReport::label_of(state);
    }
    done
}

/// A `ChildFinished` without a proof: for a child that could not even be set up (no run
/// exists to name), or a parent of revision 4.
fn finished(effect: &EffectId, outcome: ChildOutcome, usage: crate::machine::Usage) -> Completion {
    Completion::Event(EventBody::ChildFinished {
        effect: effect.clone(),
        report: ChildReport {
            outcome,
            usage,
            label: Default::default(),
        },
        proof: None,
    })
}
