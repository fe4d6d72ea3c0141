//! One run's driver: the task that steps the machine, commits, and performs effects.
//!
//! - `run_loop.rs`: the loop — the next event, stepping it, stopping.
//! - `commit.rs`: recording transitions, making them durable, releasing the lease.
//! - `dispatch.rs`: starting the effects of a durable transition.
//! - `results.rs`: taking the results of effects in, in call order when the clock asks for it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::handle::{RunEnd, RunHandle};
use super::perform::Completion;
use super::tape::Tape;
use super::trace::{Trace, TraceEvent};
use super::writes::Pending;
use super::{CONTROL_QUEUE, Ctl, EngineError, REAP_WAIT, Shared, lease_keeper, lock};
use crate::ledger::{HeadKeeper, Rebuilt, Recorder};
use crate::machine::{AgentId, Effect, EventBody, Hlc, Message, RunId, RunSpec, RunState};
use crate::provider::ToolDef;
use crate::receipt::ChainTip;
use crate::store::{Commit, RunStatus, Written};

mod commit;
mod dispatch;
mod files;
mod listing;
mod memory;
mod results;
mod run_loop;
mod timers;

pub(super) use commit::receipt_tip;

/// The lease epoch a run-creating write returned.
pub(super) fn lease_of(w: Written) -> u64 {
    match w {
        Written::Lease(e) => e,
        Written::Done | Written::MemoryOverCap(_) | Written::Pruned(_) => 0,
    }
}

