//! The writer thread: drains queued writes into one transaction per batch (group commit),
//! commits, then acknowledges each write. Nothing is acknowledged before its transaction
//! commits; every write of a run is fenced by its lease epoch and carries its sealed head.

use std::sync::atomic::Ordering;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::super::protocol;
use super::super::schema::{classify, row_id};
use super::super::{
    Commit, Control, Durable, HeadRecord, NewRun, RunStatus, StoreError, Write, Written,
};
use super::CommitStats;
use super::checkpoint::{Checkpointer, copy_back, wal_frames};
use super::known::{Known, Scope};
use super::space::{self, DbFile};
use crate::format::packed::pack;
use crate::format::packed_blob::PackedBlob;
use crate::format::packed_head::pack_head;
use crate::format::stored::edge_code;
use crate::machine::{Digest, RunId};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 1024;

/// Prepared statements the writer's connection keeps (it uses about 30 distinct ones).
const WRITER_STATEMENTS: usize = 64;

/// A queued write and where its acknowledgement goes.
///
/// A commit's bytes are put in their stored form by [`Job::new`], on the thread that submits
/// it, not on the writer's (which every commit waits for): its event, effects and snapshot are
/// packed in place, and its blobs are taken out and packed but for the row id of their
/// transition (known once the writer has the run's key).
pub(super) struct Job {
    write: Write,
    /// Per commit of the write, in order: its blobs, packed.
    blobs: Vec<Vec<(Digest, PackedBlob)>>,
    pub(super) ack: oneshot::Sender<Result<Written, StoreError>>,
    /// Told when the write is durable, if it succeeds ([`crate::store::Store::submit_timed`]).
    pub(super) durable: Option<Durable>,
}

impl Job {
    /// `write` in its stored form, acknowledged through `ack`.
    pub(super) fn new(mut write: Write, ack: oneshot::Sender<Result<Written, StoreError>>) -> Job {
        let mut blobs = Vec::new();
        match &mut write {
            Write::Commit(c) => blobs.push(pack_commit(c)),
            Write::Commits(cs) => blobs.extend(cs.iter_mut().map(pack_commit)),
            _ => {}
        }
        for_each_head(&mut write, |head| {
            if head.packed.is_none() {
                head.packed = pack_head(&head.body);
            }
        });
        Job {
            write,
            blobs,
            ack,
            durable: None,
        }
    }
}

/// Calls `f` on every head `write` carries.
fn for_each_head(write: &mut Write, mut f: impl FnMut(&mut HeadRecord)) {
    match write {
        Write::CreateRun(new) => f(&mut new.head),
        Write::Commit(c) => c.head.iter_mut().for_each(f),
        Write::Commits(cs) => cs.iter_mut().filter_map(|c| c.head.as_mut()).for_each(f),
        Write::MarkStarted { head, .. } | Write::ReleaseLease { head, .. } => {
            head.iter_mut().for_each(f)
        }
        _ => {}
    }
}

/// A head's stored form: packed, or its JSON as written (see [`crate::format::packed_head`]).
fn stored_head(head: &HeadRecord) -> &[u8] {
    match &head.packed {
        Some(p) => p.as_bytes(),
        None => &head.body,
    }
}

/// Packs `c`'s event, effects and snapshot in place; returns its blobs, packed.
fn pack_commit(c: &mut Commit) -> Vec<(Digest, PackedBlob)> {
    let blobs = std::mem::take(&mut c.blobs)
        .into_iter()
        .map(|(d, bytes)| (d, PackedBlob::new(&bytes, &c.event)))
        .collect();
    c.event = pack(&c.event);
    c.effects = pack(&c.effects);
    if let Some(state) = &mut c.snapshot {
        *state = pack(state);
    }
    blobs
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            // The path and the cause are filled in by the writer (`with_path`).
            return StoreError::Full {
                path: String::new(),
                detail: e.to_string(),
                cap_bytes: None,
            };
        }
        StoreError::Io(e.to_string())
    }
}

