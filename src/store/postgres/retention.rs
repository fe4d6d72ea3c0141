//! `runtape prune` in PostgreSQL (schema 6; blobs from schema 8): the tombstones read back, and
//! the prune write inside the writer's transaction. The rules, and why blobs are found through
//! `blob_refs`, are [`crate::store::retention`]'s; blobs are stored whole here (nothing refers
//! to a transition's event), so one no kept run refers to is simply removed.
//!
//! The prune first takes `blob_refs` in `SHARE ROW EXCLUSIVE` mode: it waits for every commit
//! in flight that inserted blob references and holds new ones until it commits, so no commit
//! can find a blob stored, skip storing it and refer to it while the prune removes it. The
//! runs' rows are then locked (`FOR UPDATE`) before they are checked, and tombstones are
//! numbered under a transaction-scoped advisory lock, so two prunes at once take turns.

use std::collections::BTreeSet;

use tokio_postgres::Row;

use super::conn::Conn;
use super::read::ReadError;
use super::writer::Fail;
use crate::machine::{Digest, RunId};
use crate::store::retention::{BlobsFreed, Prune, TombstoneRecord};
use crate::store::{RunStatus, StoreError, Written};

/// The advisory lock taken while tombstones are numbered.
const TOMBSTONES_LOCK: &str = "runtape:pruned-runs";

fn record(r: &Row) -> Result<TombstoneRecord, tokio_postgres::Error> {
    let chain: Vec<u8> = r.try_get(3)?;
    Ok(TombstoneRecord {
        id: r.try_get::<_, i64>(0)? as u64,
        run: RunId::new(r.try_get::<_, String>(1)?),
        body: r.try_get(2)?,
        chain: Digest(chain.try_into().unwrap_or([0u8; 32])),
    })
}

/// See [`Store::tombstones`](crate::store::Store::tombstones).
pub(super) async fn tombstones(c: &Conn) -> Result<Vec<TombstoneRecord>, ReadError> {
    let found = c
        .query(
            "SELECT id, run_id, body, chain FROM runtape.pruned_runs ORDER BY id",
            &[],
        )
        .await?;
    Ok(found.iter().map(record).collect::<Result<_, _>>()?)
}

/// Applies `p` inside the writer's transaction: checks every run may still go, removes its
/// rows, writes the tombstones. Nothing is written before every check has passed.
pub(super) async fn prune(c: &Conn, p: &Prune) -> Result<Written, Fail> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&TOMBSTONES_LOCK],
    )
    .await?;
    c.execute(
        "LOCK TABLE runtape.blob_refs IN SHARE ROW EXCLUSIVE MODE",
        &[],
    )
    .await?;
    let going: BTreeSet<&str> = p.runs.iter().map(|r| r.run.as_str()).collect();
    let mut keys: Vec<i64> = Vec::with_capacity(p.runs.len());
    for r in &p.runs {
        let refuse = |why: String| {
            Fail::Refused(StoreError::PruneRefused {
                run: r.run.to_string(),
                why,
            })
        };
        let row = c
            .query_opt(
                "SELECT key, status, seq, lease_owner, lease_expires_ms > runtape.now_ms() \
                 FROM runtape.runs WHERE id = $1 FOR UPDATE",
                &[&r.run.as_str()],
            )
            .await?;
        let Some(row) = row else {
            return Err(refuse("it is no longer stored".into()));
        };
        let key: i64 = row.try_get(0)?;
        let status: String = row.try_get(1)?;
        let seq = row.try_get::<_, i64>(2)? as u64;
        let owner: Option<String> = row.try_get(3)?;
        let unexpired: bool = row.try_get(4)?;
        let now = RunStatus::parse(&status);
        if now != Some(r.status) || !now.is_some_and(RunStatus::is_terminal) || seq != r.seq {
            return Err(refuse(format!(
                "it has not ended or moved on since it was read (now {status} at seq {seq})"
            )));
        }
        if let Some(owner) = owner.filter(|_| unexpired) {
            return Err(refuse(format!("its lease is held by {owner}")));
        }
        let dependents = c
            .query(
                "SELECT r.id FROM runtape.run_specs s JOIN runtape.runs r ON r.key = s.run \
                 WHERE s.parent_id = $1 \
                 UNION SELECT id FROM runtape.runs WHERE id > $1 || '.' AND id < $1 || '/' \
                 UNION SELECT r.id FROM runtape.session_runs a \
                   JOIN runtape.session_runs b ON b.session = a.session \
                   JOIN runtape.runs r ON r.key = b.run WHERE a.run = $2",
                &[&r.run.as_str(), &key],
            )
            .await?;
        for d in &dependents {
            let other: String = d.try_get(0)?;
            if !going.contains(other.as_str()) {
                return Err(refuse(format!(
                    "run {other}, which shares its history, results or session, is kept"
                )));
            }
        }
        let published = c
            .query_opt(
                "SELECT 1 FROM runtape.memory_global WHERE run_id = $1 LIMIT 1",
                &[&r.run.as_str()],
            )
            .await?;
        if published.is_some() {
            return Err(refuse(
                "it published global memory rows, which verify checks against its history".into(),
            ));
        }
        keys.push(key);
    }
    for key in &keys {
        let (from, to) = (key << 32, (key << 32) | 0xffff_ffff);
        for sql in [
            "DELETE FROM runtape.transitions WHERE id BETWEEN $1 AND $2",
            "DELETE FROM runtape.snapshots WHERE id BETWEEN $1 AND $2",
        ] {
            c.execute(sql, &[&from, &to]).await?;
        }
        for sql in [
            "DELETE FROM runtape.outbox WHERE run = $1",
            "DELETE FROM runtape.session_runs WHERE run = $1",
            "DELETE FROM runtape.run_specs WHERE run = $1",
            "DELETE FROM runtape.run_summary WHERE run = $1",
            "DELETE FROM runtape.run_tags WHERE run = $1",
        ] {
            c.execute(sql, &[key]).await?;
        }
        c.execute("DELETE FROM runtape.runs WHERE key = $1", &[key])
            .await?;
    }
    let prev = c
        .query_opt(
            "SELECT id, run_id, body, chain FROM runtape.pruned_runs ORDER BY id DESC LIMIT 1",
            &[],
        )
        .await?
        .map(|found| record(&found))
        .transpose()?;
    for t in p.tombstones_after(prev.as_ref()) {
        c.execute(
            "INSERT INTO runtape.pruned_runs (id, run_id, body, chain) VALUES ($1, $2, $3, $4)",
            &[&(t.id as i64), &t.run.as_str(), &t.body, &&t.chain.0[..]],
        )
        .await?;
    }
    Ok(Written::Pruned(remove_blobs(c, &keys).await?))
}

