//! Taking a stored run up: the protocol every process follows before it acts on a run it did
//! not create (`resume`, `cancel` of a run at rest, answering a person's question, `apply`).
//!
//! 1. **Checks that need no lease** — the run exists, has not ended, its stored spec reads,
//!    this engine's receipt key can continue its chain, the caller's event fits its latest
//!    state — refuse bad input before anything is written.
//! 2. **The lease is taken by compare-and-swap** (`AcquireLease`): refused while another live
//!    process holds it, and refused for a run that has ended. A refused take-up has written
//!    nothing and performed nothing; the caller gets one line saying why.
//! 3. **Everything the driver acts on is read under the lease**: the latest state, the outbox
//!    (which calls had started), the receipt tip. Every commit is fenced by the lease epoch,
//!    so from the moment the lease is ours nobody else can change what we read: a run that
//!    finished meanwhile is seen finished (step 2 refuses it), a call answered meanwhile is
//!    seen answered.
//! 4. **Anything refused after the lease was taken gives it back** with the status the run
//!    rests in. A release writes nothing unless the lease is still held at its epoch, and
//!    never overwrites a terminal status.
//!
//! `protocol_model.rs` (tests only) is the model of this protocol that `stateright` checks
//! exhaustively, including the variant that read the run before taking the lease.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::driver::{Driver, lease_of, receipt_tip, status_of};
use super::trace::Trace;
use super::{EngineError, RunHandle, Shared, lock, read_lock};
use crate::history;
use crate::history::head::{HeadKeeper, check_continuable};
use crate::machine::{Effect, EffectRef, Event, EventBody, Hlc, RunId, RunSpec, RunState, step};
use crate::store::{self, OutboxStatus, RunRecord, RunStatus, StoreError, Write};

/// A run taken up: its driver (holding the lease), the effects its state waits on, its goal.
pub(super) struct TakenUp {
    pub(super) driver: Driver,
    outstanding: Vec<Effect>,
    goal: String,
}

/// Takes the lease of `run`, rebuilds its latest state under it, and drives it on with
/// `events` first. A run driven by this engine already gets the events through its driver.
pub(super) async fn resume(
    shared: &Arc<Shared>,
    run: &RunId,
    events: Vec<EventBody>,
) -> Result<RunHandle, EngineError> {
    if let Some(handle) = attach_live(shared, run, &events) {
        return Ok(handle);
    }
    let mut taken = take_up(shared, run).await?;
    if let Err(e) = prepare(shared, &mut taken, events) {
        let rest = rest_status(&taken.driver.state);
        give_back(shared, run, taken.driver.epoch, rest).await;
        return Err(e);
    }
    Ok(taken.driver.spawn())
}

/// Hands `events` to this engine's live driver of `run`, if there is one.
fn attach_live(shared: &Arc<Shared>, run: &RunId, events: &[EventBody]) -> Option<RunHandle> {
    let tx = lock(&shared.live).get(run).cloned()?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    for e in events {
        let _ = tx.send(super::Ctl::Event(e.clone()));
    }
    tx.send(super::Ctl::Attach(done_tx))
        .is_ok()
        .then(|| RunHandle {
            run_id: run.clone(),
            events: shared.trace.subscribe(),
            done: done_rx,
        })
}

/// Queues what the taken-up run must do first: `Start` for a run created but never started,
/// then for each outstanding effect either performing it or reporting it in doubt (read from
/// the outbox, under the lease), then the caller's events — checked against the state read
/// under the lease, so an answer that no longer fits is refused rather than dropped.
fn prepare(
    shared: &Arc<Shared>,
    taken: &mut TakenUp,
    events: Vec<EventBody>,
) -> Result<(), EngineError> {
    let driver = &mut taken.driver;
    let run = driver.run.clone();
    for body in &events {
        fits(&run, &driver.state, &driver.spec, body)?;
    }
    let cancelling = events
        .iter()
        .any(|e| matches!(e, EventBody::CancelRequested { .. }));
    if matches!(driver.state, RunState::Created) && !cancelling {
        // The process that created the run stopped before committing `Start`.
        driver.queue.push_back(EventBody::Start {
            goal: std::mem::take(&mut taken.goal),
        });
    }
    if !cancelling {
        let open: HashMap<EffectRef, OutboxStatus> = shared
            .store
            .open_effects(&run)?
            .into_iter()
            .map(|o| (o.effect, o.status))
            .collect();
        for effect in std::mem::take(&mut taken.outstanding) {
            let at = EffectRef {
                seq: effect.id().seq,
                index: effect.id().index,
            };
            match &effect {
                Effect::CallTool { tool, .. } if open.get(&at) == Some(&OutboxStatus::Started) => {
                    let idempotent = read_lock(&shared.tools)
                        .get(tool)
                        .is_some_and(|t| t.idempotent());
                    if idempotent {
                        driver.to_perform.push(effect);
                    } else {
                        driver.queue.push_back(EventBody::EffectInDoubt {
                            effect: effect.id().clone(),
                        });
                    }
                }
                Effect::RequestInput { .. } => {}
                _ => driver.to_perform.push(effect),
            }
        }
    }
    driver.queue.extend(events);
    driver.opening = Some(Trace::RunResumed {
        state: driver.state.kind(),
    });
    Ok(())
}