/// A lack of room reported with the file's name and its cause (the disk, or the database's
/// size cap), whichever way the error was made: SQLite's `SQLITE_FULL`, or an I/O error met on
/// a disk with no room left ([`space::full`]).
fn with_path(e: StoreError, file: &DbFile) -> StoreError {
    use rusqlite::ErrorCode;
    let (code, detail) = match &e {
        StoreError::Full { detail, .. } => (ErrorCode::DiskFull, detail),
        StoreError::Io(detail) if detail.contains("database or disk is full") => {
            (ErrorCode::DiskFull, detail)
        }
        StoreError::Io(detail) if detail.contains(space::IO_ERROR_TEXT) => {
            (ErrorCode::SystemIoFailure, detail)
        }
        _ => return e,
    };
    space::full(&file.shown, file.cap_bytes, Some(code), detail).unwrap_or(e)
}

/// The writer thread: drains queued writes into one transaction, commits, then acknowledges
/// each write. Nothing is acknowledged before its transaction commits.
pub(super) fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Job>,
    file: DbFile,
    stats: &CommitStats,
    checkpointer: Option<Checkpointer>,
) {
    // Every statement the writer runs stays prepared: rusqlite keeps 16 by default, fewer
    // than the writer's, and one evicted is parsed again at its next use.
    conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
    let mut known = Known::default();
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let results = apply_batch(&mut conn, &mut known, &batch, &file);
        let committed = crate::clock::stopwatch();
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        for (job, result) in batch.into_iter().zip(results) {
            if let (Some(durable), Ok(_)) = (job.durable, &result) {
                durable(committed);
            }
            let _ = job.ack.send(result);
        }
        if let Some(c) = &checkpointer {
            // After the acknowledgements: nothing waits on this.
            match wal_frames(&conn) {
                Ok((frames, copied)) => {
                    c.saw(frames);
                    if c.thresholds().writer_should_copy(frames, copied)
                        && let Err(e) = copy_back(&conn)
                    {
                        tracing::debug!(error = %e, "WAL checkpoint");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "reading the WAL's size"),
            }
        }
    }
}

/// What one attempt at a batch came to.
enum Attempt {
    /// The batch is over (committed, or failed as a whole): one result per write.
    Done(Vec<Result<Written, StoreError>>),
    /// Write `i` failed after it had changed rows: the transaction was rolled back, and the
    /// batch is to be made again without it.
    Redo(usize, StoreError),
}

/// Applies `batch` in one transaction and returns each write's result.
///
/// Writes carry no savepoint each (it journals every page a write touches, a twentieth of
/// the writer's time at 10,000 runs): a write's checks come before its changes, so a write
/// refused by them (fenced, out of sequence, a stale head, ...) has changed nothing and the
/// batch goes on. A write that fails after it changed rows (`total_changes` moved: SQLite
/// counts only statements that completed) rolls the transaction back, and the batch is made
/// again without it — so no write is ever half applied.
fn apply_batch(
    conn: &mut Connection,
    known: &mut Known,
    batch: &[Job],
    file: &DbFile,
) -> Vec<Result<Written, StoreError>> {
    // The writes left out of the batch, with the error each failed with.
    let mut left_out: Vec<Option<StoreError>> = vec![None; batch.len()];
    loop {
        match try_batch(conn, known, batch, file, &left_out) {
            Attempt::Done(results) => return results,
            Attempt::Redo(i, e) => {
                known.rolled_back();
                left_out[i] = Some(e);
            }
        }
    }
}

