//! [`ScheduleBook`] on a SQLite file: a connection of its own per call, each write in a
//! `BEGIN IMMEDIATE` transaction (the file's write lock held from its start, so a read of the
//! cursor and the write that moves it cannot interleave with another process's), waiting for
//! the lock as the store's writer does.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::super::StoreError;
use super::super::schedules::{CursorMove, FireRecord, FireState, ScheduleBook, ScheduleRecord};
use crate::machine::RunId;

/// The schedules of the SQLite file at `path` (migrated by the store that handed this out).
#[derive(Debug)]
pub(super) struct SqliteSchedules {
    pub(super) path: PathBuf,
}

/// How long a call waits for another connection's write lock before it fails.
const BUSY: Duration = Duration::from_secs(30);

impl SqliteSchedules {
    fn conn(&self) -> Result<Connection, StoreError> {
        let c = Connection::open(&self.path)?;
        c.busy_timeout(BUSY)?;
        Ok(c)
    }

    /// A read-only connection: reading schedules never writes the file (nor checkpoints its
    /// WAL as the last connection closes).
    fn reader(&self) -> Result<Connection, StoreError> {
        let c = Connection::open_with_flags(
            &self.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        c.busy_timeout(BUSY)?;
        Ok(c)
    }
}

fn ms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn sql_ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn schedule_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ScheduleRecord> {
    Ok(ScheduleRecord {
        name: r.get(0)?,
        spec_path: r.get(1)?,
        cron: r.get(2)?,
        tz: r.get(3)?,
        goal: r.get(4)?,
        overlap: r.get(5)?,
        catch_up: r.get(6)?,
        paused: r.get::<_, i64>(7)? != 0,
        cursor_ms: ms(r.get(8)?),
        created_ms: ms(r.get(9)?),
    })
}

impl ScheduleBook for SqliteSchedules {
    fn add(&self, s: &ScheduleRecord) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "INSERT OR IGNORE INTO schedules (name, spec_path, cron, tz, goal, overlap, \
             catch_up, paused, cursor_ms, created_ms) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
            params![
                s.name,
                s.spec_path,
                s.cron,
                s.tz,
                s.goal,
                s.overlap,
                s.catch_up,
                i64::from(s.paused),
                sql_ms(s.cursor_ms),
                sql_ms(s.created_ms)
            ],
        )?;
        Ok(n == 1)
    }

    fn all(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let c = self.reader()?;
        let mut stmt = c.prepare(
            "SELECT name, spec_path, cron, tz, goal, overlap, catch_up, paused, cursor_ms, \
             created_ms FROM schedules ORDER BY name",
        )?;
        let rows = stmt.query_map([], schedule_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn set_paused(&self, name: &str, paused: bool) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "UPDATE schedules SET paused = ?2 WHERE name = ?1",
            params![name, i64::from(paused)],
        )?;
        Ok(n == 1)
    }

    fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let mut c = self.conn()?;
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute("DELETE FROM schedule_fires WHERE schedule = ?1", [name])?;
        let n = tx.execute("DELETE FROM schedules WHERE name = ?1", [name])?;
        tx.commit()?;
        Ok(n == 1)
    }

    fn claim(
        &self,
        name: &str,
        cursor: Option<CursorMove>,
        fires: &[FireRecord],
    ) -> Result<bool, StoreError> {
        let mut c = self.conn()?;
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: Option<(i64, i64)> = tx
            .query_row(
                "SELECT cursor_ms, paused FROM schedules WHERE name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((at, paused)) = found else {
            return Ok(false);
        };
        if let Some(m) = cursor {
            if paused != 0 || ms(at) != m.from {
                return Ok(false);
            }
            tx.execute(
                "UPDATE schedules SET cursor_ms = ?2 WHERE name = ?1 AND cursor_ms = ?3",
                params![name, sql_ms(m.to), sql_ms(m.from)],
            )?;
        }
        for f in fires {
            let n = tx.execute(
                "INSERT OR IGNORE INTO schedule_fires (schedule, instant_ms, run, state, \
                 manual, fired_ms) VALUES (?1,?2,?3,?4,?5,?6)",
                params![
                    name,
                    sql_ms(f.instant_ms),
                    f.run.as_str(),
                    f.state.as_str(),
                    i64::from(f.manual),
                    sql_ms(f.fired_ms)
                ],
            )?;
            if n == 0 {
                // Claimed already: the transaction rolls back as it drops.
                return Ok(false);
            }
        }
        tx.commit()?;
        Ok(true)
    }

    fn fires(&self, name: &str) -> Result<Vec<FireRecord>, StoreError> {
        let c = self.reader()?;
        let mut stmt = c.prepare(
            "SELECT schedule, instant_ms, run, state, manual, fired_ms FROM schedule_fires \
             WHERE schedule = ?1 ORDER BY instant_ms",
        )?;
        let rows = stmt.query_map([name], |r| {
            let state: String = r.get(3)?;
            Ok(FireRecord {
                schedule: r.get(0)?,
                instant_ms: ms(r.get(1)?),
                run: RunId::new(r.get::<_, String>(2)?),
                // Only this module writes the column; an unknown value reads as settled.
                state: FireState::parse(&state).unwrap_or(FireState::Skipped),
                manual: r.get::<_, i64>(4)? != 0,
                fired_ms: ms(r.get(5)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn settle(&self, name: &str, instant_ms: u64, state: FireState) -> Result<bool, StoreError> {
        let n = self.conn()?.execute(
            "UPDATE schedule_fires SET state = ?3 WHERE schedule = ?1 AND instant_ms = ?2 \
             AND state = 'pending'",
            params![name, sql_ms(instant_ms), state.as_str()],
        )?;
        Ok(n == 1)
    }
}
