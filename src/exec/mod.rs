//! The executor: drives runs on tokio, performing the effects of committed transitions and
//! feeding their results back as events.
//!
//! # The run loop
//!
//! For each run, one task (its *driver*) repeats: take the next event (a result that arrived,
//! `Proceed` at a step boundary, a person's input, a cancel), [`step`](crate::machine::step),
//! record the transition ([`ledger::Recorder`](crate::ledger::Recorder)) and submit it to the
//! store, and — only once it is durable — start its effects. Transitions that emit no effect
//! do not wait for the disk before the next step; the next durable commit covers them (a
//! commit is never acknowledged before it is durable, and nothing is performed before the
//! transition that asked for it is).
//!
//! The driver's concerns live in one file each: taking a stored run up (`takeup.rs`, a new
//! one in `start.rs`, a fork in `fork.rs`), the loop (`driver/run_loop.rs`), committing
//! (`driver/commit.rs`), dispatching effects (`driver/dispatch.rs`, performed in
//! `perform.rs`), and what observers are told (`transition_traces.rs`).
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
//!   performs nothing. The protocol is model-checked (`protocol_model/`).
//! - Before starting a non-idempotent call a driver checks by its own clock that its lease has
//!   margin left; a driver frozen past its lease is taken over, and fenced when it wakes.
//! - [`Engine::shutdown`] stops runs gracefully: no new effect, calls in flight finish within a
//!   grace period (then are abandoned: in doubt on resume), the run rests `paused`, and it
//!   returns once every driver has stopped and its last writes are durable.
//! - Budgets are state: they do not reset on resume.
//! - Every wait goes through the engine's [`Clock`]; every queue is bounded: a driver's
//!   control requests, the writes an engine has in flight, and the trace channel (an observer
//!   that falls behind is told how many events it missed, [`Trace::Lagged`]).
//! - Store reads that may touch the disk run on tokio's blocking pool, never on a worker
//!   thread driving runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast, mpsc, oneshot, watch};

use crate::cassette::{MemorySource, RetrievalSource};
use crate::machine::EventBody;
use crate::provider::ModelProvider;
use crate::store::Store;
use crate::tool::ToolRegistry;

mod child_run;
mod driver;
mod engine;
mod error;
mod fork;
mod handle;
mod ids;
mod lease_keeper;
mod mcp_progress;
mod perform;
#[cfg(test)]
mod protocol_model;
mod reads;
pub(crate) mod session;
mod start;
mod takeup;
mod tape;
mod trace;
mod transition_traces;
mod writes;

pub use crate::clock::{Clock, Sleep, SteppedClock, SystemClock, VirtualClock, wall_ms};
pub use engine::{Engine, EngineConfig, StartRun};
pub use error::EngineError;
pub use fork::{ForkEdit, ForkMode};
pub use handle::{RunEnd, RunHandle};
pub use ids::new_run_id;
pub use mcp_progress::forward_mcp_progress;
pub use session::SessionSettings;
pub(crate) use takeup::{answer_event, fits};
pub use tape::TapeEnd;
pub use trace::{RequestParams, Trace, TraceEvent};

/// Control requests a driver takes at most this many of before the sender waits.
const CONTROL_QUEUE: usize = 64;

/// A request to a live driver.
#[derive(Debug)]
pub(crate) enum Ctl {
    Pause,
    Cancel(Option<String>),
    /// Boxed: every driver's queue allocates room for a block of requests up front, so the
    /// size of a request is paid per run in flight.
    Event(Box<EventBody>),
    Attach(oneshot::Sender<Result<RunEnd, EngineError>>),
    /// The engine's lease keeper read another lease epoch than the driver's: the run was taken
    /// over by another process (this is the epoch now stored).
    Fenced(u64),
}

/// What every driver of an engine shares.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) providers: RwLock<BTreeMap<String, Arc<dyn ModelProvider>>>,
    pub(crate) tools: RwLock<ToolRegistry>,
    /// Where runs get MCP servers' tool lists (revision 3), by server name.
    pub(crate) mcp: RwLock<BTreeMap<String, Arc<dyn crate::tool::mcp::ToolLister>>>,
    /// What runs with a `[retriever]` ask for passages (revision 5).
    pub(crate) retriever: RwLock<Option<crate::tool::retriever::Retriever>>,
    pub(crate) config: EngineConfig,
    pub(crate) owner: String,
    pub(crate) trace: broadcast::Sender<crate::exec::TraceEvent>,
    /// The control queue of each run a driver of this engine drives.
    pub(crate) live: Mutex<HashMap<crate::machine::RunId, mpsc::Sender<Ctl>>>,
    /// Drivers running, for [`Engine::shutdown`] to wait on.
    pub(crate) running: watch::Sender<usize>,
    /// A graceful stop: the instant calls in flight must be done by. Drivers react to a value
    /// sent after they started.
    pub(crate) stop: watch::Sender<Option<tokio::time::Instant>>,
    /// Runs driven at once.
    pub(crate) slots: Arc<Semaphore>,
    /// Writes in flight (submitted, not yet acknowledged): a bound on the store's queue.
    pub(crate) writes: Arc<writes::Writes>,
    /// The leases this engine's drivers hold, polled and renewed by one task for all of them.
    pub(crate) kept: lease_keeper::KeptLeases,
    /// Where global memory loads and publishes are answered instead of the store (a replay's
    /// cassette, revision 5).
    pub(crate) memory_source: RwLock<Option<Arc<dyn MemorySource>>>,
    /// Where retrievals are answered instead of the retriever (a replay's cassette, revision
    /// 5).
    pub(crate) retrieval_source: RwLock<Option<Arc<dyn RetrievalSource>>>,
}

/// The status a run in `state` rests in.
pub(crate) fn status_of(state: &crate::machine::RunState) -> crate::store::RunStatus {
    crate::store::RunStatus::of_state(state)
}

// Poisoned locks only mean another thread panicked while holding them; the maps inside stay
// consistent (every update is a single insert or remove), so keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

/// How long a driver that stops with calls in flight waits for them to kill and reap their
/// processes after cancelling them (command tools do so at once; anything slower is dropped).
const REAP_WAIT: Duration = Duration::from_secs(2);
#[cfg(test)]
mod size_tests {
    /// Every driver's control queue allocates a block of requests when it is made, so a
    /// request's size is memory held per run in flight (W5: 10,000 runs).
    #[test]
    fn a_control_request_stays_small() {
        assert!(std::mem::size_of::<super::Ctl>() <= 32);
    }
}
