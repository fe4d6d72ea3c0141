//! A run written whole into a store as another store holds it (`runtape import`): its row,
//! sealed head, transitions, snapshots, outbox rows, session place and the blobs it reads.
//!
//! Nothing here is checked: the caller verifies the run first (`ops::archive` imports it into
//! a [`super::MemoryStore`] and runs `verify` there). A store writes an [`ImportedRun`] in one
//! transaction ([`super::Write::Import`]): when a run with its id exists already it writes
//! nothing — successfully when the stored head is the same, else
//! [`StoreError::ImportConflict`](super::StoreError::ImportConflict).

use super::{HeadRecord, OutboxRecord, RunRecord, SessionLink, TransitionRecord};
use crate::machine::Digest;

/// One run to write whole.
#[derive(Clone, Debug)]
pub struct ImportedRun {
    /// Its row: written with no lease held and no control request, whatever these say.
    pub record: RunRecord,
    /// Its sealed head.
    pub head: HeadRecord,
    /// Its own transitions, in seq order (event and effects as plain JSON).
    pub transitions: Vec<TransitionRecord>,
    /// Its own snapshots: `(seq, state JSON)`.
    pub snapshots: Vec<(u64, Vec<u8>)>,
    /// Its outbox rows.
    pub outbox: Vec<OutboxRecord>,
    /// Its place in a session.
    pub session: Option<SessionLink>,
    /// The blobs it reads, as written (a store keeps the ones it holds already).
    pub blobs: Vec<(Digest, Vec<u8>)>,
}
