//! Durable storage of runs: the [`Store`] trait and its records, with a SQLite implementation
//! ([`SqliteStore`]) and an in-memory one ([`MemoryStore`]) for tests and benchmarks.
//!
//! The executor submits [`Write`]s; each resolves only when it is durable (for SQLite: the
//! transaction holding it has committed with the configured `synchronous` level). Writes from
//! all runs share transactions (group commit), but none is acknowledged before its
//! transaction commits. Reads are plain blocking calls.
//!
//! A run's history is a list of transitions `(seq, event, effects, state hash, chain)`;
//! message bodies are content-addressed blobs (conversation Merkle nodes: the previous head
//! followed by the message JSON, keyed by the new head), and state snapshots every
//! [`SNAPSHOT_EVERY`] transitions bound the fold needed to rebuild a state. Storage per
//! transition stays flat as a run grows.
//!
//! Each run also has a sealed head ([`HeadRecord`], see [`crate::receipt::RunHead`]): what the
//! run is and where its history ends, replaced in the same transaction as every write that
//! changes either. `history::coverage` lists every stored column and what verifies it.

use std::fmt;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::machine::{Digest, EdgeId, EffectRef, Hlc, RunId, StateKind};

mod chunked;
mod forward;
pub mod global_memory;
pub mod import;
mod lease;
mod legacy_heads;
mod memory;
mod postgres;
pub(crate) mod protocol;
/// A `stateright` model of the global memory publish racing removals (tests only).
#[cfg(test)]
pub(crate) mod publish_model;
pub mod retention;
mod run_facts;
mod run_query;
mod run_stats;
pub mod schedules;
mod schema;
mod schema_shape;
mod session;
/// A `stateright` model of processes starting a session's next run at once (tests only).
#[cfg(test)]
mod session_model;
mod sqlite;
mod timed;

pub use global_memory::{GlobalRow, Publication, Removal, RemovalBody, RemovalRecord};
pub use lease::{LeaseRecord, owner_host, owner_id, owner_is_dead};
pub use memory::MemoryStore;
pub use postgres::{
    Claim, PG_SCHEMA_VERSION, PostgresStore, WorkerInfo, WorkerRecord, display_url, is_postgres_url,
};
pub use run_query::{Cursor, Relation, RunPage, RunQuery, RunSort, StatusFilter};
pub use run_stats::{FailureCount, RunStats, Spend, StatusCount};
pub use schema::SCHEMA_VERSION;
pub use session::{SessionLink, SessionRecord};
pub use sqlite::priority as sqlite_priority;
pub use sqlite::{CommitStats, Durability, SqliteStore};
pub use timed::{Latency, TimedStore};

/// A state snapshot is written every this many transitions.
pub const SNAPSHOT_EVERY: u64 = 64;

/// Where a run stands, as `runtape ls` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Being driven (or was, by a process that died; `resume` picks it up).
    Running,
    /// Paused at a step boundary by request.
    Paused,
    /// Waiting for a person.
    AwaitingInput,
    /// Resting in `BudgetExhausted` until a budget is raised.
    BudgetExhausted,
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl RunStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::AwaitingInput => "awaiting_input",
            RunStatus::BudgetExhausted => "budget_exhausted",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Parses [`as_str`](Self::as_str).
    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "running" => RunStatus::Running,
            "paused" => RunStatus::Paused,
            "awaiting_input" => RunStatus::AwaitingInput,
            "budget_exhausted" => RunStatus::BudgetExhausted,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    /// The status a run whose latest state is `state` records with each commit: terminal for
    /// `Done`, waiting for a person or a budget raise where the state rests, else running.
    pub fn of_state(state: &crate::machine::RunState) -> RunStatus {
        use crate::machine::{Outcome, RunState, SlotStatus};
        match state {
            RunState::Done {
                outcome: Outcome::Completed { .. },
                ..
            } => RunStatus::Completed,
            RunState::Done {
                outcome: Outcome::Failed { .. },
                ..
            } => RunStatus::Failed,
            RunState::Done {
                outcome: Outcome::Cancelled { .. },
                ..
            } => RunStatus::Cancelled,
            RunState::AwaitingInput { .. } => RunStatus::AwaitingInput,
            RunState::BudgetExhausted { resting: true, .. } => RunStatus::BudgetExhausted,
            RunState::CallingTools { batch, .. }
                if !batch.any_running()
                    && batch
                        .slots
                        .iter()
                        .any(|s| !matches!(s.status, SlotStatus::Finished { .. })) =>
            {
                RunStatus::AwaitingInput
            }
            _ => RunStatus::Running,
        }
    }

    /// True once the run is over.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request from another process (or this one) to a run's driver, read at step boundaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Pause at the next step boundary.
    Pause,
    /// Cancel now, for the reason given (`runtape cancel --reason`), which the driver records.
    Cancel(Option<String>),
}

