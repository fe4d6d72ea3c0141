//! The SQLite store: one writer thread owns the write connection and commits every queued
//! write of every run in one transaction per batch (group commit, `writer.rs`); reads use a
//! pool of read-only connections (`readers.rs`; WAL lets them read while the writer writes).
//! Reads are blocking calls: async callers make them off tokio's worker threads.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::schema::{self, classify, row_id};
use super::{
    Ack, Control, Durable, HeadRecord, LeaseRecord, OutboxRecord, OutboxStatus, RunPage, RunQuery,
    RunRecord, RunStats, RunStatus, Store, StoreError, TransitionRecord, Write,
};
use crate::format::packed::unpack;
use crate::format::packed_blob::{blob_source, unpack_blob};
use crate::format::packed_head::unpack_head;
use crate::format::stored::stored_edge;
use crate::machine::{Digest, EffectRef, Hlc, RunId, StateKind};

mod chain;
mod checkpoint;
mod global_memory;
mod import;
mod known;
pub mod priority;
mod readers;
mod retention;
mod run_stats;
pub(super) mod run_summary;
mod schedules;
mod sessions;
pub(super) mod space;
mod writer;

use readers::{Readers, open_reader};
use writer::Job;

/// How hard a commit waits for the disk. It belongs to the process's connection, not to the
/// file or a run: each process chooses when it opens the database (the guide's guarantees chapter, "Durability modes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: a commit is on disk when acknowledged (the WAL is fsynced at every
    /// commit), so neither a process crash nor a power loss loses it.
    #[default]
    Full,
    /// `synchronous=NORMAL` (opt-in): a commit is in the WAL, in the OS's cache, when
    /// acknowledged; the WAL is fsynced only at checkpoints. A process crash loses nothing
    /// acknowledged; a power loss or OS crash can lose the commits since the last checkpoint
    /// (never corrupting the database): their runs resume from an earlier step.
    Normal,
}

impl Durability {
    /// The mode a spec file or the command line names: `full` or `normal`; `None` otherwise.
    pub fn parse(name: &str) -> Option<Durability> {
        match name {
            "full" => Some(Durability::Full),
            "normal" => Some(Durability::Normal),
            _ => None,
        }
    }

    /// Its name in a spec file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::Normal => "normal",
        }
    }
}

/// The writer connection's settings for many runs at once (none changes what is durable when):
/// a 16 MiB page cache, large enough that a batch of a thousand commits neither spills dirty
/// pages into the WAL mid-transaction nor re-reads the pages it just wrote (SQLite's default
/// is 2 MiB; 32 MiB held 1.6 KiB more per run at 10,000 runs in flight, `runtape bench --only
/// w5 --runs 10000`, with wall and p99 the same within the noise over six interleaved
/// repetitions); temporary journals in memory rather than in a temporary file; and a WAL
/// checkpoint every 16 MiB of WAL rather than every 4 MiB, so a page written by many batches
/// is copied back once, not once per 4 MiB. (The checkpoints are made by a thread of their
/// own, `checkpoint.rs`, when it starts; this setting is what the writer falls back to when it
/// does not.)
const WRITER_PRAGMAS: &str =
    "PRAGMA cache_size = -16384; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 4000;";

/// Counts of the writer's work: how many writes shared how many transactions.
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Transactions committed (one fsync each at `synchronous=FULL`).
    pub transactions: AtomicU64,
    /// Writes acknowledged.
    pub writes: AtomicU64,
}