fn try_batch(
    conn: &mut Connection,
    known: &mut Known,
    batch: &[Job],
    file: &DbFile,
    left_out: &[Option<StoreError>],
) -> Attempt {
    let fail_all = |known: &mut Known, e: StoreError| {
        known.rolled_back();
        Attempt::Done(batch.iter().map(|_| Err(e.clone())).collect())
    };
    let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(known, with_path(classify(&file.shown, e), file)),
    };
    if let Err(e) = known.begin(&tx) {
        return fail_all(known, with_path(classify(&file.shown, e), file));
    }
    let mut results = Vec::with_capacity(batch.len());
    for (i, job) in batch.iter().enumerate() {
        if let Some(e) = &left_out[i] {
            results.push(Err(e.clone()));
            continue;
        }
        let before = tx.total_changes();
        let mut scope = known.scope();
        let result = apply(&tx, &mut scope, job).map_err(|e| with_path(e, file));
        match result {
            Ok(written) => {
                scope.keep();
                results.push(Ok(written));
            }
            Err(e) if tx.is_autocommit() => {
                // SQLite rolled the whole transaction back (a full disk, an I/O error):
                // nothing of this batch is written, and nothing after it may run outside a
                // transaction.
                drop(scope);
                return fail_all(known, e);
            }
            Err(e) if tx.total_changes() != before => {
                // Dropping the transaction rolls it back.
                return Attempt::Redo(i, e);
            }
            Err(e) => results.push(Err(e)),
        }
    }
    if let Err(e) = tx.commit() {
        return fail_all(known, with_path(classify(&file.shown, e), file));
    }
    known.committed();
    Attempt::Done(results)
}