impl Control {
    /// The `runs.control` column's text: `pause`, `cancel`, or `cancel:REASON` (a database
    /// written before reasons were kept holds only the first two).
    pub(crate) fn to_column(&self) -> String {
        match self {
            Control::Pause => "pause".into(),
            Control::Cancel(None) => "cancel".into(),
            Control::Cancel(Some(reason)) => format!("cancel:{reason}"),
        }
    }

    /// Reads what [`to_column`](Self::to_column) wrote; `None` for text that is no request.
    pub(crate) fn from_column(stored: &str) -> Option<Control> {
        match stored {
            "pause" => Some(Control::Pause),
            "cancel" => Some(Control::Cancel(None)),
            other => other
                .strip_prefix("cancel:")
                .map(|reason| Control::Cancel(Some(reason.to_owned()))),
        }
    }
}

/// A run's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub id: RunId,
    /// For a fork: the parent run and the seq it forked at (its history up to there is the
    /// parent's).
    pub parent: Option<(RunId, u64)>,
    /// The run spec, as JSON.
    pub spec: String,
    /// How to rebuild the run's providers and tools in another process (JSON written by the
    /// spec-file layer; names environment variables, never holds a key). `None` for runs
    /// whose providers and tools were registered in code.
    pub setup: Option<String>,
    /// The goal.
    pub goal: String,
    /// Latest status.
    pub status: RunStatus,
    /// Kind of the latest state.
    pub state_kind: StateKind,
    /// Latest committed seq.
    pub seq: u64,
    /// Lease epoch; bumped by every takeover, checked by every commit.
    pub lease_epoch: u64,
    /// Who holds the lease (`host:pid:nonce@start`, see [`owner_id`]), if anyone.
    pub lease_owner: Option<String>,
    /// Wall-clock ms after which the lease counts as abandoned.
    pub lease_expires_ms: u64,
    /// A pending control request.
    pub control: Option<Control>,
    /// Creation time, wall-clock ms.
    pub created_ms: u64,
    /// Last update, wall-clock ms.
    pub updated_ms: u64,
    /// Known cost so far, nanodollars.
    pub cost_nanos: u64,
    /// Model turns so far whose cost is unknown (not in `cost_nanos`).
    pub unpriced_turns: u64,
    /// Tokens so far.
    pub tokens: u64,
    /// How it ended (JSON of the outcome), once done.
    pub outcome: Option<String>,
}

impl RunRecord {
    /// True while the run waits for a process to take it up: `running` with no lease held.
    /// `runtape run --detach` leaves a new run so, and a worker gives a run back to the queue
    /// so; a driver that died leaves its owner on the lease instead (that run is interrupted,
    /// not queued). Changes when a process takes the lease (`resume`, a worker's claim).
    pub fn is_queued(&self) -> bool {
        self.status == RunStatus::Running && self.lease_owner.is_none()
    }

    /// The status as `ls`, `log`, `show` and `runtape serve` show it: `queued` for a queued run
    /// ([`is_queued`](Self::is_queued)), else the stored status's name. `queued` is derived
    /// from the lease, never stored: the stored status of a queued run stays `running`.
    pub fn shown_status(&self) -> &'static str {
        if self.is_queued() {
            "queued"
        } else {
            self.status.as_str()
        }
    }
}

/// One committed transition.
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionRecord {
    /// Its seq.
    pub seq: u64,
    /// The event's time.
    pub at: Hlc,
    /// The event, as JSON.
    pub event: Vec<u8>,
    /// The table edge taken (stored as its persisted name; see [`EdgeId`]).
    pub edge: EdgeId,
    /// The emitted effects, as a JSON array (empty when none).
    pub effects: Vec<u8>,
    /// Kind of the state after it.
    pub state_kind: StateKind,
    /// Hash of the state after it.
    pub state_hash: Digest,
    /// `blake3(previous chain || event || state hash)`.
    pub chain: Digest,
    /// The seal of the receipt this transition carries (see [`crate::receipt::Seal::to_bytes`]).
    pub seal: Option<Vec<u8>>,
}

