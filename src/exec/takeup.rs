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
//! `protocol_model/` (tests only) is the model of this protocol that `stateright` checks
//! exhaustively, including the variant that read the run before taking the lease.

use std::collections::HashMap;
use std::sync::Arc;

use super::driver::{Driver, lease_of, receipt_tip};
use super::reads::off_thread;
use super::trace::Trace;
use super::{EngineError, RunHandle, Shared, lock, read_lock, status_of};
use crate::ledger::{
    self, ActFrom, Continuable, HeadKeeper, check_continuable, outstanding_effects,
};
use crate::machine::{Effect, EffectRef, Event, EventBody, Hlc, RunId, RunSpec, RunState, step};
use crate::store::{Control, OutboxStatus, RunRecord, RunStatus, Store, StoreError, Write};

/// A run taken up: its driver (holding the lease), the effects its state waits on, the outbox
/// rows not done, its goal.
pub(super) struct TakenUp {
    pub(super) driver: Driver,
    /// A cancel another process asked for that no driver acted on yet (the run's `control`
    /// when it was taken up), with its reason.
    pending_cancel: Option<Option<String>>,
    outstanding: Vec<Effect>,
    open: HashMap<EffectRef, OutboxStatus>,
    /// For a run created but never started: its first event (`Start`, or a session run's
    /// `SessionStart` with the history it goes on from).
    opening: Option<EventBody>,
}

/// Takes the lease of `run`, rebuilds its latest state under it, and drives it on with
/// `events` first. A run driven by this engine already gets the events through its driver.
pub(super) async fn resume(
    shared: &Arc<Shared>,
    run: &RunId,
    events: Vec<EventBody>,
) -> Result<RunHandle, EngineError> {
    resume_checked(shared, run, None, events, Vec::new()).await
}

/// [`resume`], with what the caller's own [`check_continuable`] of `run` found (`checked`),
/// so the take-up does not make the same check again: it is used when the run's stored head
/// is still the one it checked, and the check is made again otherwise (before the lease is
/// taken, and under it, as every take-up checks).
pub(super) async fn resume_checked(
    shared: &Arc<Shared>,
    run: &RunId,
    checked: Option<Continuable>,
    events: Vec<EventBody>,
    files: Vec<Vec<u8>>,
) -> Result<RunHandle, EngineError> {
    // A live driver is not handed files: the take-up below is then refused while it holds
    // the run, rather than the files being lost.
    if files.is_empty()
        && let Some(handle) = attach_live(shared, run, &events).await
    {
        return Ok(handle);
    }
    let mut taken = take_up_checked(shared, run, checked).await?;
    let mut events = events;
    if let Some(reason) = taken.pending_cancel.take() {
        // Acted on here, so the lease keeper does not tell the driver a second time.
        let clear = Write::SetControl {
            run: run.clone(),
            control: None,
        };
        if let Err(e) = shared.writes.write(clear).await {
            give_back(
                shared,
                run,
                taken.driver.epoch(),
                rest_status(&taken.driver.state),
            )
            .await;
            return Err(e.into());
        }
        if !events
            .iter()
            .any(|e| matches!(e, EventBody::CancelRequested { .. }))
        {
            let reason = reason.unwrap_or_else(|| "cancelled from another process".into());
            events.push(EventBody::CancelRequested {
                reason: Some(reason),
            });
        }
    }
    taken.driver.register_added_tools().await;
    for bytes in files {
        taken
            .driver
            .files
            .insert(crate::machine::Digest::of(&bytes), bytes);
    }
    if let Err(e) = prepare(shared, &mut taken, events) {
        let rest = rest_status(&taken.driver.state);
        give_back(shared, run, taken.driver.epoch(), rest).await;
        return Err(e);
    }
    Ok(taken.driver.spawn())
}

