//! [`Engine`]: the handle a program holds to start, continue, steer and stop runs.

use std::collections::{BTreeMap, HashMap};
use std::future::{Future, IntoFuture};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast, watch};

use super::error::finished;
use super::fork::{ForkEdit, ForkMode};
use super::handle::RunHandle;
use super::reads::off_thread;
use super::trace::{Trace, TraceEvent};
use super::writes::{WRITES_IN_FLIGHT, Writes};
use super::{Ctl, EngineError, Shared, lock, read_lock, write_lock};
use crate::cassette::{MemorySource, RetrievalSource};
use crate::clock::{Clock, SystemClock};
use crate::machine::{BudgetKey, EventBody, HumanInput, RunId, RunSpec, RunState, Scope};
use crate::provider::ModelProvider;
use crate::store::{Control, Durability, MemoryStore, SqliteStore, Store, StoreError, Write};
use crate::tool::{Tool, ToolRegistry};

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
    /// How often the engine reads, in one query for all the runs it drives, whether another
    /// process asked one to pause or cancel or took one over, and renews their leases (less
    /// often when that read itself takes long: at most a tenth of the time reading, at least
    /// every quarter of `lease_ttl`).
    pub control_poll: Duration,
    /// Event timestamps and every wait the executor makes.
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

/// Trace events the channel holds for its slowest reader before that reader lags.
const TRACE_CAPACITY: usize = 4096;

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

/// A run about to start: [`Engine::start`] returns it, options are set with its methods, and
/// awaiting it creates the run and starts driving it.
///
/// ```no_run
/// # async fn demo(engine: runtape::exec::Engine, spec: runtape::machine::RunSpec) -> Result<(), runtape::exec::EngineError> {
/// let handle = engine.start(spec, "Summarise the report").await?;
/// # Ok(()) }
/// ```
#[must_use = "a run starts only when this is awaited"]
pub struct StartRun<'a> {
    engine: &'a Engine,
    spec: RunSpec,
    goal: String,
    id: Option<RunId>,
    setup: Option<String>,
    session: Option<super::session::SessionStartKind>,
    files: Vec<Vec<u8>>,
}

impl StartRun<'_> {
    /// The spec the run starts with.
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    /// The bytes of the spec's goal attachments ([`Spec::attachments`](crate::machine::Spec::attachments)),
    /// stored as blobs by the run's first transition. A file the spec names but not given
    /// here is sent to the model as its placeholder text (and `verify` refuses the run).
    pub fn with_files(mut self, files: Vec<Vec<u8>>) -> Self {
        self.files = files;
        self
    }

    /// Starts the run as the next run of session `name` (revision 5): its agents begin with
    /// the conversations the session's latest completed run ended with, kept as `settings`
    /// say. Refused, writing nothing, while the session's latest run has not ended; when
    /// another process starts the session's next run at the same moment, exactly one of them
    /// gets the place ([`StoreError::SessionTaken`] for the other).
    pub fn in_session(mut self, name: &str, settings: super::SessionSettings) -> Self {
        self.session = Some(super::session::SessionStartKind::Next {
            name: name.to_owned(),
            settings,
        });
        self
    }

    /// Starts the run as a replay of run `index` of session `name` (revision 5), beginning
    /// with the history `seed` carries (as a cassette recorded it) kept as `settings` say,
    /// instead of reading the session's previous run: it needs no earlier run of the session
    /// in this database, and it holds no place in the session (its spec says it was
    /// replayed).
    pub fn replaying_session(
        mut self,
        name: &str,
        index: u64,
        settings: super::SessionSettings,
        seed: crate::machine::SessionSeed,
    ) -> Self {
        self.session = Some(super::session::SessionStartKind::Replay {
            name: name.to_owned(),
            index,
            settings,
            seed,
        });
        self
    }

    /// Starts the run under this id, which must be new (default: a fresh
    /// [`new_run_id`](super::new_run_id)).
    pub fn with_id(mut self, id: RunId) -> Self {
        self.id = Some(id);
        self
    }

    /// Stores `setup` with the run: how another process rebuilds its providers and tools to
    /// resume it (the spec-file layer writes it; it must never hold a secret).
    pub fn with_setup(mut self, setup: String) -> Self {
        self.setup = Some(setup);
        self
    }
}

