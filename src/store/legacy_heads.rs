//! Heads for runs stored before heads existed (schema version 1, runtape 0.1.0).
//!
//! Such a run has no seal over its spec, setup, status or end. When the database is first
//! opened by a runtape that seals heads, each run gets a head recording exactly what is stored
//! then — its row, the chain link and state hash of its last transition, its last receipt, its
//! outbox rows marked started — sealed without a key and marked
//! [`HeadOrigin::Migration`]: trust on first use. From then on the engine keeps it like any
//! other head, and `verify` reports that the run's head was trusted on first use.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::schema::row_id;
use crate::machine::Digest;
use crate::receipt::{
    HEAD_FORMAT, HeadOrigin, HeadParent, HeadTip, RunHead, Seal, unsigned_head_seal,
};

/// What the migration needs of a run's row.
struct Row {
    key: i64,
    parent: Option<(String, u64)>,
}

/// Seals a head for every run that has none. Called once, inside the migration's transaction.
pub(super) fn seal_existing_runs(conn: &Connection) -> rusqlite::Result<()> {
    let mut rows: HashMap<String, Row> = HashMap::new();
    {
        let mut stmt = conn.prepare("SELECT key, id, parent_id, fork_seq FROM runs")?;
        let mut q = stmt.query([])?;
        while let Some(r) = q.next()? {
            let parent = match (r.get::<_, Option<String>>(2)?, r.get::<_, Option<i64>>(3)?) {
                (Some(p), Some(s)) => Some((p, s as u64)),
                _ => None,
            };
            rows.insert(
                r.get(1)?,
                Row {
                    key: r.get(0)?,
                    parent,
                },
            );
        }
    }
    let mut stmt = conn.prepare(
        "SELECT key, id, spec, setup, goal, status, state_kind, seq, created_ms, updated_ms, \
         cost_nanos, tokens, outcome, unpriced_turns FROM runs WHERE key NOT IN (SELECT run FROM heads)",
    )?;
    let mut q = stmt.query([])?;
    let mut insert = conn.prepare("INSERT INTO heads (run, body, seal) VALUES (?1, ?2, ?3)")?;
    while let Some(r) = q.next()? {
        let key: i64 = r.get(0)?;
        let id: String = r.get(1)?;
        let text = |i: usize| -> rusqlite::Result<Option<String>> {
            Ok(r.get_ref(i)?
                .as_bytes_or_null()?
                .map(|b| Digest::of(b).to_hex()))
        };
        let seq = r.get::<_, i64>(7)? as u64;
        let (state_hash, chain) = last_link(conn, &rows, &id, seq)?;
        let head = RunHead {
            chain: chain.to_hex(),
            cost_nanos: r.get::<_, i64>(10)? as u64,
            created_ms: r.get::<_, i64>(8)? as u64,
            format: HEAD_FORMAT.into(),
            goal: text(4)?.unwrap_or_default(),
            origin: HeadOrigin::Migration,
            outcome: text(12)?,
            parent: rows[&id].parent.as_ref().map(|(p, s)| HeadParent {
                run: crate::machine::RunId::new(p.clone()),
                seq: *s,
            }),
            receipt_tip: receipt_tip(conn, &rows, &id, seq)?,
            run: crate::machine::RunId::new(id.clone()),
            seq,
            setup: text(3)?,
            spec: text(2)?.unwrap_or_default(),
            started: started(conn, key)?,
            state: r.get(6)?,
            state_hash: state_hash.to_hex(),
            status: r.get(5)?,
            tokens: r.get::<_, i64>(11)? as u64,
            unpriced_turns: r.get::<_, i64>(13)? as u64,
            updated_ms: r.get::<_, i64>(9)? as u64,
        };
        let body = head.canonical_bytes();
        // An unsigned seal always encodes: its digest is 64 hex characters by construction.
        let seal = unsigned_head_seal(&body).to_bytes().unwrap_or_default();
        insert.execute(params![key, body, seal])?;
    }
    Ok(())
}

/// The run (or ancestor) whose own rows hold seq `seq` of `id`'s history, and its key.
fn owner<'a>(rows: &'a HashMap<String, Row>, id: &str, seq: u64) -> Option<&'a Row> {
    let mut current = rows.get(id)?;
    for _ in 0..10_000 {
        match &current.parent {
            Some((parent, fork_seq)) if seq <= *fork_seq => current = rows.get(parent)?,
            _ => return Some(current),
        }
    }
    None
}

/// State hash and chain link of transition `seq` of `id`'s history (zeros at seq 0 or when
/// the row is missing: `verify` then reports the damage).
fn last_link(
    conn: &Connection,
    rows: &HashMap<String, Row>,
    id: &str,
    seq: u64,
) -> rusqlite::Result<(Digest, Digest)> {
    let Some(row) = owner(rows, id, seq).filter(|_| seq > 0) else {
        return Ok((Digest::ZERO, Digest::ZERO));
    };
    let found = conn
        .prepare_cached("SELECT state_hash, chain FROM transitions WHERE id = ?1")?
        .query_row([row_id(row.key, seq)], |r| {
            let digest = |i: usize| -> rusqlite::Result<Digest> {
                Ok(r.get_ref(i)?
                    .as_bytes_or_null()?
                    .and_then(|b| b.try_into().ok())
                    .map_or(Digest::ZERO, Digest))
            };
            Ok((digest(0)?, digest(1)?))
        })
        .optional()?;
    Ok(found.unwrap_or((Digest::ZERO, Digest::ZERO)))
}

/// The last receipt seal at or before `seq` of `id`'s history, across its ancestry.
fn receipt_tip(
    conn: &Connection,
    rows: &HashMap<String, Row>,
    id: &str,
    seq: u64,
) -> rusqlite::Result<Option<HeadTip>> {
    let mut hi = seq;
    let mut current = rows.get(id);
    for _ in 0..10_000 {
        let Some(row) = current else { return Ok(None) };
        let lo = row.parent.as_ref().map_or(1, |(_, f)| f + 1);
        if hi >= lo {
            let found: Option<(i64, Vec<u8>)> = conn
                .prepare_cached(
                    "SELECT id, seal FROM transitions WHERE id BETWEEN ?1 AND ?2 AND seal IS NOT NULL ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![row_id(row.key, lo), row_id(row.key, hi)], |r| {
                    Ok((r.get(0)?, r.get_ref(1)?.as_bytes_or_null()?.unwrap_or_default().to_vec()))
                })
                .optional()?;
            if let Some((at, bytes)) = found {
                return Ok(Seal::from_bytes(&bytes).map(|s| HeadTip {
                    link: s.link(),
                    seq: (at & 0xffff_ffff) as u64,
                }));
            }
        }
        match &row.parent {
            Some((parent, fork_seq)) => {
                hi = hi.min(*fork_seq);
                current = rows.get(parent);
            }
            None => return Ok(None),
        }
    }
    Ok(None)
}

/// The run's outbox rows marked started, as `(seq, index)`, sorted.
fn started(conn: &Connection, key: i64) -> rusqlite::Result<Vec<(u64, u32)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, idx FROM outbox WHERE run = ?1 AND status = 'started' ORDER BY seq, idx",
    )?;
    stmt.query_map([key], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u32))
    })?
    .collect()
}
