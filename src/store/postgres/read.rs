//! Reads of the PostgreSQL store, one function per [`Store`](crate::store::Store) read, each on
//! a connection it is given (a pooled one, or a read-only view's). Rows decode exactly as
//! SQLite's do, and damage is reported the same way.

use tokio_postgres::Row;

use super::conn::Conn;
use crate::format::packed_head::unpack_head;
use crate::machine::{Digest, EffectRef, Hlc, RunId, StateKind};
use crate::store::{
    Control, HeadRecord, LeaseRecord, OutboxRecord, OutboxStatus, RunRecord, RunStatus, StoreError,
    TransitionRecord,
};

/// A query error, or stored data that does not decode.
pub(super) enum ReadError {
    Db(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for ReadError {
    fn from(e: tokio_postgres::Error) -> Self {
        ReadError::Db(e)
    }
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        ReadError::Store(e)
    }
}

type Read<T> = Result<T, ReadError>;

/// The columns of a run's row, in the order [`run_record`] reads them. The lease expiry is
/// read as the time left on the database's clock (see [`run_record`]).
/// `run_columns!("NULL::text")` reads `NULL` in the setup's place
/// ([`Store::run_without_setup`](crate::store::Store::run_without_setup)).
macro_rules! run_columns {
    () => {
        run_columns!("s.setup")
    };
    ($setup:literal) => {
        concat!(
            "r.id, s.parent_id, s.fork_seq, s.spec, s.goal, r.status, r.state_kind, r.seq, r.lease_epoch, \
             r.lease_owner, \
             CASE WHEN r.lease_expires_ms = 0 THEN NULL ELSE r.lease_expires_ms - runtape.now_ms() END, \
             r.control, s.created_ms, r.updated_ms, r.cost_nanos, r.tokens, s.outcome, ",
            $setup,
            ", r.unpriced_turns, s.run"
        )
    };
}

/// A run's row and what it is, left-joined as SQLite's store reads them: a row whose
/// `run_specs` row is missing is read and reported as damaged rather than skipped.
macro_rules! run_rows {
    () => {
        "runtape.runs r LEFT JOIN runtape.run_specs s ON s.run = r.key"
    };
}

/// The highest seq a row id can pack.
pub(super) fn clamp_seq(seq: u64) -> i64 {
    seq.min(u64::from(u32::MAX)) as i64
}

pub(super) async fn run(c: &Conn, id: &RunId) -> Read<Option<RunRecord>> {
    run_selected(
        c,
        id,
        concat!(
            "SELECT ",
            run_columns!(),
            " FROM ",
            run_rows!(),
            " WHERE r.id = $1"
        ),
    )
    .await
}

/// [`run`] with `NULL` read for the setup
/// ([`Store::run_without_setup`](crate::store::Store::run_without_setup)).
pub(super) async fn run_without_setup(c: &Conn, id: &RunId) -> Read<Option<RunRecord>> {
    run_selected(
        c,
        id,
        concat!(
            "SELECT ",
            run_columns!("NULL::text"),
            " FROM ",
            run_rows!(),
            " WHERE r.id = $1"
        ),
    )
    .await
}

/// The row `sql` (one run's columns, by id as `$1`) selects for `id`.
async fn run_selected(c: &Conn, id: &RunId, sql: &'static str) -> Read<Option<RunRecord>> {
    let row = c.query_opt(sql, &[&id.as_str()]).await?;
    row.map(|r| run_record(&r)).transpose()
}

/// The lease columns of every run in `ids` that exists, in one query (see
/// [`Store::leases`](crate::store::Store::leases)); the expiry is read as [`run_record`] reads
/// it, as time left on the database's clock.
pub(super) async fn leases(c: &Conn, ids: &[String]) -> Read<Vec<LeaseRecord>> {
    let rows = c
        .query(
            "SELECT id, lease_epoch, \
             CASE WHEN lease_expires_ms = 0 THEN NULL ELSE lease_expires_ms - runtape.now_ms() END, \
             control FROM runtape.runs WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let id: String = r.try_get(0)?;
            let lease_left: Option<i64> = r.try_get(2)?;
            let control: Option<String> = r.try_get(3)?;
            Ok(LeaseRecord::new(
                RunId::new(id.clone()),
                r.try_get::<_, i64>(1)? as u64,
                expiry_on_our_clock(lease_left),
                parse_control(&id, control.as_deref())?,
            ))
        })
        .collect()
}

