//! [`ScheduleBook`] in PostgreSQL: the same rows and rules as SQLite's (`runtape.schedules`,
//! `runtape.schedule_fires`), shared by every `runtape worker` on the database. A claim is one
//! transaction that locks the schedule's row (`FOR UPDATE`), so the cursor read and the write
//! that moves it cannot interleave with another worker's; the fired instants go in under the
//! key (schedule, instant), so an instant two workers decided on at once is inserted once and
//! the loser's transaction rolls back whole. Each call takes a pooled connection and waits for
//! an unreachable database as the store's reads do.

use std::future::Future;
use std::sync::Arc;

use super::conn::{Backend, Conn, Pooled};
use super::schema::classify;
use crate::machine::RunId;
use crate::store::StoreError;
use crate::store::schedules::{CursorMove, FireRecord, FireState, ScheduleBook, ScheduleRecord};

/// The schedules of one PostgreSQL database (migrated by the store that handed this out).
pub(super) struct PgSchedules {
    pub(super) backend: Arc<Backend>,
}

impl PgSchedules {
    /// Runs `work` on a pooled connection on the store's runtime and waits for it (the book's
    /// calls are blocking, as the store's reads are).
    fn call<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Pooled) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send,
    {
        let backend = self.backend.clone();
        self.backend.block_on(async move {
            let conn = backend.get().await?;
            work(conn).await.map_err(|e| classify(backend.shown(), &e))
        })
    }
}

fn ms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn sql_ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn schedule_row(r: &tokio_postgres::Row) -> Result<ScheduleRecord, tokio_postgres::Error> {
    Ok(ScheduleRecord {
        name: r.try_get(0)?,
        spec_path: r.try_get(1)?,
        cron: r.try_get(2)?,
        tz: r.try_get(3)?,
        goal: r.try_get(4)?,
        overlap: r.try_get(5)?,
        catch_up: r.try_get(6)?,
        paused: r.try_get(7)?,
        cursor_ms: ms(r.try_get(8)?),
        created_ms: ms(r.try_get(9)?),
    })
}

fn fire_row(r: &tokio_postgres::Row) -> Result<FireRecord, tokio_postgres::Error> {
    let state: String = r.try_get(3)?;
    Ok(FireRecord {
        schedule: r.try_get(0)?,
        instant_ms: ms(r.try_get(1)?),
        run: RunId::new(r.try_get::<_, String>(2)?),
        // Only this module and SQLite's write the column; an unknown value reads as settled.
        state: FireState::parse(&state).unwrap_or(FireState::Skipped),
        manual: r.try_get(4)?,
        fired_ms: ms(r.try_get(5)?),
    })
}

/// Runs `work` in a transaction of its own on `c`: committed when it returns `Ok(true)`,
/// rolled back whole when it returns `Ok(false)` or fails.
async fn in_transaction<'a, Fut>(c: &'a Conn, work: Fut) -> Result<bool, tokio_postgres::Error>
where
    Fut: Future<Output = Result<bool, tokio_postgres::Error>> + 'a,
{
    c.client().batch_execute("BEGIN").await?;
    match work.await {
        Ok(true) => {
            c.client().batch_execute("COMMIT").await?;
            Ok(true)
        }
        done => {
            let _ = c.client().batch_execute("ROLLBACK").await;
            done
        }
    }
}

