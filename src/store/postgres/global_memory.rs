//! Global memory in PostgreSQL (schema 2): the reads, and the publish and removal writes inside
//! the writer's transaction. The rules are [`crate::store::global_memory`]'s; publishes to one
//! memory, and removals, take a transaction-scoped advisory lock first, so two processes
//! applying writes at once take turns instead of colliding on a version.

use std::collections::BTreeMap;

use tokio_postgres::Row;

use super::conn::Conn;
use super::read::ReadError;
use super::writer::Fail;
use crate::machine::{Digest, EffectRef, RunId};
use crate::store::global_memory::{RemovalRecord, removal_body, row_bytes};
use crate::store::{GlobalRow, Publication, Removal, Written};

type Read<T> = Result<T, ReadError>;

/// The lock key space of global memory names (`hashtext` of `memory:NAME`).
const REMOVALS_LOCK: &str = "runtape:memory-removals";

fn row(r: &Row) -> Result<GlobalRow, tokio_postgres::Error> {
    let seq: Option<i64> = r.try_get(5)?;
    let index: Option<i64> = r.try_get(6)?;
    Ok(GlobalRow {
        name: r.try_get(0)?,
        key: r.try_get(1)?,
        version: r.try_get::<_, i64>(2)? as u64,
        value: r.try_get(3)?,
        run: r.try_get::<_, Option<String>>(4)?.map(RunId::new),
        effect: GlobalRow::effect_at(seq, index),
        removal: r.try_get::<_, Option<i64>>(7)?.map(|id| id as u64),
    })
}

fn rows(found: &[Row]) -> Read<Vec<GlobalRow>> {
    Ok(found.iter().map(row).collect::<Result<_, _>>()?)
}

/// See [`Store::memory_rows`](crate::store::Store::memory_rows).
pub(super) async fn memory_rows(c: &Conn, name: &str, latest_only: bool) -> Read<Vec<GlobalRow>> {
    let found = if latest_only {
        c.query(
            "SELECT DISTINCT ON (key) name, key, version, value, run_id, effect_seq, effect_index, removal \
             FROM runtape.memory_global WHERE name = $1 ORDER BY key, version DESC",
            &[&name],
        )
        .await?
    } else {
        c.query(
            "SELECT name, key, version, value, run_id, effect_seq, effect_index, removal \
             FROM runtape.memory_global WHERE name = $1 ORDER BY key, version",
            &[&name],
        )
        .await?
    };
    rows(&found)
}

/// See [`Store::memory_published`](crate::store::Store::memory_published).
pub(super) async fn memory_published(
    c: &Conn,
    run: &RunId,
    effect: EffectRef,
) -> Read<Vec<GlobalRow>> {
    let found = c
        .query(
            "SELECT name, key, version, value, run_id, effect_seq, effect_index, removal \
             FROM runtape.memory_global WHERE run_id = $1 AND effect_seq = $2 AND effect_index = $3 \
             ORDER BY key, version",
            &[
                &run.as_str(),
                &(effect.seq as i64),
                &i64::from(effect.index),
            ],
        )
        .await?;
    rows(&found)
}

/// See [`Store::memory_names`](crate::store::Store::memory_names).
pub(super) async fn memory_names(c: &Conn) -> Read<Vec<String>> {
    let found = c
        .query(
            "SELECT DISTINCT name FROM runtape.memory_global ORDER BY name",
            &[],
        )
        .await?;
    Ok(found
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?)
}

fn removal(r: &Row) -> Result<RemovalRecord, tokio_postgres::Error> {
    let chain: Vec<u8> = r.try_get(2)?;
    Ok(RemovalRecord {
        id: r.try_get::<_, i64>(0)? as u64,
        body: r.try_get(1)?,
        chain: Digest(chain.try_into().unwrap_or([0u8; 32])),
        seal: r.try_get(3)?,
    })
}

/// See [`Store::memory_removals`](crate::store::Store::memory_removals).
pub(super) async fn memory_removals(c: &Conn) -> Read<Vec<RemovalRecord>> {
    let found = c
        .query(
            "SELECT id, body, chain, seal FROM runtape.memory_removals ORDER BY id",
            &[],
        )
        .await?;
    Ok(found.iter().map(removal).collect::<Result<_, _>>()?)
}