/// A run's sealed head as stored: the head's canonical bytes and their seal (see
/// [`crate::receipt::RunHead`]). Written with every write that changes what it records.
#[non_exhaustive]
#[derive(Clone, Debug, Default)]
pub struct HeadRecord {
    /// The head's canonical JSON.
    pub body: Vec<u8>,
    /// Its seal ([`crate::receipt::Seal::to_bytes`]).
    pub seal: Vec<u8>,
    /// For a write: the [`body_digest`](Self::body_digest) of the head it replaces. The store refuses
    /// the write ([`StoreError::StaleHead`]) when another head is stored, so a writer whose view
    /// went stale changes nothing. `None` for a new run's first head, and on heads read back.
    pub replaces: Option<Digest>,
    /// The digest of `body` when whoever sealed it worked it out already (the engine does, to
    /// name it in the next write): stores take it from here instead of hashing the body again.
    /// Not part of what the record is (equality ignores it).
    pub(crate) digest: Option<Digest>,
    /// The head packed ([`crate::format::packed_head`]) when whoever sealed it packed it (the
    /// engine does for a store that keeps heads packed, [`Store::packs_heads`]): the store
    /// stores it instead of parsing the body to pack it. Equality ignores it.
    pub(crate) packed: Option<crate::format::packed_head::PackedHead>,
}

impl PartialEq for HeadRecord {
    fn eq(&self, other: &Self) -> bool {
        (&self.body, &self.seal, self.replaces) == (&other.body, &other.seal, other.replaces)
    }
}

impl Eq for HeadRecord {}

/// Where an effect stands in the outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    /// Emitted; not known to have started.
    Pending,
    /// Started (recorded durably before a non-idempotent tool runs); no result yet.
    Started,
    /// Its result is committed.
    Done,
}

impl OutboxStatus {
    /// The stored name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Started => "started",
            OutboxStatus::Done => "done",
        }
    }

    /// Parses [`as_str`](Self::as_str).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => OutboxStatus::Pending,
            "started" => OutboxStatus::Started,
            "done" => OutboxStatus::Done,
            _ => return None,
        })
    }
}

/// An effect's outbox row.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRecord {
    /// Where it was emitted.
    pub effect: EffectRef,
    /// Its status.
    pub status: OutboxStatus,
    /// The tool's idempotency key, for tool calls.
    pub idempotency_key: Option<String>,
}

/// A new run.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct NewRun {
    /// Its id.
    pub id: RunId,
    /// For a fork: parent and fork seq.
    pub parent: Option<(RunId, u64)>,
    /// Spec JSON.
    pub spec: String,
    /// Setup JSON (see [`RunRecord::setup`]).
    pub setup: Option<String>,
    /// Goal.
    pub goal: String,
    /// Wall-clock ms now.
    pub now_ms: u64,
    /// The creating process takes the lease (epoch 1).
    pub owner: String,
    /// Lease expiry, wall-clock ms.
    pub lease_expires_ms: u64,
    /// The run's first head.
    pub head: HeadRecord,
    /// Its place in a session (revision 5): refused with [`StoreError::SessionTaken`] unless
    /// it is the session's next place (its latest run's + 1, or 1 for a new session).
    pub session: Option<SessionLink>,
}

/// One transition to make durable.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct Commit {
    /// The run.
    pub run: RunId,
    /// The committer's lease epoch; a mismatch is [`StoreError::Fenced`].
    pub epoch: u64,
    /// Its seq; must be the run's latest seq + 1.
    pub seq: u64,
    /// The event's time.
    pub at: Hlc,
    /// Event JSON.
    pub event: Vec<u8>,
    /// The edge taken.
    pub edge: EdgeId,
    /// Effects JSON array (empty when none).
    pub effects: Vec<u8>,
    /// Outbox rows for the effects.
    pub outbox: Vec<OutboxRecord>,
    /// The effect whose result this event carries (marked done).
    pub resolves: Option<EffectRef>,
    /// Kind of the new state.
    pub state_kind: StateKind,
    /// Hash of the new state.
    pub state_hash: Digest,
    /// Chain link.
    pub chain: Digest,
    /// Content-addressed blobs (conversation nodes) to store if absent.
    pub blobs: Vec<(Digest, Vec<u8>)>,
    /// A state snapshot (JSON), every [`SNAPSHOT_EVERY`] transitions.
    pub snapshot: Option<Vec<u8>>,
    /// New status of the run.
    pub status: RunStatus,
    /// Cost so far.
    pub cost_nanos: u64,
    /// Model turns so far whose cost is unknown.
    pub unpriced_turns: u64,
    /// Tokens so far.
    pub tokens: u64,
    /// Outcome JSON when the run ends.
    pub outcome: Option<String>,
    /// The seal of the receipt of the model turn or tool call this transition's event answers
    /// (the receipt's body is a function of the history, rebuilt when read).
    pub seal: Option<Vec<u8>>,
    /// Wall-clock ms now (for `updated_ms` and lease renewal).
    pub now_ms: u64,
    /// Push the lease expiry to this wall-clock ms.
    pub lease_expires_ms: u64,
    /// The run's head after this transition (for several commits written together, the last
    /// one carries it); `None` leaves the stored head as it is.
    pub head: Option<HeadRecord>,
}

