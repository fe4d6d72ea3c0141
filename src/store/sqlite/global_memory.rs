//! Global memory in SQLite (schema 5): reads on the reader pool, the publish and removal
//! writes inside the writer's transaction. The rules are [`crate::store::global_memory`]'s.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::super::global_memory::{RemovalRecord, removal_body, row_bytes};
use super::super::{GlobalRow, Publication, Removal, StoreError, Written};
use super::bytes_at;
use crate::machine::{Digest, EffectRef, RunId};

const COLUMNS: &str = "name, key, version, value, run_id, effect_seq, effect_index, removal";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GlobalRow> {
    let seq: Option<i64> = r.get(5)?;
    let index: Option<i64> = r.get(6)?;
    Ok(GlobalRow {
        name: r.get(0)?,
        key: r.get(1)?,
        version: r.get::<_, i64>(2)? as u64,
        value: r.get(3)?,
        run: r.get::<_, Option<String>>(4)?.map(RunId::new),
        effect: GlobalRow::effect_at(seq, index),
        removal: r.get::<_, Option<i64>>(7)?.map(|id| id as u64),
    })
}

/// The rows of `name` in `(key, version)` order (each key's latest alone with `latest_only`).
pub(super) fn rows(
    c: &Connection,
    name: &str,
    latest_only: bool,
) -> rusqlite::Result<Vec<GlobalRow>> {
    let sql = if latest_only {
        format!(
            "SELECT {COLUMNS} FROM memory_global m WHERE name = ?1 AND version = \
             (SELECT max(version) FROM memory_global WHERE name = m.name AND key = m.key) ORDER BY key"
        )
    } else {
        format!("SELECT {COLUMNS} FROM memory_global WHERE name = ?1 ORDER BY key, version")
    };
    c.prepare_cached(&sql)?.query_map([name], row)?.collect()
}

/// The rows the effect at `effect` of `run` published.
pub(super) fn published(
    c: &Connection,
    run: &RunId,
    effect: EffectRef,
) -> rusqlite::Result<Vec<GlobalRow>> {
    c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM memory_global WHERE run_id = ?1 AND effect_seq = ?2 AND effect_index = ?3 \
         ORDER BY key, version"
    ))?
    .query_map(
        params![run.as_str(), effect.seq as i64, i64::from(effect.index)],
        row,
    )?
    .collect()
}

/// Every memory's name.
pub(super) fn names(c: &Connection) -> rusqlite::Result<Vec<String>> {
    c.prepare_cached("SELECT DISTINCT name FROM memory_global ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect()
}

/// Every removal record, in id order.
pub(super) fn removals(c: &Connection) -> rusqlite::Result<Vec<RemovalRecord>> {
    c.prepare_cached("SELECT id, body, chain, seal FROM memory_removals ORDER BY id")?
        .query_map([], |r| {
            let chain = bytes_at(r, 2)?;
            Ok(RemovalRecord {
                id: r.get::<_, i64>(0)? as u64,
                body: bytes_at(r, 1)?,
                chain: Digest(chain.try_into().unwrap_or([0u8; 32])),
                seal: r.get_ref(3)?.as_bytes_or_null()?.map(<[u8]>::to_vec),
            })
        })?
        .collect()
}

fn insert(tx: &Connection, r: &GlobalRow) -> Result<(), StoreError> {
    tx.prepare_cached(&format!(
        "INSERT INTO memory_global ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    ))?
    .execute(params![
        r.name,
        r.key,
        r.version as i64,
        r.value,
        r.run.as_ref().map(RunId::as_str),
        r.effect.map(|e| e.seq as i64),
        r.effect.map(|e| i64::from(e.index)),
        r.removal.map(|id| id as i64)
    ])?;
    Ok(())
}

/// Applies `p` inside the writer's transaction (the caller checked the lease epoch): nothing
/// when its rows exist already or a written key moved, a refusal when it would take the
/// memory past its cap, else every row.
pub(super) fn publish(tx: &Connection, p: &Publication) -> Result<Written, StoreError> {
    let done = tx
        .prepare_cached(
            "SELECT 1 FROM memory_global WHERE run_id = ?1 AND effect_seq = ?2 AND effect_index = ?3 LIMIT 1",
        )?
        .exists(params![
            p.run.as_str(),
            p.effect.seq as i64,
            i64::from(p.effect.index)
        ])?;
    if done {
        return Ok(Written::Done);
    }
    let mut latest = BTreeMap::new();
    let mut current = BTreeMap::new();
    let mut stmt = tx.prepare_cached(
        "SELECT version, value FROM memory_global WHERE name = ?1 AND key = ?2 ORDER BY version DESC LIMIT 1",
    )?;
    for key in p.writes.keys() {
        let found: Option<(i64, Option<String>)> = stmt
            .query_row(params![p.name, key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((version, value)) = found {
            latest.insert(key.clone(), version as u64);
            current.insert(key.clone(), row_bytes(key, value.as_deref()));
        }
    }
    let Some(rows) = p.rows(&latest) else {
        return Ok(Written::Done);
    };
    if p.cap.is_some() {
        // Bytes, not characters: SQLite's length() of TEXT counts characters.
        let holds: i64 = tx
            .prepare_cached(
                "SELECT coalesce(sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB))), 0) \
                 FROM memory_global m WHERE name = ?1 AND value IS NOT NULL AND version = \
                 (SELECT max(version) FROM memory_global WHERE name = m.name AND key = m.key)",
            )?
            .query_row([&p.name], |r| r.get(0))?;
        if let Some(refused) = p.over_cap(holds.max(0) as u64, &current) {
            return Ok(Written::MemoryOverCap(refused));
        }
    }
    for r in &rows {
        insert(tx, r)?;
    }
    Ok(Written::Done)
}

/// Applies `r` inside the writer's transaction: a row without a value and the next chained
/// removal record; [`StoreError::NoMemoryKey`] when the key holds no value.
pub(super) fn remove(tx: &Connection, r: &Removal) -> Result<Written, StoreError> {
    let latest = tx
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM memory_global WHERE name = ?1 AND key = ?2 ORDER BY version DESC LIMIT 1"
        ))?
        .query_row(params![r.name, r.key], row)
        .optional()?;
    let prev = tx
        .prepare_cached(
            "SELECT id, body, chain, seal FROM memory_removals ORDER BY id DESC LIMIT 1",
        )?
        .query_row([], |row| {
            Ok(RemovalRecord {
                id: row.get::<_, i64>(0)? as u64,
                body: bytes_at(row, 1)?,
                chain: Digest(bytes_at(row, 2)?.try_into().unwrap_or([0u8; 32])),
                seal: row.get_ref(3)?.as_bytes_or_null()?.map(<[u8]>::to_vec),
            })
        })
        .optional()?;
    let id = prev.as_ref().map_or(1, |p| p.id + 1);
    let body = removal_body(r, latest.as_ref(), id)?;
    let record = r.record_after(prev.as_ref(), &body);
    tx.prepare_cached(
        "INSERT INTO memory_removals (id, body, chain, seal) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        id as i64,
        record.body,
        &record.chain.0[..],
        record.seal
    ])?;
    insert(tx, &GlobalRow::removed(r, body.version, id))?;
    Ok(Written::Done)
}
