//! `session_runs` in SQLite: placing a new run in its session (inside the write that creates
//! it) and reading sessions back.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::{SessionLink, SessionRecord, StoreError};
use crate::machine::RunId;

/// Gives run `key` place `link` in its session, inside the write creating the run: refused
/// with [`StoreError::SessionTaken`] unless the place is the session's next. The write runs
/// in a `BEGIN IMMEDIATE` transaction, which holds the file's write lock from its start, so
/// reading the latest place and inserting cannot interleave with another connection's or
/// process's; the table's `(session, idx)` key would refuse a second holder anyway. (Checked
/// in `store::session_model`.)
pub(super) fn place(tx: &Connection, key: i64, link: &SessionLink) -> Result<(), StoreError> {
    let latest: i64 = tx
        .prepare_cached("SELECT coalesce(max(idx), 0) FROM session_runs WHERE session = ?1")?
        .query_row([link.name.as_str()], |r| r.get(0))?;
    let latest = latest as u64;
    if link.index != latest + 1 {
        return Err(StoreError::SessionTaken {
            session: link.name.clone(),
            index: link.index,
            latest,
        });
    }
    tx.prepare_cached("INSERT INTO session_runs (session, idx, run) VALUES (?1, ?2, ?3)")?
        .execute(params![link.name, link.index as i64, key])?;
    Ok(())
}

/// The runs of session `name` in order.
pub(super) fn runs_of(c: &Connection, name: &str) -> rusqlite::Result<Vec<(u64, RunId)>> {
    let mut stmt = c.prepare_cached(
        "SELECT s.idx, r.id FROM session_runs s JOIN runs r ON r.key = s.run \
         WHERE s.session = ?1 ORDER BY s.idx",
    )?;
    stmt.query_map([name], |r| {
        Ok((
            r.get::<_, i64>(0)? as u64,
            RunId::new(r.get::<_, String>(1)?),
        ))
    })?
    .collect()
}

/// Every session with its run count and latest run, by name.
pub(super) fn all(c: &Connection) -> rusqlite::Result<Vec<SessionRecord>> {
    let mut stmt = c.prepare_cached(
        "SELECT s.session, s.idx, r.id FROM session_runs s JOIN runs r ON r.key = s.run \
         WHERE s.idx = (SELECT max(idx) FROM session_runs t WHERE t.session = s.session) \
         ORDER BY s.session",
    )?;
    stmt.query_map([], |r| {
        Ok(SessionRecord {
            name: r.get(0)?,
            runs: r.get::<_, i64>(1)? as u64,
            latest: RunId::new(r.get::<_, String>(2)?),
        })
    })?
    .collect()
}

/// The place of `run` in a session, if it has one.
pub(super) fn of(c: &Connection, run: &RunId) -> rusqlite::Result<Option<SessionLink>> {
    c.prepare_cached(
        // Not a join on `r.id = ?1`: see `RUN_BY_ID` in the module above.
        "SELECT session, idx FROM session_runs WHERE run = (SELECT key FROM runs WHERE id = ?1)",
    )?
    .query_row([run.as_str()], |r| {
        Ok(SessionLink {
            name: r.get(0)?,
            index: r.get::<_, i64>(1)? as u64,
        })
    })
    .optional()
}
