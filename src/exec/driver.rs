//! One run's driver: the loop that steps the machine, commits, and performs effects.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::perform::{self, Completion, ToolJob};
use super::takeup::rest_status;
use super::tape::{Cue, Tape, TapeEnd};
use super::trace::{Trace, TraceEvent};
use super::{Ctl, EngineError, RunEnd, RunHandle, Shared, lock, read_lock};
use crate::history::head::{HeadKeeper, first_head};
use crate::history::{self, chain_link, node_bytes};
use crate::machine::{
    AgentId, Digest, Effect, EffectRef, Event, EventBody, Hlc, InputKind, Message, Note, RunId,
    RunSpec, RunState, Transition, step,
};
use crate::provider::{ProviderRequest, ToolDef};
use crate::store::{
    self, Ack, Commit, Control, HeadRecord, NewRun, OutboxRecord, OutboxStatus, RunStatus,
    SNAPSHOT_EVERY, Write, Written,
};

/// How long a driver that stops with calls in flight waits for them to kill and reap their
/// processes after cancelling them (command tools do so at once; anything slower is dropped).
const REAP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Creates the run and starts driving it from `Start`.
pub(super) async fn start(
    shared: &Arc<Shared>,
    run: RunId,
    spec: RunSpec,
    goal: &str,
    setup: Option<String>,
) -> Result<RunHandle, EngineError> {
    let spec_json = serde_json::to_string(&spec)
        .map_err(|e| EngineError::Spec(format!("spec does not serialise: {e}")))?;
    let now = shared.config.clock.wall_ms();
    let mut new = NewRun {
        id: run.clone(),
        parent: None,
        spec: spec_json,
        setup,
        goal: goal.to_owned(),
        now_ms: now,
        owner: shared.owner.clone(),
        lease_expires_ms: now + shared.config.lease_ttl.as_millis() as u64,
        head: HeadRecord::default(),
    };
    let head = HeadKeeper::new(
        first_head(&new, Digest::ZERO, Digest::ZERO, None),
        shared.config.receipts.clone(),
    );
    new.head = head.sealed();
    let epoch = lease_of(store::write(shared.store.as_ref(), Write::CreateRun(new)).await?);
    let mut driver = Driver::new(
        shared,
        run,
        spec,
        epoch,
        history::Rebuilt {
            state: RunState::Created,
            chain: Digest::ZERO,
        },
        BTreeMap::new(),
        Hlc::default(),
        head,
    );
    driver.queue.push_back(EventBody::Start {
        goal: goal.to_owned(),
    });
    driver.opening = Some(Trace::RunStarted {
        goal: goal.to_owned(),
    });
    Ok(driver.spawn())
}

pub(super) fn lease_of(w: Written) -> u64 {
    match w {
        Written::Lease(e) => e,
        Written::Done => 0,
    }
}

// Built once per step and matched immediately; boxing the event would cost more than it saves.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// Step this event; with a time when it replays a recorded one.
    Event(EventBody, Option<Hlc>),
    Stop(RunStatus),
}