/// Hands `events` to this engine's live driver of `run`, if there is one.
async fn attach_live(shared: &Arc<Shared>, run: &RunId, events: &[EventBody]) -> Option<RunHandle> {
    let tx = lock(&shared.live).get(run).cloned()?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    for e in events {
        let _ = tx.send(super::Ctl::Event(Box::new(e.clone()))).await;
    }
    tx.send(super::Ctl::Attach(done_tx))
        .await
        .is_ok()
        .then(|| RunHandle {
            run_id: run.clone(),
            events: shared.trace.subscribe(),
            done: done_rx,
            ended: None,
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
    if matches!(driver.state, RunState::Created)
        && !cancelling
        && let Some(opening) = taken.opening.take()
    {
        // The process that created the run stopped before committing `Start`.
        driver.queue.push_back(opening);
    }
    // A run publishing its global memory performs its publish even when it is being
    // cancelled (revision 5): the publish may have been applied before the crash, and only
    // its answer can say whether the cancel still takes effect.
    // A run compensating performs its undo too: a cancel changes nothing there.
    if cancelling && !matches!(driver.state, RunState::Compensating { .. }) {
        taken
            .outstanding
            .retain(|e| matches!(e, Effect::PublishMemory { .. }));
    }
    if !cancelling || !taken.outstanding.is_empty() {
        for effect in std::mem::take(&mut taken.outstanding) {
            let at = EffectRef {
                seq: effect.id().seq,
                index: effect.id().index,
            };
            match &effect {
                Effect::CallTool { tool, .. }
                    if taken.open.get(&at) == Some(&OutboxStatus::Started) =>
                {
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
                // A timer a person fires now (`runtape wake`): nothing to wait for.
                Effect::StartTimer { id, .. }
                    if events.iter().any(
                        |e| matches!(e, EventBody::TimerFired { effect, .. } if effect == id),
                    ) => {}
                _ => driver.to_perform.push(effect),
            }
        }
    }
    driver.queue.extend(events);
    driver.opening = Some(Box::new(Trace::RunResumed {
        state: driver.state.kind(),
    }));
    Ok(())
}

/// The `InputProvided` event answering the call in `run` that waits for a person
/// (`call_id` picks one when several wait), refused up front when the machine would refuse it
/// — approving a question, say — so the caller hears why. Reads the latest state; writes
/// nothing. The event is checked again under the lease when the run is taken up.
pub(super) async fn input_event(
    shared: &Arc<Shared>,
    run: &RunId,
    call_id: Option<&str>,
    input: crate::machine::HumanInput,
) -> Result<EventBody, EngineError> {
    let (state, spec) = latest(shared, run).await?;
    answer_event(run, &state, &spec, call_id, input)
}

/// The `InputProvided` event answering the call that waits for a person in `state`, `run`'s
/// latest state (`call_id` picks one when several wait), refused when the machine would refuse
/// it. Pure: for a caller that has read the state already (it is checked again under the
/// lease when the run is taken up).
pub(crate) fn answer_event(
    run: &RunId,
    state: &RunState,
    spec: &RunSpec,
    call_id: Option<&str>,
    input: crate::machine::HumanInput,
) -> Result<EventBody, EngineError> {
    let effect = input_effect(run, state, call_id)?;
    let body = EventBody::InputProvided { effect, input };
    fits(run, state, spec, &body)?;
    Ok(body)
}

/// Refuses `body` up front when the machine would refuse it in the run's latest state (a
/// budget raise that raises nothing). Writes nothing.
pub(super) async fn check_fits(
    shared: &Arc<Shared>,
    run: &RunId,
    body: &EventBody,
) -> Result<(), EngineError> {
    let (state, spec) = latest(shared, run).await?;
    fits(run, &state, &spec, body)
}

/// Steps `body` against `state` and throws the transition away: only the verdict matters.
pub(crate) fn fits(
    run: &RunId,
    state: &RunState,
    spec: &RunSpec,
    body: &EventBody,
) -> Result<(), EngineError> {
    step(state, &Event::new(run, Hlc::default(), body.clone()), spec)?;
    Ok(())
}

/// The run's latest state and its spec; a run that has ended is refused.
async fn latest(shared: &Arc<Shared>, run: &RunId) -> Result<(RunState, RunSpec), EngineError> {
    let run = run.clone();
    off_thread(&shared.store, move |store| {
        let rec = unfinished(store, &run)?;
        let spec = ledger::spec_of(&rec)?;
        let state = ledger::state_at(store, &run, &spec, rec.seq)?.state;
        Ok::<_, EngineError>((state, spec))
    })
    .await
}

/// The run's record, without its setup (what a take-up builds from was installed from the
/// setup once it was checked); a run that has ended is refused with [`EngineError::Finished`].
fn unfinished(store: &dyn Store, run: &RunId) -> Result<RunRecord, EngineError> {
    let rec = ledger::row(store, run)?;
    refuse_ended(&rec)?;
    Ok(rec)
}

/// Refuses a run whose row says it has ended ([`EngineError::Finished`]).
fn refuse_ended(rec: &RunRecord) -> Result<(), EngineError> {
    if rec.status.is_terminal() {
        return Err(EngineError::Finished {
            run: rec.id.to_string(),
            status: rec.status,
        });
    }
    Ok(())
}

/// The effect a person is asked about in `run`, by call id.
fn input_effect(
    run: &RunId,
    state: &RunState,
    call_id: Option<&str>,
) -> Result<crate::machine::EffectId, EngineError> {
    use crate::machine::SlotStatus;
    let waiting: Vec<(&str, crate::machine::EffectId)> = match state {
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => batch
            .slots
            .iter()
            .filter_map(|s| match s.status {
                SlotStatus::Approval { effect }
                | SlotStatus::Question { effect }
                | SlotStatus::InDoubt { effect } => Some((s.call_id.as_str(), effect.in_run(run))),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    match (call_id, waiting.as_slice()) {
        (_, []) => Err(EngineError::NoInputExpected(run.to_string())),
        (None, [(_, e)]) => Ok(e.clone()),
        (None, many) => Err(EngineError::AmbiguousInput {
            run: run.to_string(),
            calls: many.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", "),
        }),
        (Some(c), all) => all
            .iter()
            .find(|(id, _)| *id == c)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| EngineError::AmbiguousInput {
                run: run.to_string(),
                calls: all.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", "),
            }),
    }
}

/// Takes the lease of a stored, unfinished run, then builds its driver from what is read
/// under the lease: its latest state, conversations loaded lazily (when a model call needs
/// one), its receipt tip, and the effects its state waits on — under this run's ids, as a
/// fork performs what it inherited. A refused take-up (another live holder, a finished run,
/// bad input) has written nothing; a failure after the lease was taken gives it back.
pub(super) async fn take_up(shared: &Arc<Shared>, run: &RunId) -> Result<TakenUp, EngineError> {
    take_up_checked(shared, run, None).await
}

/// [`take_up`], given what a check of `run` made by the caller found (see [`resume_checked`]).
async fn take_up_checked(
    shared: &Arc<Shared>,
    run: &RunId,
    prior: Option<Continuable>,
) -> Result<TakenUp, EngineError> {
    let (before, checked) = {
        let (shared, run) = (shared.clone(), run.clone());
        off_thread(&shared.store.clone(), move |store| {
            precheck(&shared, store, &run, prior)
        })
        .await?
    };
    let epoch = acquire(shared, run).await?;
    // Programs an earlier, killed driver left running die before anything is performed again.
    crate::tool::orphans::reap(run, epoch).await;
    let loaded = {
        let (shared, run) = (shared.clone(), run.clone());
        off_thread(&shared.store.clone(), move |store| {
            load(&shared, store, &run, checked)
        })
        .await
    };
    let pending_cancel = match before.control {
        Some(Control::Cancel(reason)) => Some(reason),
        _ => None,
    };
    match loaded {
        Ok(loaded) => {
            let mut taken = loaded.into_taken_up(shared, run, epoch);
            taken.pending_cancel = pending_cancel;
            Ok(taken)
        }
        Err(e) => {
            give_back(shared, run, epoch, before.status).await;
            Err(e)
        }
    }
}

/// What can be refused without the lease, so that bad input writes nothing. Returns the run's
/// row and what the check found to act on (its head and latest state). `prior` is what a
/// check the caller made found: it stands for this one while the stored head is the one it
/// checked.
fn precheck(
    shared: &Shared,
    store: &dyn Store,
    run: &RunId,
    prior: Option<Continuable>,
) -> Result<(RunRecord, Continuable), EngineError> {
    // A run whose record `verify` would reject where this acts on it is refused before
    // anything is written (even one its row says has ended): nothing it would execute can be
    // trusted, nor what its row says.
    // The row is read once (the check reads the whole row again on its own view, to check it
    // against the head); an ended run is refused after the check.
    let rec = ledger::row(store, run)?;
    let checked = match prior {
        Some(prior) => checked_again(shared, store, &rec, prior)?,
        None => check_continuable(store, &rec, &shared.config.receipts, ActFrom::End)?,
    };
    refuse_ended(&rec)?;
    ledger::spec_of(&rec)?;
    receipt_tip(shared, store, run, rec.seq)?;
    Ok((rec, checked))
}

/// What `check_continuable` finds to act on, under the lease: `checked` (what the check before
/// the lease found) when the stored head is still the one it checked — every write any process
/// makes to the run moves its head, so nothing was written since — else the check is made
/// again on what is stored now. Either way the state acted on is the one the check folded.
fn checked_again(
    shared: &Shared,
    store: &dyn Store,
    rec: &RunRecord,
    checked: Continuable,
) -> Result<Continuable, EngineError> {
    let unchanged = store.head(&rec.id)?.is_some_and(|stored| {
        stored.body_digest() == crate::receipt::head_body_digest(&checked.head.canonical_bytes())
    });
    if unchanged {
        return Ok(checked);
    }
    Ok(check_continuable(
        store,
        rec,
        &shared.config.receipts,
        ActFrom::End,
    )?)
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
    match shared.writes.write(acquire).await {
        Ok(w) => Ok(lease_of(w)),
        Err(StoreError::Finished { run, status }) => Err(EngineError::Finished { run, status }),
        Err(e) => Err(e.into()),
    }
}

/// What a taken-up run's driver is built from, read under the lease.
struct Loaded {
    head: crate::receipt::RunHead,
    spec: RunSpec,
    rebuilt: ledger::Rebuilt,
    last_at: Hlc,
    outstanding: Vec<Effect>,
    open: HashMap<EffectRef, OutboxStatus>,
    tip: Option<crate::receipt::ChainTip>,
    opening: Option<EventBody>,
}

impl Loaded {
    fn into_taken_up(self, shared: &Arc<Shared>, run: &RunId, epoch: u64) -> TakenUp {
        let mut driver = Driver::new(
            shared,
            run.clone(),
            self.spec,
            epoch,
            self.rebuilt,
            Default::default(),
            self.last_at,
            HeadKeeper::new(self.head, shared.config.receipts.clone()),
            self.tip,
        );
        driver.lazy_convs = true;
        driver.inherit(self.outstanding.iter().cloned());
        TakenUp {
            pending_cancel: None,
            driver,
            outstanding: self.outstanding,
            open: self.open,
            opening: self.opening,
        }
    }
}

/// Reads everything the driver acts on; call only while holding the lease.
fn load(
    shared: &Shared,
    store: &dyn Store,
    run: &RunId,
    checked: Continuable,
) -> Result<Loaded, EngineError> {
    let rec = unfinished(store, run)?;
    // Checked again under the lease, unless nothing was written since: what is driven is what
    // was sealed, as read now, and folded by the check.
    let Continuable { head, rebuilt } = checked_again(shared, store, &rec, checked)?;
    let spec = ledger::spec_of(&rec)?;
    let last_at = ledger::time_at(store, run, rec.seq)?;
    let outstanding = outstanding_effects(store, run, &rebuilt.state)?;
    let open = store
        .open_effects(run)?
        .into_iter()
        .map(|o| (o.effect, o.status))
        .collect();
    let tip = receipt_tip(shared, store, run, rebuilt.state.seq())?;
    let opening = match rebuilt.state {
        RunState::Created => Some(super::session::opening(store, &spec, &rec.goal)?),
        _ => None,
    };
    Ok(Loaded {
        opening,
        head,
        spec,
        rebuilt,
        last_at,
        outstanding,
        open,
        tip,
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
    let _ = shared.writes.write(release).await;
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
        Ok(mut t) => driver.commit(&event, &mut t).map(|()| t.next),
        Err(e) => Err(e.into()),
    };
    if let Ok(next) = &result {
        driver.state = next.clone();
    }
    // The step and the lease's release go to the writer together, so they usually share one
    // transaction (one fsync); the step is acknowledged only once durable either way.
    driver.submit_unsent().await;
    let (head, epoch) = (driver.head.clone(), driver.epoch());
    let rest = rest_status(&driver.state);
    let release = shared
        .writes
        .submit_with(|store| head.submit_release(store, run.clone(), epoch, rest))
        .await;
    let flushed = driver.flush().await;
    release.done().await?;
    flushed?;
    result
}