/// The `InputProvided` event answering the call in `run` that waits for a person
/// (`call_id` picks one when several wait), refused up front when the machine would refuse it
/// — approving a question, say — so the caller hears why. Reads the latest state; writes
/// nothing. The event is checked again under the lease when the run is taken up.
pub(super) fn input_event(
    shared: &Arc<Shared>,
    run: &RunId,
    call_id: Option<&str>,
    input: crate::machine::HumanInput,
) -> Result<EventBody, EngineError> {
    let (state, spec) = latest(shared, run)?;
    let effect = super::input_effect(run, &state, call_id)?;
    let body = EventBody::InputProvided { effect, input };
    fits(run, &state, &spec, &body)?;
    Ok(body)
}

/// Refuses `body` up front when the machine would refuse it in the run's latest state (a
/// budget raise that raises nothing). Writes nothing.
pub(super) fn check_fits(
    shared: &Arc<Shared>,
    run: &RunId,
    body: &EventBody,
) -> Result<(), EngineError> {
    let (state, spec) = latest(shared, run)?;
    fits(run, &state, &spec, body)
}

/// Steps `body` against `state` and throws the transition away: only the verdict matters.
fn fits(
    run: &RunId,
    state: &RunState,
    spec: &RunSpec,
    body: &EventBody,
) -> Result<(), EngineError> {
    step(state, &Event::new(run, Hlc::default(), body.clone()), spec)?;
    Ok(())
}

/// The run's latest state and its spec; a run that has ended is refused.
fn latest(shared: &Arc<Shared>, run: &RunId) -> Result<(RunState, RunSpec), EngineError> {
    let store = shared.store.as_ref();
    let rec = unfinished(store, run)?;
    let spec = history::spec_of(&rec)?;
    let state = history::state_at(store, run, &spec, rec.seq)?.state;
    Ok((state, spec))
}

/// The run's record; a run that has ended is refused with [`EngineError::Finished`].
fn unfinished(store: &dyn store::Store, run: &RunId) -> Result<RunRecord, EngineError> {
    let rec = history::record(store, run)?;
    if rec.status.is_terminal() {
        return Err(EngineError::Finished {
            run: run.to_string(),
            status: rec.status,
        });
    }
    Ok(rec)
}

/// Takes the lease of a stored, unfinished run, then builds its driver from what is read
/// under the lease: its latest state, conversations loaded lazily (when a model call needs
/// one), its receipt tip, and the effects its state waits on — under this run's ids, as a
/// fork performs what it inherited. A refused take-up (another live holder, a finished run,
/// bad input) has written nothing; a failure after the lease was taken gives it back.
pub(super) async fn take_up(shared: &Arc<Shared>, run: &RunId) -> Result<TakenUp, EngineError> {
    let before = precheck(shared, run)?;
    let epoch = acquire(shared, run).await?;
    // Programs an earlier, killed driver left running die before anything is performed again.
    crate::tool::orphans::reap(run, epoch).await;
    match load(shared, run, epoch) {
        Ok(taken) => Ok(taken),
        Err(e) => {
            give_back(shared, run, epoch, before.status).await;
            Err(e)
        }
    }
}

/// What can be refused without the lease, so that bad input writes nothing.
fn precheck(shared: &Arc<Shared>, run: &RunId) -> Result<RunRecord, EngineError> {
    let store = shared.store.as_ref();
    let rec = unfinished(store, run)?;
    history::spec_of(&rec)?;
    // A run whose spec, setup or end is not what its head sealed is refused before anything is
    // written: nothing it would execute can be trusted.
    check_continuable(store, &rec, &shared.config.receipts)?;
    receipt_tip(shared, run, rec.seq)?;
    Ok(rec)
}

