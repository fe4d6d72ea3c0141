//! [`crate::store::Store::run_stats`] on SQLite: each aggregate one `GROUP BY` over `runs`
//! and the run summary ([`super::run_summary`]), none reading a run's spec.

use rusqlite::{Connection, params};

use crate::store::run_stats::{FailureCount, RunStats, Spend, StatusCount, finish};

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The aggregates of the runs created at or after `since_ms`, per `bucket_ms`.
pub(super) fn stats(c: &Connection, since_ms: u64, bucket_ms: u64) -> rusqlite::Result<RunStats> {
    let since = i64::try_from(since_ms).unwrap_or(i64::MAX);
    let bucket = i64::try_from(bucket_ms.max(1)).unwrap_or(i64::MAX);
    let by_status = c
        .prepare_cached(
            "SELECT m.created_ms / ?2 * ?2 AS bucket, r.status, count(*) \
             FROM runs r JOIN run_summary m ON m.run = r.key WHERE m.created_ms >= ?1 \
             GROUP BY bucket, r.status ORDER BY bucket, r.status",
        )?
        .query_map(params![since, bucket], |r| {
            Ok(StatusCount {
                bucket_ms: count(r.get(0)?),
                status: r.get(1)?,
                runs: count(r.get(2)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let spend = c
        .prepare_cached(
            "SELECT m.agent, m.model, count(*), sum(r.cost_nanos), sum(r.tokens) \
             FROM runs r JOIN run_summary m ON m.run = r.key WHERE m.created_ms >= ?1 \
             GROUP BY m.agent, m.model",
        )?
        .query_map(params![since], |r| {
            Ok(Spend {
                agent: r.get(0)?,
                model: r.get(1)?,
                runs: count(r.get(2)?),
                cost_nanos: count(r.get(3)?),
                tokens: count(r.get(4)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // The newest reason of each class: SQLite's bare columns take the row of max().
    let failures = c
        .prepare_cached(
            "SELECT substr(m.ended, 1, instr(m.ended, ':') - 1) AS class, count(*), \
                    m.ended, max(m.run) \
             FROM runs r JOIN run_summary m ON m.run = r.key \
             WHERE m.created_ms >= ?1 AND r.status = 'failed' GROUP BY class",
        )?
        .query_map(params![since], |r| {
            Ok(FailureCount {
                class: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                runs: count(r.get(1)?),
                example: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(finish(by_status, spend, failures))
}