fn apply(tx: &Connection, known: &mut Scope<'_>, job: &Job) -> Result<Written, StoreError> {
    match &job.write {
        Write::CreateRun(new) => create_run(tx, known, new),
        Write::Commit(c) => commit(tx, known, std::slice::from_ref(c.as_ref()), &job.blobs),
        Write::Commits(cs) => commit(tx, known, cs, &job.blobs),
        Write::MarkStarted {
            run,
            epoch,
            effects,
            expires_ms,
            head,
        } => {
            let key = check_epoch(tx, known, run, *epoch)?;
            let mut done = tx.prepare_cached(
                "SELECT 1 FROM outbox WHERE run = ?1 AND seq = ?2 AND idx = ?3 AND status = 'done'",
            )?;
            let mut answered = None;
            for o in effects {
                let at = params![key, o.effect.seq as i64, i64::from(o.effect.index)];
                if done.exists(at)? {
                    answered = Some((o.effect.seq, o.effect.index));
                    break;
                }
            }
            protocol::may_start(run, answered)?;
            check_head(tx, known, key, run, head.as_ref())?;
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
            tx.prepare_cached(
                "UPDATE runs SET lease_expires_ms = ?2 WHERE key = ?1 AND lease_owner IS NOT NULL",
            )?
            .execute(params![key, *expires_ms as i64])?;
            put_head(tx, known, key, run, head.as_ref())?;
            Ok(Written::Done)
        }
        Write::RenewLease {
            run,
            epoch,
            expires_ms,
        } => {
            let key = check_epoch(tx, known, run, *epoch)?;
            tx.prepare_cached(
                "UPDATE runs SET lease_expires_ms = ?2 WHERE key = ?1 AND lease_owner IS NOT NULL",
            )?
            .execute(params![key, *expires_ms as i64])?;
            Ok(Written::Done)
        }
        Write::AcquireLease {
            run,
            owner,
            now_ms,
            expires_ms,
        } => {
            let key = known.key(tx, run)?;
            type Row = (i64, Option<String>, i64, String, i64, Option<String>);
            let (epoch, holder, expires, status, seq, control): Row = tx
                .prepare_cached(
                    "SELECT lease_epoch, lease_owner, lease_expires_ms, status, seq, control FROM runs WHERE key = ?1",
                )?
                .query_row([key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?;
            let row = protocol::LeaseRow {
                epoch: epoch as u64,
                holder: holder.as_deref(),
                expires_ms: expires as u64,
                status: RunStatus::parse(&status).unwrap_or(RunStatus::Running),
            };
            let next = protocol::take_up(run, &row, owner, *now_ms, |holder| {
                super::super::lease::owner_is_dead(holder)
            })? as i64;
            let control =
                protocol::control_after_take_up(control.as_deref().and_then(Control::from_column));
            tx.prepare_cached(
                "UPDATE runs SET lease_epoch = ?2, lease_owner = ?3, lease_expires_ms = ?4, \
                 control = ?5, status = 'running' WHERE key = ?1",
            )?
            .execute(params![
                key,
                next,
                owner,
                *expires_ms as i64,
                control.as_ref().map(Control::to_column)
            ])?;
            known.set_standing(run, key, next as u64, seq as u64);
            Ok(Written::Lease(next as u64))
        }
        Write::ReleaseLease {
            run,
            epoch,
            status,
            head,
        } => {
            let key = check_epoch(tx, known, run, *epoch)?;
            let held: Option<String> = tx
                .prepare_cached(
                    "SELECT status FROM runs WHERE key = ?1 AND lease_owner IS NOT NULL",
                )?
                .query_row([key], |r| r.get(0))
                .optional()?;
            if let Some(now) = held {
                let now = RunStatus::parse(&now).unwrap_or(RunStatus::Running);
                tx.prepare_cached(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_ms = 0, status = ?2 WHERE key = ?1",
                )?
                .execute(params![key, protocol::status_on_release(now, *status).as_str()])?;
                write_head(tx, known, key, run, head.as_ref())?;
            }
            // Nothing more is written for it until a lease is taken again.
            known.forget(run);
            Ok(Written::Done)
        }
        Write::PublishMemory(p) => {
            check_epoch(tx, known, &p.run, p.epoch)?;
            super::global_memory::publish(tx, p)
        }
        Write::RemoveMemory(r) => super::global_memory::remove(tx, r),
        Write::Prune(p) => super::retention::prune(tx, p),
        Write::Import(run) => super::import::import(tx, run),
        Write::SetControl { run, control } => {
            let key = known.key(tx, run)?;
            if control.is_some() {
                let status: String = tx
                    .prepare_cached("SELECT status FROM runs WHERE key = ?1")?
                    .query_row([key], |r| r.get(0))?;
                let status = RunStatus::parse(&status).unwrap_or(RunStatus::Running);
                protocol::may_request(run, status, control.as_ref())?;
            }
            let value = control.as_ref().map(Control::to_column);
            tx.prepare_cached("UPDATE runs SET control = ?2 WHERE key = ?1")?
                .execute(params![key, value])?;
            Ok(Written::Done)
        }
    }
}

fn create_run(tx: &Connection, known: &mut Scope<'_>, new: &NewRun) -> Result<Written, StoreError> {
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
    // A fork's history starts in its parent's: a parent pruned since it was read is refused
    // (the prune and this write are serialized by the file's write lock).
    if let Some(p) = parent
        && !tx
            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")?
            .exists([p])?
    {
        return Err(StoreError::UnknownRun(p.to_owned()));
    }
    let seq = fork_seq.unwrap_or(0);
    let kind = if new.parent.is_some() {
        "preparing"
    } else {
        "created"
    };
    // A new run's first head replaces none: nothing to check it against.
    tx.prepare_cached(
        "INSERT INTO runs (id, status, state_kind, seq, lease_epoch, lease_owner, lease_expires_ms, control, \
         updated_ms, cost_nanos, tokens, unpriced_turns, head, seal) \
         VALUES (?1, 'running', ?2, ?3, 1, ?4, ?5, NULL, ?6, 0, 0, 0, ?7, ?8)",
    )?
    .execute(params![
        new.id.as_str(),
        kind,
        seq,
        new.owner,
        new.lease_expires_ms as i64,
        new.now_ms as i64,
        stored_head(&new.head),
        new.head.seal
    ])?;
    let key = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
    )?
    .execute(params![
        key,
        parent,
        fork_seq,
        new.spec,
        new.setup,
        new.goal,
        new.now_ms as i64
    ])?;
    super::run_summary::insert(tx, key, &new.spec, parent, &new.goal, new.now_ms as i64)?;
    if let Some(link) = &new.session {
        super::sessions::place(tx, key, link)?;
    }
    known.created(&new.id, key, seq as u64, new.head.body_digest());
    Ok(Written::Lease(1))
}

/// Fences a write of `run` by its lease `epoch`; returns the run's key.
fn check_epoch(
    tx: &Connection,
    known: &mut Scope<'_>,
    run: &RunId,
    epoch: u64,
) -> Result<i64, StoreError> {
    let (key, current, _) = known.standing(tx, run)?;
    protocol::fence(run, epoch, current)?;
    Ok(key)
}

/// Writes consecutive transitions of one run (one driver write, packed by [`Job::new`], with
/// each commit's `blobs`): each fenced and sequenced, the run's row updated once to where the
/// last leaves it, with the head it carries.
fn commit(
    tx: &Connection,
    known: &mut Scope<'_>,
    cs: &[Commit],
    blobs: &[Vec<(Digest, PackedBlob)>],
) -> Result<Written, StoreError> {
    let Some(last) = cs.last() else {
        return Ok(Written::Done);
    };
    let (key, epoch, first) = known.standing(tx, &last.run)?;
    // Checked before anything is written: a refused write changes nothing.
    let numbered = cs.iter().map(|c| protocol::Numbered {
        run: &c.run,
        epoch: c.epoch,
        seq: c.seq,
    });
    protocol::in_sequence(&last.run, epoch, first, numbered)?;
    for c in cs {
        check_head(tx, known, key, &c.run, c.head.as_ref())?;
    }
    for (i, c) in cs.iter().enumerate() {
        transition_rows(tx, key, c, blobs.get(i).map_or(&[][..], Vec::as_slice))?;
    }
    let c = last;
    // The head the write leads to: the last it carries (the engine puts one on its last commit).
    let head = cs.iter().rev().find_map(|c| c.head.as_ref());
    tx.prepare_cached(
        "UPDATE runs SET seq = ?2, status = ?3, state_kind = ?4, updated_ms = ?5, cost_nanos = ?6, tokens = ?7, \
         lease_expires_ms = ?8, unpriced_turns = ?9, head = coalesce(?10, head), seal = coalesce(?11, seal) \
         WHERE key = ?1",
    )?
    .execute(params![
        key,
        c.seq as i64,
        c.status.as_str(),
        c.state_kind.as_str(),
        c.now_ms as i64,
        c.cost_nanos as i64,
        c.tokens as i64,
        c.lease_expires_ms as i64,
        c.unpriced_turns as i64,
        head.map(stored_head),
        head.map(|h| &h.seal)
    ])?;
    // Written once, by the commit that ends the run (nothing leaves `Done`).
    if let Some(outcome) = &c.outcome {
        tx.prepare_cached("UPDATE run_specs SET outcome = ?2 WHERE run = ?1")?
            .execute(params![key, outcome])?;
        super::run_summary::set_ended(tx, key, outcome)?;
    }
    known.set_standing(&c.run, key, epoch, c.seq);
    if let Some(h) = head {
        known.set_head(&c.run, key, h.body_digest());
    }
    Ok(Written::Done)
}

/// The rows of one transition (packed by [`Job::new`]): itself, its new `blobs`, its
/// snapshot, its outbox rows and the outbox row it answers.
fn transition_rows(
    tx: &Connection,
    key: i64,
    c: &Commit,
    blobs: &[(Digest, PackedBlob)],
) -> Result<(), StoreError> {
    let id = row_id(key, c.seq);
    tx.prepare_cached(
        "INSERT INTO transitions (id, at, event, edge, effects, state_hash, chain, seal) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        id,
        c.at.0 as i64,
        c.event,
        &edge_code(c.edge)[..],
        c.effects,
        &c.state_hash.0[..],
        &c.chain.0[..],
        c.seal
    ])?;
    if !blobs.is_empty() {
        let mut stored = tx.prepare_cached(super::BLOB_STORED)?;
        let mut insert = tx.prepare_cached(super::INSERT_BLOB)?;
        let mut refer = tx.prepare_cached(super::INSERT_BLOB_REF)?;
        for (d, blob) in blobs {
            if !stored.exists(params![&d.0[..]])? {
                insert.execute(params![&d.0[..], blob.stored(id as u64).as_ref()])?;
            }
            refer.execute(params![&d.0[..], key])?;
        }
    }
    if let Some(state) = &c.snapshot {
        tx.prepare_cached("INSERT OR REPLACE INTO snapshots (id, state) VALUES (?1, ?2)")?
            .execute(params![id, state])?;
    }
    if !c.outbox.is_empty() {
        insert_outbox(tx, key, &c.outbox)?;
    }
    if let Some(e) = c.resolves {
        tx.prepare_cached(
            "UPDATE outbox SET status = 'done' WHERE run = ?1 AND seq = ?2 AND idx = ?3",
        )?
        .execute(params![key, e.seq as i64, i64::from(e.index)])?;
    }
    Ok(())
}