pub(super) async fn runs(c: &Conn) -> Read<Vec<RunRecord>> {
    let rows = c
        .query(
            concat!(
                "SELECT ",
                run_columns!(),
                " FROM ",
                run_rows!(),
                " ORDER BY r.key DESC"
            ),
            &[],
        )
        .await?;
    rows.iter().map(run_record).collect()
}

/// The rows of the runs at `keys` (`runs.key`) that exist, in the order of `keys`: the run
/// list reads a page's runs with it once it has found their keys ([`super::run_summary`]).
pub(super) async fn runs_by_key(c: &Conn, keys: &[i64]) -> Read<Vec<RunRecord>> {
    let rows = c
        .query(
            concat!(
                "SELECT ",
                run_columns!(),
                ", r.key FROM ",
                run_rows!(),
                " WHERE r.key = ANY($1)"
            ),
            &[&keys],
        )
        .await?;
    let mut found: std::collections::HashMap<i64, &Row> = std::collections::HashMap::new();
    for r in &rows {
        found.insert(r.try_get(20)?, r);
    }
    keys.iter()
        .filter_map(|k| found.get(k))
        .map(|r| run_record(r))
        .collect()
}

pub(super) async fn transitions(
    c: &Conn,
    run: &RunId,
    from: u64,
    to: u64,
) -> Read<Vec<TransitionRecord>> {
    let rows = c
        .query(
            "SELECT t.id, t.at, t.event, t.edge, t.effects, t.state_hash, t.chain, t.seal \
             FROM runtape.runs r JOIN runtape.transitions t \
             ON t.id BETWEEN (r.key << 32) + $2 AND (r.key << 32) + $3 \
             WHERE r.id = $1 ORDER BY t.id",
            &[&run.as_str(), &clamp_seq(from), &clamp_seq(to)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let id: i64 = r.try_get(0)?;
            let seq = (id & 0xffff_ffff) as u64;
            let damaged = |what: &str| StoreError::Damaged {
                run: run.to_string(),
                detail: format!("seq {seq}: {what}"),
            };
            let edge: String = r.try_get(3)?;
            let edge = crate::machine::table::EdgeId::parse(&edge)
                .ok_or_else(|| damaged("transitions.edge names no edge of the machine"))?;
            let state_kind = edge.to();
            let hash: Vec<u8> = r.try_get(5)?;
            let chain: Vec<u8> = r.try_get(6)?;
            Ok(TransitionRecord {
                seq,
                at: Hlc(r.try_get::<_, i64>(1)? as u64),
                event: r.try_get(2)?,
                edge,
                effects: r.try_get(4)?,
                state_kind,
                state_hash: digest(&hash)
                    .ok_or_else(|| damaged("transitions.state_hash is not 32 bytes"))?,
                chain: digest(&chain)
                    .ok_or_else(|| damaged("transitions.chain is not 32 bytes"))?,
                seal: r.try_get(7)?,
            })
        })
        .collect()
}

/// `(seq, bytes)` from a row whose first column is a packed row id.
fn seq_and_bytes(r: &Row) -> Result<(u64, Vec<u8>), tokio_postgres::Error> {
    Ok((
        (r.try_get::<_, i64>(0)? & 0xffff_ffff) as u64,
        r.try_get(1)?,
    ))
}

pub(super) async fn snapshot_at_or_before(
    c: &Conn,
    run: &RunId,
    at: u64,
) -> Read<Option<(u64, Vec<u8>)>> {
    let row = c
        .query_opt(
            "SELECT s.id, s.state FROM runtape.runs r JOIN runtape.snapshots s \
             ON s.id BETWEEN (r.key << 32) AND (r.key << 32) + $2 \
             WHERE r.id = $1 ORDER BY s.id DESC LIMIT 1",
            &[&run.as_str(), &clamp_seq(at)],
        )
        .await?;
    Ok(row.map(|r| seq_and_bytes(&r)).transpose()?)
}

