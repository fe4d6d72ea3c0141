//! The writer thread: drains queued writes into one transaction per batch (group commit),
//! commits, then acknowledges each write. Nothing is acknowledged before its transaction
//! commits; every write of a run is fenced by its lease epoch and carries its sealed head.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::super::schema::{classify, row_id};
use super::super::{Commit, Control, HeadRecord, NewRun, RunStatus, StoreError, Write, Written};
use super::{CommitStats, bytes_at};
use crate::ledger::codec::edge_code;
use crate::ledger::packed::pack;
use crate::ledger::packed_blob::pack_blob;
use crate::machine::{Digest, RunId};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 1024;

/// Prepared statements the writer's connection keeps (it uses about 30 distinct ones).
const WRITER_STATEMENTS: usize = 64;

/// A queued write and where its acknowledgement goes.
pub(super) type Job = (Write, oneshot::Sender<Result<Written, StoreError>>);

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
pub(super) fn writer_loop(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Job>,
    shown: String,
    stats: &CommitStats,
) {
    // Every statement the writer runs stays prepared: rusqlite keeps 16 by default, fewer
    // than the writer's, and one evicted is parsed again at its next use.
    conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
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
    let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(classify(shown, e)),
    };
    let mut created = Vec::new();
    let mut results = Vec::with_capacity(batch.len());
    for (write, _) in batch {
        let result = in_savepoint(&tx, |sp| apply(sp, keys, write, &mut created), shown)
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

/// Runs `f` inside a savepoint of `tx`: what it wrote stays if it succeeds and is undone if
/// it fails, the rest of the batch going on. The savepoint statements are prepared once per
/// connection (rusqlite's `Savepoint` parses them again for every write, a measurable share of
/// the writer's time when thousands of runs commit together).
fn in_savepoint(
    tx: &Connection,
    f: impl FnOnce(&Connection) -> Result<Written, StoreError>,
    shown: &str,
) -> Result<Written, StoreError> {
    let statement = |sql: &str| -> Result<(), StoreError> {
        tx.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(|_| ())
            .map_err(|e| classify(shown, e))
    };
    statement("SAVEPOINT write")?;
    match f(tx) {
        Ok(written) => {
            statement("RELEASE write")?;
            Ok(written)
        }
        Err(e) => {
            if !tx.is_autocommit() {
                // Undo this write alone; when this fails too, SQLite has rolled the whole
                // transaction back, which the caller sees from `is_autocommit`.
                let _ = statement("ROLLBACK TO write");
                let _ = statement("RELEASE write");
            }
            Err(e)
        }
    }
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
            tx.prepare_cached(
                "UPDATE runs SET lease_expires_ms = ?2 WHERE key = ?1 AND lease_owner IS NOT NULL",
            )?
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
                && !super::super::lease::owner_is_dead(&holder)
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
        Write::PublishMemory(p) => {
            let key = run_key(tx, keys, created, &p.run)?;
            check_epoch(tx, key, &p.run, p.epoch)?;
            super::global_memory::publish(tx, p)
        }
        Write::RemoveMemory(r) => super::global_memory::remove(tx, r),
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
    if let Some(link) = &new.session {
        super::sessions::place(tx, key, link)?;
    }
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
    .execute(params![
        id,
        c.at.0 as i64,
        pack(&c.event),
        &edge_code(c.edge)[..],
        pack(&c.effects),
        &c.state_hash.0[..],
        &c.chain.0[..],
        c.seal
    ])?;
    if !c.blobs.is_empty() {
        let mut stmt =
            tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, bytes) VALUES (?1, ?2)")?;
        for (d, bytes) in &c.blobs {
            stmt.execute(params![&d.0[..], pack_blob(bytes, id as u64, &c.event)])?;
        }
    }
    if let Some(state) = &c.snapshot {
        tx.prepare_cached("INSERT OR REPLACE INTO snapshots (id, state) VALUES (?1, ?2)")?
            .execute(params![id, pack(state)])?;
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