/// Replaces the run's sealed head (no-op for `None`), if the stored one is the head it says
/// it replaces.
fn write_head(
    tx: &Connection,
    known: &mut Scope<'_>,
    key: i64,
    run: &RunId,
    head: Option<&HeadRecord>,
) -> Result<(), StoreError> {
    check_head(tx, known, key, run, head)?;
    put_head(tx, known, key, run, head)
}

/// Refuses a head (`None`: no head, nothing to check) that replaces another than the one
/// stored. Reads only.
fn check_head(
    tx: &Connection,
    known: &mut Scope<'_>,
    key: i64,
    run: &RunId,
    head: Option<&HeadRecord>,
) -> Result<(), StoreError> {
    match head.and_then(|h| h.replaces) {
        Some(replaces) => protocol::head_follows(run, known.head(tx, run, key)?, Some(replaces)),
        None => Ok(()),
    }
}

/// Stores `head` as the run's (no-op for `None`), unchecked.
fn put_head(
    tx: &Connection,
    known: &mut Scope<'_>,
    key: i64,
    run: &RunId,
    head: Option<&HeadRecord>,
) -> Result<(), StoreError> {
    let Some(h) = head else { return Ok(()) };
    tx.prepare_cached("UPDATE runs SET head = ?2, seal = ?3 WHERE key = ?1")?
        .execute(params![key, stored_head(h), h.seal])?;
    known.set_head(run, key, h.body_digest());
    Ok(())
}