async fn insert(c: &Conn, r: &GlobalRow) -> Result<(), Fail> {
    c.execute(
        "INSERT INTO runtape.memory_global (name, key, version, value, run_id, effect_seq, effect_index, removal) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &r.name,
            &r.key,
            &(r.version as i64),
            &r.value,
            &r.run.as_ref().map(RunId::as_str),
            &r.effect.map(|e| e.seq as i64),
            &r.effect.map(|e| i64::from(e.index)),
            &r.removal.map(|id| id as i64),
        ],
    )
    .await?;
    Ok(())
}

/// Applies `p` (the caller locked the run's row and checked its epoch): nothing when its rows
/// exist already or a written key moved, else every row.
pub(super) async fn publish(c: &Conn, p: &Publication) -> Result<Written, Fail> {
    let lock = format!("runtape:memory:{}", p.name);
    c.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock])
        .await?;
    let done = c
        .query_opt(
            "SELECT 1 FROM runtape.memory_global WHERE run_id = $1 AND effect_seq = $2 AND effect_index = $3 LIMIT 1",
            &[
                &p.run.as_str(),
                &(p.effect.seq as i64),
                &i64::from(p.effect.index),
            ],
        )
        .await?;
    if done.is_some() {
        return Ok(Written::Done);
    }
    let mut latest = BTreeMap::new();
    let mut current = BTreeMap::new();
    for key in p.writes.keys() {
        let r = c
            .query_opt(
                "SELECT version, value FROM runtape.memory_global WHERE name = $1 AND key = $2 ORDER BY version DESC LIMIT 1",
                &[&p.name, key],
            )
            .await?;
        if let Some(r) = r {
            let value: Option<String> = r.get(1);
            latest.insert(key.clone(), r.get::<_, i64>(0) as u64);
            current.insert(key.clone(), row_bytes(key, value.as_deref()));
        }
    }
    let Some(rows) = p.rows(&latest) else {
        return Ok(Written::Done);
    };
    if p.cap.is_some() {
        let holds: i64 = c
            .query_opt(
                "SELECT coalesce(sum(octet_length(key) + octet_length(value)), 0)::BIGINT \
                 FROM runtape.memory_global m WHERE name = $1 AND value IS NOT NULL AND version = \
                 (SELECT max(version) FROM runtape.memory_global WHERE name = m.name AND key = m.key)",
                &[&p.name],
            )
            .await?
            .map_or(0, |r| r.get(0));
        if let Some(refused) = p.over_cap(holds.max(0) as u64, &current) {
            return Ok(Written::MemoryOverCap(refused));
        }
    }
    for r in &rows {
        insert(c, r).await?;
    }
    Ok(Written::Done)
}

/// Applies `r`: a row without a value and the next chained removal record.
pub(super) async fn remove(c: &Conn, r: &Removal) -> Result<Written, Fail> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&REMOVALS_LOCK],
    )
    .await?;
    let lock = format!("runtape:memory:{}", r.name);
    c.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock])
        .await?;
    let latest = c
        .query_opt(
            "SELECT name, key, version, value, run_id, effect_seq, effect_index, removal \
             FROM runtape.memory_global WHERE name = $1 AND key = $2 ORDER BY version DESC LIMIT 1",
            &[&r.name, &r.key],
        )
        .await?
        .map(|found| row(&found))
        .transpose()?;
    let prev = c
        .query_opt(
            "SELECT id, body, chain, seal FROM runtape.memory_removals ORDER BY id DESC LIMIT 1",
            &[],
        )
        .await?
        .map(|found| removal(&found))
        .transpose()?;
    let id = prev.as_ref().map_or(1, |p| p.id + 1);
    let body = removal_body(r, latest.as_ref(), id)?;
    let record = r.record_after(prev.as_ref(), &body);
    c.execute(
        "INSERT INTO runtape.memory_removals (id, body, chain, seal) VALUES ($1, $2, $3, $4)",
        &[
            &(id as i64),
            &record.body,
            &&record.chain.0[..],
            &record.seal,
        ],
    )
    .await?;
    insert(c, &GlobalRow::removed(r, body.version, id)).await?;
    Ok(Written::Done)
}