pub(super) struct Driver {
    shared: Arc<Shared>,
    pub(super) run: RunId,
    pub(super) spec: RunSpec,
    pub(super) state: RunState,
    pub(super) last_at: Hlc,
    /// Encodes each transition as its commit: the chain, the effects outstanding, the receipt
    /// tip, the lease epoch.
    pub(super) recorder: Recorder,
    /// Conversations as the driver knows them, for building model requests.
    convs: BTreeMap<AgentId, Arc<Vec<Message>>>,
    /// Per agent: the offered names its tool definitions were built for, and those.
    tool_defs: BTreeMap<AgentId, (Vec<String>, Vec<ToolDef>)>,
    pub(super) queue: VecDeque<EventBody>,
    pub(super) to_perform: Vec<Effect>,
    inflight: FuturesUnordered<BoxFuture<'static, Completion>>,
    /// Results held back until earlier calls answer (see `results.rs`).
    order: results::CallOrder,
    cancel: CancellationToken,
    acks: Vec<Pending>,
    /// Transitions not yet handed to the store: effect-free ones wait for the next, so that
    /// consecutive transitions share one transaction (and one fsync).
    unsent: Vec<Commit>,
    traces: Vec<TraceEvent>,
    ctl_rx: mpsc::Receiver<Ctl>,
    ctl_tx: mpsc::Sender<Ctl>,
    /// The engine's graceful stop (see [`Engine::begin_shutdown`](super::Engine::begin_shutdown)).
    stop_rx: watch::Receiver<Option<tokio::time::Instant>>,
    waiters: Vec<oneshot::Sender<Result<RunEnd, EngineError>>>,
    pause: bool,
    /// Set by a graceful stop (SIGTERM, SIGHUP, Ctrl-C): start no new effect, let the calls in
    /// flight finish until this instant, commit their results, then rest paused.
    draining: Option<tokio::time::Instant>,
    /// The lease epoch now stored, when the engine's lease keeper saw another process take
    /// the run over.
    fenced: Option<u64>,
    /// Published when the task starts, after the handle has subscribed.
    /// (Boxed: a driver's task holds it only until it starts, and a run in flight holds its
    /// driver the whole time.)
    pub(super) opening: Option<Box<Trace>>,
    /// A fork replaying its parent's recording.
    /// (Boxed: few runs have one.)
    pub(super) tape: Option<Box<Tape>>,
    /// True when conversations are loaded on first use (a resumed run), false when `convs`
    /// holds every conversation (a new run, a fork).
    pub(super) lazy_convs: bool,
    /// The run's sealed head: every write that changes it goes through here.
    pub(super) head: Arc<HeadKeeper>,
    /// Catalog blobs of `ToolsListed` events queued, stored with the event's commit.
    catalog_blobs: BTreeMap<crate::machine::Digest, Vec<u8>>,
    /// Attachment bytes (images, PDFs) not stored yet, by digest: each goes with the first
    /// commit that appends a message naming it (see [`crate::machine::attachment`]).
    pub(super) files: BTreeMap<crate::machine::Digest, Vec<u8>>,
    /// Per MCP server, its `list_changed` count when this driver last listed it.
    list_changes_seen: BTreeMap<String, u64>,
    /// The run's place in its delegation tree (read from the store at its first model call):
    /// what its model requests carry as their origin.
    tree_path: Option<String>,
    /// Child runs found resting for a person: once nothing else is in flight, the run rests
    /// too (paused) instead of waiting on them.
    children_waiting: Vec<RunId>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        shared: &Arc<Shared>,
        run: RunId,
        spec: RunSpec,
        epoch: u64,
        rebuilt: Rebuilt,
        convs: BTreeMap<AgentId, Arc<Vec<Message>>>,
        last_at: Hlc,
        head: HeadKeeper,
        receipt_tip: Option<ChainTip>,
    ) -> Driver {
        let (ctl_tx, ctl_rx) = mpsc::channel(CONTROL_QUEUE);
        let clock = &shared.config.clock;
        let recorder = Recorder::new(
            run.clone(),
            epoch,
            spec.history_hash(),
            rebuilt.chain,
            receipt_tip,
            shared.config.receipts.clone(),
        );
        Driver {
            shared: shared.clone(),
            run,
            spec,
            state: rebuilt.state,
            last_at,
            recorder,
            convs,
            tool_defs: BTreeMap::new(),
            // Room for one event: it rarely holds more, and every run in flight keeps it.
            queue: VecDeque::with_capacity(1),
            to_perform: Vec::new(),
            inflight: FuturesUnordered::new(),
            order: results::CallOrder::new(clock.deterministic()),
            cancel: CancellationToken::new(),
            acks: Vec::new(),
            unsent: Vec::new(),
            traces: Vec::new(),
            ctl_rx,
            ctl_tx,
            stop_rx: shared.stop.subscribe(),
            waiters: Vec::new(),
            pause: false,
            draining: None,
            fenced: None,
            opening: None,
            tape: None,
            lazy_convs: false,
            head: Arc::new(head),
            catalog_blobs: BTreeMap::new(),
            files: BTreeMap::new(),
            list_changes_seen: BTreeMap::new(),
            tree_path: None,
            children_waiting: Vec::new(),
        }
    }

    /// The lease epoch this driver holds.
    pub(super) fn epoch(&self) -> u64 {
        self.recorder.epoch()
    }

    /// Starts the driver's task and returns the caller's handle on it.
    pub(super) fn spawn(mut self) -> RunHandle {
        let (done_tx, done_rx) = oneshot::channel();
        self.waiters.push(done_tx);
        let handle = RunHandle {
            run_id: self.run.clone(),
            events: self.shared.trace.subscribe(),
            done: done_rx,
            ended: None,
        };
        lock(&self.shared.live).insert(self.run.clone(), self.ctl_tx.clone());
        self.shared.running.send_modify(|n| *n += 1);
        let epoch = self.epoch();
        lease_keeper::keep(&self.shared, self.run.clone(), epoch, self.ctl_tx.clone());
        tokio::spawn(async move {
            let result = self.drive().await;
            lease_keeper::forget(&self.shared, &self.run, epoch);
            lock(&self.shared.live).remove(&self.run);
            // Controls that raced with the end: attach requests still get the result.
            self.ctl_rx.close();
            while let Ok(ctl) = self.ctl_rx.try_recv() {
                if let Ctl::Attach(tx) = ctl {
                    self.waiters.push(tx);
                }
            }
            for w in self.waiters.drain(..) {
                let _ = w.send(result.clone());
            }
            self.shared
                .running
                .send_modify(|n| *n = n.saturating_sub(1));
        });
        handle
    }

    async fn drive(&mut self) -> Result<RunEnd, EngineError> {
        // A child run (revision 4) is part of its parent's work, which holds a slot already:
        // waiting for one of its own would deadlock an engine whose slots parents fill.
        let _permit = if self.spec.spec().delegated_by.is_some() {
            None
        } else {
            let permit = self.shared.slots.clone().acquire_owned().await;
            Some(permit.map_err(|_| EngineError::ShuttingDown)?)
        };
        if let Some(kind) = self.opening.take().map(|k| *k) {
            self.emit(None, || kind);
        }
        self.take_controls();
        if self.draining.is_none() && !self.to_perform.is_empty() {
            // Boxed, as every branch below: a future awaited inline is laid out in every run's
            // task for its whole life (see `size_tests`).
            Box::pin(self.perform_inherited()).await;
        }
        match self.step_until_rest().await {
            Ok(end) => Ok(end),
            Err(e) => {
                Box::pin(self.stop_after_error()).await;
                Err(e)
            }
        }
    }

    /// Performs the effects the run was taken up with (outstanding when it rested), in order.
    async fn perform_inherited(&mut self) {
        for effect in std::mem::take(&mut self.to_perform) {
            Box::pin(self.perform(effect)).await;
        }
    }

    /// After the run loop failed (lost the lease, the store or the clock): stops performing
    /// anything, and gives the lease back if it is still ours (a release is fenced by the epoch
    /// and never overwrites a terminal status, so after a takeover it writes nothing).
    async fn stop_after_error(&mut self) {
        self.abandon_inflight_and_wait().await;
        let _ = self.release_unsealed().await;
    }

    /// Drops every call in flight: their cancellation tokens fire and their futures are
    /// dropped (command tools are killed), and nothing they return is committed. A
    /// non-idempotent call dropped this way stays `started` in the outbox, so it is in doubt
    /// on resume.
    fn abandon_inflight(&mut self) {
        self.cancel.cancel();
        self.cancel = CancellationToken::new();
        self.inflight = FuturesUnordered::new();
        self.order.clear();
    }

    /// Like [`abandon_inflight`](Self::abandon_inflight), but before the process may exit:
    /// waits (at most [`REAP_WAIT`]) for the cancelled calls to kill and reap their
    /// processes, discarding whatever they return.
    async fn abandon_inflight_and_wait(&mut self) {
        self.cancel.cancel();
        let inflight = std::mem::take(&mut self.inflight);
        let reaped = inflight.collect::<Vec<_>>();
        let waited = self.shared.config.clock.sleep(REAP_WAIT);
        tokio::select! {
            _ = reaped => {}
            () = waited => {}
        }
        self.cancel = CancellationToken::new();
        self.order.clear();
    }

    fn end(&self, status: RunStatus) -> RunEnd {
        RunEnd {
            run_id: self.run.clone(),
            status,
            state: self.state.clone(),
        }
    }

    /// Publishes a trace event now (not tied to a commit). `kind` is called only when someone
    /// listens, so an unwatched run builds (and clones into) no trace.
    fn emit(&self, seq: Option<u64>, kind: impl FnOnce() -> Trace) {
        if self.shared.trace.receiver_count() > 0 {
            let kind = kind();
            let at = self.shared.config.clock.trace();
            let _ = self.shared.trace.send(TraceEvent {
                run: self.run.clone(),
                at,
                seq,
                kind,
            });
        }
    }
}

#[cfg(test)]
mod size_tests {
    use super::Driver;

    /// The size of the future `f` returns, without calling it.
    fn future_size<'a, R>(_: impl FnOnce(&'a mut Driver) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// Every run in flight holds its driver and the driver's future in its task (W5: 10,000
    /// runs at once): a branch whose future is laid out inline — rather than boxed where it is
    /// awaited — costs its size in every run, whether or not it ever runs.
    #[test]
    fn a_drivers_task_stays_small() {
        assert!(
            std::mem::size_of::<Driver>() <= 1_536,
            "{}",
            std::mem::size_of::<Driver>()
        );
        // 1,040 bytes with the loop's step boxed (2,864 before, when the step's transition and
        // event were laid out in every task); the bounds leave room for other compilers.
        let drive = future_size(Driver::drive);
        assert!(drive <= 1_536, "drive(): {drive} bytes");
        let step_until_rest = future_size(Driver::step_until_rest);
        assert!(
            step_until_rest <= 768,
            "step_until_rest(): {step_until_rest} bytes"
        );
    }
}
