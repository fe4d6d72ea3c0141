//! [`forward_store_reads!`](crate::forward_store_reads): the read methods of [`Store`] for a
//! store that wraps another and changes only how writes go — timing them
//! ([`TimedStore`](super::TimedStore)), failing a chosen one as a crash would (the crash
//! tests), counting or logging them.
//!
//! [`Store`]: super::Store

/// Writes every read method of [`Store`](crate::store::Store) except `snapshot` as the same
/// call on `self.$inner` (an `Arc<dyn Store>` or anything that derefs to a store), inside an
/// `impl Store for …` block that writes `submit` itself. `snapshot` is left out so a wrapper
/// chooses: keep the trait's default (reads go through the wrapper) or forward it too.
///
/// `forward_store_reads!(inner, but blobs)` leaves out `blob` and `conversation_nodes` too,
/// for a wrapper that watches which blobs are read (`runtape export` collects what `verify`
/// reads that way).
///
/// When the trait gains a read method, this macro gains it, and every wrapper gets it.
///
/// ```
/// use std::sync::Arc;
/// use runtape::store::{Ack, MemoryStore, Store, Write};
///
/// /// Counts the writes it passes on.
/// struct Counting {
///     inner: Arc<dyn Store>,
///     writes: std::sync::atomic::AtomicUsize,
/// }
///
/// impl Store for Counting {
///     fn submit(&self, write: Write) -> Ack {
///         self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         self.inner.submit(write)
///     }
///     runtape::forward_store_reads!(inner);
/// }
///
/// let store = Counting { inner: Arc::new(MemoryStore::new()), writes: Default::default() };
/// assert!(store.runs().expect("reads").is_empty());
/// ```
#[macro_export]
macro_rules! forward_store_reads {
    ($inner:ident) => {
        $crate::forward_store_reads!($inner, but blobs);
        fn blob(
            &self,
            digest: &$crate::machine::Digest,
        ) -> Result<Option<Vec<u8>>, $crate::store::StoreError> {
            self.$inner.blob(digest)
        }
        fn conversation_nodes(
            &self,
            head: &$crate::machine::Digest,
            len: u64,
        ) -> Result<Vec<($crate::machine::Digest, Vec<u8>)>, $crate::store::StoreError> {
            self.$inner.conversation_nodes(head, len)
        }
    };
    ($inner:ident, but blobs) => {
        fn packs_heads(&self) -> bool {
            self.$inner.packs_heads()
        }
        fn run(
            &self,
            id: &$crate::machine::RunId,
        ) -> Result<Option<$crate::store::RunRecord>, $crate::store::StoreError> {
            self.$inner.run(id)
        }
        fn run_without_setup(
            &self,
            id: &$crate::machine::RunId,
        ) -> Result<Option<$crate::store::RunRecord>, $crate::store::StoreError> {
            self.$inner.run_without_setup(id)
        }
        fn leases(
            &self,
            runs: &[$crate::machine::RunId],
        ) -> Result<Vec<$crate::store::LeaseRecord>, $crate::store::StoreError> {
            self.$inner.leases(runs)
        }
        fn runs(&self) -> Result<Vec<$crate::store::RunRecord>, $crate::store::StoreError> {
            self.$inner.runs()
        }
        fn run_page(
            &self,
            q: &$crate::store::RunQuery,
            now_ms: u64,
        ) -> Result<$crate::store::RunPage, $crate::store::StoreError> {
            self.$inner.run_page(q, now_ms)
        }
        fn run_stats(
            &self,
            since_ms: u64,
            bucket_ms: u64,
        ) -> Result<$crate::store::RunStats, $crate::store::StoreError> {
            self.$inner.run_stats(since_ms, bucket_ms)
        }
        fn transitions(
            &self,
            run: &$crate::machine::RunId,
            from: u64,
            to: u64,
        ) -> Result<Vec<$crate::store::TransitionRecord>, $crate::store::StoreError> {
            self.$inner.transitions(run, from, to)
        }
        fn snapshot_at_or_before(
            &self,
            run: &$crate::machine::RunId,
            at: u64,
        ) -> Result<Option<(u64, Vec<u8>)>, $crate::store::StoreError> {
            self.$inner.snapshot_at_or_before(run, at)
        }
        fn last_seal(
            &self,
            run: &$crate::machine::RunId,
            at: u64,
        ) -> Result<Option<(u64, Vec<u8>)>, $crate::store::StoreError> {
            self.$inner.last_seal(run, at)
        }
        fn open_effects(
            &self,
            run: &$crate::machine::RunId,
        ) -> Result<Vec<$crate::store::OutboxRecord>, $crate::store::StoreError> {
            self.$inner.open_effects(run)
        }
        fn outbox(
            &self,
            run: &$crate::machine::RunId,
        ) -> Result<Vec<$crate::store::OutboxRecord>, $crate::store::StoreError> {
            self.$inner.outbox(run)
        }
        fn snapshots(
            &self,
            run: &$crate::machine::RunId,
            from: u64,
            to: u64,
        ) -> Result<Vec<(u64, Vec<u8>)>, $crate::store::StoreError> {
            self.$inner.snapshots(run, from, to)
        }
        fn head(
            &self,
            run: &$crate::machine::RunId,
        ) -> Result<Option<$crate::store::HeadRecord>, $crate::store::StoreError> {
            self.$inner.head(run)
        }
        fn session_runs(
            &self,
            name: &str,
        ) -> Result<Vec<(u64, $crate::machine::RunId)>, $crate::store::StoreError> {
            self.$inner.session_runs(name)
        }
        fn sessions(&self) -> Result<Vec<$crate::store::SessionRecord>, $crate::store::StoreError> {
            self.$inner.sessions()
        }
        fn session_of(
            &self,
            run: &$crate::machine::RunId,
        ) -> Result<Option<$crate::store::SessionLink>, $crate::store::StoreError> {
            self.$inner.session_of(run)
        }
        fn memory_rows(
            &self,
            name: &str,
            latest_only: bool,
        ) -> Result<Vec<$crate::store::GlobalRow>, $crate::store::StoreError> {
            self.$inner.memory_rows(name, latest_only)
        }
        fn memory_published(
            &self,
            run: &$crate::machine::RunId,
            effect: $crate::machine::EffectRef,
        ) -> Result<Vec<$crate::store::GlobalRow>, $crate::store::StoreError> {
            self.$inner.memory_published(run, effect)
        }
        fn memory_names(&self) -> Result<Vec<String>, $crate::store::StoreError> {
            self.$inner.memory_names()
        }
        fn tombstones(
            &self,
        ) -> Result<Vec<$crate::store::retention::TombstoneRecord>, $crate::store::StoreError> {
            self.$inner.tombstones()
        }
        fn memory_removals(
            &self,
        ) -> Result<Vec<$crate::store::RemovalRecord>, $crate::store::StoreError> {
            self.$inner.memory_removals()
        }
        fn size_bytes(&self) -> Result<u64, $crate::store::StoreError> {
            self.$inner.size_bytes()
        }
        fn schedules(&self) -> Option<Box<dyn $crate::store::schedules::ScheduleBook>> {
            self.$inner.schedules()
        }
    };
}
