//! Shared by in-process crash tests: a store that fails one chosen write as a crash would
//! stop the process there, so a test can resume on a fresh engine from exactly that point.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use runtape::machine::{Digest, EffectRef, RunId};
use runtape::store::{
    Ack, GlobalRow, HeadRecord, LeaseRecord, OutboxRecord, RemovalRecord, RunRecord, Store,
    StoreError, TransitionRecord, Write,
};

/// A store that refuses (as a crash would stop) the first write matching `crash`.
pub struct CrashOnce {
    pub inner: Arc<dyn Store>,
    pub crash: fn(&Write) -> bool,
    pub crashed: std::sync::atomic::AtomicBool,
}

impl Store for CrashOnce {
    fn submit(&self, write: Write) -> Ack {
        if (self.crash)(&write) && !self.crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let _ = tx.send(Err(StoreError::Io("injected crash".into())));
            return rx;
        }
        self.inner.submit(write)
    }
    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.inner.run(id)
    }
    fn leases(&self, runs: &[RunId]) -> Result<Vec<LeaseRecord>, StoreError> {
        self.inner.leases(runs)
    }
    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.runs()
    }
    fn transitions(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        self.inner.transitions(run, from, to)
    }
    fn snapshot_at_or_before(
        &self,
        run: &RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.inner.snapshot_at_or_before(run, at)
    }
    fn last_seal(&self, run: &RunId, at: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.inner.last_seal(run, at)
    }
    fn blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.blob(digest)
    }
    fn open_effects(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.inner.open_effects(run)
    }
    fn outbox(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.inner.outbox(run)
    }
    fn snapshots(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.inner.snapshots(run, from, to)
    }
    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError> {
        self.inner.head(run)
    }
    fn memory_rows(&self, name: &str, latest_only: bool) -> Result<Vec<GlobalRow>, StoreError> {
        self.inner.memory_rows(name, latest_only)
    }
    fn memory_published(
        &self,
        run: &RunId,
        effect: EffectRef,
    ) -> Result<Vec<GlobalRow>, StoreError> {
        self.inner.memory_published(run, effect)
    }
    fn memory_names(&self) -> Result<Vec<String>, StoreError> {
        self.inner.memory_names()
    }
    fn memory_removals(&self) -> Result<Vec<RemovalRecord>, StoreError> {
        self.inner.memory_removals()
    }
    fn session_runs(&self, name: &str) -> Result<Vec<(u64, RunId)>, StoreError> {
        self.inner.session_runs(name)
    }
    fn sessions(&self) -> Result<Vec<runtape::store::SessionRecord>, StoreError> {
        self.inner.sessions()
    }
    fn session_of(&self, run: &RunId) -> Result<Option<runtape::store::SessionLink>, StoreError> {
        self.inner.session_of(run)
    }
    fn size_bytes(&self) -> Result<u64, StoreError> {
        self.inner.size_bytes()
    }
}
