//! The ledger: a run's stored record, owned in one place.
//!
//! Everything runtape keeps about a run goes through this module; the bytes it is kept in are
//! [`crate::format`]'s, below both the ledger and the stores:
//!
//! - **What is written** ([`codec`], [`Recorder`]): each transition a driver makes becomes one
//!   [`Commit`](crate::store::Commit) — the event and its effects as stored bytes, the state
//!   hash, the hash-chain link, the conversation nodes it appends (content-addressed blobs), a
//!   snapshot every [`SNAPSHOT_EVERY`](crate::store::SNAPSHOT_EVERY) transitions, the outbox
//!   rows of non-idempotent calls, and the seal of the receipt of the answer it carries.
//! - **What answered what** ([`pairing`]): the one pairing of each effect with the event that
//!   answered it, used by the driver, `verify`, receipts, the timeline, the cassette export and
//!   a fork's tape.
//! - **The sealed head** ([`head`]): what a run is and where its history ends, sealed with every
//!   write that changes either.
//! - **What a command may act on** ([`check_continuable`]): before anything drives, forks,
//!   answers or cancels a stored run, what it acts on is checked the way `verify` checks it,
//!   from the newest snapshot before it (incrementally, not the whole history).
//! - **What is read back** ([`read`]): a run's row, its history across fork ancestry, its state
//!   at any step (snapshot plus fold), its conversations.
//! - **What is verified** ([`verify()`], [`coverage`]): every stored column of every table is
//!   either recomputed by `verify` or listed as operational with the reason; the list is
//!   [`coverage::COLUMNS`], and `tests/it/verify/coverage.rs` fails on a stored column it does not
//!   name, so a new stored field cannot be added without deciding how it is verified.
//!
//! The edge names stored in `transitions.edge` are part of this format: they are the persisted
//! names of [`EdgeId`](crate::machine::EdgeId), which never change once released.

pub mod codec;
pub mod coverage;
pub mod fork_view;
pub mod head;
pub mod pairing;
pub mod read;
pub mod tree;

mod audit;
mod continuable;
mod memory_audit;
mod receipts;
mod recorder;
mod replay;
mod session;
mod tail;
mod verify;

pub use codec::EncodeError;
pub use continuable::{ActFrom, Continuable, check_continuable, check_identity};
pub use fork_view::{AncestorLoad, ancestor_load, first_event};
pub use head::{HeadKeeper, first_head};
pub use pairing::{Issued, Outstanding, Paired, answered, pairs};
pub use read::{
    Rebuilt, Segment, ancestry, conversation, conversations, effect_at, event_at,
    outstanding_effects, record, row, spec_of, state_at, time_at, transitions,
};
pub use receipts::{
    ReceiptSummary, anchor_under, chain_tip, check_receipts, delegation_anchor, receipt_draft,
    receipts, receipts_export, receipts_export_tree,
};
pub use recorder::{CommitTimes, RecordError, Recorder, outbox_rows, outcome_text};
pub use replay::{Divergence, Recorded, replay, replay_from, replay_with};
pub use tree::{
    NamedChild, TreeChild, TreeRun, check_named, check_proof, child_proof, children,
    named_children, path_of, tree,
};
pub use verify::{HeadSummary, Verified, verify};

use crate::machine::RunId;
use crate::store::StoreError;

/// Reading a run's record failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such run.
    #[error("no run with id `{0}`; `runtape ls` lists the runs in this database")]
    UnknownRun(String),
    /// The seq is not in the run's history.
    #[error("run {run} has steps 1..={latest}; there is no step {seq}")]
    SeqOutOfRange {
        /// The run.
        run: String,
        /// The seq asked for.
        seq: u64,
        /// The latest seq.
        latest: u64,
    },
    /// A stored run does not verify (its record is not what its head sealed): refused
    /// before anything is executed. `detail` is `verify`'s own line.
    #[error(
        "run {run} does not verify: {detail}; nothing was done with it (`runtape verify {run}` reports the same)"
    )]
    Tampered {
        /// The run.
        run: String,
        /// What does not match (names the column or seq).
        detail: String,
    },
    /// The run's head is sealed with another key (or mode) than the one given.
    #[error("{0}")]
    WrongKey(String),
    /// Stored history does not replay to what was stored: damage or a machine change.
    #[error("run {run} step {seq}: {detail}")]
    Diverged {
        /// The run.
        run: String,
        /// The first bad seq.
        seq: u64,
        /// Expected vs found.
        detail: String,
    },
}

pub(crate) fn damaged(run: &RunId, seq: u64, detail: impl Into<String>) -> HistoryError {
    HistoryError::Diverged {
        run: run.to_string(),
        seq,
        detail: detail.into(),
    }
}