// The records above are `#[non_exhaustive]` so a new stored field is not a breaking change;
// programs outside this crate that write records themselves (another store's conformance
// tests, tools that build databases) start from these constructors and set the rest by field.

impl HeadRecord {
    /// A head of `body` sealed by `seal`, replacing the head whose body digests to `replaces`.
    pub fn new(body: Vec<u8>, seal: Vec<u8>, replaces: Option<Digest>) -> HeadRecord {
        HeadRecord {
            body,
            seal,
            replaces,
            digest: None,
            packed: None,
        }
    }

    /// The body's [`head_body_digest`](crate::receipt::head_body_digest): what the next write
    /// of the run names in [`replaces`](Self::replaces).
    pub fn body_digest(&self) -> Digest {
        self.digest
            .unwrap_or_else(|| crate::receipt::head_body_digest(&self.body))
    }
}

impl OutboxRecord {
    /// The outbox row of `effect` at `status`.
    pub fn new(
        effect: EffectRef,
        status: OutboxStatus,
        idempotency_key: Option<String>,
    ) -> OutboxRecord {
        OutboxRecord {
            effect,
            status,
            idempotency_key,
        }
    }
}

impl NewRun {
    /// Run `id` of `spec` toward `goal`, leased to `owner` until `lease_expires_ms`, with its
    /// first `head`; no parent and no stored setup until those fields are set.
    pub fn new(
        id: RunId,
        spec: String,
        goal: String,
        owner: String,
        now_ms: u64,
        lease_expires_ms: u64,
        head: HeadRecord,
    ) -> NewRun {
        NewRun {
            id,
            parent: None,
            spec,
            setup: None,
            goal,
            now_ms,
            owner,
            lease_expires_ms,
            head,
            session: None,
        }
    }

    /// For store tests: run `id` of an empty spec toward "goal", leased to "me" for good, with
    /// a placeholder head (`{}`, unsigned).
    #[cfg(test)]
    pub(crate) fn sample(id: &str) -> NewRun {
        NewRun::new(
            RunId::new(id),
            "{}".into(),
            "goal".into(),
            "me".into(),
            1,
            u64::MAX >> 2,
            HeadRecord::new(b"{}".to_vec(), vec![0], None),
        )
    }
}

impl Commit {
    /// Transition `seq` of `run` under lease `epoch` taking `edge` at `at`, with every other
    /// field empty (no event or effect bytes, zero digests, no counters, status `running`, the
    /// head left as stored): set the fields the write needs before submitting it.
    pub fn new(run: RunId, epoch: u64, seq: u64, edge: EdgeId, at: Hlc, now_ms: u64) -> Commit {
        Commit {
            run,
            epoch,
            seq,
            at,
            event: Vec::new(),
            edge,
            effects: Vec::new(),
            outbox: Vec::new(),
            resolves: None,
            state_kind: edge.to(),
            state_hash: Digest::default(),
            chain: Digest::default(),
            blobs: Vec::new(),
            snapshot: None,
            status: RunStatus::Running,
            cost_nanos: 0,
            unpriced_turns: 0,
            tokens: 0,
            outcome: None,
            seal: None,
            now_ms,
            lease_expires_ms: now_ms,
            head: None,
        }
    }
}

