//! The executor: drives runs on tokio, performing the effects of committed transitions and
//! feeding their results back as events.
//!
//! # The run loop
//!
//! For each run, one task repeats: take the next event (a result that arrived, `Proceed` at a
//! step boundary, a person's input, a cancel), [`step`](crate::machine::step), submit the
//! transition to the store, and — only once it is durable — start its effects. Transitions
//! that emit no effect do not wait for the disk before the next step; the next durable
//! commit covers them (a commit is never acknowledged before it is durable, and nothing is
//! performed before the transition that asked for it is).
//!
//! # Guarantees
//!
//! - An effect is performed only after the transition that emitted it is durable.
//! - A crash at any point resumes from the last committed transition. Outstanding model calls
//!   are made again; tool calls that had not started are performed; idempotent tool calls that
//!   had started are performed again with the same idempotency key; non-idempotent ones that
//!   had started are reported with `EffectInDoubt` and handled by the agent's `on_in_doubt`
//!   (fail, retry, ask a person, or reconcile: ask the tool).
//! - One process drives a run at a time: the lease is taken by compare-and-swap before anything
//!   is read for driving (see `takeup.rs`), taking a run over bumps its lease epoch, and every
//!   commit, outbox mark and release is fenced by it. A process refused the lease writes and
//!   performs nothing. The protocol is model-checked (`protocol_model.rs`).
//! - Before starting a non-idempotent call a driver checks by its own clock that its lease has
//!   margin left; a driver frozen past its lease is taken over, and fenced when it wakes.
//! - [`Engine::shutdown`] stops runs gracefully: no new effect, calls in flight finish within a
//!   grace period (then are abandoned: in doubt on resume), the run rests `paused`.
//! - Budgets are state: they do not reset on resume.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};

use crate::history::HistoryError;
use crate::machine::{
    BudgetKey, EffectId, EventBody, HumanInput, MachineError, RunId, RunSpec, RunState, Scope,
};
use crate::provider::ModelProvider;
use crate::store::{Durability, MemoryStore, RunStatus, SqliteStore, Store, StoreError};
use crate::tool::{Tool, ToolRegistry};

mod clock;
mod driver;
mod fork;
mod ids;
mod perform;
#[cfg(test)]
mod protocol_model;
mod takeup;
mod tape;
mod trace;

pub use clock::{Clock, SteppedClock, SystemClock, wall_ms};
pub use fork::{ForkEdit, ForkMode};
pub use ids::new_run_id;
pub use tape::TapeEnd;
pub use trace::{Trace, TraceEvent};

/// How an engine behaves.
#[derive(Clone)]
pub struct EngineConfig {
    /// SQLite durability (`synchronous=FULL` unless you opt in to `NORMAL`).
    pub durability: Durability,
    /// Runs driven at once; more wait for a slot.
    pub max_concurrent_runs: usize,
    /// A tool call that takes longer fails with a timeout error fed back to the model.
    pub tool_timeout: Duration,
    /// How long a lease stays valid without a commit or renewal.
    pub lease_ttl: Duration,
    /// How often a driver checks the database for pause/cancel requests from other processes.
    pub control_poll: Duration,
    /// Event timestamps.
    pub clock: Arc<dyn Clock>,
    /// Seals a receipt for every model turn and tool result (unsigned unless given a key).
    pub receipts: Arc<crate::receipt::ReceiptSigner>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            durability: Durability::Full,
            max_concurrent_runs: 256,
            tool_timeout: Duration::from_secs(120),
            lease_ttl: Duration::from_secs(15),
            control_poll: Duration::from_millis(200),
            clock: Arc::new(SystemClock::default()),
            receipts: Arc::new(crate::receipt::ReceiptSigner::unsigned()),
        }
    }
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("durability", &self.durability)
            .field("max_concurrent_runs", &self.max_concurrent_runs)
            .field("tool_timeout", &self.tool_timeout)
            .finish_non_exhaustive()
    }
}

