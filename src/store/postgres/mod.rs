//! The PostgreSQL store: runs in a database that many processes on many machines share —
//! `runtape worker`s and every other command — with SQLite's guarantees.
//!
//! - **Group commit.** One writer task per process owns one connection and commits every
//!   queued write of every run of the process in one transaction per batch; a write is
//!   acknowledged only after its transaction committed (`writer.rs`).
//! - **Fencing.** Every commit, outbox mark, renewal and release checks the run's lease epoch
//!   in the same transaction, with the run's row locked: a process whose lease was taken over
//!   writes nothing and stops driving the run.
//! - **The database's clock.** Lease expiries are set and compared on the server's clock
//!   (`runtape.now_ms()`), never a worker's; a run's row reports its lease expiry on the reading
//!   process's clock (`now + time left`), so clocks that disagree do not matter.
//! - **Reads** are the [`Store`] trait's blocking calls: each runs on the store's own runtime
//!   (threads of its own) on a pooled connection, while the calling thread waits, as it does
//!   for a SQLite read. [`Store::snapshot`] is a `REPEATABLE READ` transaction.
//! - **Schema** `runtape`, versioned and migrated like SQLite's (`schema.rs`); the layout is
//!   SQLite's, so storage per transition stays flat.
//! - **Workers** claim runs with `FOR UPDATE SKIP LOCKED` (`queue.rs`).
//! - **An unreachable database** (down, restarting, the network cut) fails a call at once,
//!   unless the store was told to wait for it ([`PostgresStore::wait_for_database`], as
//!   `runtape worker` does): then reads and writes try again with backoff. A write that
//!   reaches the database after another process took its run over is refused by the lease
//!   epoch like any other (`reconnect.rs`).
//!
//! The URL is `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (the password may come from
//! `$PGPASSWORD` instead). **TLS** follows libpq: `sslmode` (`disable`, `allow`, `prefer` — the
//! default —, `require`, `verify-ca`, `verify-full`), `sslrootcert` (a CA file, or `system`),
//! `sslcert` and `sslkey`, in the URL (`…/db?sslmode=verify-full&sslrootcert=/etc/ca.pem`) or
//! in `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`; rustls with the `ring`
//! provider. What each mode does and where runtape differs from libpq: `tls.rs`; how a
//! connection is made and a refused one is said: `tls_connect.rs`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, mpsc, oneshot};

use super::{
    Ack, CommitStats, Durable, HeadRecord, LeaseRecord, OutboxRecord, RunPage, RunQuery, RunRecord,
    RunStats, Store, StoreError, TransitionRecord, Write,
};
use crate::machine::{Digest, RunId};

mod conn;
mod global_memory;
mod import;
mod lanes;
mod queue;
mod read;
mod reconnect;
mod retention;
mod run_summary;
mod schedules;
mod schema;
mod sessions;
mod tls;
mod tls_connect;
mod tls_files;
mod tls_verify;
mod writer;

use conn::{Backend, Conn, Pooled, Target};
pub use conn::{display_url, is_postgres_url};
pub use queue::{Claim, WorkerInfo, WorkerRecord};
use read::ReadError;
pub use schema::PG_SCHEMA_VERSION;

/// Reads made at once by one process (each on its own connection), unless it asks for more
/// ([`PostgresStore::allow_reads`]).
const MAX_READS: usize = 8;

/// The most reads one process may make at once, whatever it asks for: each is a connection,
/// and every worker process holds this many besides its writer's (PostgreSQL allows 100
/// connections unless configured otherwise).
const MOST_READS: usize = 24;

/// A runtape database in PostgreSQL.
pub struct PostgresStore {
    backend: Arc<Backend>,
    jobs: mpsc::UnboundedSender<writer::Job>,
    stats: Arc<CommitStats>,
    /// For a read-only view: the connection holding its `REPEATABLE READ` transaction.
    view: Option<Arc<AsyncMutex<Pooled>>>,
    /// For a view: set once a read finds its connection lost ([`Store::view_lost`]).
    lost: Arc<AtomicBool>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("db", &self.backend.shown())
            .finish_non_exhaustive()
    }
}