/// A write for the store to make durable.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub enum Write {
    /// Create a run (and take its lease, epoch 1).
    CreateRun(NewRun),
    /// Commit a transition.
    Commit(Box<Commit>),
    /// Commit consecutive transitions of one run together (all or none, one transaction).
    Commits(Vec<Commit>),
    /// Mark effects started (before performing non-idempotent tools); creates the outbox row
    /// when the effect has none (a fork performing an effect its parent emitted). Fenced by
    /// the epoch; fails with [`StoreError::AlreadyAnswered`] for an effect whose result is
    /// committed (a stale driver must not perform it). Renews the lease in the same
    /// transaction, so the driver knows from its own clock how long its lease is good for.
    MarkStarted {
        /// The run.
        run: RunId,
        /// Lease epoch.
        epoch: u64,
        /// The effects (status is ignored).
        effects: Vec<OutboxRecord>,
        /// New lease expiry, wall-clock ms.
        expires_ms: u64,
        /// The run's head with these effects among its started ones.
        head: Option<HeadRecord>,
    },
    /// Push the lease expiry while a long effect runs. Fenced by the epoch; a lease given
    /// back stays given back (nothing is written), so a renewal that raced the release is
    /// harmless.
    RenewLease {
        /// The run.
        run: RunId,
        /// Lease epoch.
        epoch: u64,
        /// New expiry, wall-clock ms.
        expires_ms: u64,
    },
    /// Take the lease: compare-and-swap on the epoch. Fails with [`StoreError::LeaseHeld`]
    /// while another live owner holds it, and with [`StoreError::Finished`] for a run that
    /// has ended; either way nothing is written. Call it *before* reading anything the driver
    /// acts on: only what is read under the lease is current. A pending pause request is
    /// dropped (it was for the driver that held the run); a pending cancel stays, for the
    /// taker to act on: a cancel whose driver handed the run back before reading it is not
    /// lost to the next take-up.
    AcquireLease {
        /// The run.
        run: RunId,
        /// Who asks.
        owner: String,
        /// Wall-clock ms now.
        now_ms: u64,
        /// New expiry.
        expires_ms: u64,
    },
    /// Give the lease back, recording the status the run rests in. Writes nothing unless the
    /// lease is still held at `epoch` (a second release is a no-op; a lease taken over since
    /// is [`StoreError::Fenced`]), and never overwrites a terminal status.
    ReleaseLease {
        /// The run.
        run: RunId,
        /// Lease epoch.
        epoch: u64,
        /// Status to record.
        status: RunStatus,
        /// The run's head with that status; written only if the lease was still held.
        head: Option<HeadRecord>,
    },
    /// Publish a run's staged global memory writes (revision 5): all or none, at most once
    /// per effect, only over the versions they are based on; see [`global_memory`]. Fenced by
    /// the run's lease epoch. A refusal (a key moved) is not an error: nothing is written, and
    /// [`global_memory::publish_outcome`] reads what happened.
    PublishMemory(Publication),
    /// Forget a global memory key by hand (`runtape memory rm`): adds a version without a
    /// value and a chained removal record. Fails with [`StoreError::NoMemoryKey`] when the
    /// key holds no value; nothing is written then.
    RemoveMemory(Removal),
    /// Remove whole run groups and leave their tombstones (`runtape prune`, see [`retention`]):
    /// all or none. Fails with [`StoreError::PruneRefused`] and writes nothing when a run is
    /// gone, moved on, leased, has a fork or child outside the write, or published global
    /// memory.
    Prune(retention::Prune),
    /// Write a run whole, as another store holds it (`runtape import`, see [`import`]): in
    /// one transaction; nothing when a run with its id exists (an error,
    /// [`StoreError::ImportConflict`], unless its stored head is the same).
    Import(Box<import::ImportedRun>),
    /// Set or clear a run's control request (no lease needed). Setting one on a run that has
    /// ended fails with [`StoreError::Finished`] and writes nothing.
    SetControl {
        /// The run.
        run: RunId,
        /// The request, or `None` to clear.
        control: Option<Control>,
    },
}

/// What a write returns once durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Nothing to report.
    Done,
    /// The lease epoch now held.
    Lease(u64),
    /// A publish of global memory was refused: it would take the memory past its cap
    /// (nothing was written).
    MemoryOverCap(global_memory::OverCap),
    /// A prune removed its runs, and with them the blobs no kept run refers to.
    Pruned(retention::BlobsFreed),
}

/// Resolves when a write is durable.
pub type Ack = oneshot::Receiver<Result<Written, StoreError>>;

/// Told the instant a write became durable ([`Store::submit_timed`]).
pub type Durable = Box<dyn FnOnce(std::time::Instant) + Send + Sync>;

