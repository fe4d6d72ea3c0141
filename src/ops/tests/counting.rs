//! A store that counts how often a run's state is rebuilt from its history (every rebuild,
//! [`crate::ledger::state_at`], starts by asking for the nearest snapshot, and nothing else
//! asks for one) and how many reads are made in all (each call of a read method: one query
//! of a database store). Reads and writes go to the real store it wraps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::machine::RunId;
use crate::store::{Ack, Store, Write};

/// A store over another that records, in order, the run of every snapshot lookup.
pub(super) struct Counting {
    inner: Arc<dyn Store>,
    rebuilt: Mutex<Vec<RunId>>,
    reads: AtomicUsize,
    rows: AtomicUsize,
    setups: AtomicUsize,
}

impl Counting {
    /// Counts the rebuilds made over `inner`.
    pub(super) fn over(inner: Arc<dyn Store>) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            rebuilt: Mutex::new(Vec::new()),
            reads: AtomicUsize::new(0),
            rows: AtomicUsize::new(0),
            setups: AtomicUsize::new(0),
        })
    }

    /// How often `run`'s state (or a fork's, through `run`'s history) has been rebuilt so far.
    pub(super) fn rebuilds(&self, run: &RunId) -> usize {
        crate::exec::lock(&self.rebuilt)
            .iter()
            .filter(|r| *r == run)
            .count()
    }

    /// How many reads (calls of a read method, whatever the run) have been made so far.
    pub(super) fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many transition rows all reads have returned so far (a read of the whole history
    /// is one read, but as many rows as the run has steps).
    pub(super) fn rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }

    /// How many whole run rows, setup included ([`Store::run`], not
    /// [`Store::run_without_setup`]), all reads have returned so far.
    pub(super) fn setups(&self) -> usize {
        self.setups.load(Ordering::Relaxed)
    }

    fn note(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }
}

impl Store for Counting {
    fn submit(&self, write: Write) -> Ack {
        self.inner.submit(write)
    }

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, crate::store::StoreError> {
        // No separate view: every read comes through here and is counted.
        Ok(None)
    }

    fn packs_heads(&self) -> bool {
        self.inner.packs_heads()
    }
    fn run(
        &self,
        id: &crate::machine::RunId,
    ) -> Result<Option<crate::store::RunRecord>, crate::store::StoreError> {
        self.note();
        self.setups.fetch_add(1, Ordering::Relaxed);
        self.inner.run(id)
    }
    fn run_without_setup(
        &self,
        id: &crate::machine::RunId,
    ) -> Result<Option<crate::store::RunRecord>, crate::store::StoreError> {
        self.note();
        self.inner.run_without_setup(id)
    }
    fn leases(
        &self,
        runs: &[crate::machine::RunId],
    ) -> Result<Vec<crate::store::LeaseRecord>, crate::store::StoreError> {
        self.note();
        self.inner.leases(runs)
    }
    fn runs(&self) -> Result<Vec<crate::store::RunRecord>, crate::store::StoreError> {
        self.note();
        self.inner.runs()
    }
    fn transitions(
        &self,
        run: &crate::machine::RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<crate::store::TransitionRecord>, crate::store::StoreError> {
        self.note();
        let rows = self.inner.transitions(run, from, to)?;
        self.rows.fetch_add(rows.len(), Ordering::Relaxed);
        Ok(rows)
    }
    fn snapshot_at_or_before(
        &self,
        run: &crate::machine::RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, crate::store::StoreError> {
        crate::exec::lock(&self.rebuilt).push(run.clone());
        self.note();
        self.inner.snapshot_at_or_before(run, at)
    }
    fn last_seal(
        &self,
        run: &crate::machine::RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, crate::store::StoreError> {
        self.note();
        self.inner.last_seal(run, at)
    }
    fn blob(
        &self,
        digest: &crate::machine::Digest,
    ) -> Result<Option<Vec<u8>>, crate::store::StoreError> {
        self.note();
        self.inner.blob(digest)
    }
    fn conversation_nodes(
        &self,
        head: &crate::machine::Digest,
        len: u64,
    ) -> Result<Vec<(crate::machine::Digest, Vec<u8>)>, crate::store::StoreError> {
        self.note();
        self.inner.conversation_nodes(head, len)
    }
    fn open_effects(
        &self,
        run: &crate::machine::RunId,
    ) -> Result<Vec<crate::store::OutboxRecord>, crate::store::StoreError> {
        self.note();
        self.inner.open_effects(run)
    }
    fn outbox(
        &self,
        run: &crate::machine::RunId,
    ) -> Result<Vec<crate::store::OutboxRecord>, crate::store::StoreError> {
        self.note();
        self.inner.outbox(run)
    }
    fn snapshots(
        &self,
        run: &crate::machine::RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, crate::store::StoreError> {
        self.note();
        self.inner.snapshots(run, from, to)
    }
    fn head(
        &self,
        run: &crate::machine::RunId,
    ) -> Result<Option<crate::store::HeadRecord>, crate::store::StoreError> {
        self.note();
        self.inner.head(run)
    }
    fn session_runs(
        &self,
        name: &str,
    ) -> Result<Vec<(u64, crate::machine::RunId)>, crate::store::StoreError> {
        self.note();
        self.inner.session_runs(name)
    }
    fn sessions(&self) -> Result<Vec<crate::store::SessionRecord>, crate::store::StoreError> {
        self.note();
        self.inner.sessions()
    }
    fn session_of(
        &self,
        run: &crate::machine::RunId,
    ) -> Result<Option<crate::store::SessionLink>, crate::store::StoreError> {
        self.note();
        self.inner.session_of(run)
    }
    fn memory_rows(
        &self,
        name: &str,
        latest_only: bool,
    ) -> Result<Vec<crate::store::GlobalRow>, crate::store::StoreError> {
        self.note();
        self.inner.memory_rows(name, latest_only)
    }
    fn memory_published(
        &self,
        run: &crate::machine::RunId,
        effect: crate::machine::EffectRef,
    ) -> Result<Vec<crate::store::GlobalRow>, crate::store::StoreError> {
        self.note();
        self.inner.memory_published(run, effect)
    }
    fn memory_names(&self) -> Result<Vec<String>, crate::store::StoreError> {
        self.note();
        self.inner.memory_names()
    }
    fn memory_removals(
        &self,
    ) -> Result<Vec<crate::store::RemovalRecord>, crate::store::StoreError> {
        self.note();
        self.inner.memory_removals()
    }
    fn size_bytes(&self) -> Result<u64, crate::store::StoreError> {
        self.note();
        self.inner.size_bytes()
    }
}
