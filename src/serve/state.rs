//! What every request shares: the database, the security policy, the runs this server drives,
//! the trace events they emit (the hub), cached timelines and the per-run watchers.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::security::Policy;
use super::watch::Watch;
use crate::exec::{Engine, RunHandle, TraceEvent};
use crate::history::{self, HistoryError, TimelineEntry as Entry};
use crate::machine::RunId;
use crate::ops::{EngineSettings, OpsError, engine_config};
use crate::store::{RunRecord, Store};

/// How many runs' timelines stay cached.
const CACHED_TIMELINES: usize = 16;

/// Trace events of every run this server drives, as they happen.
const HUB_CAPACITY: usize = 8192;

/// The server's shared state; cheap to clone.
#[derive(Clone)]
pub(crate) struct App(Arc<Inner>);

impl Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// See [`App`].
pub(crate) struct Inner {
    /// The database every request reads and every run is driven in.
    pub(crate) store: Arc<dyn Store>,
    /// Its path, as shown on the page.
    pub(crate) db: PathBuf,
    /// Where an uploaded spec's relative paths start.
    pub(crate) spec_dir: PathBuf,
    /// Where `runtape eval`'s reports are read from.
    pub(crate) experiments_dir: PathBuf,
    /// The receipt key file runs are driven with (else `$RUNTAPE_RECEIPT_KEY`).
    pub(crate) receipt_key: Option<PathBuf>,
    /// How long calls in flight may finish when the server stops.
    pub(crate) grace: Duration,
    /// Who may ask what.
    pub(crate) policy: Policy,
    /// How often a watched run's row is read for changes made by other processes.
    pub(crate) poll: Duration,
    /// Trace events of the runs this server drives.
    pub(crate) hub: broadcast::Sender<Arc<TraceEvent>>,
    /// Cancelled when the server stops: streams end, watchers stop.
    pub(crate) shutdown: CancellationToken,
    drivers: Mutex<Vec<(RunId, Engine)>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    timelines: Mutex<HashMap<RunId, CachedTimeline>>,
    tick: AtomicU64,
    pub(crate) watches: Mutex<HashMap<RunId, Arc<Watch>>>,
    agents: Mutex<HashMap<RunId, String>>,
}

struct CachedTimeline {
    seq: u64,
    entries: Arc<Vec<Entry>>,
    used: u64,
}

/// What [`App::new`] needs.
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) db: PathBuf,
    pub(crate) spec_dir: PathBuf,
    pub(crate) experiments_dir: PathBuf,
    pub(crate) receipt_key: Option<PathBuf>,
    pub(crate) grace: Duration,
    pub(crate) policy: Policy,
    pub(crate) poll: Duration,
}

impl App {
    /// The shared state for a server over `settings.store`.
    pub(crate) fn new(s: Settings) -> App {
        let (hub, _) = broadcast::channel(HUB_CAPACITY);
        App(Arc::new(Inner {
            store: s.store,
            db: s.db,
            spec_dir: s.spec_dir,
            experiments_dir: s.experiments_dir,
            receipt_key: s.receipt_key,
            grace: s.grace,
            policy: s.policy,
            poll: s.poll,
            hub,
            shutdown: CancellationToken::new(),
            drivers: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            timelines: Mutex::new(HashMap::new()),
            tick: AtomicU64::new(0),
            watches: Mutex::new(HashMap::new()),
            agents: Mutex::new(HashMap::new()),
        }))
    }

    /// The settings a run-driving command would have: this server's receipt key.
    fn settings(&self) -> EngineSettings {
        EngineSettings {
            receipt_key: self.receipt_key.clone(),
            warn: crate::term::note,
            ..EngineSettings::default()
        }
    }

    /// A new engine over the server's database, configured as `runtape resume` would be,
    /// whose trace events go to the hub. One per driven run: each run's spec registers its
    /// own providers and tools under its own names, which must not meet another run's.
    pub(crate) fn engine(&self) -> Result<Engine, OpsError> {
        let engine = Engine::with_store(self.store.clone(), engine_config(&self.settings())?);
        let mut events = engine.subscribe();
        let hub = self.hub.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(e) => {
                        let _ = hub.send(Arc::new(e));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(engine)
    }

    /// Drives `handle` (a run `engine` took up) to its end in the background; the server's
    /// stop pauses it gracefully.
    pub(crate) fn drive(&self, engine: Engine, handle: RunHandle) {
        let run = handle.run_id().clone();
        lock(&self.drivers).push((run.clone(), engine.clone()));
        let app = self.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = handle.wait().await {
                let e = OpsError::from(e);
                crate::term::note(&format!(
                    "run {run}: {}",
                    crate::term::one_line(&e.to_string())
                ));
            }
            lock(&app.drivers).retain(|(r, _)| *r != run);
            drop(engine);
        });
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// True while this server drives `run`.
    pub(crate) fn drives(&self, run: &RunId) -> bool {
        lock(&self.drivers).iter().any(|(r, _)| r == run)
    }

    /// Stops every run this server drives as `runtape run` does on SIGTERM (calls in flight
    /// get the grace period, then each run rests paused) and waits for them.
    pub(crate) async fn stop_runs(&self) {
        for (_, engine) in lock(&self.drivers).iter() {
            engine.begin_shutdown(self.grace);
        }
        let tasks: Vec<_> = std::mem::take(&mut *lock(&self.tasks));
        let wait = futures_util::future::join_all(tasks);
        let _ = crate::clock::timeout(self.grace + Duration::from_secs(10), wait).await;
    }

    /// `run`'s whole timeline (as `runtape log` reads it), cached until the run moves on.
    /// Blocking: call it off the async workers.
    pub(crate) fn timeline(&self, run: &RunId) -> Result<Arc<Vec<Entry>>, HistoryError> {
        let rec = history::record(self.store.as_ref(), run)?;
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = lock(&self.timelines).get_mut(run)
            && c.seq == rec.seq
        {
            c.used = tick;
            return Ok(c.entries.clone());
        }
        let entries = Arc::new(history::timeline(self.store.as_ref(), run)?);
        let seq = entries.last().map_or(0, |e| e.seq);
        let mut cache = lock(&self.timelines);
        if cache.len() >= CACHED_TIMELINES
            && !cache.contains_key(run)
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(r, _)| r.clone())
        {
            cache.remove(&oldest);
        }
        cache.insert(
            run.clone(),
            CachedTimeline {
                seq,
                entries: entries.clone(),
                used: tick,
            },
        );
        Ok(entries)
    }

    /// The agent a run starts with (its plan's entry, else its first agent), cached: a
    /// run's spec never changes.
    pub(crate) fn entry_agent(&self, rec: &RunRecord) -> String {
        if let Some(a) = lock(&self.agents).get(&rec.id) {
            return a.clone();
        }
        let agent = history::spec_of(rec)
            .ok()
            .map(|spec| {
                let spec = spec.spec();
                spec.plan
                    .as_ref()
                    .map(|p| p.entry.to_string())
                    .or_else(|| spec.agents.first().map(|a| a.id.to_string()))
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        lock(&self.agents).insert(rec.id.clone(), agent.clone());
        agent
    }

    /// Runs `f` on a blocking thread (SQLite reads must not stall the async workers).
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(App) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let app = self.clone();
        tokio::task::spawn_blocking(move || f(app))
            .await
            .map_err(super::error::join_error)?
    }
}

/// Poisoned locks only mean another thread panicked while holding them; every update here is
/// a single insert, remove or push, so the data stays consistent: keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