/// The compare-and-swap on the run's lease; returns the epoch now held.
async fn acquire(shared: &Arc<Shared>, run: &RunId) -> Result<u64, EngineError> {
    let now = shared.config.clock.wall_ms();
    let acquire = Write::AcquireLease {
        run: run.clone(),
        owner: shared.owner.clone(),
        now_ms: now,
        expires_ms: now + shared.config.lease_ttl.as_millis() as u64,
    };
    match store::write(shared.store.as_ref(), acquire).await {
        Ok(w) => Ok(lease_of(w)),
        Err(StoreError::Finished { run, status }) => Err(EngineError::Finished { run, status }),
        Err(e) => Err(e.into()),
    }
}

/// Reads everything the driver acts on; call only while holding the lease at `epoch`.
fn load(shared: &Arc<Shared>, run: &RunId, epoch: u64) -> Result<TakenUp, EngineError> {
    let store = shared.store.as_ref();
    let rec = unfinished(store, run)?;
    // Checked again under the lease: what is driven is what was sealed, as read now.
    let head = check_continuable(store, &rec, &shared.config.receipts)?;
    let spec = history::spec_of(&rec)?;
    let rebuilt = history::state_at(store, run, &spec, rec.seq)?;
    let last_at = history::transitions(store, run, rec.seq, rec.seq)?
        .first()
        .map_or(Hlc::default(), |t| t.at);
    let mut driver = Driver::new(
        shared,
        run.clone(),
        spec,
        epoch,
        rebuilt,
        BTreeMap::new(),
        last_at,
        HeadKeeper::new(head, shared.config.receipts.clone()),
    );
    driver.lazy_convs = true;
    let outstanding = driver
        .state
        .outstanding()
        .into_iter()
        .map(|at| {
            let effect = history::effect_at(store, run, at)?;
            Ok(if effect.id().run == *run {
                effect
            } else {
                effect.with_id(at.in_run(run))
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    driver.load_receipts_and_issued(&outstanding)?;
    Ok(TakenUp {
        driver,
        outstanding,
        goal: rec.goal,
    })
}

/// Gives back a lease taken for a take-up that was then refused, recording `status`. Best
/// effort: a lease that cannot be released expires, or is taken over at once once this
/// process has exited.
async fn give_back(shared: &Arc<Shared>, run: &RunId, epoch: u64, status: RunStatus) {
    // No new head: a refused take-up changed nothing the head seals (acquiring the lease
    // wrote only `running`, which a release puts back).
    let release = Write::ReleaseLease {
        run: run.clone(),
        epoch,
        status,
        head: None,
    };
    let _ = store::write(shared.store.as_ref(), release).await;
}

/// The status a run rests in when no process drives it: `paused` where it would be running.
pub(super) fn rest_status(state: &RunState) -> RunStatus {
    match status_of(state) {
        RunStatus::Running => RunStatus::Paused,
        s => s,
    }
}

/// Commits one event to a run nobody is driving, without performing the effects it emits
/// (they stay pending in the outbox; a later `resume` performs them). Takes the lease first
/// and releases it with the step.
pub(super) async fn apply_one(
    shared: &Arc<Shared>,
    run: &RunId,
    body: EventBody,
) -> Result<RunState, EngineError> {
    let TakenUp { mut driver, .. } = take_up(shared, run).await?;
    let last_at = driver.last_at;
    let at = shared.config.clock.stamp(driver.state.seq() + 1, last_at);
    let event = Event::new(run, at, body);
    let result = match step(&driver.state, &event, &driver.spec) {
        Ok(t) => driver.commit(&event, &t).map(|()| t.next),
        Err(e) => Err(e.into()),
    };
    if let Ok(next) = &result {
        driver.state = next.clone();
    }
    // The step and the lease's release go to the writer together, so they usually share one
    // transaction (one fsync); the step is acknowledged only once durable either way.
    driver.submit_unsent();
    let release = driver.head.submit_release(
        shared.store.as_ref(),
        run.clone(),
        driver.epoch,
        rest_status(&driver.state),
    );
    let flushed = driver.flush().await;
    release.await.unwrap_or(Err(StoreError::Closed))?;
    flushed?;
    result
}