/// Inserts `rows` as the outbox rows of the run at `key`: a commit's new effects, or an
/// imported run's whole outbox.
pub(super) fn insert_outbox(
    tx: &Connection,
    key: i64,
    rows: &[crate::store::OutboxRecord],
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO outbox (run, seq, idx, status, idempotency_key) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for o in rows {
        stmt.execute(params![
            key,
            o.effect.seq as i64,
            i64::from(o.effect.index),
            o.status.as_str(),
            o.idempotency_key
        ])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file the writer tests write, as errors name it.
    fn w_db() -> DbFile {
        DbFile {
            shown: "w.db".into(),
            cap_bytes: None,
        }
    }
    use crate::machine::{EdgeId, Hlc};

    fn db(dir: &std::path::Path) -> Connection {
        let path = dir.join("w.db");
        let mut conn = super::super::super::schema::open(&path).expect("opens");
        super::super::super::schema::prepare(&mut conn, "w.db", true).expect("prepares");
        conn
    }

    fn job(write: Write) -> Job {
        // Nobody waits on these acknowledgements: `apply_batch`'s results are checked.
        let (ack, _) = oneshot::channel();
        Job::new(write, ack)
    }

    fn commit(run: &str, epoch: u64, seq: u64) -> Commit {
        let mut c = Commit::new(
            RunId::new(run),
            epoch,
            seq,
            EdgeId::CreatedStart,
            Hlc::from_ms(1),
            1,
        );
        c.event = format!("{{\"seq\":{seq}}}").into_bytes();
        c
    }

    fn create(run: &str) -> Write {
        Write::CreateRun(NewRun::sample(run))
    }

    /// A database in `dir` holding runs `a` and `b`, created by the writer, and what it knows.
    fn runs_a_and_b(dir: &std::path::Path) -> (Connection, Known) {
        let mut conn = db(dir);
        let mut known = Known::default();
        let created = apply_batch(
            &mut conn,
            &mut known,
            &[job(create("a")), job(create("b"))],
            &w_db(),
        );
        assert!(created.iter().all(Result::is_ok), "{created:?}");
        (conn, known)
    }

    fn seqs(conn: &Connection, run: &str) -> (i64, Vec<i64>) {
        let key: i64 = conn
            .query_row("SELECT key FROM runs WHERE id = ?1", [run], |r| r.get(0))
            .expect("the run");
        let seq = conn
            .query_row("SELECT seq FROM runs WHERE key = ?1", [key], |r| r.get(0))
            .expect("its row");
        let mut stmt = conn
            .prepare("SELECT id & 4294967295 FROM transitions WHERE id >> 32 = ?1 ORDER BY id")
            .expect("prepares");
        let rows = stmt
            .query_map([key], |r| r.get(0))
            .expect("reads")
            .collect::<rusqlite::Result<Vec<i64>>>()
            .expect("reads");
        (seq, rows)
    }

    #[test]
    fn a_blob_is_stored_once_however_many_writes_carry_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut conn, mut known) = runs_a_and_b(dir.path());
        let shared = (Digest([7; 32]), b"shared blob".to_vec());
        let own = (Digest([8; 32]), b"b's own blob".to_vec());
        let mut a1 = commit("a", 1, 1);
        // Twice in one commit, and again in another run's commit of the same batch.
        a1.blobs = vec![shared.clone(), shared.clone()];
        let mut b1 = commit("b", 1, 1);
        b1.blobs = vec![shared.clone(), own.clone()];
        let results = apply_batch(
            &mut conn,
            &mut known,
            &[
                job(Write::Commit(Box::new(a1))),
                job(Write::Commit(Box::new(b1))),
            ],
            &w_db(),
        );
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        // And once more in a later batch.
        let mut a2 = commit("a", 1, 2);
        a2.blobs = vec![shared.clone()];
        let later = apply_batch(
            &mut conn,
            &mut known,
            &[job(Write::Commit(Box::new(a2)))],
            &w_db(),
        );
        assert!(later[0].is_ok(), "{later:?}");
        let count = |d: &Digest| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM blobs WHERE hash = ?1",
                [&d.0[..]],
                |r| r.get(0),
            )
            .expect("counts")
        };
        assert_eq!(count(&shared.0), 1, "the shared blob is stored once");
        assert_eq!(count(&own.0), 1, "a new blob is stored");
        let total: i64 = conn
            .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
            .expect("counts");
        assert_eq!(total, 2);
    }

    #[test]
    fn a_write_failing_half_way_is_left_out_whole_and_the_rest_of_its_batch_commits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut conn, mut known) = runs_a_and_b(dir.path());
        // A stray row where run a's second transition goes: its first insert succeeds, the
        // second fails on the unique id, after the write changed rows.
        conn.execute(
            "INSERT INTO transitions (id, at, event, edge, effects, state_hash, chain) \
             SELECT (key << 32) | 2, 0, x'', x'', x'', x'', x'' FROM runs WHERE id = 'a'",
            [],
        )
        .expect("a stray row");
        let batch = [
            job(Write::Commit(Box::new(commit("b", 1, 1)))),
            job(Write::Commits(vec![commit("a", 1, 1), commit("a", 1, 2)])),
            job(Write::Commit(Box::new(commit("b", 9, 2)))),
            job(Write::Commit(Box::new(commit("b", 1, 2)))),
        ];
        let results = apply_batch(&mut conn, &mut known, &batch, &w_db());
        assert!(results[0].is_ok() && results[3].is_ok(), "{results:?}");
        assert!(results[1].is_err(), "the half-way failure is reported");
        assert!(
            matches!(results[2], Err(StoreError::Fenced { .. })),
            "a refused write: {results:?}"
        );
        assert_eq!(
            seqs(&conn, "a"),
            (0, vec![2]),
            "nothing of run a's write is left"
        );
        assert_eq!(
            seqs(&conn, "b"),
            (2, vec![1, 2]),
            "the rest of the batch committed"
        );
        // What the writer knows is what is stored.
        let next = apply_batch(
            &mut conn,
            &mut known,
            &[job(Write::Commit(Box::new(commit("b", 1, 3))))],
            &w_db(),
        );
        assert!(next[0].is_ok(), "{next:?}");
    }
}