/// An engine call failed. The Display is one line saying what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored history could not be read back.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The machine refused an event.
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// An agent's route names a provider that is not registered.
    #[error(
        "agent `{agent}` uses provider `{provider}`, which is not registered; define it in the spec or register it"
    )]
    MissingProvider {
        /// The agent.
        agent: String,
        /// The provider name.
        provider: String,
    },
    /// A tool in the spec has no implementation registered.
    #[error(
        "tool `{0}` is in the spec but no implementation is registered; register it or remove it"
    )]
    MissingTool(String),
    /// The run has ended.
    #[error("run {run} has already ended ({status}); fork it to continue from an earlier step")]
    Finished {
        /// The run.
        run: String,
        /// How it ended.
        status: RunStatus,
    },
    /// No call of the run waits for a person.
    #[error("run {0} is not waiting for input")]
    NoInputExpected(String),
    /// Several calls wait for a person; name one.
    #[error("run {run} waits for input on several calls ({calls}); name one of them")]
    AmbiguousInput {
        /// The run.
        run: String,
        /// Their call ids.
        calls: String,
    },
    /// The spec stored with a run could not be used.
    #[error("{0}")]
    Spec(String),
    /// The run's receipts cannot be continued with this engine's signer.
    #[error("{0}")]
    Receipts(String),
    /// This process could not be sure its lease was still valid when it was about to start a
    /// non-idempotent call (it was frozen or starved for most of the lease): the call was not
    /// started, and this process stopped driving the run.
    #[error(
        "run {run}: this process was too slow to be sure it still held the run's lease, so it did not start call {call_id} and stopped; `runtape resume {run}` continues (the call is in doubt there)"
    )]
    LeaseExpired {
        /// The run.
        run: String,
        /// The call not started.
        call_id: String,
    },
    /// The run's task stopped unexpectedly.
    #[error("the run's driver stopped unexpectedly: {0}")]
    Driver(String),
}

/// How a run's driver stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEnd {
    /// The run.
    pub run_id: RunId,
    /// Where it stands.
    pub status: RunStatus,
    /// Its latest state.
    pub state: RunState,
}

/// A run being driven: its id, its trace events, and its end.
#[derive(Debug)]
pub struct RunHandle {
    run_id: RunId,
    events: broadcast::Receiver<TraceEvent>,
    done: oneshot::Receiver<Result<RunEnd, EngineError>>,
}

impl RunHandle {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The next trace event of this run; `None` once the run's driver has stopped and every
    /// event has been read. Events an observer was too slow to read are skipped, never
    /// waited for.
    pub async fn next_event(&mut self) -> Option<TraceEvent> {
        loop {
            match self.events.recv().await {
                Ok(e) if e.run == self.run_id => return Some(e),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// Waits until the driver stops: the run ended, paused, or rests waiting for a person or a
    /// budget raise.
    pub async fn wait(self) -> Result<RunEnd, EngineError> {
        // Nobody will read the events: unsubscribe, so the driver stops building them.
        drop(self.events);
        self.done
            .await
            .unwrap_or_else(|_| Err(EngineError::Driver("the task was dropped".into())))
    }

    /// Waits like [`wait`](Self::wait) while passing every trace event of the run to `f`.
    pub async fn wait_with(
        mut self,
        mut f: impl FnMut(&TraceEvent),
    ) -> Result<RunEnd, EngineError> {
        loop {
            tokio::select! {
                biased;
                e = self.events.recv() => match e {
                    Ok(e) if e.run == self.run_id => f(&e),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return self.wait().await,
                },
                end = &mut self.done => {
                    while let Ok(e) = self.events.try_recv() {
                        if e.run == self.run_id {
                            f(&e);
                        }
                    }
                    return end.unwrap_or_else(|_| Err(EngineError::Driver("the task was dropped".into())));
                }
            }
        }
    }
}

/// A request to a live driver.
// Rare and short-lived; boxing the event would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Ctl {
    Pause,
    /// Stop gracefully within this grace period (see [`Engine::shutdown`]).
    Stop(Duration),
    Cancel(Option<String>),
    Event(EventBody),
    Attach(oneshot::Sender<Result<RunEnd, EngineError>>),
}

pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) providers: RwLock<BTreeMap<String, Arc<dyn ModelProvider>>>,
    pub(crate) tools: RwLock<ToolRegistry>,
    pub(crate) config: EngineConfig,
    pub(crate) owner: String,
    pub(crate) trace: broadcast::Sender<TraceEvent>,
    pub(crate) live: Mutex<HashMap<RunId, mpsc::UnboundedSender<Ctl>>>,
    pub(crate) slots: Arc<Semaphore>,
}