/// The claim's statements, inside [`in_transaction`]; `false` when anything of it is refused.
async fn claim_in(
    c: &Conn,
    name: &str,
    cursor: Option<CursorMove>,
    fires: &[FireRecord],
) -> Result<bool, tokio_postgres::Error> {
    let found = c
        .query_opt(
            "SELECT cursor_ms, paused FROM runtape.schedules WHERE name = $1 FOR UPDATE",
            &[&name],
        )
        .await?;
    let Some(found) = found else {
        return Ok(false);
    };
    let (at, paused): (i64, bool) = (found.try_get(0)?, found.try_get(1)?);
    if let Some(m) = cursor {
        if paused || ms(at) != m.from {
            return Ok(false);
        }
        c.execute(
            "UPDATE runtape.schedules SET cursor_ms = $2 WHERE name = $1",
            &[&name, &sql_ms(m.to)],
        )
        .await?;
    }
    for f in fires {
        let n = c
            .execute(
                "INSERT INTO runtape.schedule_fires (schedule, instant_ms, run, state, manual, \
                 fired_ms) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[
                    &name,
                    &sql_ms(f.instant_ms),
                    &f.run.as_str(),
                    &f.state.as_str(),
                    &f.manual,
                    &sql_ms(f.fired_ms),
                ],
            )
            .await?;
        if n == 0 {
            // Claimed already by another worker.
            return Ok(false);
        }
    }
    Ok(true)
}

impl ScheduleBook for PgSchedules {
    fn add(&self, s: &ScheduleRecord) -> Result<bool, StoreError> {
        let s = s.clone();
        self.call(move |c| async move {
            let n = c
                .execute(
                    "INSERT INTO runtape.schedules (name, spec_path, cron, tz, goal, overlap, \
                     catch_up, paused, cursor_ms, created_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
                    &[
                        &s.name,
                        &s.spec_path,
                        &s.cron,
                        &s.tz,
                        &s.goal,
                        &s.overlap,
                        &s.catch_up,
                        &s.paused,
                        &sql_ms(s.cursor_ms),
                        &sql_ms(s.created_ms),
                    ],
                )
                .await?;
            Ok(n == 1)
        })
    }

    fn all(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.call(|c| async move {
            let rows = c
                .query(
                    "SELECT name, spec_path, cron, tz, goal, overlap, catch_up, paused, \
                     cursor_ms, created_ms FROM runtape.schedules ORDER BY name",
                    &[],
                )
                .await?;
            rows.iter().map(schedule_row).collect()
        })
    }

    fn set_paused(&self, name: &str, paused: bool) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.call(move |c| async move {
            let n = c
                .execute(
                    "UPDATE runtape.schedules SET paused = $2 WHERE name = $1",
                    &[&name, &paused],
                )
                .await?;
            Ok(n == 1)
        })
    }

    fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.call(move |c| async move {
            let work = async {
                c.execute(
                    "DELETE FROM runtape.schedule_fires WHERE schedule = $1",
                    &[&name],
                )
                .await?;
                let n = c
                    .execute("DELETE FROM runtape.schedules WHERE name = $1", &[&name])
                    .await?;
                Ok(n == 1)
            };
            in_transaction(&c, work).await
        })
    }

    fn claim(
        &self,
        name: &str,
        cursor: Option<CursorMove>,
        fires: &[FireRecord],
    ) -> Result<bool, StoreError> {
        let (name, fires) = (name.to_owned(), fires.to_vec());
        self.call(
            move |c| async move { in_transaction(&c, claim_in(&c, &name, cursor, &fires)).await },
        )
    }

    fn fires(&self, name: &str) -> Result<Vec<FireRecord>, StoreError> {
        let name = name.to_owned();
        self.call(move |c| async move {
            let rows = c
                .query(
                    "SELECT schedule, instant_ms, run, state, manual, fired_ms \
                     FROM runtape.schedule_fires WHERE schedule = $1 ORDER BY instant_ms",
                    &[&name],
                )
                .await?;
            rows.iter().map(fire_row).collect()
        })
    }

    fn settle(&self, name: &str, instant_ms: u64, state: FireState) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.call(move |c| async move {
            let n = c
                .execute(
                    "UPDATE runtape.schedule_fires SET state = $3 WHERE schedule = $1 \
                     AND instant_ms = $2 AND state = 'pending'",
                    &[&name, &sql_ms(instant_ms), &state.as_str()],
                )
                .await?;
            Ok(n == 1)
        })
    }
}