/// A store failure. The Display is one line saying what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database was written by a newer runtape.
    #[error(
        "database {path} has schema version {found}, newer than this runtape supports ({supported}); upgrade runtape (the versions: runtape::guide::changelog)"
    )]
    NewerSchema {
        /// The file.
        path: String,
        /// Its version.
        found: i64,
        /// Ours.
        supported: i64,
    },
    /// The file is not a SQLite database, or is damaged.
    #[error(
        "{path} is not a runtape database or is damaged ({detail}); point RUNTAPE_DB or --db at another file"
    )]
    Corrupt {
        /// The file.
        path: String,
        /// SQLite's words.
        detail: String,
    },
    /// The file's schema label (`PRAGMA user_version`) names another version than its tables
    /// are: someone changed the label. Nothing was written.
    #[error(
        "database {path} is labelled schema version {labelled} (PRAGMA user_version) but its tables are those of version {actual}: the label is wrong and nothing was written; if nothing else was changed, `PRAGMA user_version = {actual}` puts it right"
    )]
    MislabelledSchema {
        /// The file.
        path: String,
        /// The version its label names.
        labelled: i64,
        /// The (latest) version its tables are.
        actual: i64,
    },
    /// The directory to hold the database does not exist.
    #[error("cannot open database {path}: directory {dir} does not exist; create it first")]
    MissingDirectory {
        /// The file.
        path: String,
        /// The missing directory.
        dir: String,
    },
    /// No such run.
    #[error("no run with id `{0}`; `runtape ls` lists the runs in this database")]
    UnknownRun(String),
    /// A run with this id exists already.
    #[error("a run with id `{0}` exists already")]
    DuplicateRun(String),
    /// Another run took this place in the session first (two processes started the session's
    /// next run at once), or the place is not the next one.
    #[error(
        "run {index} of session {session} was started by another process at the same time (the session is at run {latest}); nothing was written – run again once that run has ended"
    )]
    SessionTaken {
        /// The session.
        session: String,
        /// The place asked for.
        index: u64,
        /// The session's latest place when refused.
        latest: u64,
    },
    /// Another live process holds the run's lease.
    #[error(
        "run {run} is being driven by another process ({owner}); wait for it to stop, or `runtape cancel {run}`"
    )]
    LeaseHeld {
        /// The run.
        run: String,
        /// The owner.
        owner: String,
    },
    /// This writer lost the lease (another process took the run over).
    #[error(
        "run {run} was taken over by another process (lease epoch {current}, ours {ours}); this process stops driving it"
    )]
    Fenced {
        /// The run.
        run: String,
        /// Our epoch.
        ours: u64,
        /// The current epoch.
        current: u64,
    },
    /// The run has ended: its lease cannot be taken and no request can reach it.
    #[error("run {run} has already ended ({status}); fork it to continue from an earlier step")]
    Finished {
        /// The run.
        run: String,
        /// How it ended.
        status: RunStatus,
    },
    /// A driver tried to start an effect whose result is already committed: its view of the
    /// run is stale.
    #[error(
        "run {run}: the call at step {seq} (effect {index}) already has a committed result; this process stops driving the run"
    )]
    AlreadyAnswered {
        /// The run.
        run: String,
        /// The seq that emitted the effect.
        seq: u64,
        /// Its index in that transition.
        index: u32,
    },
    /// The disk under the database is full, or the database reached the size cap it was
    /// opened with ([`SqliteStore::open_capped`]): the write was not made.
    #[error("{}", full_line(.path, .detail, *.cap_bytes))]
    Full {
        /// The file (or the PostgreSQL database).
        path: String,
        /// The database's own words.
        detail: String,
        /// The size cap that was reached; `None`: the disk is full.
        cap_bytes: Option<u64>,
    },
    /// A commit out of sequence.
    #[error("run {run}: commit of seq {got} does not follow the latest seq {latest}")]
    OutOfSequence {
        /// The run.
        run: String,
        /// Latest stored seq.
        latest: u64,
        /// The seq given.
        got: u64,
    },
    /// A write carried a head replacing another than the one stored: the writer's view of the
    /// run is stale.
    #[error(
        "run {run} moved on without this process (another process wrote to it since this one read it); this process stops driving it"
    )]
    StaleHead {
        /// The run.
        run: String,
    },
    /// `runtape memory rm` named a key that holds no value.
    #[error(
        "global memory `{name}` has no key `{key}` holding a value; `runtape memory ls --name {name}` lists its keys"
    )]
    NoMemoryKey {
        /// The global memory.
        name: String,
        /// The key.
        key: String,
    },
    /// A prune was refused: a run may not go (it moved on, is leased, or something still
    /// stored depends on it). Nothing was written.
    #[error("run {run} was not pruned: {why}; nothing of its group was removed")]
    PruneRefused {
        /// The run.
        run: String,
        /// Why.
        why: String,
    },
    /// `runtape import` of a run whose id is taken by a run with another head, or whose
    /// session place is taken. Nothing was written.
    #[error(
        "run {run} exists in this database already with other content ({why}); nothing was imported for it"
    )]
    ImportConflict {
        /// The run.
        run: String,
        /// What differs.
        why: String,
    },
    /// Stored data does not decode.
    #[error("stored data of run {run} is damaged: {detail}")]
    Damaged {
        /// The run.
        run: String,
        /// What did not decode.
        detail: String,
    },
    /// Any other SQLite or I/O error.
    #[error("storage error: {0}")]
    Io(String),
    /// The writer has stopped (the engine is shutting down).
    #[error("the store's writer has stopped")]
    Closed,
}

