//! `runtape prune` in SQLite (schema 11; blobs from schema 14): the tombstones read back, and
//! the prune write inside the writer's transaction. The rules, and why blobs are found through
//! `blob_refs`, are [`crate::store::retention`]'s.
//!
//! Every check is made before anything is written, so a refused prune leaves the transaction
//! as it found it. A blob a kept run still refers to that refers to the event of a removed
//! transition (a packed node, [`crate::format::packed_blob`]) is rewritten standing alone
//! first; the blobs no kept run refers to are removed.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::super::retention::{BlobsFreed, Prune, TombstoneRecord};
use super::super::{RunStatus, StoreError, Written};
use super::bytes_at;
use crate::format::packed_blob::{PackedBlob, blob_source};
use crate::machine::{Digest, RunId};

/// Every tombstone, in id order.
pub(super) fn tombstones(c: &Connection) -> rusqlite::Result<Vec<TombstoneRecord>> {
    c.prepare_cached("SELECT id, run_id, body, chain FROM pruned_runs ORDER BY id")?
        .query_map([], record)?
        .collect()
}

fn record(r: &rusqlite::Row<'_>) -> rusqlite::Result<TombstoneRecord> {
    Ok(TombstoneRecord {
        id: r.get::<_, i64>(0)? as u64,
        run: RunId::new(r.get::<_, String>(1)?),
        body: bytes_at(r, 2)?,
        chain: Digest(bytes_at(r, 3)?.try_into().unwrap_or([0u8; 32])),
    })
}

/// Applies `p` inside the writer's transaction: checks every run may still go, makes the blobs
/// that refer to their transitions stand alone, removes their rows, writes their tombstones.
pub(super) fn prune(tx: &Connection, p: &Prune) -> Result<Written, StoreError> {
    let going: BTreeSet<&str> = p.runs.iter().map(|r| r.run.as_str()).collect();
    let mut keys = Vec::with_capacity(p.runs.len());
    for r in &p.runs {
        let refuse = |why: String| StoreError::PruneRefused {
            run: r.run.to_string(),
            why,
        };
        let row = tx
            .prepare_cached(
                "SELECT key, status, seq, lease_owner, lease_expires_ms FROM runs WHERE id = ?1",
            )?
            .query_row([r.run.as_str()], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)? as u64,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, i64>(4)?,
                ))
            })
            .optional()?;
        let Some((key, status, seq, owner, expires)) = row else {
            return Err(refuse("it is no longer stored".into()));
        };
        let now = RunStatus::parse(&status);
        if now != Some(r.status) || !now.is_some_and(RunStatus::is_terminal) || seq != r.seq {
            return Err(refuse(format!(
                "it has not ended or moved on since it was read (now {status} at seq {seq})"
            )));
        }
        if let Some(owner) = owner.filter(|_| expires > p.now_ms as i64) {
            return Err(refuse(format!("its lease is held by {owner}")));
        }
        let forks: Vec<String> = tx
            .prepare_cached(
                "SELECT r.id FROM run_specs s JOIN runs r ON r.key = s.run WHERE s.parent_id = ?1",
            )?
            .query_map([r.run.as_str()], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let below: Vec<String> = tx
            .prepare_cached("SELECT id FROM runs WHERE id > ?1 || '.' AND id < ?1 || '/'")?
            .query_map([r.run.as_str()], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if let Some(other) = forks
            .iter()
            .chain(&below)
            .find(|id| !going.contains(id.as_str()))
        {
            return Err(refuse(format!(
                "run {other}, which shares its history or results, is kept"
            )));
        }
        let session_mates: Vec<String> = tx
            .prepare_cached(
                "SELECT r.id FROM session_runs a JOIN session_runs b ON b.session = a.session \
                 JOIN runs r ON r.key = b.run WHERE a.run = ?1",
            )?
            .query_map([key], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if let Some(other) = session_mates.iter().find(|id| !going.contains(id.as_str())) {
            return Err(refuse(format!("run {other} of its session is kept")));
        }
        let published = tx
            .prepare_cached("SELECT 1 FROM memory_global WHERE run_id = ?1 LIMIT 1")?
            .exists([r.run.as_str()])?;
        if published {
            return Err(refuse(
                "it published global memory rows, which verify checks against its history".into(),
            ));
        }
        keys.push(key);
    }
    let (kept, gone) = blobs_of(tx, &keys)?;
    stand_blobs_alone(tx, &keys, &kept)?;
    for key in &keys {
        let (from, to) = (key << 32, (key << 32) | 0xffff_ffff);
        tx.prepare_cached("DELETE FROM transitions WHERE id BETWEEN ?1 AND ?2")?
            .execute([from, to])?;
        tx.prepare_cached("DELETE FROM snapshots WHERE id BETWEEN ?1 AND ?2")?
            .execute([from, to])?;
        for table in ["outbox", "session_runs", "run_summary", "run_tags"] {
            tx.prepare_cached(&format!("DELETE FROM {table} WHERE run = ?1"))?
                .execute([key])?;
        }
        tx.prepare_cached("DELETE FROM run_specs WHERE run = ?1")?
            .execute([key])?;
        tx.prepare_cached("DELETE FROM runs WHERE key = ?1")?
            .execute([key])?;
    }
    let prev = tx
        .prepare_cached("SELECT id, run_id, body, chain FROM pruned_runs ORDER BY id DESC LIMIT 1")?
        .query_row([], record)
        .optional()?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO pruned_runs (id, run_id, body, chain) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for t in p.tombstones_after(prev.as_ref()) {
        insert.execute(params![t.id as i64, t.run.as_str(), t.body, &t.chain.0[..]])?;
    }
    Ok(Written::Pruned(remove_blobs(tx, &gone)?))
}

/// Blob digests (as stored).
type Digests = BTreeSet<Vec<u8>>;

/// The blobs the runs `keys` refer to, split into those a run not among them still refers to
/// and those no other run does; their `blob_refs` rows are removed. Reads the runs' rows
/// through the index by run and probes each blob once: the cost is what goes.
fn blobs_of(tx: &Connection, keys: &[i64]) -> Result<(Digests, Digests), StoreError> {
    let mut referred = Digests::new();
    for key in keys {
        let hashes = tx
            .prepare_cached("SELECT hash FROM blob_refs WHERE run = ?1")?
            .query_map([key], |r| bytes_at(r, 0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        referred.extend(hashes);
        tx.prepare_cached("DELETE FROM blob_refs WHERE run = ?1")?
            .execute([key])?;
    }
    let (mut kept, mut gone) = (Digests::new(), Digests::new());
    for hash in referred {
        let shared = tx
            .prepare_cached("SELECT 1 FROM blob_refs WHERE hash = ?1 LIMIT 1")?
            .exists([&hash])?;
        if shared { &mut kept } else { &mut gone }.insert(hash);
    }
    Ok((kept, gone))
}

/// Removes the blobs `gone` (every row under each digest) and counts them.
fn remove_blobs(tx: &Connection, gone: &Digests) -> Result<BlobsFreed, StoreError> {
    let mut freed = BlobsFreed::default();
    for hash in gone {
        let (rows, bytes): (i64, i64) = tx
            .prepare_cached(super::BLOB_SIZE)?
            .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?)))?;
        tx.prepare_cached(super::DELETE_BLOB)?.execute([hash])?;
        freed.add(BlobsFreed {
            blobs: rows as u64,
            bytes: bytes as u64,
        });
    }
    Ok(freed)
}