impl<'a> IntoFuture for StartRun<'a> {
    type Output = Result<RunHandle, EngineError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.engine.check_runnable(&self.spec)?;
            let id = self.id.unwrap_or_else(super::new_run_id);
            super::start::start(
                &self.engine.shared,
                id,
                self.spec,
                &self.goal,
                self.setup,
                self.session,
                self.files,
            )
            .await
        })
    }
}

impl Engine {
    /// The engine whose shared state this is (for the executor's own requests, such as
    /// cancelling the child runs of a run that ended).
    pub(super) fn from_shared(shared: Arc<Shared>) -> Engine {
        Engine { shared }
    }

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
        let (trace, _) = broadcast::channel(TRACE_CAPACITY);
        let mut nonce = [0u8; 8];
        // Without OS randomness the nonce only distinguishes engines within one process,
        // which the pid-derived part of the owner id already does for processes.
        let _ = getrandom::fill(&mut nonce);
        Engine {
            shared: Arc::new(Shared {
                writes: Arc::new(Writes::new(store.clone(), WRITES_IN_FLIGHT)),
                store,
                providers: RwLock::new(BTreeMap::new()),
                tools: RwLock::new(ToolRegistry::new()),
                mcp: RwLock::new(BTreeMap::new()),
                retriever: RwLock::new(None),
                slots: Arc::new(Semaphore::new(config.max_concurrent_runs.max(1))),
                config,
                owner: crate::store::owner_id(u64::from_le_bytes(nonce)),
                trace,
                live: Mutex::new(HashMap::new()),
                running: watch::Sender::new(0),
                stop: watch::Sender::new(None),
                kept: Default::default(),
                memory_source: RwLock::new(None),
                retrieval_source: RwLock::new(None),
            }),
        }
    }

    /// This engine's lease owner id (`host:pid:nonce@start`, see [`crate::store::owner_id`]):
    /// the owner its leases are taken as.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The clock this engine stamps, waits and judges leases by ([`EngineConfig::clock`]).
    pub(crate) fn clock(&self) -> &Arc<dyn crate::exec::Clock> {
        &self.shared.config.clock
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

    /// Registers where runs of revision 3 granted an MCP server's tools get its tool list at
    /// their step boundaries (the live server, or a recording; see
    /// [`crate::tool::mcp::listing`]). The tools of each listing are registered as they come.
    pub fn register_tool_lister(&self, lister: Arc<dyn crate::tool::mcp::ToolLister>) {
        write_lock(&self.shared.mcp).insert(lister.server().to_owned(), lister);
    }

    /// Registers the retriever runs with a `[retriever]` ask for passages before their agents'
    /// turns (revision 5; replaces any registered before).
    pub fn register_retriever(&self, retriever: crate::tool::retriever::Retriever) {
        *write_lock(&self.shared.retriever) = Some(retriever);
    }

    /// The place the next run of session `name` would take now, or why none can start (a bad
    /// name, the session's latest run has not ended). Reads only; the place is taken when the
    /// run is started ([`StartRun::in_session`]), where another process may have taken it
    /// first.
    pub async fn next_in_session(
        &self,
        spec: &RunSpec,
        name: &str,
        settings: &super::SessionSettings,
    ) -> Result<crate::store::SessionLink, EngineError> {
        let (spec, name, settings) = (spec.clone(), name.to_owned(), settings.clone());
        off_thread(&self.shared.store, move |s| {
            super::session::next_run(s, &spec, &name, &settings).map(|(_, link)| link)
        })
        .await
    }

    /// Answers the global memory loads and publishes of this engine's runs from `source`
    /// instead of the store (revision 5): `runtape replay` serves what a cassette recorded,
    /// so a replay reads and writes no global memory. The events say they were replayed.
    pub fn use_memory_source(&self, source: Arc<dyn MemorySource>) {
        *write_lock(&self.shared.memory_source) = Some(source);
    }

    /// Answers the retrievals of this engine's runs from `source` instead of running the
    /// retriever (revision 5): `runtape replay` serves the passages a cassette recorded. A
    /// retrieval the source cannot answer cancels the run, with the source's line as the
    /// reason.
    pub fn use_retrieval_source(&self, source: Arc<dyn RetrievalSource>) {
        *write_lock(&self.shared.retrieval_source) = Some(source);
    }

    /// Every trace event of every run from now on. The channel is bounded: a receiver that
    /// falls behind gets `RecvError::Lagged(n)` for the `n` events it missed, and no driver
    /// ever waits for it.
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

    /// A run of `spec` toward `goal`, started when awaited: `engine.start(spec, goal).await`,
    /// or with options, `engine.start(spec, goal).with_id(id).with_setup(setup).await`. A spec
    /// naming a provider or tool that is not registered is refused before anything is written.
    pub fn start(&self, spec: RunSpec, goal: &str) -> StartRun<'_> {
        StartRun {
            engine: self,
            spec,
            goal: goal.to_owned(),
            id: None,
            setup: None,
            session: None,
            files: Vec::new(),
        }
    }

    /// Takes up a run that is not being driven (paused, crashed, resting) and drives it on.
    /// A run whose lease another live process holds is refused.
    pub async fn resume(&self, run: &RunId) -> Result<RunHandle, EngineError> {
        super::takeup::resume(&self.shared, run, Vec::new()).await
    }

    /// Asks every run this engine drives to stop gracefully, and returns at once: no new effect
    /// is started, calls in flight may finish within `grace` and their results are committed,
    /// then each run rests `paused` (its lease released) and its handle's `wait` returns. A
    /// call still running when `grace` is over is cancelled (command tools are killed) and
    /// nothing it returns is committed: a non-idempotent one is in doubt on resume. Call it
    /// from a SIGTERM or SIGHUP handler; [`shutdown`](Self::shutdown) also waits. Runs started
    /// afterwards are not affected.
    pub fn begin_shutdown(&self, grace: Duration) {
        let deadline = self.shared.config.clock.now() + grace;
        self.shared.stop.send_modify(|stop| {
            *stop = Some(stop.map_or(deadline, |d| d.min(deadline)));
        });
    }

    /// Asks every run to stop as [`begin_shutdown`](Self::begin_shutdown) does — at once, when
    /// called — and returns a future that completes when every driver of this engine has
    /// stopped: its calls in flight finished or abandoned, its last commits and the release of
    /// its lease durable.
    pub fn shutdown(&self, grace: Duration) -> impl Future<Output = ()> + Send + 'static {
        self.begin_shutdown(grace);
        let mut running = self.shared.running.subscribe();
        async move {
            // The sender lives as long as the engine's shared state, which every driver holds
            // too: the channel cannot close while a driver runs.
            let _ = running.wait_for(|n| *n == 0).await;
        }
    }

    /// Asks the run to pause at its next step boundary. In this process the request goes to
    /// the driver; otherwise it is written for whichever process drives the run. A run
    /// waiting only on child runs (revision 4) pauses them, waits until they have, and rests
    /// paused; `resume` picks them up again.
    pub async fn pause(&self, run: &RunId) -> Result<(), EngineError> {
        if self.send_live(run, Ctl::Pause).await {
            return Ok(());
        }
        let id = run.clone();
        off_thread(&self.shared.store, move |s| crate::ledger::record(s, &id)).await?;
        let control = Write::SetControl {
            run: run.clone(),
            control: Some(Control::Pause),
        };
        self.shared.writes.write(control).await.map_err(finished)?;
        Ok(())
    }

    /// Cancels the run: a live driver aborts its in-flight work and commits the cancellation;
    /// a run driven by another process is asked to; a run at rest is cancelled here.
    /// Whichever driver commits the cancellation also cancels the child runs the run was
    /// waiting on (revision 4) and waits until they have ended.
    pub async fn cancel(
        &self,
        run: &RunId,
        reason: Option<String>,
    ) -> Result<Option<RunHandle>, EngineError> {
        if self.send_live(run, Ctl::Cancel(reason.clone())).await {
            return Ok(None);
        }
        // A run that has ended is refused by the take-up, once what it would act on is shown
        // to be what `verify` accepts.
        let cancel = vec![EventBody::CancelRequested {
            reason: reason.clone(),
        }];
        match super::takeup::resume(&self.shared, run, cancel).await {
            Err(EngineError::Store(StoreError::LeaseHeld { .. })) => {
                let control = Write::SetControl {
                    run: run.clone(),
                    control: Some(Control::Cancel(reason)),
                };
                self.shared.writes.write(control).await.map_err(finished)?;
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
        let body = super::takeup::input_event(&self.shared, run, call_id, input).await?;
        super::takeup::resume(&self.shared, run, vec![body]).await
    }

    /// Commits a person's answer to a run at rest without driving it (its effects wait in the
    /// outbox for the next `resume`): how `resume PARENT --approve` answers the child run its
    /// parent rests on, then drives the parent, which takes the child up. `call_id` picks the
    /// call when several wait. Refused, writing nothing, when the run waits for no one.
    pub async fn answer_at_rest(
        &self,
        run: &RunId,
        call_id: Option<&str>,
        input: HumanInput,
    ) -> Result<RunState, EngineError> {
        let body = super::takeup::input_event(&self.shared, run, call_id, input).await?;
        super::takeup::apply_one(&self.shared, run, body).await
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
        super::takeup::check_fits(&self.shared, run, &body).await?;
        super::takeup::resume(&self.shared, run, vec![body]).await
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
        self.fork_resolving(parent, seq, Box::new(move |_| edits), mode)
            .await
    }

    /// [`fork`](Self::fork) with edits that depend on the state at the fork point
    /// (`budget.KEY=VALUE` sets the budget that is spent there, else the active agent's):
    /// `resolve` turns that state, read once to plan the fork, into the edits.
    pub(crate) async fn fork_resolving(
        &self,
        parent: &RunId,
        seq: u64,
        resolve: super::fork::Resolve,
        mode: ForkMode,
    ) -> Result<RunHandle, EngineError> {
        super::fork::fork(
            &self.shared,
            parent,
            seq,
            resolve,
            mode,
            super::new_run_id(),
        )
        .await
    }

    /// Takes up `run` and drives it with `events` first, each checked against the state read
    /// under the lease (a caller checks them against the state it read before, with
    /// [`fits`](super::fits), so bad input is refused before anything is written), for a
    /// caller that has checked `run` itself: `checked`
    /// is what the caller's own [`check_continuable`](crate::ledger::check_continuable) of
    /// `run` with this engine's receipt key found: it stands for the take-up's check while the
    /// run's stored head is still the one it checked (any write to the run moves it);
    /// otherwise the check is made again, as every take-up makes it.
    pub(crate) async fn resume_checked(
        &self,
        run: &RunId,
        checked: crate::ledger::Continuable,
        events: Vec<EventBody>,
    ) -> Result<RunHandle, EngineError> {
        super::takeup::resume_checked(&self.shared, run, Some(checked), events, Vec::new()).await
    }

    /// [`resume_checked`](Self::resume_checked), the first transition storing `files` (the
    /// bytes of the files `events` name: a person's answer's) as blobs.
    pub(crate) async fn resume_checked_with_files(
        &self,
        run: &RunId,
        checked: crate::ledger::Continuable,
        events: Vec<EventBody>,
        files: Vec<Vec<u8>>,
    ) -> Result<RunHandle, EngineError> {
        super::takeup::resume_checked(&self.shared, run, Some(checked), events, files).await
    }

    /// Commits one event to a run that no process is driving, without performing the effects
    /// it emits (they wait in the outbox for the next `resume`). For tools that adjust a run
    /// at rest, and for measuring what resuming costs.
    pub async fn apply(&self, run: &RunId, body: EventBody) -> Result<RunState, EngineError> {
        super::takeup::apply_one(&self.shared, run, body).await
    }

    /// True while a driver in this engine is driving `run`.
    pub fn is_live(&self, run: &RunId) -> bool {
        lock(&self.shared.live).contains_key(run)
    }

    /// Hands `ctl` to this engine's live driver of `run`; false when there is none.
    async fn send_live(&self, run: &RunId, ctl: Ctl) -> bool {
        let tx = lock(&self.shared.live).get(run).cloned();
        match tx {
            Some(tx) => tx.send(ctl).await.is_ok(),
            None => false,
        }
    }

    /// Refuses `spec` unless every provider and tool it names (and its retriever) is
    /// registered in this engine.
    pub(crate) fn check_runnable(&self, spec: &RunSpec) -> Result<(), EngineError> {
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
        if spec.spec().retriever.is_some()
            && read_lock(&self.shared.retriever).is_none()
            && read_lock(&self.shared.retrieval_source).is_none()
        {
            return Err(EngineError::NoRetriever);
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