/// Drives runs durably. Cheap to clone (clones share everything).
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("owner", &self.shared.owner)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over the SQLite database at `path` (created if absent) with default settings.
    pub fn open(path: &Path) -> Result<Engine, EngineError> {
        Self::open_with(path, EngineConfig::default())
    }

    /// An engine over the SQLite database at `path` with `config`.
    pub fn open_with(path: &Path, config: EngineConfig) -> Result<Engine, EngineError> {
        let store = SqliteStore::open(path, config.durability)?;
        Ok(Self::with_store(Arc::new(store), config))
    }

    /// An engine whose runs live in memory (tests, benchmarks).
    pub fn in_memory() -> Engine {
        Self::with_store(Arc::new(MemoryStore::new()), EngineConfig::default())
    }

    /// An engine over any store.
    pub fn with_store(store: Arc<dyn Store>, config: EngineConfig) -> Engine {
        let (trace, _) = broadcast::channel(4096);
        let mut nonce = [0u8; 8];
        // Without OS randomness the nonce only distinguishes engines within one process,
        // which the pid-derived part of the owner id already does for processes.
        let _ = getrandom::fill(&mut nonce);
        Engine {
            shared: Arc::new(Shared {
                store,
                providers: RwLock::new(BTreeMap::new()),
                tools: RwLock::new(ToolRegistry::new()),
                slots: Arc::new(Semaphore::new(config.max_concurrent_runs.max(1))),
                config,
                owner: crate::store::owner_id(u64::from_le_bytes(nonce)),
                trace,
                live: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This engine's lease owner id (`host:pid:nonce`): the owner its leases are taken as.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// The signer that seals this engine's receipts and run heads.
    pub fn receipt_signer(&self) -> &crate::receipt::ReceiptSigner {
        &self.shared.config.receipts
    }

    /// Registers a provider under `name` (the name agents' routes use).
    pub fn register_provider(&self, name: &str, provider: Arc<dyn ModelProvider>) {
        write_lock(&self.shared.providers).insert(name.to_owned(), provider);
    }

    /// Registers a tool under its name.
    pub fn register_tool(&self, tool: Arc<dyn Tool>) {
        write_lock(&self.shared.tools).register(tool);
    }

    /// Every trace event of every run from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<TraceEvent> {
        self.shared.trace.subscribe()
    }

    /// Adds an event that happened outside the driver (a tool's progress) to `run`'s trace,
    /// stamped with the engine's clock. Observers see it like any other event.
    pub fn trace_external(&self, run: RunId, kind: Trace) {
        if self.shared.trace.receiver_count() > 0 {
            let _ = self.shared.trace.send(TraceEvent {
                run,
                at: self.shared.config.clock.trace(),
                seq: None,
                kind,
            });
        }
    }

    /// Starts a run of `spec` toward `goal` under a new id.
    pub async fn start(&self, spec: RunSpec, goal: &str) -> Result<RunHandle, EngineError> {
        self.start_with_id(new_run_id(), spec, goal).await
    }

    /// Starts a run under a given id (which must be new).
    pub async fn start_with_id(
        &self,
        run: RunId,
        spec: RunSpec,
        goal: &str,
    ) -> Result<RunHandle, EngineError> {
        self.check_runnable(&spec)?;
        driver::start(&self.shared, run, spec, goal, None).await
    }

    /// Starts a run and stores `setup` with it: how another process rebuilds its providers and
    /// tools to resume it (the spec-file layer writes it; it must never hold a secret).
    pub async fn start_with_setup(
        &self,
        run: RunId,
        spec: RunSpec,
        goal: &str,
        setup: String,
    ) -> Result<RunHandle, EngineError> {
        self.check_runnable(&spec)?;
        driver::start(&self.shared, run, spec, goal, Some(setup)).await
    }

    /// Takes up a run that is not being driven (paused, crashed, resting) and drives it on.
    /// A run whose lease another live process holds is refused.
    pub async fn resume(&self, run: &RunId) -> Result<RunHandle, EngineError> {
        takeup::resume(&self.shared, run, Vec::new()).await
    }

    /// Stops every run this engine drives, gracefully: no new effect is started, calls in
    /// flight may finish within `grace` and their results are committed, then each run rests
    /// `paused` (its lease released) and its handle's `wait` returns. A call still running
    /// when `grace` is over is cancelled (command tools are killed) and nothing it returns is
    /// committed: a non-idempotent one is in doubt on resume. Call it from a SIGTERM or
    /// SIGHUP handler. Runs started afterwards are not affected.
    pub fn shutdown(&self, grace: Duration) {
        for tx in lock(&self.shared.live).values() {
            let _ = tx.send(Ctl::Stop(grace));
        }
    }

    /// Asks the run to pause at its next step boundary. In this process the request goes to
    /// the driver; otherwise it is written for whichever process drives the run.
    pub async fn pause(&self, run: &RunId) -> Result<(), EngineError> {
        if self.send_live(run, Ctl::Pause) {
            return Ok(());
        }
        crate::history::record(self.shared.store.as_ref(), run)?;
        crate::store::write(
            self.shared.store.as_ref(),
            crate::store::Write::SetControl {
                run: run.clone(),
                control: Some(crate::store::Control::Pause),
            },
        )
        .await
        .map_err(finished)?;
        Ok(())
    }

    /// Cancels the run: a live driver aborts its in-flight work and commits the cancellation;
    /// a run driven by another process is asked to; a run at rest is cancelled here.
    pub async fn cancel(
        &self,
        run: &RunId,
        reason: Option<String>,
    ) -> Result<Option<RunHandle>, EngineError> {
        if self.send_live(run, Ctl::Cancel(reason.clone())) {
            return Ok(None);
        }
        let rec = crate::history::record(self.shared.store.as_ref(), run)?;
        if rec.status.is_terminal() {
            return Err(EngineError::Finished {
                run: run.to_string(),
                status: rec.status,
            });
        }
        match takeup::resume(
            &self.shared,
            run,
            vec![EventBody::CancelRequested { reason }],
        )
        .await
        {
            Err(EngineError::Store(StoreError::LeaseHeld { .. })) => {
                crate::store::write(
                    self.shared.store.as_ref(),
                    crate::store::Write::SetControl {
                        run: run.clone(),
                        control: Some(crate::store::Control::Cancel),
                    },
                )
                .await
                .map_err(finished)?;
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// Answers a call that waits for a person (`call_id` may be left out when only one
    /// waits) and drives the run on. Input that does not fit the request (approving a question)
    /// is refused with [`EngineError::Machine`] before anything is written.
    pub async fn provide_input(
        &self,
        run: &RunId,
        call_id: Option<&str>,
        input: HumanInput,
    ) -> Result<RunHandle, EngineError> {
        let body = takeup::input_event(&self.shared, run, call_id, input)?;
        takeup::resume(&self.shared, run, vec![body]).await
    }

    /// Raises a budget and drives the run on (a run resting in `BudgetExhausted` continues). A
    /// raise that raises nothing is refused before anything is written.
    pub async fn raise_budget(
        &self,
        run: &RunId,
        scope: Scope,
        key: BudgetKey,
        limit: u64,
    ) -> Result<RunHandle, EngineError> {
        let body = EventBody::BudgetRaised { scope, key, limit };
        takeup::check_fits(&self.shared, run, &body)?;
        takeup::resume(&self.shared, run, vec![body]).await
    }

    /// Forks `parent` at step `seq`: a new run whose history up to `seq` is the parent's
    /// (shared, not copied), with `edits` applied as its first transition, continuing live or
    /// from the parent's recording. Forking at a step where the run had ended is refused; an
    /// edit that does not apply is refused; either way nothing is written.
    pub async fn fork(
        &self,
        parent: &RunId,
        seq: u64,
        edits: Vec<ForkEdit>,
        mode: ForkMode,
    ) -> Result<RunHandle, EngineError> {
        fork::fork(&self.shared, parent, seq, edits, mode, new_run_id()).await
    }

    /// Commits one event to a run that no process is driving, without performing the effects
    /// it emits (they wait in the outbox for the next `resume`). For tools that adjust a run
    /// at rest, and for measuring what resuming costs.
    pub async fn apply(&self, run: &RunId, body: EventBody) -> Result<RunState, EngineError> {
        takeup::apply_one(&self.shared, run, body).await
    }

    /// True while a driver in this engine is driving `run`.
    pub fn is_live(&self, run: &RunId) -> bool {
        lock(&self.shared.live).contains_key(run)
    }

    fn send_live(&self, run: &RunId, ctl: Ctl) -> bool {
        lock(&self.shared.live)
            .get(run)
            .is_some_and(|tx| tx.send(ctl).is_ok())
    }

    fn check_runnable(&self, spec: &RunSpec) -> Result<(), EngineError> {
        let providers = read_lock(&self.shared.providers);
        for agent in &spec.spec().agents {
            for route in &agent.routes {
                if !providers.contains_key(&route.provider) {
                    return Err(EngineError::MissingProvider {
                        agent: agent.id.to_string(),
                        provider: route.provider.clone(),
                    });
                }
            }
        }
        let tools = read_lock(&self.shared.tools);
        for t in &spec.spec().tools {
            if !t.interactive && tools.get(&t.name).is_none() {
                return Err(EngineError::MissingTool(t.name.clone()));
            }
        }
        Ok(())
    }
}

/// A store refusal because the run has ended, as the engine reports it.
fn finished(e: StoreError) -> EngineError {
    match e {
        StoreError::Finished { run, status } => EngineError::Finished { run, status },
        e => EngineError::Store(e),
    }
}

/// The effect a person is asked about in `run`, by call id.
pub(crate) fn input_effect(
    run: &RunId,
    state: &RunState,
    call_id: Option<&str>,
) -> Result<EffectId, EngineError> {
    use crate::machine::SlotStatus;
    let waiting: Vec<(&str, EffectId)> = match state {
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

// Poisoned locks only mean another thread panicked while holding them; the maps inside stay
// consistent (every update is a single insert or remove), so keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}