pub(super) struct Driver {
    shared: Arc<Shared>,
    pub(super) run: RunId,
    pub(super) spec: RunSpec,
    pub(super) state: RunState,
    chain: Digest,
    pub(super) last_at: Hlc,
    pub(super) epoch: u64,
    convs: BTreeMap<AgentId, Arc<Vec<Message>>>,
    tool_defs: BTreeMap<AgentId, Vec<ToolDef>>,
    pub(super) queue: VecDeque<EventBody>,
    pub(super) to_perform: Vec<Effect>,
    inflight: FuturesUnordered<BoxFuture<'static, Completion>>,
    cancel: CancellationToken,
    acks: Vec<Ack>,
    /// Transitions not yet handed to the store: effect-free ones wait for the next, so that
    /// consecutive transitions share one transaction (and one fsync).
    unsent: Vec<Commit>,
    traces: Vec<TraceEvent>,
    ctl_rx: mpsc::UnboundedReceiver<Ctl>,
    ctl_tx: mpsc::UnboundedSender<Ctl>,
    waiters: Vec<oneshot::Sender<Result<RunEnd, EngineError>>>,
    pause: bool,
    /// Set by a graceful stop (SIGTERM, SIGHUP, Ctrl-C): start no new effect, let the calls in
    /// flight finish until this instant, commit their results, then rest paused.
    draining: Option<tokio::time::Instant>,
    last_poll: Instant,
    /// Published when the task starts, after the handle has subscribed.
    pub(super) opening: Option<Trace>,
    /// A fork replaying its parent's recording.
    pub(super) tape: Option<Tape>,
    /// True when conversations are loaded on first use (a resumed run), false when `convs`
    /// holds every conversation (a new run, a fork).
    pub(super) lazy_convs: bool,
    /// Wakes the driver to check for control requests from other processes while it waits;
    /// one timer for the driver's life, re-armed when it fires.
    poll_timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// Effects emitted and not yet answered, for sealing the receipt of their answer.
    /// (With the SHA-256 of the effect's JSON as written, when known.)
    pub(super) issued: HashMap<EffectRef, (Effect, Option<String>)>,
    /// The last receipt of the run's chain.
    pub(super) receipt_tip: Option<crate::receipt::ChainTip>,
    /// The run's sealed head: every write that changes it goes through here.
    pub(super) head: Arc<HeadKeeper>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        shared: &Arc<Shared>,
        run: RunId,
        spec: RunSpec,
        epoch: u64,
        rebuilt: history::Rebuilt,
        convs: BTreeMap<AgentId, Arc<Vec<Message>>>,
        last_at: Hlc,
        head: HeadKeeper,
    ) -> Driver {
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        Driver {
            shared: shared.clone(),
            run,
            spec,
            state: rebuilt.state,
            chain: rebuilt.chain,
            last_at,
            epoch,
            convs,
            tool_defs: BTreeMap::new(),
            queue: VecDeque::new(),
            to_perform: Vec::new(),
            inflight: FuturesUnordered::new(),
            cancel: CancellationToken::new(),
            acks: Vec::new(),
            unsent: Vec::new(),
            traces: Vec::new(),
            ctl_rx,
            ctl_tx,
            waiters: Vec::new(),
            pause: false,
            draining: None,
            last_poll: Instant::now(),
            opening: None,
            tape: None,
            lazy_convs: false,
            poll_timer: Box::pin(tokio::time::sleep(shared.config.control_poll)),
            issued: HashMap::new(),
            receipt_tip: None,
            head: Arc::new(head),
        }
    }

    pub(super) fn spawn(mut self) -> RunHandle {
        let (done_tx, done_rx) = oneshot::channel();
        self.waiters.push(done_tx);
        let handle = RunHandle {
            run_id: self.run.clone(),
            events: self.shared.trace.subscribe(),
            done: done_rx,
        };
        lock(&self.shared.live).insert(self.run.clone(), self.ctl_tx.clone());
        tokio::spawn(async move {
            let result = self.drive().await;
            lock(&self.shared.live).remove(&self.run);
            // Controls that raced with the end: attach requests still get the result.
            while let Ok(ctl) = self.ctl_rx.try_recv() {
                if let Ctl::Attach(tx) = ctl {
                    self.waiters.push(tx);
                }
            }
            for w in self.waiters.drain(..) {
                let _ = w.send(result.clone());
            }
        });
        handle
    }

    async fn drive(&mut self) -> Result<RunEnd, EngineError> {
        let permit = self.shared.slots.clone().acquire_owned().await;
        let _permit =
            permit.map_err(|_| EngineError::Driver("the engine is shutting down".into()))?;
        if let Some(kind) = self.opening.take() {
            self.emit(None, kind);
        }
        while let Ok(ctl) = self.ctl_rx.try_recv() {
            self.control(ctl);
        }
        if self.draining.is_none() {
            for effect in std::mem::take(&mut self.to_perform) {
                self.perform(effect);
            }
        }
        let result = self.step_until_rest().await;
        if result.is_err() {
            // Lost the lease, the store or the clock: stop performing anything, and give the
            // lease back if it is still ours (a release is fenced by the epoch and never
            // overwrites a terminal status, so after a takeover it writes nothing).
            self.abandon_inflight_and_wait().await;
            let _ = self.release_unsealed().await;
        }
        result
    }

    /// Drops every call in flight: their cancellation tokens fire and their futures are
    /// dropped (command tools are killed), and nothing they return is committed. A
    /// non-idempotent call dropped this way stays `started` in the outbox, so it is in doubt
    /// on resume.
    fn abandon_inflight(&mut self) {
        self.cancel.cancel();
        self.cancel = CancellationToken::new();
        self.inflight = FuturesUnordered::new();
    }

    /// Like [`abandon_inflight`](Self::abandon_inflight), but before the process may exit:
    /// waits (at most [`REAP_WAIT`]) for the cancelled calls to kill and reap their
    /// processes, discarding whatever they return.
    async fn abandon_inflight_and_wait(&mut self) {
        self.cancel.cancel();
        let inflight = std::mem::take(&mut self.inflight);
        let _ = tokio::time::timeout(REAP_WAIT, inflight.collect::<Vec<_>>()).await;
        self.cancel = CancellationToken::new();
    }

    async fn step_until_rest(&mut self) -> Result<RunEnd, EngineError> {
        loop {
            let (body, replayed_at) = match self.next().await? {
                Next::Event(body, at) => (body, at),
                Next::Stop(status) => {
                    self.flush().await?;
                    self.release(status).await?;
                    self.emit(Some(self.state.seq()), Trace::RunPaused { status });
                    return Ok(self.end(status));
                }
            };
            let at = match replayed_at {
                Some(at) => at.max(self.last_at),
                None => self
                    .shared
                    .config
                    .clock
                    .stamp(self.state.seq() + 1, self.last_at),
            };
            let event = Event::new(&self.run, at, body);
            let t = match step(&self.state, &event, &self.spec) {
                Ok(t) => t,
                Err(e @ crate::machine::MachineError::EdgeMismatch { .. }) => return Err(e.into()),
                Err(e) => {
                    // A stale result (its call was replaced by a retry or a cancel) or input
                    // that no longer fits: nothing changes.
                    tracing::debug!(run = %self.run, error = %e, "event refused");
                    continue;
                }
            };
            let emits = !t.effects.is_empty();
            self.commit(&event, &t)?;
            if emits || t.next.is_done() {
                self.flush().await?;
            }
            let done = t.next.is_done();
            self.state = t.next;
            match &mut self.tape {
                Some(tape) => tape.suppress(t.effects),
                // Stopping: the effects are committed and stay outstanding; `resume` performs
                // them.
                None if self.draining.is_some() => {}
                None => {
                    for effect in t.effects {
                        self.perform(effect);
                    }
                }
            }
            if done {
                let status = status_of(&self.state);
                self.release(status).await?;
                return Ok(self.end(status));
            }
        }
    }

    async fn next(&mut self) -> Result<Next, EngineError> {
        loop {
            while let Ok(ctl) = self.ctl_rx.try_recv() {
                self.control(ctl);
            }
            if let Some(body) = self.queue.pop_front() {
                return Ok(Next::Event(body, None));
            }
            self.poll_remote().await?;
            if !self.queue.is_empty() {
                continue;
            }
            if let Some(deadline) = self.draining {
                if self.inflight.is_empty() {
                    return Ok(Next::Stop(rest_status(&self.state)));
                }
                if tokio::time::Instant::now() >= deadline {
                    self.abandon_inflight_and_wait().await;
                    return Ok(Next::Stop(rest_status(&self.state)));
                }
            }
            if self.pause && self.state.wants_proceed() {
                return Ok(Next::Stop(RunStatus::Paused));
            }
            if let Some(tape) = &mut self.tape {
                match tape.next(&self.run, self.state.wants_proceed()) {
                    Cue::Feed(body, at) => return Ok(Next::Event(body, Some(at))),
                    Cue::End => {
                        if let Some(stop) = self.end_tape() {
                            return Ok(Next::Stop(stop));
                        }
                        continue;
                    }
                }
            }
            if self.state.wants_proceed() {
                return Ok(Next::Event(EventBody::Proceed, None));
            }
            if self.inflight.is_empty() {
                return match status_of(&self.state) {
                    s @ (RunStatus::AwaitingInput | RunStatus::BudgetExhausted) => {
                        Ok(Next::Stop(s))
                    }
                    _ => Err(EngineError::Driver(format!(
                        "run {} is in state {} with nothing in flight",
                        self.run,
                        self.state.kind()
                    ))),
                };
            }
            // A result may be ready already (a fast tool, a scripted model): take it without
            // arming a timer, and without sending the unsent commits on their own.
            if let Some(Some(done)) = self.inflight.next().now_or_never() {
                match done {
                    Completion::Event(body) => self.queue.push_back(body),
                    Completion::Abandoned => {}
                    Completion::Fatal(e) => return Err(e),
                }
                continue;
            }
            // About to wait on the world: what is committed so far should become durable now,
            // not when the next effect needs it.
            self.submit_unsent();
            let stop_by = self.draining;
            let grace_over = async move {
                match stop_by {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(done) = self.inflight.next() => match done {
                    Completion::Event(body) => self.queue.push_back(body),
                    Completion::Abandoned => {}
                    Completion::Fatal(e) => return Err(e),
                },
                Some(ctl) = self.ctl_rx.recv() => self.control(ctl),
                _ = &mut self.poll_timer => {
                    let next = tokio::time::Instant::now() + self.shared.config.control_poll;
                    self.poll_timer.as_mut().reset(next);
                }
                () = grace_over => {}
            }
        }
    }

    /// The tape stopped matching (or ran out): go live, performing what is outstanding, or
    /// stop when the fork asked to.
    fn end_tape(&mut self) -> Option<RunStatus> {
        let tape = self.tape.take()?;
        self.emit(
            Some(self.state.seq()),
            Trace::TapeEnded {
                live: tape.on_end == TapeEnd::GoLive,
            },
        );
        if tape.on_end == TapeEnd::Stop {
            return Some(RunStatus::Paused);
        }
        let mut suppressed = tape.suppressed;
        for at in self.state.outstanding() {
            if let Some(effect) = suppressed.remove(&at) {
                self.perform(effect);
            }
        }
        None
    }

    fn control(&mut self, ctl: Ctl) {
        match ctl {
            Ctl::Pause => self.pause = true,
            Ctl::Stop(grace) => {
                let deadline = tokio::time::Instant::now() + grace;
                self.draining = Some(self.draining.map_or(deadline, |d| d.min(deadline)));
            }
            Ctl::Cancel(reason) => self.cancel_inflight(reason),
            Ctl::Event(body) => self.queue.push_back(body),
            Ctl::Attach(tx) => self.waiters.push(tx),
        }
    }

    fn cancel_inflight(&mut self, reason: Option<String>) {
        self.abandon_inflight();
        self.queue
            .retain(|b| matches!(b, EventBody::CancelRequested { .. }));
        self.queue.push_front(EventBody::CancelRequested { reason });
    }

    /// Checks the database for control requests from other processes and keeps the lease
    /// fresh, at most once per `control_poll`.
    async fn poll_remote(&mut self) -> Result<(), EngineError> {
        if self.last_poll.elapsed() < self.shared.config.control_poll {
            return Ok(());
        }
        self.last_poll = Instant::now();
        let store = self.shared.store.clone();
        let Some(rec) = store.run(&self.run)? else {
            return Ok(());
        };
        if rec.lease_epoch != self.epoch {
            return Err(store::StoreError::Fenced {
                run: self.run.to_string(),
                ours: self.epoch,
                current: rec.lease_epoch,
            }
            .into());
        }
        match rec.control {
            Some(Control::Pause) => self.pause = true,
            Some(Control::Cancel) => {
                self.cancel_inflight(Some("cancelled from another process".into()))
            }
            None => {}
        }
        if rec.control.is_some() {
            // Fire and forget: the write happens whether or not anyone waits for its ack.
            drop(store.submit(Write::SetControl {
                run: self.run.clone(),
                control: None,
            }));
        }
        let now = self.shared.config.clock.wall_ms();
        let ttl = self.shared.config.lease_ttl.as_millis() as u64;
        if rec.lease_expires_ms < now + ttl / 2 {
            drop(store.submit(Write::RenewLease {
                run: self.run.clone(),
                epoch: self.epoch,
                expires_ms: now + ttl,
            }));
        }
        Ok(())
    }

    /// Submits the transition; it is durable once [`flush`](Self::flush) returns.
    pub(super) fn commit(&mut self, event: &Event, t: &Transition) -> Result<(), EngineError> {
        let encode =
            |e: serde_json::Error| EngineError::Driver(format!("cannot encode a transition: {e}"));
        let seq = t.next.seq();
        let event_json = serde_json::to_vec(event).map_err(encode)?;
        // The effects column, written one effect at a time so each effect's own bytes can be
        // hashed for the receipt of its answer (the result equals encoding the whole list).
        let mut effects = Vec::new();
        let mut effect_hashes = Vec::with_capacity(t.effects.len());
        if !t.effects.is_empty() {
            effects.reserve(256 * t.effects.len());
            effects.push(b'[');
            for (i, e) in t.effects.iter().enumerate() {
                if i > 0 {
                    effects.push(b',');
                }
                let start = effects.len();
                serde_json::to_writer(&mut effects, e).map_err(encode)?;
                effect_hashes.push(crate::receipt::sha256_hex(&effects[start..]));
            }
            effects.push(b']');
        }
        let state_bytes = t.next.canonical_bytes();
        let state_hash = Digest::of(&state_bytes);
        let chain = chain_link(&self.chain, &event_json, &state_hash);
        let blobs = t
            .appended
            .iter()
            .map(|a| (a.head, node_bytes(&a.prev, &a.bytes)))
            .collect();
        // Outbox rows for the calls whose status matters on resume: tool calls that are not
        // idempotent (started vs pending decides between in doubt and performing). Every other
        // effect is pending by virtue of its committed transition, and is simply performed
        // (again) on resume.
        let tools = read_lock(&self.shared.tools);
        let outbox = t
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::CallTool {
                    id,
                    tool,
                    idempotency_key,
                    ..
                } if !tools.get(tool).is_some_and(|t| t.idempotent()) => Some(OutboxRecord {
                    effect: EffectRef {
                        seq: id.seq,
                        index: id.index,
                    },
                    status: OutboxStatus::Pending,
                    idempotency_key: Some(idempotency_key.clone()),
                }),
                _ => None,
            })
            .collect();
        drop(tools);
        let receipt = self.seal(seq, event, &event_json)?;
        for (e, hash) in t.effects.iter().zip(effect_hashes) {
            self.issued.insert(
                EffectRef {
                    seq: e.id().seq,
                    index: e.id().index,
                },
                (e.clone(), Some(hash)),
            );
        }
        let usage = t.next.data().map(|d| d.usage).unwrap_or_default();
        let now = self.shared.config.clock.wall_ms();
        let commit = Commit {
            run: self.run.clone(),
            epoch: self.epoch,
            seq,
            at: event.at,
            event: event_json,
            edge: t.edge,
            effects,
            outbox,
            resolves: resolved(&event.body),
            state_kind: t.next.kind(),
            state_hash,
            chain,
            blobs,
            snapshot: seq.is_multiple_of(SNAPSHOT_EVERY).then_some(state_bytes),
            status: status_of(&t.next),
            cost_nanos: usage.cost_nanos,
            unpriced_turns: usage.unpriced_turns,
            tokens: usage.input_tokens + usage.output_tokens,
            outcome: t
                .next
                .outcome()
                .map(|o| serde_json::to_string(o).unwrap_or_default()),
            seal: receipt,
            now_ms: now,
            lease_expires_ms: now + self.shared.config.lease_ttl.as_millis() as u64,
            head: None,
        };
        self.unsent.push(commit);
        for a in &t.appended {
            // A conversation not loaded yet is read from the store when first needed (its new
            // messages are durable by then).
            if self.lazy_convs && !self.convs.contains_key(&a.agent) {
                continue;
            }
            let list = Arc::make_mut(self.convs.entry(a.agent.clone()).or_default());
            list.truncate(a.index as usize);
            list.push(a.message.clone());
        }
        self.chain = chain;
        self.last_at = event.at;
        self.trace_transition(event, t);
        Ok(())
    }

    /// The receipt (JSON) of the model turn or tool result `event` carries, chained to the tip.
    fn seal(
        &mut self,
        seq: u64,
        event: &Event,
        event_bytes: &[u8],
    ) -> Result<Option<Vec<u8>>, EngineError> {
        let answered = resolved(&event.body).and_then(|r| self.issued.remove(&r));
        let Some(draft) = answered.and_then(|(e, hash)| {
            history::receipt_draft_hashed(
                &self.run,
                seq,
                event.at,
                &e,
                hash,
                &event.body,
                event_bytes,
            )
        }) else {
            return Ok(None);
        };
        let receipt = self
            .shared
            .config
            .receipts
            .seal_after(self.receipt_tip.as_ref(), draft)
            .map_err(|e| {
                EngineError::Receipts(format!("cannot seal the receipt of step {seq}: {e}"))
            })?;
        let seal = receipt
            .seal
            .to_bytes()
            .ok_or_else(|| EngineError::Receipts(format!("the seal of step {seq} is malformed")))?;
        self.receipt_tip = Some(receipt.tip());
        Ok(Some(seal))
    }

    /// Loads what continuing a stored run needs besides its state: the effects outstanding
    /// and the receipt tip. Refuses a signer that could not continue the receipt chain.
    pub(super) fn load_receipts_and_issued(
        &mut self,
        outstanding: &[Effect],
    ) -> Result<(), EngineError> {
        for e in outstanding {
            self.issued.insert(
                EffectRef {
                    seq: e.id().seq,
                    index: e.id().index,
                },
                (e.clone(), None),
            );
        }
        self.receipt_tip = receipt_tip(&self.shared, &self.run, self.state.seq())?;
        Ok(())
    }

    /// Hands the transitions not yet sent to the store (one write, one transaction).
    pub(super) fn submit_unsent(&mut self) {
        if self.unsent.is_empty() {
            return;
        }
        let commits = std::mem::take(&mut self.unsent);
        self.acks.push(
            self.head
                .submit_commits(self.shared.store.as_ref(), commits),
        );
    }

    /// Waits until every transition so far is durable, then publishes their traces.
    pub(super) async fn flush(&mut self) -> Result<(), EngineError> {
        self.submit_unsent();
        for ack in self.acks.drain(..) {
            ack.await.unwrap_or(Err(store::StoreError::Closed))?;
        }
        if self.shared.trace.receiver_count() > 0 {
            for e in self.traces.drain(..) {
                let _ = self.shared.trace.send(e);
            }
        } else {
            self.traces.clear();
        }
        Ok(())
    }

    async fn release(&mut self, status: RunStatus) -> Result<(), EngineError> {
        let ack = self.head.submit_release(
            self.shared.store.as_ref(),
            self.run.clone(),
            self.epoch,
            status,
        );
        ack.await.unwrap_or(Err(store::StoreError::Closed))?;
        Ok(())
    }

    /// Gives the lease back as `paused` after an error, leaving the head as the last commit
    /// sealed it (verify accepts a `paused` row over a running head): the smallest write there
    /// is, so it still fits when the disk is full.
    async fn release_unsealed(&mut self) -> Result<(), EngineError> {
        let release = Write::ReleaseLease {
            run: self.run.clone(),
            epoch: self.epoch,
            status: RunStatus::Paused,
            head: None,
        };
        store::write(self.shared.store.as_ref(), release).await?;
        Ok(())
    }

    fn end(&self, status: RunStatus) -> RunEnd {
        RunEnd {
            run_id: self.run.clone(),
            status,
            state: self.state.clone(),
        }
    }

    fn emit(&self, seq: Option<u64>, kind: Trace) {
        if self.shared.trace.receiver_count() > 0 {
            let at = self.shared.config.clock.trace();
            let _ = self.shared.trace.send(TraceEvent {
                run: self.run.clone(),
                at,
                seq,
                kind,
            });
        }
    }

    fn trace_transition(&mut self, event: &Event, t: &Transition) {
        if self.shared.trace.receiver_count() == 0 {
            return;
        }
        let seq = Some(t.next.seq());
        let agent = self
            .state
            .data()
            .map(|d| d.active.clone())
            .unwrap_or_default();
        let mut push = |kind: Trace| {
            self.traces.push(TraceEvent {
                run: self.run.clone(),
                at: event.at,
                seq,
                kind,
            })
        };
        match &event.body {
            EventBody::ModelReplied { reply, .. } => {
                let route = match &self.state {
                    RunState::Generating { call, .. } => self
                        .spec
                        .agent(&agent)
                        .and_then(|a| a.routes.get(call.route as usize)),
                    _ => None,
                };
                let usage = t.next.data().map(|d| d.usage).unwrap_or_default();
                push(Trace::ModelReply {
                    agent: agent.clone(),
                    provider: route.map(|r| r.provider.clone()).unwrap_or_default(),
                    model: route.map(|r| r.model.clone()).unwrap_or_default(),
                    text: reply.text.clone(),
                    tool_calls: reply.tool_calls.len(),
                    usage: reply.usage,
                    cost_nanos: reply.cost_nanos,
                    run_cost_nanos: usage.cost_nanos,
                    run_unpriced_turns: usage.unpriced_turns,
                })
            }
            EventBody::ModelFailed { failure, .. } => push(Trace::ModelError {
                agent: agent.clone(),
                error: failure.message.clone(),
                retryable: failure.retryable,
            }),
            EventBody::ToolReturned { effect, outcome } => {
                if let RunState::CallingTools { batch, .. } = &self.state
                    && let Some(slot) = batch
                        .slots
                        .iter()
                        .find(|s| s.status.effect().is_some_and(|e| e.matches(effect)))
                {
                    push(Trace::ToolResult {
                        call_id: slot.call_id.clone(),
                        tool: slot.tool.clone(),
                        ok: matches!(outcome, crate::machine::ToolOutcome::Ok { .. }),
                    });
                }
            }
            _ => {}
        }
        push(Trace::Transition {
            edge: t.edge.to_owned(),
            state: t.next.kind(),
        });
        for note in &t.notes {
            match note {
                Note::ToolRejected {
                    agent,
                    call_id,
                    tool,
                } => push(Trace::ToolRejected {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    reason: "outside the agent's grant".into(),
                }),
                Note::ToolInvalid {
                    agent,
                    call_id,
                    tool,
                    reason,
                } => push(Trace::ToolRejected {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    reason: reason.clone(),
                }),
                Note::ToolBudget { agent, call_id } => push(Trace::ToolRejected {
                    agent: agent.clone(),
                    call_id: call_id.clone(),
                    tool: String::new(),
                    reason: "tool-call budget spent".into(),
                }),
                Note::BudgetExhausted { scope, key } => push(Trace::BudgetExhausted {
                    scope: scope.clone(),
                    key: *key,
                }),
                Note::Retry {
                    agent,
                    attempt,
                    delay_ms,
                } => push(Trace::ModelRetry {
                    agent: agent.clone(),
                    detail: format!("attempt {attempt} after {delay_ms} ms"),
                }),
                Note::Fallback {
                    agent,
                    provider,
                    model,
                    ..
                } => push(Trace::ModelRetry {
                    agent: agent.clone(),
                    detail: format!("falling back to {provider}/{model}"),
                }),
                Note::RouteRestored {
                    agent,
                    provider,
                    model,
                    ..
                } => push(Trace::ModelRetry {
                    agent: agent.clone(),
                    detail: format!("cooldown over: back to {provider}/{model}"),
                }),
                Note::Handoff { from, to } => push(Trace::Handoff {
                    from: from.clone(),
                    to: to.clone(),
                }),
                Note::HandoffCycle { agent, visits } => push(Trace::HandoffCycle {
                    agent: agent.clone(),
                    visits: *visits,
                }),
            }
        }
        if let Some(outcome) = t.next.outcome() {
            push(Trace::RunFinished {
                outcome: outcome.clone(),
            });
        }
    }

    fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::CallModel {
                id,
                agent,
                request,
                attempt,
                not_before,
            } => {
                let provider = read_lock(&self.shared.providers)
                    .get(&request.provider)
                    .cloned();
                if self.lazy_convs && !self.convs.contains_key(&agent) {
                    match history::conversation(
                        self.shared.store.as_ref(),
                        &agent,
                        &request.conversation,
                    ) {
                        Ok(list) => {
                            self.convs.insert(agent.clone(), Arc::new(list));
                        }
                        Err(e) => {
                            self.inflight.push(Box::pin(futures_util::future::ready(
                                Completion::Fatal(e.into()),
                            )));
                            return;
                        }
                    }
                }
                let mut messages = self.convs.get(&agent).cloned().unwrap_or_default();
                if messages.len() > request.conversation.len as usize {
                    messages = Arc::new(messages[..request.conversation.len as usize].to_vec());
                }
                let tools = self.tool_defs_for(&agent, &request.tools);
                let spec_agent = self.spec.agent(&agent);
                let req = ProviderRequest {
                    settings: spec_agent
                        .map(|a| a.model_settings.clone())
                        .unwrap_or_default(),
                    output_schema: spec_agent.and_then(|a| a.output_schema.clone()),
                    agent,
                    model: request.model,
                    messages,
                    tools,
                    remaining: request.remaining,
                    attempt,
                };
                let trace = self.shared.trace.clone();
                let clock = self.shared.config.clock.clone();
                let call = perform::model_call(
                    id,
                    provider,
                    request.provider,
                    req,
                    not_before,
                    trace,
                    clock,
                );
                // A model call abandoned by a stop or a lost lease ends at once (a provider
                // need not watch for cancellation itself); it is asked again on resume.
                let cancel = self.cancel.child_token();
                self.inflight.push(Box::pin(async move {
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => Completion::Abandoned,
                        done = call => done,
                    }
                }));
            }
            Effect::CallTool {
                id,
                agent,
                call_id,
                tool,
                args,
                idempotency_key,
            } => {
                self.emit(
                    Some(id.seq),
                    Trace::ToolCall {
                        agent: agent.clone(),
                        call_id: call_id.clone(),
                        tool: tool.clone(),
                        args: args.clone(),
                    },
                );
                let job = ToolJob {
                    tool: read_lock(&self.shared.tools).get(&tool).cloned(),
                    id,
                    agent,
                    call_id,
                    tool_name: tool,
                    args,
                    idempotency_key,
                    epoch: self.epoch,
                    head: self.head.clone(),
                    timeout: self.shared.config.tool_timeout,
                    cancel: self.cancel.child_token(),
                    lease: perform::LeaseTerms {
                        clock: self.shared.config.clock.clone(),
                        ttl: self.shared.config.lease_ttl,
                    },
                };
                self.inflight
                    .push(perform::tool_call(self.shared.store.clone(), job));
            }
            Effect::Reconcile {
                id,
                agent,
                call_id,
                tool,
                args,
                idempotency_key,
            } => {
                self.emit(
                    Some(id.seq),
                    Trace::ToolReconcile {
                        agent: agent.clone(),
                        call_id: call_id.clone(),
                        tool: tool.clone(),
                    },
                );
                let job = ToolJob {
                    tool: read_lock(&self.shared.tools).get(&tool).cloned(),
                    id,
                    agent,
                    call_id,
                    tool_name: tool,
                    args,
                    idempotency_key,
                    epoch: self.epoch,
                    timeout: self.shared.config.tool_timeout,
                    cancel: self.cancel.child_token(),
                    lease: perform::LeaseTerms {
                        clock: self.shared.config.clock.clone(),
                        ttl: self.shared.config.lease_ttl,
                    },
                    head: self.head.clone(),
                };
                self.inflight.push(perform::reconcile_call(job));
            }
            Effect::RequestInput {
                id,
                agent,
                call_id,
                request,
            } => {
                let kind = match request.kind {
                    InputKind::Approval => "approval",
                    InputKind::Question => "question",
                    InputKind::InDoubt => "in_doubt",
                };
                self.emit(
                    Some(id.seq),
                    Trace::InputRequested {
                        agent,
                        call_id,
                        tool: request.tool,
                        kind: kind.into(),
                    },
                );
            }
        }
    }

    fn tool_defs_for(&mut self, agent: &AgentId, names: &[String]) -> Vec<ToolDef> {
        let spec = &self.spec;
        self.tool_defs
            .entry(agent.clone())
            .or_insert_with(|| {
                names
                    .iter()
                    .filter_map(|n| spec.tool(n))
                    .map(|t| ToolDef {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        schema: t.schema.clone(),
                    })
                    .collect()
            })
            .clone()
    }
}