/// [`StoreError::Full`]'s line: which limit was hit, that nothing was written, and what to do.
fn full_line(path: &str, detail: &str, cap_bytes: Option<u64>) -> String {
    const UNWRITTEN: &str = "what was being written was not, and nothing was performed for it";
    match cap_bytes {
        None => format!(
            "disk full: no space left on the disk holding the database {path} ({detail}); {UNWRITTEN} – free space on that disk, then try again"
        ),
        Some(cap) => format!(
            "the database {path} reached its size cap of {cap} bytes (RUNTAPE_DB_MAX_BYTES; {detail}); {UNWRITTEN} – raise the cap, then try again"
        ),
    }
}

/// Durable storage of runs. Implementations: [`SqliteStore`], [`PostgresStore`],
/// [`MemoryStore`]; nothing above the trait knows SQL.
pub trait Store: Send + Sync + 'static {
    /// Queues a write; the returned [`Ack`] resolves when it is durable.
    fn submit(&self, write: Write) -> Ack;

    /// Queues a write as [`submit`](Self::submit) does, and tells `durable` the instant it
    /// became durable: for measuring how long that took ([`TimedStore`], `runtape bench`),
    /// never for acting on it. A store that knows calls it on the thread that made the write
    /// durable, right after the commit and before the acknowledgement is sent (so it must be
    /// quick); it is not called for a write that failed.
    ///
    /// The default submits through [`submit`](Self::submit) and waits for the acknowledgement
    /// in a task of the current tokio runtime (with none, `durable` is never called): that
    /// measures the task's scheduling too, and makes the caller's acknowledgement pass through
    /// it. Stores override it to time the commit itself.
    fn submit_timed(&self, write: Write, durable: Durable) -> Ack {
        timed::observe(self.submit(write), durable)
    }

    /// Whether this store keeps heads packed ([`crate::format::packed_head`]): then whoever
    /// seals a head from its fields packs it too ([`HeadRecord`]'s `packed`), so the store
    /// need not parse the JSON to pack it. Only saves work: a head without it is packed (or
    /// kept as JSON) by the store itself.
    fn packs_heads(&self) -> bool {
        false
    }

    /// The run's row.
    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError>;

    /// The run's row without its setup ([`RunRecord::setup`] is `None`): for a reader that
    /// needs where the run stands (its seq, status, parent, spec), not how to rebuild its
    /// providers and tools. A setup can be large (a scripted provider's every reply) and is
    /// read from pages of its own, so readers that walk a run's ancestry or check its tail call
    /// this; whoever checks the row against its sealed head (which seals the setup) or builds
    /// from the setup calls [`run`](Self::run). The default reads the whole row and drops it.
    fn run_without_setup(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.run(id)?.map(|rec| RunRecord { setup: None, ..rec }))
    }

    /// The lease and control request of each of `runs` that exists, in one read, in no
    /// particular order (a run that does not exist is left out). An engine calls it once per
    /// poll for every run it drives, so its cost should grow with `runs.len()` alone.
    fn leases(&self, runs: &[RunId]) -> Result<Vec<LeaseRecord>, StoreError>;

    /// Every run, newest first.
    fn runs(&self) -> Result<Vec<RunRecord>, StoreError>;

    /// A page of the runs `q` asks for, in its order, each passing [`RunQuery::matches`] at
    /// wall time `now_ms`; the page's [`RunPage::next`] asks for the page after it. The
    /// default reads every run ([`runs`](Self::runs)); SQLite and PostgreSQL narrow and order
    /// them with their run summary, so a page costs about the same at any depth.
    fn run_page(&self, q: &RunQuery, now_ms: u64) -> Result<RunPage, StoreError> {
        Ok(run_query::page_of_all(self.runs()?, q, now_ms))
    }

    /// What the runs created at or after `since_ms` add up to ([`RunStats`]), counted per
    /// `bucket_ms` of creation time. The default reads every run; SQLite and PostgreSQL add
    /// up their run summary.
    fn run_stats(&self, since_ms: u64, bucket_ms: u64) -> Result<RunStats, StoreError> {
        Ok(run_stats::stats_of_all(&self.runs()?, since_ms, bucket_ms))
    }

    /// The run's own transitions with `from <= seq <= to`, in order (a fork's inherited
    /// prefix is its parent's; see `history`).
    fn transitions(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TransitionRecord>, StoreError>;

    /// The newest snapshot of the run's own with `seq <= at`: `(seq, state JSON)`.
    fn snapshot_at_or_before(
        &self,
        run: &RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError>;

    /// The newest receipt seal of the run's own transitions with `seq <= at`: `(seq, seal)`.
    fn last_seal(&self, run: &RunId, at: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError>;

    /// A blob by digest.
    fn blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError>;

    /// The conversation node stored under `head` and the nodes before it, newest first: each
    /// node's first 32 bytes name the one before it, and the walk stops at a node naming
    /// [`Digest::ZERO`], at a digest with no blob, or after `len` nodes. Each blob is as
    /// [`blob`](Self::blob) returns it, under its digest; nothing is checked here
    /// (`ledger::conversation` checks every node against its digest and the count against the
    /// state's).
    ///
    /// Call it to read a whole conversation: a resumed run's, the messages of a request `show`
    /// prints. The default reads node by node through [`blob`](Self::blob) (one read per
    /// message); SQLite and PostgreSQL walk the chain in the database, in a fixed number of
    /// queries whatever the length.
    fn conversation_nodes(
        &self,
        head: &Digest,
        len: u64,
    ) -> Result<Vec<(Digest, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        let mut at = *head;
        while at != Digest::ZERO && (out.len() as u64) < len {
            let Some(bytes) = self.blob(&at)? else { break };
            let prev = crate::format::stored::node_parts(&bytes).map(|(prev, _)| prev);
            out.push((at, bytes));
            match prev {
                Some(prev) => at = prev,
                None => break,
            }
        }
        Ok(out)
    }

    /// Outbox rows of the run that are not done.
    fn open_effects(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError>;

    /// Every outbox row of the run, done or not, in `(seq, index)` order (for `verify`).
    fn outbox(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError>;

    /// The run's own snapshots with `from <= seq <= to`, in order: `(seq, state JSON)` (for
    /// `verify`).
    fn snapshots(&self, run: &RunId, from: u64, to: u64)
    -> Result<Vec<(u64, Vec<u8>)>, StoreError>;

    /// The run's sealed head; `None` when it has none (a damaged database).
    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError>;

    /// The runs of session `name`, in order: `(index, run)`; empty for no such session.
    fn session_runs(&self, name: &str) -> Result<Vec<(u64, RunId)>, StoreError>;

    /// Every session, by name.
    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;

    /// The session place the store gives `run`, if any (for `verify`).
    fn session_of(&self, run: &RunId) -> Result<Option<SessionLink>, StoreError>;

    /// A read-only view whose reads all see the store as it is now, while writes go on: for a
    /// check that reads many rows of a run another process may be driving (`verify`, the check
    /// before a run is continued). `None` when this store has no such view; then reads are
    /// made on the store itself.
    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        Ok(None)
    }

    /// True when this is a [`snapshot`](Store::snapshot) view whose connection to the database
    /// was lost after it was taken (the server restarted or went away): its reads since then
    /// failed, so a check made through it proves nothing either way and is to be made again on
    /// a new view — which, on a store told to wait for its database, waits for it. Always
    /// false for a store that is not such a view.
    fn view_lost(&self) -> bool {
        false
    }

    /// The rows of global memory `name` in `(key, version)` order: every version, or with
    /// `latest_only` each key's latest (what runs load). Empty for a memory never written.
    fn memory_rows(&self, name: &str, latest_only: bool) -> Result<Vec<GlobalRow>, StoreError>;

    /// The global memory rows the `PublishMemory` effect at `effect` of `run` wrote, in
    /// `(key, version)` order (empty when it wrote none).
    fn memory_published(
        &self,
        run: &RunId,
        effect: EffectRef,
    ) -> Result<Vec<GlobalRow>, StoreError>;

    /// The name of every global memory with a row, in order.
    fn memory_names(&self) -> Result<Vec<String>, StoreError>;

    /// Every removal record (`runtape memory rm`), in id order.
    fn memory_removals(&self) -> Result<Vec<RemovalRecord>, StoreError>;

    /// Every tombstone of a pruned run ([`retention`]), in id order; empty when none was
    /// pruned (a store that cannot prune has none).
    fn tombstones(&self) -> Result<Vec<retention::TombstoneRecord>, StoreError> {
        Ok(Vec::new())
    }

    /// The blobs a prune of exactly `runs` would remove: those only they refer to
    /// ([`retention`]). Reads only (`runtape prune --dry-run`); a store that cannot prune
    /// frees none.
    fn blobs_only_of(&self, runs: &[RunId]) -> Result<retention::BlobsFreed, StoreError> {
        let _ = runs;
        Ok(retention::BlobsFreed::default())
    }

    /// Bytes the store occupies (for measurements).
    fn size_bytes(&self) -> Result<u64, StoreError>;

    /// The database's schedules (`runtape schedule`); `None` from a store that keeps none
    /// (in memory, PostgreSQL for now).
    fn schedules(&self) -> Option<Box<dyn schedules::ScheduleBook>> {
        None
    }
}

/// Submits `write` and waits for it to be durable.
pub async fn write(store: &dyn Store, write: Write) -> Result<Written, StoreError> {
    store.submit(write).await.unwrap_or(Err(StoreError::Closed))
}
