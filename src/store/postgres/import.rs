//! `runtape import` in PostgreSQL: a run written whole inside the writer's transaction (see
//! [`crate::store::import`]), as SQLite's `import` does.

use super::conn::Conn;
use super::writer::Fail;
use crate::store::import::ImportedRun;
use crate::store::schema::row_id;
use crate::store::{StoreError, Written};

/// Writes `run` whole; nothing when its id is taken (an error unless the stored head is the
/// same).
pub(super) async fn import(c: &Conn, run: &ImportedRun) -> Result<Written, Fail> {
    let r = &run.record;
    let stored = c
        .query_opt(
            "SELECT head FROM runtape.runs WHERE id = $1 FOR UPDATE",
            &[&r.id.as_str()],
        )
        .await?;
    if let Some(stored) = stored {
        let head: Option<Vec<u8>> = stored.try_get(0)?;
        if head.as_deref() == Some(&run.head.body[..]) {
            return Ok(Written::Done);
        }
        return Err(Fail::Refused(StoreError::ImportConflict {
            run: r.id.to_string(),
            why: "its sealed head differs".into(),
        }));
    }
    if let Some(link) = &run.session
        && let Err(e) = super::sessions::check_next(c, link).await?
    {
        return Err(Fail::Refused(e));
    }
    let row = c
        .query_opt(
            "INSERT INTO runtape.runs (id, status, state_kind, seq, lease_epoch, lease_owner, \
             lease_expires_ms, control, updated_ms, cost_nanos, tokens, unpriced_turns, head, seal) \
             VALUES ($1, $2, $3, $4, $5, NULL, 0, NULL, $6, $7, $8, $9, $10, $11) RETURNING key",
            &[
                &r.id.as_str(),
                &r.status.as_str(),
                &r.state_kind.as_str(),
                &(r.seq as i64),
                &(r.lease_epoch as i64),
                &(r.updated_ms as i64),
                &(r.cost_nanos as i64),
                &(r.tokens as i64),
                &(r.unpriced_turns as i64),
                &run.head.body,
                &run.head.seal,
            ],
        )
        .await?
        .ok_or_else(|| {
            Fail::Refused(StoreError::ImportConflict {
                run: r.id.to_string(),
                why: "its row was not written".into(),
            })
        })?;
    let key: i64 = row.try_get(0)?;
    // The run list reads these (see `run_summary`): an imported run is listed as any other.
    let summary = super::run_summary::insert(
        c,
        super::run_summary::NewSummary {
            key,
            spec: &r.spec,
            fork_of: r.parent.as_ref().map(|(p, _)| p.as_str()),
            goal: &r.goal,
            created_ms: r.created_ms as i64,
            outcome: r.outcome.as_deref(),
        },
    );
    let (parent, fork_seq, created_ms) = (
        r.parent.as_ref().map(|(p, _)| p.as_str()),
        r.parent.as_ref().map(|(_, s)| *s as i64),
        r.created_ms as i64,
    );
    let specs_row: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &key,
        &parent,
        &fork_seq,
        &r.spec,
        &r.setup,
        &r.goal,
        &created_ms,
        &r.outcome,
    ];
    let specs = c.execute(
        "INSERT INTO runtape.run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &specs_row,
    );
    futures_util::future::try_join(specs, summary).await?;
    if let Some(link) = &run.session {
        super::sessions::place(c, key, link).await?;
    }
    for t in &run.transitions {
        c.execute(
            "INSERT INTO runtape.transitions (id, at, event, edge, effects, state_hash, chain, seal) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &row_id(key, t.seq),
                &(t.at.0 as i64),
                &t.event,
                &t.edge.as_str(),
                &t.effects,
                &&t.state_hash.0[..],
                &&t.chain.0[..],
                &t.seal,
            ],
        )
        .await?;
    }
    for (seq, state) in &run.snapshots {
        c.execute(
            "INSERT INTO runtape.snapshots (id, state) VALUES ($1, $2)",
            &[&row_id(key, *seq), state],
        )
        .await?;
    }
    for o in &run.outbox {
        c.execute(
            "INSERT INTO runtape.outbox (run, seq, idx, status, idempotency_key) VALUES ($1, $2, $3, $4, $5)",
            &[
                &key,
                &(o.effect.seq as i64),
                &i64::from(o.effect.index),
                &o.status.as_str(),
                &o.idempotency_key,
            ],
        )
        .await?;
    }
    for (d, bytes) in &run.blobs {
        c.execute(
            "INSERT INTO runtape.blobs (hash, bytes) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
            &[&&d.0[..], bytes],
        )
        .await?;
        c.execute(
            "INSERT INTO runtape.blob_refs (hash, run) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&&d.0[..], &key],
        )
        .await?;
    }
    Ok(Written::Done)
}