/// Rewrites standing alone (the same bytes when read) each blob of `kept` that refers to the
/// event of a transition of the runs `keys`, as that transition goes. Blobs stored before
/// `blob_refs` existed (a row of run 0) are not among `kept` however many runs share them, so
/// while any is stored each packed one is read (the cost of a prune before schema 14).
fn stand_blobs_alone(tx: &Connection, keys: &[i64], kept: &Digests) -> Result<(), StoreError> {
    let going: BTreeSet<i64> = keys.iter().copied().collect();
    let mut referring: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
    for hash in kept {
        let rows = tx
            .prepare_cached(super::REFERRING_BLOB)?
            .query_map([hash], |r| {
                Ok((r.get(0)?, bytes_at(r, 1)?, bytes_at(r, 2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        referring.extend(rows);
    }
    let legacy = tx
        .prepare_cached("SELECT 1 FROM blob_refs WHERE run = 0 LIMIT 1")?
        .exists([])?;
    if legacy {
        let rows = tx
            .prepare_cached(
                "SELECT rowid, hash, bytes FROM blobs WHERE substr(bytes, 33, 1) = x'02' \
                 AND hash IN (SELECT hash FROM blob_refs WHERE run = 0)",
            )?
            .query_map([], |r| Ok((r.get(0)?, bytes_at(r, 1)?, bytes_at(r, 2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        referring.extend(rows);
    }
    for (rowid, hash, bytes) in referring {
        let Some(source) = blob_source(&bytes).and_then(|s| i64::try_from(s).ok()) else {
            continue;
        };
        if !going.contains(&(source >> 32)) {
            continue;
        }
        let event: Option<Vec<u8>> = tx
            .prepare_cached("SELECT event FROM transitions WHERE id = ?1")?
            .query_row([source], |r| bytes_at(r, 0))
            .optional()?;
        let digest = Digest(hash.try_into().unwrap_or([0u8; 32]));
        let whole = super::unpacked(&digest, bytes, event.as_deref())?;
        let alone = PackedBlob::new(&whole, &[]);
        tx.prepare_cached("UPDATE blobs SET bytes = ?2 WHERE rowid = ?1")?
            .execute(params![rowid, alone.stored(0).as_ref()])?;
    }
    Ok(())
}

/// See [`Store::blobs_only_of`](crate::store::Store::blobs_only_of): the blobs `runs` refer to
/// that no other run does, probed one by one as a prune does (reads only).
pub(super) fn blobs_only_of(c: &Connection, runs: &[RunId]) -> rusqlite::Result<BlobsFreed> {
    let mut keys = BTreeSet::new();
    for run in runs {
        let key = c
            .prepare_cached("SELECT key FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get::<_, i64>(0))
            .optional()?;
        keys.extend(key);
    }
    let mut referred = Digests::new();
    for key in &keys {
        let hashes = c
            .prepare_cached("SELECT hash FROM blob_refs WHERE run = ?1")?
            .query_map([key], |r| bytes_at(r, 0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        referred.extend(hashes);
    }
    let mut freed = BlobsFreed::default();
    for hash in referred {
        let others = c
            .prepare_cached("SELECT run FROM blob_refs WHERE hash = ?1")?
            .query_map([&hash], |r| r.get::<_, i64>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if others.iter().any(|run| !keys.contains(run)) {
            continue;
        }
        let (rows, bytes): (i64, i64) = c
            .prepare_cached(super::BLOB_SIZE)?
            .query_row([&hash], |r| Ok((r.get(0)?, r.get(1)?)))?;
        freed.add(BlobsFreed {
            blobs: rows as u64,
            bytes: bytes as u64,
        });
    }
    Ok(freed)
}