/// A runtape database in a SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    /// The writer thread, where its priority can be set ([`priority`]).
    writer: Option<priority::Thread>,
    /// The WAL checkpointer, where it runs on a thread of its own.
    checkpointer: Option<checkpoint::Watch>,
    jobs: mpsc::UnboundedSender<Job>,
    readers: Readers,
    stats: Arc<CommitStats>,
    durability: Durability,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if absent) the database at `path`. A file that is not a runtape
    /// database, one written by a newer runtape, or a path in a missing directory is an error
    /// and nothing is written.
    pub fn open(path: &Path, durability: Durability) -> Result<SqliteStore, StoreError> {
        Self::open_capped(path, durability, None)
    }

    /// Opens like [`open`](Self::open), and caps the database at about `max_bytes` (SQLite's
    /// `max_page_count`; never below its current size): a write that would grow it further
    /// fails with [`StoreError::Full`], exactly as on a full disk, and writes nothing. For
    /// quotas, and for testing what a full disk does.
    pub fn open_capped(
        path: &Path,
        durability: Durability,
        max_bytes: Option<u64>,
    ) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let mut conn = schema::open(path)?;
        schema::prepare(&mut conn, &shown, durability == Durability::Full)?;
        conn.execute_batch(WRITER_PRAGMAS)
            .map_err(|e| classify(&shown, e))?;
        // What the writer connection really does, read back rather than assumed.
        let synchronous: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(|e| classify(&shown, e))?;
        let durability = if synchronous >= 2 {
            Durability::Full
        } else {
            Durability::Normal
        };
        let mut cap_bytes = None;
        if let Some(max) = max_bytes {
            let page: i64 = conn
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .map_err(|e| classify(&shown, e))?;
            let pages = (max / page.max(1) as u64).clamp(1, i64::MAX as u64);
            // SQLite never sets it below the current size, and says what it set.
            let set: i64 = conn
                .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get(0)
                })
                .map_err(|e| classify(&shown, e))?;
            cap_bytes = Some(set.max(0) as u64 * page.max(1) as u64);
        }
        let reader = open_reader(path)?;
        // WAL checkpoints run on a thread of their own; without it the writer makes them.
        let checkpointer = checkpoint::Checkpointer::start(path, durability == Durability::Full);
        let watch = checkpointer.as_ref().map(checkpoint::Checkpointer::watch);
        if checkpointer.is_some() {
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")
                .map_err(|e| classify(&shown, e))?;
        }
        let file = space::DbFile {
            shown: shown.clone(),
            cap_bytes,
        };
        let (jobs, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(CommitStats::default());
        let counters = stats.clone();
        let (thread_to, thread) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("runtape-writer".into())
            .spawn(move || {
                let _ = thread_to.send(priority::this_thread());
                writer::writer_loop(conn, rx, file, &counters, checkpointer)
            })
            .map_err(|e| StoreError::Io(format!("cannot start the writer thread: {e}")))?;
        // The thread sends its id before anything else; `None` if it could not.
        let writer = thread.recv().ok().flatten();
        if let Some(w) = writer {
            priority::boost(w);
        }
        Ok(SqliteStore {
            writer,
            checkpointer: watch,
            path: path.to_owned(),
            jobs,
            readers: Readers::pool(reader),
            stats,
            durability,
        })
    }

    /// Opens an existing database; a missing file is an error rather than a new database.
    pub fn open_existing(path: &Path, durability: Durability) -> Result<SqliteStore, StoreError> {
        if !path.exists() {
            return Err(StoreError::Io(format!(
                "no database at {}; run something first, or point RUNTAPE_DB or --db at the right file",
                path.display()
            )));
        }
        Self::open(path, durability)
    }

    /// A view of the database as it is now: its own read-only connection holding one read
    /// transaction open for as long as the view lives. Writes submitted through it go to this
    /// store's writer.
    pub fn read_snapshot(&self) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            path: self.path.clone(),
            writer: self.writer,
            checkpointer: self.checkpointer.clone(),
            jobs: self.jobs.clone(),
            readers: Readers::snapshot(&self.path)?,
            stats: self.stats.clone(),
            durability: self.durability,
        })
    }

    /// The durability this store's writer commits with, as its connection reports it
    /// (`PRAGMA synchronous`, read back when the store was opened): it is fixed for as long as
    /// the store is open, whatever another process opens the same file with.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// How many writes shared how many transactions so far.
    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }

    /// The nice value the writer thread runs at (lower runs sooner; [`priority`]): the
    /// process's own unless the store could boost it, or [`Self::set_writer_nice`] changed it.
    /// `None` where a thread's priority is not its own (outside Linux).
    pub fn writer_nice(&self) -> Option<i32> {
        priority::nice_of(self.writer?).ok()
    }

    /// Whether the WAL checkpointer gives way: runs at nice
    /// [`CHECKPOINTER_NICE`](priority::CHECKPOINTER_NICE) until the WAL is twice its threshold
    /// long, which it does only where the OS would let it take its priority back (see
    /// `checkpoint`). False elsewhere, and for a store whose writer checkpoints itself.
    pub fn checkpointer_gives_way(&self) -> bool {
        self.checkpointer
            .as_ref()
            .is_some_and(checkpoint::Watch::gives_way)
    }

    /// Runs the writer thread at `nice` (-20 to 19; see [`priority`]). Call it right after
    /// opening, e.g. with [`priority::nice_from_env`]. Below the process's permitted limit
    /// the OS refuses, and that is the error; outside Linux it is unsupported.
    pub fn set_writer_nice(&self, nice: i32) -> Result<(), StoreError> {
        let refused = |e: std::io::Error| {
            StoreError::Io(format!(
                "cannot run {}'s writer thread at nice {nice}: {e} (a nice value below the process's needs CAP_SYS_NICE or a matching RLIMIT_NICE; unset ${} for the default)",
                self.path.display(),
                priority::NICE_ENV
            ))
        };
        let writer = self
            .writer
            .ok_or_else(|| refused(std::io::ErrorKind::Unsupported.into()))?;
        priority::set_nice(writer, nice).map_err(refused)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        self.readers.read(&self.path, f)
    }

    /// Hands `write` to the writer thread, packed here, on the caller's thread, rather than on
    /// the writer's; `durable` is told when its transaction committed.
    fn queue(&self, write: Write, durable: Option<Durable>) -> Ack {
        let (tx, rx) = oneshot::channel();
        let mut job = Job::new(write, tx);
        job.durable = durable;
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(job) {
            let _ = job.ack.send(Err(StoreError::Closed));
        }
        rx
    }

    /// The run's outbox rows (only those not done, when `open_only`), in `(seq, idx)` order.
    fn outbox_rows(&self, run: &RunId, open_only: bool) -> Result<Vec<OutboxRecord>, StoreError> {
        let rows = self.read(|c| {
            let Some(key) = self.key(c, run)? else { return Ok(Vec::new()) };
            let sql = if open_only {
                "SELECT seq, idx, status, idempotency_key FROM outbox WHERE run = ?1 AND status != 'done' ORDER BY seq, idx"
            } else {
                "SELECT seq, idx, status, idempotency_key FROM outbox WHERE run = ?1 ORDER BY seq, idx"
            };
            let mut stmt = c.prepare_cached(sql)?;
            let rows = stmt
                .query_map([key], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(seq, idx, status, key)| {
                Ok(OutboxRecord {
                    effect: EffectRef {
                        seq: seq as u64,
                        index: idx as u32,
                    },
                    status: OutboxStatus::parse(&status).ok_or_else(|| StoreError::Damaged {
                        run: run.to_string(),
                        detail: format!("seq {seq}: outbox.status `{status}` is not a status"),
                    })?,
                    idempotency_key: key,
                })
            })
            .collect()
    }

    fn key(&self, conn: &Connection, run: &RunId) -> rusqlite::Result<Option<i64>> {
        conn.prepare_cached("SELECT key FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get(0))
            .optional()
    }
}

impl Store for SqliteStore {
    fn memory_rows(
        &self,
        name: &str,
        latest_only: bool,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        self.read(|c| global_memory::rows(c, name, latest_only))
    }

    fn memory_published(
        &self,
        run: &RunId,
        effect: EffectRef,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        self.read(|c| global_memory::published(c, run, effect))
    }

    fn memory_names(&self) -> Result<Vec<String>, StoreError> {
        self.read(global_memory::names)
    }

    fn memory_removals(&self) -> Result<Vec<super::RemovalRecord>, StoreError> {
        self.read(global_memory::removals)
    }

    fn tombstones(&self) -> Result<Vec<super::retention::TombstoneRecord>, StoreError> {
        self.read(retention::tombstones)
    }

    fn blobs_only_of(&self, runs: &[RunId]) -> Result<super::retention::BlobsFreed, StoreError> {
        self.read(|c| retention::blobs_only_of(c, runs))
    }

    fn packs_heads(&self) -> bool {
        true
    }

    fn schedules(&self) -> Option<Box<dyn super::schedules::ScheduleBook>> {
        Some(Box::new(schedules::SqliteSchedules {
            path: self.path.clone(),
        }))
    }

    fn submit(&self, write: Write) -> Ack {
        self.queue(write, None)
    }

    fn submit_timed(&self, write: Write, durable: Durable) -> Ack {
        self.queue(write, Some(durable))
    }

    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.read(|c| {
            c.prepare_cached(&RUN_BY_ID)?
                .query_row([id.as_str()], run_record)
                .optional()
        })?
        .transpose()
    }

    fn run_without_setup(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.read(|c| {
            c.prepare_cached(&RUN_BY_ID_WITHOUT_SETUP)?
                .query_row([id.as_str()], run_record)
                .optional()
        })?
        .transpose()
    }

    fn leases(&self, runs: &[RunId]) -> Result<Vec<LeaseRecord>, StoreError> {
        // One statement for any number of runs: the ids go in as one JSON array parameter.
        let ids = serde_json::to_string(&runs.iter().map(RunId::as_str).collect::<Vec<_>>())
            .map_err(|e| StoreError::Io(e.to_string()))?;
        let rows = self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT id, lease_epoch, lease_expires_ms, control FROM runs \
                 WHERE id IN (SELECT value FROM json_each(?1))",
            )?;
            let rows = stmt
                .query_map([ids], |r| {
                    let id: String = r.get(0)?;
                    let epoch = r.get::<_, i64>(1)? as u64;
                    let expires_ms = r.get::<_, i64>(2)? as u64;
                    let control: Option<String> = r.get(3)?;
                    Ok(parse_control(&id, control.as_deref()).map(|control| {
                        LeaseRecord::new(RunId::new(id), epoch, expires_ms, control)
                    }))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        rows.into_iter().collect()
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM {RUN_ROWS} ORDER BY r.key DESC"
            ))?;
            let rows = stmt
                .query_map([], run_record)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        rows.into_iter().collect()
    }

    fn run_page(&self, q: &RunQuery, now_ms: u64) -> Result<RunPage, StoreError> {
        self.read(|c| run_summary::page(c, q, now_ms))?
    }

    fn run_stats(&self, since_ms: u64, bucket_ms: u64) -> Result<RunStats, StoreError> {
        self.read(|c| run_stats::stats(c, since_ms, bucket_ms))
    }

    fn transitions(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        let rows = self.read(|c| {
            let Some(key) = self.key(c, run)? else {
                return Ok(Vec::new());
            };
            let mut stmt = c.prepare_cached(
                "SELECT id, at, event, edge, effects, state_hash, chain, seal FROM transitions \
                 WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
            )?;
            let to = to.min(u64::from(u32::MAX));
            let rows = stmt
                .query_map(params![row_id(key, from), row_id(key, to)], |r| {
                    // Bytes columns are read as TEXT or BLOB alike: an edit made with the
                    // sqlite3 shell may leave either, and `verify` must still read the row to
                    // report it.
                    let bytes = |i: usize| bytes_at(r, i);
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        bytes(2)?,
                        bytes(3)?,
                        bytes(4)?,
                        bytes(5)?,
                        bytes(6)?,
                        r.get_ref(7)?.as_bytes_or_null()?.map(<[u8]>::to_vec),
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(id, at, event, edge, effects, hash, chain, seal)| {
                let damaged = |what: &str| StoreError::Damaged {
                    run: run.to_string(),
                    detail: format!("seq {}: {what}", id & 0xffff_ffff),
                };
                let seq = (id & 0xffff_ffff) as u64;
                let edge = stored_edge(&edge)
                    .ok_or_else(|| damaged("transitions.edge names no edge of the machine"))?;
                let json = |stored: Vec<u8>, column: &str| match unpack(&stored) {
                    Ok(Cow::Borrowed(_)) => Ok(stored),
                    Ok(Cow::Owned(json)) => Ok(json),
                    Err(e) => Err(damaged(&format!("transitions.{column}: {e}"))),
                };
                Ok(TransitionRecord {
                    seq,
                    at: Hlc(at as u64),
                    event: json(event, "event")?,
                    edge,
                    effects: json(effects, "effects")?,
                    state_kind: edge.to(),
                    state_hash: digest(&hash)
                        .ok_or_else(|| damaged("transitions.state_hash is not 32 bytes"))?,
                    chain: digest(&chain)
                        .ok_or_else(|| damaged("transitions.chain is not 32 bytes"))?,
                    seal,
                })
            })
            .collect()
    }

    fn snapshot_at_or_before(
        &self,
        run: &RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let found = self.read(|c| {
            let Some(key) = self.key(c, run)? else { return Ok(None) };
            c.prepare_cached("SELECT id, state FROM snapshots WHERE id BETWEEN ?1 AND ?2 ORDER BY id DESC LIMIT 1")?
                .query_row(params![row_id(key, 0), row_id(key, at)], |r| {
                    Ok(((r.get::<_, i64>(0)? & 0xffff_ffff) as u64, bytes_at(r, 1)?))
                })
                .optional()
        })?;
        found
            .map(|(seq, state)| snapshot_json(run, seq, state))
            .transpose()
    }

    fn last_seal(&self, run: &RunId, at: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.read(|c| {
            let Some(key) = self.key(c, run)? else { return Ok(None) };
            c.prepare_cached(
                "SELECT id, seal FROM transitions WHERE id BETWEEN ?1 AND ?2 AND seal IS NOT NULL ORDER BY id DESC LIMIT 1",
            )?
            .query_row(params![row_id(key, 0), row_id(key, at.min(u64::from(u32::MAX)))], |r| {
                Ok(((r.get::<_, i64>(0)? & 0xffff_ffff) as u64, bytes_at(r, 1)?))
            })
            .optional()
        })
    }

    fn blob(&self, d: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        // The blob and, when it refers to one, the event of the transition that wrote it,
        // read in one read transaction.
        let stored = self.read(|c| {
            let Some(bytes) = c
                .prepare_cached(SELECT_BLOB)?
                .query_row([&d.0[..]], |r| bytes_at(r, 0))
                .optional()?
            else {
                return Ok(None);
            };
            let event = match blob_source(&bytes).and_then(|row| i64::try_from(row).ok()) {
                Some(row) => c
                    .prepare_cached("SELECT event FROM transitions WHERE id = ?1")?
                    .query_row([row], |r| bytes_at(r, 0))
                    .optional()?,
                None => None,
            };
            Ok(Some((bytes, event)))
        })?;
        let Some((bytes, event)) = stored else {
            return Ok(None);
        };
        unpacked(d, bytes, event.as_deref()).map(Some)
    }

    fn conversation_nodes(
        &self,
        head: &Digest,
        len: u64,
    ) -> Result<Vec<(Digest, Vec<u8>)>, StoreError> {
        let (nodes, events) = self.read(|c| chain::read(c, head, len))?;
        nodes
            .into_iter()
            .map(|(d, bytes)| {
                let event = blob_source(&bytes)
                    .and_then(|row| i64::try_from(row).ok())
                    .and_then(|row| events.get(&row));
                Ok((d, unpacked(&d, bytes, event.map(Vec::as_slice))?))
            })
            .collect()
    }

    fn open_effects(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.outbox_rows(run, true)
    }

    fn outbox(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.outbox_rows(run, false)
    }

    fn snapshots(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.read(|c| {
            let Some(key) = self.key(c, run)? else {
                return Ok(Vec::new());
            };
            let to = to.min(u64::from(u32::MAX));
            let mut stmt = c.prepare_cached(
                "SELECT id, state FROM snapshots WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
            )?;
            let rows = stmt
                .query_map(params![row_id(key, from), row_id(key, to)], |r| {
                    Ok(((r.get::<_, i64>(0)? & 0xffff_ffff) as u64, bytes_at(r, 1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?
        .into_iter()
        .map(|(seq, state)| snapshot_json(run, seq, state))
        .collect()
    }

    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError> {
        self.read(|c| {
            let Some(key) = self.key(c, run)? else {
                return Ok(None);
            };
            c.prepare_cached("SELECT head, seal FROM runs WHERE key = ?1 AND head IS NOT NULL")?
                .query_row([key], |r| Ok((bytes_at(r, 0)?, bytes_at(r, 1)?)))
                .optional()
        })?
        .map(|(stored, seal)| {
            let body = unpack_head(&stored).map_err(|e| StoreError::Damaged {
                run: run.to_string(),
                detail: format!("runs.head: {e}"),
            })?;
            Ok(HeadRecord::new(body.into_owned(), seal, None))
        })
        .transpose()
    }

    fn session_runs(&self, name: &str) -> Result<Vec<(u64, RunId)>, StoreError> {
        self.read(|c| sessions::runs_of(c, name))
    }

    fn sessions(&self) -> Result<Vec<super::SessionRecord>, StoreError> {
        self.read(sessions::all)
    }

    fn session_of(&self, run: &RunId) -> Result<Option<super::SessionLink>, StoreError> {
        self.read(|c| sessions::of(c, run))
    }

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        Ok(Some(Box::new(self.read_snapshot()?)))
    }

    fn size_bytes(&self) -> Result<u64, StoreError> {
        self.read(|c| {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((pages * size) as u64)
        })
    }
}

/// A stored snapshot as the JSON it was written from (packed from schema 4 on).
fn snapshot_json(run: &RunId, seq: u64, state: Vec<u8>) -> Result<(u64, Vec<u8>), StoreError> {
    match unpack(&state) {
        Ok(Cow::Borrowed(_)) => Ok((seq, state)),
        Ok(Cow::Owned(json)) => Ok((seq, json)),
        Err(e) => Err(StoreError::Damaged {
            run: run.to_string(),
            detail: format!("seq {seq}: snapshots.state: {e}"),
        }),
    }
}

/// Blob `d` as written, from its stored `bytes` and, for a node that refers to the event of
/// the transition that appended it, that event as stored (`None`: not stored).
pub(super) fn unpacked(
    d: &Digest,
    bytes: Vec<u8>,
    event: Option<&[u8]>,
) -> Result<Vec<u8>, StoreError> {
    let damaged = |what: String| StoreError::Damaged {
        run: format!("(the blob {d})"),
        detail: format!("blobs.bytes: {what}"),
    };
    let event = match event {
        Some(stored) => unpack(stored).map_err(|e| damaged(format!("its event: {e}")))?,
        None if blob_source(&bytes).is_some() => {
            return Err(damaged("the transition it refers to is not stored".into()));
        }
        None => Cow::Borrowed(&[][..]),
    };
    match unpack_blob(&bytes, &event) {
        Ok(Cow::Borrowed(_)) => Ok(bytes),
        Ok(Cow::Owned(node)) => Ok(node),
        Err(e) => Err(damaged(e.to_string())),
    }
}

/// A bytes column read as TEXT or BLOB alike: an edit made with the sqlite3 shell may leave
/// either, and `verify` must still read the row to report it.
pub(super) fn bytes_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Vec<u8>> {
    Ok(r.get_ref(i)?
        .as_bytes_or_null()?
        .unwrap_or_default()
        .to_vec())
}

fn digest(bytes: &[u8]) -> Option<Digest> {
    Some(Digest(bytes.try_into().ok()?))
}

/// The condition that finds the blob whose digest is `?1`: through the index of the digests'
/// first 8 bytes (schema 10), then compared whole. SQLite uses the index only for a query that
/// spells the indexed expression as here, so every query writes it through this macro.
macro_rules! blob_by_hash {
    () => {
        "substr(hash, 1, 8) = substr(?1, 1, 8) AND hash = ?1"
    };
}

/// Reads the blob whose digest is `?1` (the first stored, should a damaged file hold two).
const SELECT_BLOB: &str = concat!(
    "SELECT bytes FROM blobs WHERE ",
    blob_by_hash!(),
    " ORDER BY rowid LIMIT 1"
);

/// Finds whether a blob with digest `?1` is stored: the writer asks before
/// [`INSERT_BLOB`], so a blob is stored once.
pub(super) const BLOB_STORED: &str =
    concat!("SELECT 1 FROM blobs WHERE ", blob_by_hash!(), " LIMIT 1");

/// Stores blob `?2` under digest `?1`; run it only when [`BLOB_STORED`] found none. (One
/// `INSERT … SELECT … WHERE NOT EXISTS` would read the table it writes, and SQLite answers that
/// with a temporary table opened and torn down per row: 8% of the writer's CPU under W5.)
pub(super) const INSERT_BLOB: &str = "INSERT INTO blobs (hash, bytes) VALUES (?1, ?2)";

/// The rows stored under digest `?1` and their bytes (one, unless a damaged file holds two).
pub(super) const BLOB_SIZE: &str = concat!(
    "SELECT count(*), coalesce(sum(length(bytes)), 0) FROM blobs WHERE ",
    blob_by_hash!()
);

/// Removes the blob whose digest is `?1` (`runtape prune`, once no kept run refers to it).
pub(super) const DELETE_BLOB: &str = concat!("DELETE FROM blobs WHERE ", blob_by_hash!());

/// The blob under digest `?1` if it refers to its transition's event (byte 32 is
/// [`crate::format::packed_blob::REFERS`]): rowid, digest, bytes.
pub(super) const REFERRING_BLOB: &str = concat!(
    "SELECT rowid, hash, bytes FROM blobs WHERE substr(bytes, 33, 1) = x'02' AND ",
    blob_by_hash!()
);

/// Records that run `?2` (its key) refers to blob `?1` (schema 14): written for every blob of
/// every commit, stored by it or already, so `runtape prune` knows which blobs only the runs it
/// removes use ([`super::retention`]).
pub(super) const INSERT_BLOB_REF: &str =
    "INSERT OR IGNORE INTO blob_refs (hash, run) VALUES (?1, ?2)";

/// A run's row and what it is (left-joined, so a row whose `run_specs` row is missing is read
/// and reported as damaged rather than skipped).
const RUN_ROWS: &str = "runs r LEFT JOIN run_specs s ON s.run = r.key";

/// One run's row and what it is, by id. Through the key the id finds, not `r.id = ?1`:
/// SQLite plans a join whose WHERE compares a column with a parameter using the parameter's
/// value, and such a statement is prepared again each time it is used with another value (22%
/// of the CPU while 10,000 runs started together, `runtape bench --only w5`;
/// `tests::reading_a_run_prepares_its_statement_once`).
static RUN_BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {RUN_COLUMNS} FROM {RUN_ROWS} WHERE r.key = (SELECT key FROM runs WHERE id = ?1)"
    )
});

/// [`RUN_BY_ID`] with `NULL` for the setup, whose pages are then not read
/// ([`Store::run_without_setup`]).
static RUN_BY_ID_WITHOUT_SETUP: LazyLock<String> =
    LazyLock::new(|| RUN_BY_ID.replacen("s.setup", "NULL", 1));

const RUN_COLUMNS: &str = "r.id, s.parent_id, s.fork_seq, s.spec, s.goal, r.status, r.state_kind, r.seq, r.lease_epoch, \
    r.lease_owner, r.lease_expires_ms, r.control, s.created_ms, r.updated_ms, r.cost_nanos, r.tokens, s.outcome, \
    s.setup, r.unpriced_turns, s.run";

/// A stored control request.
fn parse_control(run: &str, stored: Option<&str>) -> Result<Option<Control>, StoreError> {
    match stored {
        None => Ok(None),
        Some(text) => Control::from_column(text)
            .map(Some)
            .ok_or_else(|| StoreError::Damaged {
                run: run.to_owned(),
                detail: format!("runs.control `{text}` is not a request"),
            }),
    }
}

fn run_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunRecord, StoreError>> {
    let id: String = r.get(0)?;
    let parent: Option<String> = r.get(1)?;
    let fork_seq: Option<i64> = r.get(2)?;
    let status: String = r.get(5)?;
    let kind: String = r.get(6)?;
    let control: Option<String> = r.get(11)?;
    let damaged = |what: String| StoreError::Damaged {
        run: id.clone(),
        detail: what,
    };
    let has_spec: Option<i64> = r.get(19)?;
    let spec: Option<String> = r.get(3)?;
    let goal: Option<String> = r.get(4)?;
    let created_ms: Option<i64> = r.get(12)?;
    let record = (|| {
        let (Some(_), Some(spec), Some(goal), Some(created_ms)) =
            (has_spec, spec, goal, created_ms)
        else {
            return Err(damaged(
                "its run_specs row (spec, goal, parent, outcome) is missing".into(),
            ));
        };
        Ok(RunRecord {
            parent: match (parent, fork_seq) {
                (Some(p), Some(s)) => Some((RunId::new(p), s as u64)),
                (None, None) => None,
                _ => {
                    return Err(damaged(
                        "run_specs.parent_id and run_specs.fork_seq are not set together".into(),
                    ));
                }
            },
            spec,
            goal,
            status: RunStatus::parse(&status)
                .ok_or_else(|| damaged(format!("runs.status `{status}` is not a status")))?,
            state_kind: StateKind::parse(&kind)
                .ok_or_else(|| damaged(format!("runs.state_kind `{kind}` is not a state")))?,
            seq: r.get::<_, i64>(7)? as u64,
            lease_epoch: r.get::<_, i64>(8)? as u64,
            lease_owner: r.get(9)?,
            lease_expires_ms: r.get::<_, i64>(10)? as u64,
            control: parse_control(&id, control.as_deref())?,
            created_ms: created_ms as u64,
            updated_ms: r.get::<_, i64>(13)? as u64,
            cost_nanos: r.get::<_, i64>(14)? as u64,
            tokens: r.get::<_, i64>(15)? as u64,
            outcome: r.get(16)?,
            setup: r.get(17)?,
            unpriced_turns: r.get::<_, i64>(18)? as u64,
            id: RunId::new(id.clone()),
        })
    })();
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewRun;

    #[tokio::test]
    async fn reading_a_run_prepares_its_statement_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("r.db"), Durability::Normal).expect("opens");
        let ids: Vec<RunId> = (0..4).map(|i| RunId::new(format!("run{i}"))).collect();
        for id in &ids {
            crate::store::write(&store, Write::CreateRun(NewRun::sample(id.as_str())))
                .await
                .expect("creates");
        }
        for _ in 0..3 {
            for id in &ids {
                let rec = store.run(id).expect("reads").expect("a run");
                assert_eq!(&rec.id, id);
                assert_eq!(rec.goal, "goal");
            }
        }
        let reprepared = store
            .read(|c| {
                Ok(c.prepare_cached(&RUN_BY_ID)?
                    .get_status(rusqlite::StatementStatus::RePrepare))
            })
            .expect("reads");
        assert_eq!(reprepared, 0, "the run statement was prepared again");
        assert!(store.run(&RunId::new("nobody")).expect("reads").is_none());
    }

    #[tokio::test]
    async fn a_head_is_stored_packed_and_read_back_as_the_json_that_was_sealed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("h.db"), Durability::Normal).expect("opens");
        let mut new = NewRun::sample("packed");
        let head = crate::ledger::first_head(&new, Digest::ZERO, Digest::ZERO, None);
        let signer = crate::receipt::ReceiptSigner::unsigned();
        // Sealed as a wrapper would hand it over, without the packed form: the store packs it.
        let sealed = crate::ledger::head::seal(&signer, &head, None);
        new.head = sealed.clone();
        crate::store::write(&store, Write::CreateRun(new))
            .await
            .expect("creates");
        // A body that is not a head's canonical JSON is kept as it is.
        let raw = NewRun {
            head: HeadRecord::new(b"{ }".to_vec(), vec![0], None),
            ..NewRun::sample("raw")
        };
        crate::store::write(&store, Write::CreateRun(raw))
            .await
            .expect("creates");
        let stored = |id: &str| -> Vec<u8> {
            store
                .read(|c| {
                    c.query_row("SELECT head FROM runs WHERE id = ?1", [id], |r| {
                        bytes_at(r, 0)
                    })
                })
                .expect("reads")
        };
        let packed = stored("packed");
        assert_eq!(packed[0], crate::format::packed_head::PACKED_HEAD);
        assert!(
            packed.len() * 2 < sealed.body.len(),
            "{} bytes",
            packed.len()
        );
        let read = store
            .head(&RunId::new("packed"))
            .expect("reads")
            .expect("a head");
        assert_eq!(read, HeadRecord::new(sealed.body, sealed.seal, None));
        assert_eq!(stored("raw"), b"{ }");
        let read = store
            .head(&RunId::new("raw"))
            .expect("reads")
            .expect("a head");
        assert_eq!(read.body, b"{ }");
    }
}