/// Removes the `blob_refs` rows of the runs `keys`, then the blobs they named that no other
/// row names (under the table lock taken first, every commit's rows are in), and counts them.
async fn remove_blobs(c: &Conn, keys: &[i64]) -> Result<BlobsFreed, Fail> {
    let referred: Vec<Vec<u8>> = c
        .query(
            "DELETE FROM runtape.blob_refs WHERE run = ANY($1) RETURNING hash",
            &[&keys],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    if referred.is_empty() {
        return Ok(BlobsFreed::default());
    }
    let sizes = c
        .query(
            "DELETE FROM runtape.blobs b WHERE b.hash = ANY($1) \
             AND NOT EXISTS (SELECT 1 FROM runtape.blob_refs r WHERE r.hash = b.hash) \
             RETURNING octet_length(b.bytes)::bigint",
            &[&referred],
        )
        .await?;
    let mut freed = BlobsFreed::default();
    for row in &sizes {
        freed.add(BlobsFreed {
            blobs: 1,
            bytes: row.try_get::<_, i64>(0)? as u64,
        });
    }
    Ok(freed)
}

/// See [`Store::blobs_only_of`](crate::store::Store::blobs_only_of) (reads only).
pub(super) async fn blobs_only_of(c: &Conn, runs: &[String]) -> Result<BlobsFreed, ReadError> {
    let found = c
        .query(
            "WITH going AS (SELECT key FROM runtape.runs WHERE id = ANY($1)), \
             referred AS (SELECT DISTINCT hash FROM runtape.blob_refs WHERE run IN (SELECT key FROM going)) \
             SELECT count(*), coalesce(sum(octet_length(b.bytes)), 0)::bigint \
             FROM runtape.blobs b JOIN referred USING (hash) \
             WHERE NOT EXISTS (SELECT 1 FROM runtape.blob_refs r \
                 WHERE r.hash = b.hash AND r.run NOT IN (SELECT key FROM going))",
            &[&runs],
        )
        .await?;
    let Some(found) = found.first() else {
        return Ok(BlobsFreed::default());
    };
    Ok(BlobsFreed {
        blobs: found.try_get::<_, i64>(0)? as u64,
        bytes: found.try_get::<_, i64>(1)? as u64,
    })
}