/// The tip of `run`'s receipt chain at or before `seq`, checked to be one this engine's
/// signer can continue (same mode, same key). Reads one row, not the chain.
pub(super) fn receipt_tip(
    shared: &Shared,
    run: &RunId,
    seq: u64,
) -> Result<Option<crate::receipt::ChainTip>, EngineError> {
    let tip = history::chain_tip(shared.store.as_ref(), run, seq)?;
    let signer = &shared.config.receipts;
    if let Some(tip) = &tip
        && tip.seal.key_id() != signer.key_id()
    {
        let want = tip
            .seal
            .key_id()
            .map_or("no key (unsigned receipts)".to_owned(), |k| {
                format!("the key {k}")
            });
        return Err(EngineError::Receipts(format!(
            "run {run}'s receipts are sealed with {want}; continue it with the same receipt key (RUNTAPE_RECEIPT_KEY or --receipt-key)"
        )));
    }
    Ok(tip)
}

/// The effect whose result `body` carries.
fn resolved(body: &EventBody) -> Option<EffectRef> {
    match body {
        EventBody::ModelReplied { effect, .. }
        | EventBody::ModelFailed { effect, .. }
        | EventBody::ToolReturned { effect, .. }
        | EventBody::Reconciled { effect, .. }
        | EventBody::InputProvided { effect, .. }
        | EventBody::EffectInDoubt { effect } => Some(EffectRef {
            seq: effect.seq,
            index: effect.index,
        }),
        _ => None,
    }
}

/// The status a run in `state` rests in.
pub(crate) fn status_of(state: &RunState) -> RunStatus {
    RunStatus::of_state(state)
}