/// A connection for one read: a pooled one, or the view's.
enum Held {
    Pooled(Box<Pooled>),
    View(OwnedMutexGuard<Pooled>),
}

impl std::ops::Deref for Held {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        match self {
            Held::Pooled(p) => p,
            Held::View(g) => g,
        }
    }
}

impl PostgresStore {
    /// Hands `write` to the writer task; `durable` is told when its transaction committed.
    fn queue(&self, write: Write, durable: Option<Durable>) -> Ack {
        let (tx, rx) = oneshot::channel();
        let queued = crate::clock::wall_ms();
        if let Err(mpsc::error::SendError((_, _, tx, _))) =
            self.jobs.send((write, queued, tx, durable))
        {
            let _ = tx.send(Err(StoreError::Closed));
        }
        rx
    }

    /// Connects to the database at `url`, creating or upgrading runtape's schema when it is
    /// older than this runtape's (first use needs a role that may create tables; see
    /// [`migrate`](Self::migrate)). A database written by a newer runtape, a URL that does not
    /// parse or a server that cannot be reached is an error, and nothing is written.
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let store = Self::connect(url)?;
        let backend = store.backend.clone();
        store.backend.block_on(async move {
            let conn = backend.get().await?;
            schema::migrate(&conn, backend.shown()).await
        })?;
        Ok(store)
    }

    /// Opens the database at `url` as [`open`](Self::open) does, waiting for it while it
    /// cannot be reached (the server is down or starting up, the network to it is cut):
    /// `waiting` is told each failed attempt and how long until the next, the waits doubling
    /// from 100 ms to 5 s. Returns once the database answers, or at the first error that
    /// waiting would not cure (a malformed URL, a refused password, an unknown database, TLS).
    /// Waits for ever: a caller that must stop drops the future.
    pub async fn open_when_reachable(
        url: &str,
        mut waiting: impl FnMut(&StoreError, std::time::Duration),
    ) -> Result<PostgresStore, StoreError> {
        let store = Self::connect(url)?;
        let mut backoff = reconnect::Backoff::default();
        loop {
            let backend = store.backend.clone();
            let opened = store
                .backend
                .run(async move {
                    let conn = match backend.connect_once().await {
                        Ok(conn) => conn,
                        Err(f) => return Ok(Err(f)),
                    };
                    schema::migrate(&conn, backend.shown()).await?;
                    Ok(Ok(()))
                })
                .await?;
            match opened {
                Ok(()) => return Ok(store),
                Err(f) if f.unreachable => {
                    let wait = backoff.next_wait();
                    waiting(&f.error, wait);
                    crate::clock::system().sleep(wait).await;
                }
                Err(f) => return Err(f.error),
            }
        }
    }

    /// From now on, a read or a write that finds the database unreachable (down, restarting,
    /// the network cut) tries again with backoff for up to `up_to` before it fails, instead
    /// of failing at once. For a long-running process whose runs should ride out a restart or
    /// a short partition (`runtape worker`); a write that arrives after another process took
    /// its run over is still refused by the lease epoch. The worker's claims and heartbeats
    /// never wait.
    pub fn wait_for_database(&self, up_to: std::time::Duration) {
        self.backend.set_patience(up_to);
    }

    /// Creates or upgrades runtape's schema in the database at `url`; returns the versions
    /// before and after. Safe to run from many processes at once (they take turns).
    pub fn migrate(url: &str) -> Result<(i64, i64), StoreError> {
        let store = Self::connect(url)?;
        let backend = store.backend.clone();
        let before = store.backend.block_on(async move {
            let conn = backend.get().await?;
            schema::migrate(&conn, backend.shown()).await
        })?;
        Ok((before, PG_SCHEMA_VERSION))
    }

    fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let target = Target::parse(url)?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(CommitStats::default());
        let counters = stats.clone();
        let mut made = None;
        conn::start_runtime(|handle| {
            let backend = Arc::new(Backend::new(target, handle, MAX_READS));
            made = Some(backend.clone());
            writer::writer_loop(backend, rx, counters)
        })?;
        let backend = made.ok_or(StoreError::Closed)?;
        Ok(PostgresStore {
            backend,
            jobs,
            stats,
            view: None,
            lost: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Lets up to `n` reads run at once (each on a connection of its own, kept for reuse),
    /// between the default of 8 and 24. For a process that drives many runs at once and takes
    /// them up together (`runtape worker --concurrency N`): each take-up reads its run's
    /// history, and with fewer connections than runs the take-ups wait for each other.
    pub fn allow_reads(&self, n: usize) {
        self.backend.allow_reads(n.clamp(MAX_READS, MOST_READS));
    }

    /// The database URL as messages show it (without a password).
    pub fn shown(&self) -> &str {
        self.backend.shown()
    }

    /// How many writes shared how many transactions so far.
    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }

    /// A view of the database as it is now: a `REPEATABLE READ` transaction held open for as
    /// long as the view lives. Writes submitted through it go to this store's writer. Opening
    /// one waits for the database as the store's reads do ([`wait_for_database`]), also when
    /// the connection it was given turns out to have been lost (a restart ended it).
    ///
    /// [`wait_for_database`]: Self::wait_for_database
    pub fn read_snapshot(&self) -> Result<PostgresStore, StoreError> {
        let backend = self.backend.clone();
        let conn = self.backend.block_on(async move {
            let began = crate::clock::stopwatch();
            let mut backoff = reconnect::Backoff::default();
            loop {
                let mut conn = backend.get_for_view().await?;
                // The snapshot is taken by the first statement, not by BEGIN.
                let begun = conn
                    .client()
                    .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1")
                    .await;
                match begun {
                    Ok(()) => {
                        conn.in_transaction();
                        return Ok(conn);
                    }
                    // A pooled connection the server ended: another, once it can be reached.
                    Err(e)
                        if reconnect::unreachable(&e)
                            && began.elapsed() + backoff.peek() <= backend.patience() =>
                    {
                        drop(conn);
                        crate::clock::system().sleep(backoff.next_wait()).await;
                    }
                    Err(e) => return Err(schema::classify(backend.shown(), &e)),
                }
            }
        })?;
        Ok(PostgresStore {
            backend: self.backend.clone(),
            jobs: self.jobs.clone(),
            stats: self.stats.clone(),
            view: Some(Arc::new(AsyncMutex::new(conn))),
            lost: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Runs `f` on a connection (the view's, or a pooled one) on the store's runtime, and waits.
    fn read<T, F, Fut>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Held) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ReadError>> + Send,
    {
        let backend = self.backend.clone();
        let view = self.view.clone();
        let lost = self.lost.clone();
        self.backend.block_on(async move {
            let conn = match view {
                Some(v) => Held::View(v.lock_owned().await),
                None => Held::Pooled(Box::new(backend.get().await?)),
            };
            let in_view = matches!(conn, Held::View(_));
            f(conn).await.map_err(|e| match e {
                ReadError::Db(e) => {
                    if in_view && reconnect::unreachable(&e) {
                        lost.store(true, Ordering::Relaxed);
                    }
                    schema::classify(backend.shown(), &e)
                }
                ReadError::Store(e) => e,
            })
        })
    }
}

impl Store for PostgresStore {
    fn submit(&self, write: Write) -> Ack {
        self.queue(write, None)
    }

    fn submit_timed(&self, write: Write, durable: Durable) -> Ack {
        self.queue(write, Some(durable))
    }

    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        let id = id.clone();
        self.read(move |c| async move { read::run(&c, &id).await })
    }

    fn run_without_setup(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        let id = id.clone();
        self.read(move |c| async move { read::run_without_setup(&c, &id).await })
    }

    fn leases(&self, runs: &[RunId]) -> Result<Vec<LeaseRecord>, StoreError> {
        let ids: Vec<String> = runs.iter().map(|r| r.as_str().to_owned()).collect();
        self.read(move |c| async move { read::leases(&c, &ids).await })
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.read(move |c| async move { read::runs(&c).await })
    }

    fn run_page(&self, q: &RunQuery, now_ms: u64) -> Result<RunPage, StoreError> {
        let q = q.clone();
        self.read(move |c| async move { run_summary::page(&c, &q, now_ms).await })
    }

    fn run_stats(&self, since_ms: u64, bucket_ms: u64) -> Result<RunStats, StoreError> {
        self.read(move |c| async move { run_summary::stats(&c, since_ms, bucket_ms).await })
    }

    fn transitions(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::transitions(&c, &run, from, to).await })
    }

    fn snapshot_at_or_before(
        &self,
        run: &RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::snapshot_at_or_before(&c, &run, at).await })
    }

    fn last_seal(&self, run: &RunId, at: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::last_seal(&c, &run, at).await })
    }

    fn blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        let digest = *digest;
        self.read(move |c| async move { read::blob(&c, &digest).await })
    }

    fn conversation_nodes(
        &self,
        head: &Digest,
        len: u64,
    ) -> Result<Vec<(Digest, Vec<u8>)>, StoreError> {
        let head = *head;
        self.read(move |c| async move { read::conversation_nodes(&c, &head, len).await })
    }

    fn open_effects(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::outbox(&c, &run, true).await })
    }

    fn outbox(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::outbox(&c, &run, false).await })
    }

    fn snapshots(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::snapshots(&c, &run, from, to).await })
    }

    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { read::head(&c, &run).await })
    }

    fn session_runs(&self, name: &str) -> Result<Vec<(u64, RunId)>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| async move { Ok(sessions::runs_of(&c, &name).await?) })
    }

    fn sessions(&self) -> Result<Vec<crate::store::SessionRecord>, StoreError> {
        self.read(move |c| async move { Ok(sessions::all(&c).await?) })
    }

    fn session_of(&self, run: &RunId) -> Result<Option<crate::store::SessionLink>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { Ok(sessions::of(&c, &run).await?) })
    }

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        Ok(Some(Box::new(self.read_snapshot()?)))
    }

    fn view_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    fn memory_rows(
        &self,
        name: &str,
        latest_only: bool,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| async move { global_memory::memory_rows(&c, &name, latest_only).await })
    }

    fn memory_published(
        &self,
        run: &RunId,
        effect: crate::machine::EffectRef,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        let run = run.clone();
        self.read(move |c| async move { global_memory::memory_published(&c, &run, effect).await })
    }

    fn memory_names(&self) -> Result<Vec<String>, StoreError> {
        self.read(move |c| async move { global_memory::memory_names(&c).await })
    }

    fn memory_removals(&self) -> Result<Vec<super::RemovalRecord>, StoreError> {
        self.read(move |c| async move { global_memory::memory_removals(&c).await })
    }

    fn tombstones(&self) -> Result<Vec<super::retention::TombstoneRecord>, StoreError> {
        self.read(move |c| async move { retention::tombstones(&c).await })
    }

    fn blobs_only_of(&self, runs: &[RunId]) -> Result<super::retention::BlobsFreed, StoreError> {
        let runs: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
        self.read(move |c| async move { retention::blobs_only_of(&c, &runs).await })
    }

    fn size_bytes(&self) -> Result<u64, StoreError> {
        self.read(move |c| async move { read::size_bytes(&c).await })
    }

    fn schedules(&self) -> Option<Box<dyn super::schedules::ScheduleBook>> {
        Some(Box::new(schedules::PgSchedules {
            backend: self.backend.clone(),
        }))
    }
}
