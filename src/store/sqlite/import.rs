//! `runtape import` in SQLite: a run written whole inside the writer's transaction (see
//! [`crate::store::import`]). Rows go in as plain JSON, which every reader takes beside the
//! packed form; blobs as written.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::import::ImportedRun;
use super::super::schema::row_id;
use super::super::{StoreError, Written};
use super::bytes_at;
use crate::format::packed_head::unpack_head;
use crate::format::stored::edge_code;

/// Writes `run` whole; nothing when its id is taken (an error unless the stored head is the
/// same).
pub(super) fn import(tx: &Connection, run: &ImportedRun) -> Result<Written, StoreError> {
    let r = &run.record;
    let stored = tx
        .prepare_cached("SELECT head FROM runs WHERE id = ?1")?
        .query_row([r.id.as_str()], |row| bytes_at(row, 0))
        .optional()?;
    if let Some(stored) = stored {
        let same = unpack_head(&stored).is_ok_and(|body| *body == run.head.body[..]);
        return match same {
            true => Ok(Written::Done),
            false => Err(StoreError::ImportConflict {
                run: r.id.to_string(),
                why: "its sealed head differs".into(),
            }),
        };
    }
    tx.prepare_cached(
        "INSERT INTO runs (id, status, state_kind, seq, lease_epoch, lease_owner, lease_expires_ms, control, \
         updated_ms, cost_nanos, tokens, unpriced_turns, head, seal) \
         VALUES (?1, ?2, ?3, ?4, ?5, NULL, 0, NULL, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        r.id.as_str(),
        r.status.as_str(),
        r.state_kind.as_str(),
        r.seq as i64,
        r.lease_epoch as i64,
        r.updated_ms as i64,
        r.cost_nanos as i64,
        r.tokens as i64,
        r.unpriced_turns as i64,
        run.head.body,
        run.head.seal
    ])?;
    let key = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        key,
        r.parent.as_ref().map(|(p, _)| p.as_str()),
        r.parent.as_ref().map(|(_, s)| *s as i64),
        r.spec,
        r.setup,
        r.goal,
        r.created_ms as i64,
        r.outcome
    ])?;
    // The run list reads these (see `run_summary`): an imported run is listed as any other.
    super::run_summary::insert(
        tx,
        key,
        &r.spec,
        r.parent.as_ref().map(|(p, _)| p.as_str()),
        &r.goal,
        r.created_ms as i64,
    )?;
    if let Some(outcome) = &r.outcome {
        super::run_summary::set_ended(tx, key, outcome)?;
    }
    if let Some(link) = &run.session {
        super::sessions::place(tx, key, link)?;
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO transitions (id, at, event, edge, effects, state_hash, chain, seal) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for t in &run.transitions {
        insert.execute(params![
            row_id(key, t.seq),
            t.at.0 as i64,
            t.event,
            &edge_code(t.edge)[..],
            t.effects,
            &t.state_hash.0[..],
            &t.chain.0[..],
            t.seal
        ])?;
    }
    let mut insert = tx.prepare_cached("INSERT INTO snapshots (id, state) VALUES (?1, ?2)")?;
    for (seq, state) in &run.snapshots {
        insert.execute(params![row_id(key, *seq), state])?;
    }
    super::writer::insert_outbox(tx, key, &run.outbox)?;
    let mut stored = tx.prepare_cached(super::BLOB_STORED)?;
    let mut insert = tx.prepare_cached(super::INSERT_BLOB)?;
    let mut refer = tx.prepare_cached(super::INSERT_BLOB_REF)?;
    for (d, bytes) in &run.blobs {
        if !stored.exists(params![&d.0[..]])? {
            insert.execute(params![&d.0[..], bytes])?;
        }
        refer.execute(params![&d.0[..], key])?;
    }
    Ok(Written::Done)
}