pub(super) async fn last_seal(c: &Conn, run: &RunId, at: u64) -> Read<Option<(u64, Vec<u8>)>> {
    let row = c
        .query_opt(
            "SELECT t.id, t.seal FROM runtape.runs r JOIN runtape.transitions t \
             ON t.id BETWEEN (r.key << 32) AND (r.key << 32) + $2 \
             WHERE r.id = $1 AND t.seal IS NOT NULL ORDER BY t.id DESC LIMIT 1",
            &[&run.as_str(), &clamp_seq(at)],
        )
        .await?;
    Ok(row.map(|r| seq_and_bytes(&r)).transpose()?)
}

pub(super) async fn blob(c: &Conn, d: &Digest) -> Read<Option<Vec<u8>>> {
    let row = c
        .query_opt(
            "SELECT bytes FROM runtape.blobs WHERE hash = $1",
            &[&&d.0[..]],
        )
        .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// The conversation node under `head` and the nodes before it, newest first, at most `len`,
/// walked in the database in one recursive query (see [`Store::conversation_nodes`]).
///
/// [`Store::conversation_nodes`]: crate::store::Store::conversation_nodes
pub(super) async fn conversation_nodes(
    c: &Conn,
    head: &Digest,
    len: u64,
) -> Read<Vec<(Digest, Vec<u8>)>> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let rows = c
        .query(
            "WITH RECURSIVE chain(n, hash, bytes) AS ( \
                 SELECT 1::bigint, hash, bytes FROM runtape.blobs WHERE hash = $1 \
                 UNION ALL \
                 SELECT c.n + 1, b.hash, b.bytes FROM chain c \
                 JOIN runtape.blobs b ON b.hash = substring(c.bytes from 1 for 32) \
                 WHERE c.n < $2 AND length(c.bytes) >= 32 \
                 AND substring(c.bytes from 1 for 32) <> decode(repeat('00', 32), 'hex') \
             ) SELECT hash, bytes FROM chain ORDER BY n LIMIT $2",
            &[&&head.0[..], &len],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let hash: Vec<u8> = r.try_get(0)?;
        let Ok(digest) = <[u8; 32]>::try_from(hash.as_slice()) else {
            break;
        };
        out.push((Digest(digest), r.try_get(1)?));
    }
    Ok(out)
}

pub(super) async fn outbox(c: &Conn, run: &RunId, open_only: bool) -> Read<Vec<OutboxRecord>> {
    let rows = if open_only {
        c.query(
            "SELECT o.seq, o.idx, o.status, o.idempotency_key FROM runtape.runs r \
             JOIN runtape.outbox o ON o.run = r.key WHERE r.id = $1 AND o.status <> 'done' \
             ORDER BY o.seq, o.idx",
            &[&run.as_str()],
        )
        .await?
    } else {
        c.query(
            "SELECT o.seq, o.idx, o.status, o.idempotency_key FROM runtape.runs r \
             JOIN runtape.outbox o ON o.run = r.key WHERE r.id = $1 ORDER BY o.seq, o.idx",
            &[&run.as_str()],
        )
        .await?
    };
    rows.iter()
        .map(|r| {
            let seq: i64 = r.try_get(0)?;
            let status: String = r.try_get(2)?;
            Ok(OutboxRecord {
                effect: EffectRef {
                    seq: seq as u64,
                    index: r.try_get::<_, i64>(1)? as u32,
                },
                status: OutboxStatus::parse(&status).ok_or_else(|| StoreError::Damaged {
                    run: run.to_string(),
                    detail: format!("seq {seq}: outbox.status `{status}` is not a status"),
                })?,
                idempotency_key: r.try_get(3)?,
            })
        })
        .collect()
}

pub(super) async fn snapshots(
    c: &Conn,
    run: &RunId,
    from: u64,
    to: u64,
) -> Read<Vec<(u64, Vec<u8>)>> {
    let rows = c
        .query(
            "SELECT s.id, s.state FROM runtape.runs r JOIN runtape.snapshots s \
             ON s.id BETWEEN (r.key << 32) + $2 AND (r.key << 32) + $3 \
             WHERE r.id = $1 ORDER BY s.id",
            &[&run.as_str(), &clamp_seq(from), &clamp_seq(to)],
        )
        .await?;
    Ok(rows.iter().map(seq_and_bytes).collect::<Result<_, _>>()?)
}

