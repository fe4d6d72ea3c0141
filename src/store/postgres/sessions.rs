//! `session_runs` in PostgreSQL: placing a new run in its session (inside the transaction
//! creating it) and reading sessions back.

use super::conn::Conn;
use crate::machine::RunId;
use crate::store::{SessionLink, SessionRecord, StoreError};

/// Serialises the placing of runs in one session across processes: a transaction-scoped
/// advisory lock on the session's name, so the latest place read is the latest there is.
const SESSION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('runtape.session:' || $1, 0))";

/// Checks that `link` is its session's next place. Call before anything of the write is
/// inserted: a refusal must leave nothing behind (the transaction holds other writes too).
pub(super) async fn check_next(
    conn: &Conn,
    link: &SessionLink,
) -> Result<Result<(), StoreError>, tokio_postgres::Error> {
    conn.execute(SESSION_LOCK, &[&link.name]).await?;
    let latest: i64 = conn
        .query_opt(
            "SELECT coalesce(max(idx), 0) FROM runtape.session_runs WHERE session = $1",
            &[&link.name],
        )
        .await?
        .map_or(Ok(0), |r| r.try_get(0))?;
    let latest = latest as u64;
    if link.index != latest + 1 {
        return Ok(Err(StoreError::SessionTaken {
            session: link.name.clone(),
            index: link.index,
            latest,
        }));
    }
    Ok(Ok(()))
}

/// Gives run `key` place `link` (checked by [`check_next`] in this transaction).
pub(super) async fn place(
    conn: &Conn,
    key: i64,
    link: &SessionLink,
) -> Result<(), tokio_postgres::Error> {
    conn.execute(
        "INSERT INTO runtape.session_runs (session, idx, run) VALUES ($1, $2, $3)",
        &[&link.name, &(link.index as i64), &key],
    )
    .await?;
    Ok(())
}

/// The runs of session `name` in order.
pub(super) async fn runs_of(
    c: &Conn,
    name: &str,
) -> Result<Vec<(u64, RunId)>, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT s.idx, r.id FROM runtape.session_runs s JOIN runtape.runs r ON r.key = s.run \
             WHERE s.session = $1 ORDER BY s.idx",
            &[&name],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get::<_, i64>(0)? as u64,
                RunId::new(r.try_get::<_, String>(1)?),
            ))
        })
        .collect()
}

/// Every session with its run count and latest run, by name.
pub(super) async fn all(c: &Conn) -> Result<Vec<SessionRecord>, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT s.session, s.idx, r.id FROM runtape.session_runs s \
             JOIN runtape.runs r ON r.key = s.run \
             WHERE s.idx = (SELECT max(idx) FROM runtape.session_runs t WHERE t.session = s.session) \
             ORDER BY s.session",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(SessionRecord {
                name: r.try_get(0)?,
                runs: r.try_get::<_, i64>(1)? as u64,
                latest: RunId::new(r.try_get::<_, String>(2)?),
            })
        })
        .collect()
}

/// The place of `run` in a session, if it has one.
pub(super) async fn of(
    c: &Conn,
    run: &RunId,
) -> Result<Option<SessionLink>, tokio_postgres::Error> {
    let row = c
        .query_opt(
            "SELECT s.session, s.idx FROM runtape.session_runs s \
             JOIN runtape.runs r ON r.key = s.run WHERE r.id = $1",
            &[&run.as_str()],
        )
        .await?;
    row.map(|r| {
        Ok(SessionLink {
            name: r.try_get(0)?,
            index: r.try_get::<_, i64>(1)? as u64,
        })
    })
    .transpose()
}
