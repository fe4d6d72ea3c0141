//! The SQLite store: one writer thread owns the write connection and commits every queued
//! write of every run in one transaction per batch (group commit); readers use their own
//! connection (WAL lets them read while the writer writes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::schema::{self, classify, row_id};
use super::{
    Ack, Commit, Control, HeadRecord, NewRun, OutboxRecord, OutboxStatus, RunRecord, RunStatus,
    Store, StoreError, TransitionRecord, Write, Written,
};
use crate::machine::{Digest, EdgeId, EffectRef, Hlc, RunId, StateKind};

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: a commit is on disk when acknowledged, even across power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL` (opt-in): survives a process crash, but a power loss can drop the
    /// most recent commits.
    Normal,
}

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 1024;

type Job = (Write, oneshot::Sender<Result<Written, StoreError>>);

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
    jobs: mpsc::UnboundedSender<Job>,
    reader: Mutex<Connection>,
    stats: Arc<CommitStats>,
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
        if let Some(max) = max_bytes {
            let page: i64 = conn
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .map_err(|e| classify(&shown, e))?;
            let pages = (max / page.max(1) as u64).clamp(1, i64::MAX as u64);
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                .map_err(|e| classify(&shown, e))?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let reader = Connection::open_with_flags(path, flags).map_err(|e| classify(&shown, e))?;
        reader
            .busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| classify(&shown, e))?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(CommitStats::default());
        let counters = stats.clone();
        std::thread::Builder::new()
            .name("runtape-writer".into())
            .spawn(move || writer_loop(conn, rx, shown, &counters))
            .map_err(|e| StoreError::Io(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            path: path.to_owned(),
            jobs,
            reader: Mutex::new(reader),
            stats,
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
        let shown = self.path.display().to_string();
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(&self.path, flags).map_err(|e| classify(&shown, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| classify(&shown, e))?;
        // BEGIN is deferred: the first read fixes the snapshot.
        conn.execute_batch("BEGIN; SELECT count(*) FROM sqlite_schema;")
            .map_err(|e| classify(&shown, e))?;
        Ok(SqliteStore {
            path: self.path.clone(),
            jobs: self.jobs.clone(),
            reader: Mutex::new(conn),
            stats: self.stats.clone(),
        })
    }

    /// How many writes shared how many transactions so far.
    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        let conn = self
            .reader
            .lock()
            .map_err(|_| StoreError::Io("reader lock poisoned".into()))?;
        f(&conn).map_err(|e| classify(&self.path.display().to_string(), e))
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
    fn submit(&self, write: Write) -> Ack {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError((_, tx))) = self.jobs.send((write, tx)) {
            let _ = tx.send(Err(StoreError::Closed));
        }
        rx
    }

    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.read(|c| {
            c.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?
                .query_row([id.as_str()], run_record)
                .optional()
        })?
        .transpose()
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = self.read(|c| {
            let mut stmt =
                c.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY key DESC"))?;
            let rows = stmt
                .query_map([], run_record)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        rows.into_iter().collect()
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
                        r.get::<_, String>(3)?,
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
                let edge = EdgeId::parse(&edge)
                    .ok_or_else(|| damaged("transitions.edge names no edge of the machine"))?;
                Ok(TransitionRecord {
                    seq,
                    at: Hlc(at as u64),
                    event,
                    edge,
                    effects,
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
        self.read(|c| {
            let Some(key) = self.key(c, run)? else { return Ok(None) };
            c.prepare_cached("SELECT id, state FROM snapshots WHERE id BETWEEN ?1 AND ?2 ORDER BY id DESC LIMIT 1")?
                .query_row(params![row_id(key, 0), row_id(key, at)], |r| {
                    Ok(((r.get::<_, i64>(0)? & 0xffff_ffff) as u64, bytes_at(r, 1)?))
                })
                .optional()
        })
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
        self.read(|c| {
            c.prepare_cached("SELECT bytes FROM blobs WHERE hash = ?1")?
                .query_row([&d.0[..]], |r| bytes_at(r, 0))
                .optional()
        })
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
        })
    }

    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError> {
        self.read(|c| {
            let Some(key) = self.key(c, run)? else {
                return Ok(None);
            };
            c.prepare_cached("SELECT body, seal FROM heads WHERE run = ?1")?
                .query_row([key], |r| {
                    Ok(HeadRecord {
                        body: bytes_at(r, 0)?,
                        seal: bytes_at(r, 1)?,
                        replaces: None,
                    })
                })
                .optional()
        })
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

/// A bytes column read as TEXT or BLOB alike: an edit made with the sqlite3 shell may leave
/// either, and `verify` must still read the row to report it.
fn bytes_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Vec<u8>> {
    Ok(r.get_ref(i)?
        .as_bytes_or_null()?
        .unwrap_or_default()
        .to_vec())
}

fn digest(bytes: &[u8]) -> Option<Digest> {
    Some(Digest(bytes.try_into().ok()?))
}

const RUN_COLUMNS: &str = "id, parent_id, fork_seq, spec, goal, status, state_kind, seq, lease_epoch, lease_owner, \
    lease_expires_ms, control, created_ms, updated_ms, cost_nanos, tokens, outcome, setup, unpriced_turns";

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
    let record = (|| {
        Ok(RunRecord {
            parent: match (parent, fork_seq) {
                (Some(p), Some(s)) => Some((RunId(p), s as u64)),
                (None, None) => None,
                _ => {
                    return Err(damaged(
                        "runs.parent_id and runs.fork_seq are not set together".into(),
                    ));
                }
            },
            spec: r.get(3)?,
            goal: r.get(4)?,
            status: RunStatus::parse(&status)
                .ok_or_else(|| damaged(format!("runs.status `{status}` is not a status")))?,
            state_kind: StateKind::parse(&kind)
                .ok_or_else(|| damaged(format!("runs.state_kind `{kind}` is not a state")))?,
            seq: r.get::<_, i64>(7)? as u64,
            lease_epoch: r.get::<_, i64>(8)? as u64,
            lease_owner: r.get(9)?,
            lease_expires_ms: r.get::<_, i64>(10)? as u64,
            control: match control.as_deref() {
                None => None,
                Some("pause") => Some(Control::Pause),
                Some("cancel") => Some(Control::Cancel),
                Some(other) => {
                    return Err(damaged(format!("runs.control `{other}` is not a request")));
                }
            },
            created_ms: r.get::<_, i64>(12)? as u64,
            updated_ms: r.get::<_, i64>(13)? as u64,
            cost_nanos: r.get::<_, i64>(14)? as u64,
            tokens: r.get::<_, i64>(15)? as u64,
            outcome: r.get(16)?,
            setup: r.get(17)?,
            unpriced_turns: r.get::<_, i64>(18)? as u64,
            id: RunId(id.clone()),
        })
    })();
    Ok(record)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            // The path is filled in by the writer (`with_path`).
            return StoreError::Full {
                path: String::new(),
                detail: e.to_string(),
            };
        }
        StoreError::Io(e.to_string())
    }
}

/// A full database reported with its file name, whichever way the error was made.
fn with_path(e: StoreError, shown: &str) -> StoreError {
    match e {
        StoreError::Full { detail, .. } => StoreError::Full {
            path: shown.to_owned(),
            detail,
        },
        StoreError::Io(detail) if detail.contains("database or disk is full") => StoreError::Full {
            path: shown.to_owned(),
            detail,
        },
        other => other,
    }
}

/// The writer thread: drains queued writes into one transaction, commits, then acknowledges
/// each write. Nothing is acknowledged before its transaction commits.
fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Job>,
    shown: String,
    stats: &CommitStats,
) {
    let mut keys: HashMap<RunId, i64> = HashMap::new();
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let results = apply_batch(&mut conn, &mut keys, &batch, &shown);
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        for ((_, ack), result) in batch.into_iter().zip(results) {
            let _ = ack.send(result);
        }
    }
}

fn apply_batch(
    conn: &mut Connection,
    keys: &mut HashMap<RunId, i64>,
    batch: &[Job],
    shown: &str,
) -> Vec<Result<Written, StoreError>> {
    let fail_all = |e: StoreError| batch.iter().map(|_| Err(e.clone())).collect();
    let mut tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(classify(shown, e)),
    };
    let mut created = Vec::new();
    let mut results = Vec::with_capacity(batch.len());
    for (write, _) in batch {
        let result = match tx.savepoint() {
            Ok(sp) => match apply(&sp, keys, write, &mut created) {
                Ok(w) => sp.commit().map(|_| w).map_err(|e| classify(shown, e)),
                Err(e) => Err(e),
            },
            Err(e) => Err(classify(shown, e)),
        }
        .map_err(|e| with_path(e, shown));
        if let Err(e) = &result
            && tx.is_autocommit()
        {
            // SQLite rolled the whole transaction back (a full disk, an I/O error): nothing
            // of this batch is written, and nothing after it may run outside a transaction.
            return fail_all(e.clone());
        }
        results.push(result);
    }
    if let Err(e) = tx.commit() {
        return fail_all(with_path(classify(shown, e), shown));
    }
    keys.extend(created);
    results
}

fn run_key(
    tx: &Connection,
    keys: &HashMap<RunId, i64>,
    created: &[(RunId, i64)],
    run: &RunId,
) -> Result<i64, StoreError> {
    if let Some(k) = keys
        .get(run)
        .or_else(|| created.iter().find(|(r, _)| r == run).map(|(_, k)| k))
    {
        return Ok(*k);
    }
    tx.prepare_cached("SELECT key FROM runs WHERE id = ?1")?
        .query_row([run.as_str()], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::UnknownRun(run.to_string()))
}

fn apply(
    tx: &Connection,
    keys: &mut HashMap<RunId, i64>,
    write: &Write,
    created: &mut Vec<(RunId, i64)>,
) -> Result<Written, StoreError> {
    match write {
        Write::CreateRun(new) => create_run(tx, new, created),
        Write::Commit(c) => {
            let key = run_key(tx, keys, created, &c.run)?;
            commit(tx, key, c)
        }
        Write::Commits(cs) => {
            for c in cs {
                let key = run_key(tx, keys, created, &c.run)?;
                commit(tx, key, c)?;
            }
            Ok(Written::Done)
        }
        Write::MarkStarted {
            run,
            epoch,
            effects,
            expires_ms,
            head,
        } => {
            let key = run_key(tx, keys, created, run)?;
            check_epoch(tx, key, run, *epoch)?;
            let mut answered = tx.prepare_cached(
                "SELECT 1 FROM outbox WHERE run = ?1 AND seq = ?2 AND idx = ?3 AND status = 'done'",
            )?;
            for o in effects {
                let at = params![key, o.effect.seq as i64, i64::from(o.effect.index)];
                if answered.exists(at)? {
                    return Err(StoreError::AlreadyAnswered {
                        run: run.to_string(),
                        seq: o.effect.seq,
                        index: o.effect.index,
                    });
                }
            }
            let mut stmt = tx.prepare_cached(
                "INSERT INTO outbox (run, seq, idx, status, idempotency_key) VALUES (?1, ?2, ?3, 'started', ?4) \
                 ON CONFLICT (run, seq, idx) DO UPDATE SET status = 'started' WHERE status = 'pending'",
            )?;
            for o in effects {
                stmt.execute(params![
                    key,
                    o.effect.seq as i64,
                    i64::from(o.effect.index),
                    o.idempotency_key
                ])?;
            }
            tx.prepare_cached("UPDATE runs SET lease_expires_ms = ?2 WHERE key = ?1")?
                .execute(params![key, *expires_ms as i64])?;
            write_head(tx, key, run, head.as_ref())?;
            Ok(Written::Done)
        }
        Write::RenewLease {
            run,
            epoch,
            expires_ms,
        } => {
            let key = run_key(tx, keys, created, run)?;
            check_epoch(tx, key, run, *epoch)?;
            tx.prepare_cached("UPDATE runs SET lease_expires_ms = ?2 WHERE key = ?1")?
                .execute(params![key, *expires_ms as i64])?;
            Ok(Written::Done)
        }
        Write::AcquireLease {
            run,
            owner,
            now_ms,
            expires_ms,
        } => {
            let key = run_key(tx, keys, created, run)?;
            let (epoch, holder, expires, status): (i64, Option<String>, i64, String) = tx
                .prepare_cached(
                    "SELECT lease_epoch, lease_owner, lease_expires_ms, status FROM runs WHERE key = ?1",
                )?
                .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            if let Some(status) = RunStatus::parse(&status).filter(|s| s.is_terminal()) {
                return Err(StoreError::Finished {
                    run: run.to_string(),
                    status,
                });
            }
            if let Some(holder) = holder.filter(|h| h != owner)
                && (expires as u64) > *now_ms
                && !super::lease::owner_is_dead(&holder)
            {
                return Err(StoreError::LeaseHeld {
                    run: run.to_string(),
                    owner: holder,
                });
            }
            let next = epoch + 1;
            tx.prepare_cached(
                "UPDATE runs SET lease_epoch = ?2, lease_owner = ?3, lease_expires_ms = ?4, control = NULL, \
                 status = 'running' WHERE key = ?1",
            )?
            .execute(params![key, next, owner, *expires_ms as i64])?;
            Ok(Written::Lease(next as u64))
        }
        Write::ReleaseLease {
            run,
            epoch,
            status,
            head,
        } => {
            let key = run_key(tx, keys, created, run)?;
            check_epoch(tx, key, run, *epoch)?;
            let released = tx
                .prepare_cached(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_ms = 0, \
                     status = CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN status ELSE ?2 END \
                     WHERE key = ?1 AND lease_owner IS NOT NULL",
                )?
                .execute(params![key, status.as_str()])?;
            if released == 1 {
                write_head(tx, key, run, head.as_ref())?;
            }
            Ok(Written::Done)
        }
        Write::SetControl { run, control } => {
            let key = run_key(tx, keys, created, run)?;
            if control.is_some() {
                let status: String = tx
                    .prepare_cached("SELECT status FROM runs WHERE key = ?1")?
                    .query_row([key], |r| r.get(0))?;
                if let Some(status) = RunStatus::parse(&status).filter(|s| s.is_terminal()) {
                    return Err(StoreError::Finished {
                        run: run.to_string(),
                        status,
                    });
                }
            }
            let value = control.map(|c| match c {
                Control::Pause => "pause",
                Control::Cancel => "cancel",
            });
            tx.prepare_cached("UPDATE runs SET control = ?2 WHERE key = ?1")?
                .execute(params![key, value])?;
            Ok(Written::Done)
        }
    }
}

fn create_run(
    tx: &Connection,
    new: &NewRun,
    created: &mut Vec<(RunId, i64)>,
) -> Result<Written, StoreError> {
    let exists: Option<i64> = tx
        .prepare_cached("SELECT key FROM runs WHERE id = ?1")?
        .query_row([new.id.as_str()], |r| r.get(0))
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::DuplicateRun(new.id.to_string()));
    }
    let (parent, fork_seq) = match &new.parent {
        Some((p, s)) => (Some(p.as_str()), Some(*s as i64)),
        None => (None, None),
    };
    let seq = fork_seq.unwrap_or(0);
    let kind = if new.parent.is_some() {
        "preparing"
    } else {
        "created"
    };
    tx.prepare_cached(
        "INSERT INTO runs (id, parent_id, fork_seq, spec, goal, status, state_kind, seq, lease_epoch, lease_owner, \
         lease_expires_ms, control, created_ms, updated_ms, cost_nanos, tokens, outcome, setup) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, 1, ?8, ?9, NULL, ?10, ?10, 0, 0, NULL, ?11)",
    )?
    .execute(params![
        new.id.as_str(),
        parent,
        fork_seq,
        new.spec,
        new.goal,
        kind,
        seq,
        new.owner,
        new.lease_expires_ms as i64,
        new.now_ms as i64,
        new.setup
    ])?;
    let key = tx.last_insert_rowid();
    write_head(tx, key, &new.id, Some(&new.head))?;
    created.push((new.id.clone(), key));
    Ok(Written::Lease(1))
}

fn check_epoch(tx: &Connection, key: i64, run: &RunId, epoch: u64) -> Result<u64, StoreError> {
    let (current, seq): (i64, i64) = tx
        .prepare_cached("SELECT lease_epoch, seq FROM runs WHERE key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if current as u64 != epoch {
        return Err(StoreError::Fenced {
            run: run.to_string(),
            ours: epoch,
            current: current as u64,
        });
    }
    Ok(seq as u64)
}

fn commit(tx: &Connection, key: i64, c: &Commit) -> Result<Written, StoreError> {
    let latest = check_epoch(tx, key, &c.run, c.epoch)?;
    if c.seq != latest + 1 {
        return Err(StoreError::OutOfSequence {
            run: c.run.to_string(),
            latest,
            got: c.seq,
        });
    }
    let id = row_id(key, c.seq);
    tx.prepare_cached(
        "INSERT INTO transitions (id, at, event, edge, effects, state_hash, chain, seal) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![id, c.at.0 as i64, c.event, c.edge.as_str(), c.effects, &c.state_hash.0[..], &c.chain.0[..], c.seal])?;
    if !c.blobs.is_empty() {
        let mut stmt =
            tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, bytes) VALUES (?1, ?2)")?;
        for (d, bytes) in &c.blobs {
            stmt.execute(params![&d.0[..], bytes])?;
        }
    }
    if let Some(state) = &c.snapshot {
        tx.prepare_cached("INSERT OR REPLACE INTO snapshots (id, state) VALUES (?1, ?2)")?
            .execute(params![id, state])?;
    }
    if !c.outbox.is_empty() {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO outbox (run, seq, idx, status, idempotency_key) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for o in &c.outbox {
            stmt.execute(params![
                key,
                o.effect.seq as i64,
                i64::from(o.effect.index),
                o.status.as_str(),
                o.idempotency_key
            ])?;
        }
    }
    if let Some(e) = c.resolves {
        tx.prepare_cached(
            "UPDATE outbox SET status = 'done' WHERE run = ?1 AND seq = ?2 AND idx = ?3",
        )?
        .execute(params![key, e.seq as i64, i64::from(e.index)])?;
    }
    tx.prepare_cached(
        "UPDATE runs SET seq = ?2, status = ?3, state_kind = ?4, updated_ms = ?5, cost_nanos = ?6, tokens = ?7, \
         outcome = ?8, lease_expires_ms = ?9, unpriced_turns = ?10 WHERE key = ?1",
    )?
    .execute(params![
        key,
        c.seq as i64,
        c.status.as_str(),
        c.state_kind.as_str(),
        c.now_ms as i64,
        c.cost_nanos as i64,
        c.tokens as i64,
        c.outcome,
        c.lease_expires_ms as i64,
        c.unpriced_turns as i64
    ])?;
    write_head(tx, key, &c.run, c.head.as_ref())?;
    Ok(Written::Done)
}

/// Replaces the run's sealed head (no-op for `None`), if the stored one is the head it says
/// it replaces.
fn write_head(
    tx: &Connection,
    key: i64,
    run: &RunId,
    head: Option<&HeadRecord>,
) -> Result<(), StoreError> {
    let Some(h) = head else { return Ok(()) };
    if let Some(expected) = h.replaces {
        let stored: Option<Vec<u8>> = tx
            .prepare_cached("SELECT body FROM heads WHERE run = ?1")?
            .query_row([key], |r| bytes_at(r, 0))
            .optional()?;
        if stored.map(|b| Digest::of(&b)) != Some(expected) {
            return Err(StoreError::StaleHead {
                run: run.to_string(),
            });
        }
    }
    tx.prepare_cached("INSERT OR REPLACE INTO heads (run, body, seal) VALUES (?1, ?2, ?3)")?
        .execute(params![key, h.body, h.seal])?;
    Ok(())
}