pub(super) async fn head(c: &Conn, run: &RunId) -> Read<Option<HeadRecord>> {
    let row = c
        .query_opt(
            "SELECT head, seal FROM runtape.runs WHERE id = $1 AND head IS NOT NULL",
            &[&run.as_str()],
        )
        .await?;
    let Some(r) = row else { return Ok(None) };
    let stored: Vec<u8> = r.try_get(0)?;
    let seal: Option<Vec<u8>> = r.try_get(1)?;
    let body = unpack_head(&stored).map_err(|e| StoreError::Damaged {
        run: run.to_string(),
        detail: format!("runs.head: {e}"),
    })?;
    Ok(Some(HeadRecord::new(
        body.into_owned(),
        seal.unwrap_or_default(),
        None,
    )))
}

pub(super) async fn size_bytes(c: &Conn) -> Read<u64> {
    let row = c
        .query_opt(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'runtape' AND c.relkind = 'r'",
            &[],
        )
        .await?;
    Ok(row.map_or(Ok(0), |r| r.try_get::<_, i64>(0))? as u64)
}

fn digest(bytes: &[u8]) -> Option<Digest> {
    Some(Digest(bytes.try_into().ok()?))
}

/// A lease's expiry given as time left on the database's clock, on this process's wall clock
/// (0 for no lease).
fn expiry_on_our_clock(lease_left: Option<i64>) -> u64 {
    lease_left.map_or(0, |left| {
        (crate::clock::wall_ms() as i64).saturating_add(left).max(0) as u64
    })
}

/// A stored control request.
fn parse_control(run: &str, stored: Option<&str>) -> Result<Option<Control>, StoreError> {
    match stored {
        None => Ok(None),
        Some(text) => Control::from_column(text)
            .map(Some)
            .ok_or_else(|| StoreError::Damaged {
                run: run.to_owned(),
                detail: format!("runs.control `{text}` is not a request"),
            }),
    }
}

/// A run's row as [`run_columns!`] selects it. The lease expiry comes back as the time left
/// on the database's clock and is given on this process's wall clock (`now + left`), so a
/// driver comparing it with its own clock judges the lease right even when the clocks of the
/// two machines disagree.
pub(super) fn run_record(r: &Row) -> Result<RunRecord, ReadError> {
    let id: String = r.try_get(0)?;
    let parent: Option<String> = r.try_get(1)?;
    let fork_seq: Option<i64> = r.try_get(2)?;
    let status: String = r.try_get(5)?;
    let kind: String = r.try_get(6)?;
    let lease_left: Option<i64> = r.try_get(10)?;
    let control: Option<String> = r.try_get(11)?;
    let damaged = |what: String| StoreError::Damaged {
        run: id.clone(),
        detail: what,
    };
    let has_spec: Option<i64> = r.try_get(19)?;
    let spec: Option<String> = r.try_get(3)?;
    let goal: Option<String> = r.try_get(4)?;
    let created_ms: Option<i64> = r.try_get(12)?;
    let (Some(_), Some(spec), Some(goal), Some(created_ms)) = (has_spec, spec, goal, created_ms)
    else {
        return Err(
            damaged("its run_specs row (spec, goal, parent, outcome) is missing".into()).into(),
        );
    };
    Ok(RunRecord {
        parent: match (parent, fork_seq) {
            (Some(p), Some(s)) => Some((RunId::new(p), s as u64)),
            (None, None) => None,
            _ => {
                return Err(damaged(
                    "run_specs.parent_id and run_specs.fork_seq are not set together".into(),
                )
                .into());
            }
        },
        spec,
        goal,
        status: RunStatus::parse(&status)
            .ok_or_else(|| damaged(format!("runs.status `{status}` is not a status")))?,
        state_kind: StateKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(|| damaged(format!("runs.state_kind `{kind}` is not a state")))?,
        seq: r.try_get::<_, i64>(7)? as u64,
        lease_epoch: r.try_get::<_, i64>(8)? as u64,
        lease_owner: r.try_get(9)?,
        lease_expires_ms: expiry_on_our_clock(lease_left),
        control: parse_control(&id, control.as_deref())?,
        created_ms: created_ms as u64,
        updated_ms: r.try_get::<_, i64>(13)? as u64,
        cost_nanos: r.try_get::<_, i64>(14)? as u64,
        tokens: r.try_get::<_, i64>(15)? as u64,
        outcome: r.try_get(16)?,
        setup: r.try_get(17)?,
        unpriced_turns: r.try_get::<_, i64>(18)? as u64,
        id: RunId::new(id.clone()),
    })
}
