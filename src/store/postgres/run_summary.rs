//! The run summary on PostgreSQL (schema 9), as SQLite's (schema 13, `sqlite::run_summary`):
//! one narrow row per run with what the run list filters on that `runs` does not hold, its
//! tags in `run_tags`, and `runs_by_cost`, so a page of runs ([`page`]) and the aggregates
//! ([`stats`]) are answered in SQL instead of by reading every run.
//!
//! Kept in step by the writer, in the transaction of the write that changes it: a new run's
//! row and tags go out pipelined with its `run_specs` row ([`insert`]), a commit that ends a
//! run records how it ended in the commit's own pipelined round trip ([`ENDED`]), an imported
//! run gets both at once, and a prune deletes them with the run. Filled for the runs already
//! stored when the schema is migrated to 9 ([`fill`]).
//!
//! It is an index, not a record: every run [`page`] returns is read from its own rows and
//! checked against [`RunQuery::matches`], so a summary row that disagrees with its run can
//! hide the run from a filter but never show a run the filter excludes.

use tokio_postgres::types::ToSql;

use super::conn::Conn;
use super::read::{ReadError, runs_by_key};
use crate::store::run_facts::{
    outcome_text, spec_child_of, spec_digest, spec_entry_route, spec_session, spec_tags,
};
use crate::store::run_stats::{FailureCount, RunStats, Spend, StatusCount, finish};
use crate::store::{Cursor, Relation, RunPage, RunQuery, RunSort, StatusFilter};

/// Migration 8 → 9: the run summary, the runs' tags, and the runs in order of cost. The rows
/// of the runs already stored are written by [`fill`] in the same transaction.
pub(super) const RUN_SUMMARY: &str = r#"
-- what the run list filters on beyond `runs`, one narrow row per run (an index: every run
-- listed is checked against its own row)
CREATE TABLE runtape.run_summary (
    -- runs.key
    run bigint PRIMARY KEY,
    created_ms bigint NOT NULL,
    -- the entry agent
    agent text NOT NULL,
    -- its primary route, provider/model
    model text NOT NULL,
    -- BLAKE3 of the stored spec without its tags (hex)
    spec_digest text NOT NULL,
    -- the run a fork was forked from
    fork_of text,
    -- the run whose delegation started a child run
    child_of text,
    goal text NOT NULL,
    -- the session it belongs to
    session text,
    -- the answer, or why it failed or was cancelled; NULL until it ends
    ended text
);
-- each run's tags, found by tag (and by run, for a prune)
CREATE TABLE runtape.run_tags (
    key text NOT NULL,
    value text NOT NULL,
    -- runs.key
    run bigint NOT NULL,
    PRIMARY KEY (key, value, run)
);
CREATE INDEX run_tags_by_run ON runtape.run_tags (run);
-- the list sorted by cost, a page at a time at any depth (the key breaks ties, as the cursor)
CREATE INDEX runs_by_cost ON runtape.runs (cost_nanos, key);
"#;

/// Records how the run `$1` ended (`$2`: [`outcome_text`] of its outcome): sent by the commit
/// that stores the outcome, pipelined with its other statements.
pub(super) const ENDED: &str = "UPDATE runtape.run_summary SET ended = $2 WHERE run = $1";

/// A run's summary row, from its stored spec.
struct Summary {
    agent: String,
    model: String,
    spec_digest: String,
    child_of: Option<String>,
    session: Option<String>,
    tag_keys: Vec<String>,
    tag_values: Vec<String>,
}

fn summarise(spec: &str) -> Summary {
    let (agent, model) = spec_entry_route(spec);
    let (tag_keys, tag_values) = spec_tags(spec).into_iter().unzip();
    Summary {
        agent,
        model,
        spec_digest: spec_digest(spec),
        child_of: spec_child_of(spec).map(|r| r.to_string()),
        session: spec_session(spec),
        tag_keys,
        tag_values,
    }
}

/// What a new run's summary says, for [`insert`].
pub(super) struct NewSummary<'a> {
    /// `runs.key`.
    pub key: i64,
    pub spec: &'a str,
    /// The run a fork was forked from.
    pub fork_of: Option<&'a str>,
    pub goal: &'a str,
    pub created_ms: i64,
    /// Its stored outcome, for a run imported finished.
    pub outcome: Option<&'a str>,
}

/// Writes the summary row and tags of a new run: call in the transaction that inserts its
/// `runs` and `run_specs` rows (the two statements go out together; await them with that
/// insert to keep them in its round trip).
pub(super) async fn insert(c: &Conn, new: NewSummary<'_>) -> Result<(), tokio_postgres::Error> {
    let s = summarise(new.spec);
    let ended = outcome_text(new.outcome);
    let row: [&(dyn ToSql + Sync); 10] = [
        &new.key,
        &new.created_ms,
        &s.agent,
        &s.model,
        &s.spec_digest,
        &new.fork_of,
        &s.child_of,
        &new.goal,
        &s.session,
        &ended,
    ];
    let summary = c.execute(
        "INSERT INTO runtape.run_summary (run, created_ms, agent, model, spec_digest, fork_of, \
         child_of, goal, session, ended) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &row,
    );
    if s.tag_keys.is_empty() {
        return summary.await.map(drop);
    }
    let tag_rows: [&(dyn ToSql + Sync); 3] = [&s.tag_keys, &s.tag_values, &new.key];
    let tags = c.execute(
        "INSERT INTO runtape.run_tags (key, value, run) \
         SELECT k, v, $3 FROM unnest($1::text[], $2::text[]) AS t(k, v)",
        &tag_rows,
    );
    futures_util::future::try_join(summary, tags)
        .await
        .map(drop)
}

/// Rows [`fill`] writes per statement.
const FILL_CHUNK: usize = 2_000;

/// The summary rows of a chunk of runs, column by column, for one `unnest` insert.
#[derive(Default)]
struct Columns {
    run: Vec<i64>,
    created_ms: Vec<i64>,
    agent: Vec<String>,
    model: Vec<String>,
    spec_digest: Vec<String>,
    fork_of: Vec<Option<String>>,
    child_of: Vec<Option<String>>,
    goal: Vec<String>,
    session: Vec<Option<String>>,
    ended: Vec<Option<String>>,
    tag_keys: Vec<String>,
    tag_values: Vec<String>,
    tag_runs: Vec<i64>,
}

/// Summarises every run already stored (the migration to schema 9), in its transaction.
pub(super) async fn fill(c: &Conn) -> Result<(), tokio_postgres::Error> {
    let rows = c
        .client()
        .query(
            "SELECT run, spec, parent_id, goal, created_ms, outcome FROM runtape.run_specs",
            &[],
        )
        .await?;
    for chunk in rows.chunks(FILL_CHUNK) {
        let mut cols = Columns::default();
        for r in chunk {
            let key: i64 = r.try_get(0)?;
            let spec: String = r.try_get(1)?;
            let outcome: Option<String> = r.try_get(5)?;
            let s = summarise(&spec);
            cols.run.push(key);
            cols.created_ms.push(r.try_get(4)?);
            cols.agent.push(s.agent);
            cols.model.push(s.model);
            cols.spec_digest.push(s.spec_digest);
            cols.fork_of.push(r.try_get(2)?);
            cols.child_of.push(s.child_of);
            cols.goal.push(r.try_get(3)?);
            cols.session.push(s.session);
            cols.ended.push(outcome_text(outcome.as_deref()));
            cols.tag_runs
                .extend(std::iter::repeat_n(key, s.tag_keys.len()));
            cols.tag_keys.extend(s.tag_keys);
            cols.tag_values.extend(s.tag_values);
        }
        c.client()
            .execute(
                "INSERT INTO runtape.run_summary (run, created_ms, agent, model, spec_digest, \
                 fork_of, child_of, goal, session, ended) \
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])",
                &[
                    &cols.run,
                    &cols.created_ms,
                    &cols.agent,
                    &cols.model,
                    &cols.spec_digest,
                    &cols.fork_of,
                    &cols.child_of,
                    &cols.goal,
                    &cols.session,
                    &cols.ended,
                ],
            )
            .await?;
        c.client()
            .execute(
                "INSERT INTO runtape.run_tags (key, value, run) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])",
                &[&cols.tag_keys, &cols.tag_values, &cols.tag_runs],
            )
            .await?;
    }
    Ok(())
}

/// A statement parameter of a query built at run time.
type Arg = Box<dyn ToSql + Sync + Send>;

/// An unsigned number as a `bigint` (the largest it holds past that).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The `WHERE` conditions of a query, numbering their parameters as they are added.
#[derive(Default)]
struct Conditions {
    when: Vec<String>,
    args: Vec<Arg>,
}

impl Conditions {
    /// The next parameter's placeholder for `value` (`$N`).
    fn arg(&mut self, value: Arg) -> String {
        self.args.push(value);
        format!("${}", self.args.len())
    }

    fn add(&mut self, sql: String) {
        self.when.push(sql);
    }
}

/// The `WHERE` conditions of `q` (without its cursor) and their parameters: the SQL form of
/// [`RunQuery::matches`], as SQLite's run summary has it.
fn conditions(q: &RunQuery) -> Conditions {
    let mut w = Conditions::default();
    match &q.status {
        None => {}
        Some(StatusFilter::Queued) => {
            w.add("r.status = 'running' AND r.lease_owner IS NULL".into());
        }
        // Which of these have lost their driver is judged on each row read.
        Some(StatusFilter::Interrupted) => {
            w.add("r.status = 'running' AND r.lease_owner IS NOT NULL".into());
        }
        Some(StatusFilter::Stored(s)) => {
            let p = w.arg(Box::new(s.as_str().to_owned()));
            w.add(format!(
                "r.status = {p} AND NOT (r.status = 'running' AND r.lease_owner IS NULL)"
            ));
        }
    }
    if let Some(a) = &q.agent {
        let p = w.arg(Box::new(a.clone()));
        w.add(format!("m.agent = {p}"));
    }
    if let Some(s) = &q.spec {
        let p = w.arg(Box::new(s.clone()));
        w.add(format!(
            "left(m.spec_digest, length({p}::text)) = {p}::text"
        ));
    }
    if let Some(t) = q.created_from_ms {
        let p = w.arg(Box::new(int(t)));
        w.add(format!("m.created_ms >= {p}"));
    }
    if let Some(t) = q.created_to_ms {
        let p = w.arg(Box::new(int(t)));
        w.add(format!("m.created_ms < {p}"));
    }
    if let Some(c) = q.cost_min {
        let p = w.arg(Box::new(int(c)));
        w.add(format!("r.cost_nanos >= {p}"));
    }
    if let Some(c) = q.cost_max {
        let p = w.arg(Box::new(int(c)));
        w.add(format!("r.cost_nanos <= {p}"));
    }
    if let Some(d) = q.duration_min_ms {
        let p = w.arg(Box::new(int(d)));
        w.add(format!("{DURATION} >= {p}"));
    }
    if let Some(d) = q.duration_max_ms {
        let p = w.arg(Box::new(int(d)));
        w.add(format!("{DURATION} <= {p}"));
    }
    match q.relation {
        None => {}
        Some(Relation::Root) => w.add("m.fork_of IS NULL AND m.child_of IS NULL".into()),
        Some(Relation::Fork) => w.add("m.fork_of IS NOT NULL".into()),
        Some(Relation::Child) => w.add("m.child_of IS NOT NULL".into()),
    }
    if let Some(parent) = &q.parent {
        let p = w.arg(Box::new(parent.to_string()));
        w.add(format!("(m.fork_of = {p} OR m.child_of = {p})"));
    }
    for (k, v) in &q.tags {
        let (pk, pv) = (w.arg(Box::new(k.clone())), w.arg(Box::new(v.clone())));
        w.add(format!(
            "r.key IN (SELECT run FROM runtape.run_tags WHERE key = {pk} AND value = {pv})"
        ));
    }
    if let Some(t) = &q.text {
        // strpos takes the text literally (no pattern characters to escape); lower() as
        // `matches` lowercases, beyond ASCII too.
        let p = w.arg(Box::new(t.clone()));
        w.add(format!(
            "(strpos(lower(r.id), {p}) > 0 OR strpos(lower(m.goal), {p}) > 0 \
             OR strpos(lower(m.ended), {p}) > 0 OR strpos(lower(m.session), {p}) > 0)"
        ));
    }
    w
}

/// A run's duration ([`crate::store::RunRecord::duration_ms`]) in SQL.
const DURATION: &str = "greatest(r.updated_ms - m.created_ms, 0)";

/// A page of the runs `q` asks for (see [`crate::store::Store::run_page`]): the keys and sort
/// values of the page's runs from `runs` and the summary, in order, in one query; then the
/// page's rows in one more, each kept when it passes [`RunQuery::matches`].
pub(super) async fn page(c: &Conn, q: &RunQuery, now_ms: u64) -> Result<RunPage, ReadError> {
    let sort = match q.sort {
        RunSort::Started => "r.key",
        RunSort::Cost => "r.cost_nanos",
        RunSort::Duration => DURATION,
    };
    let mut w = conditions(q);
    let (cmp, dir) = if q.ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    if let Some(Cursor { value, key }) = q.after {
        if q.sort == RunSort::Started {
            let p = w.arg(Box::new(key));
            w.add(format!("r.key {cmp} {p}"));
        } else {
            // A row comparison, which PostgreSQL walks `runs_by_cost` by.
            let (pv, pk) = (w.arg(Box::new(value)), w.arg(Box::new(key)));
            w.add(format!("({sort}, r.key) {cmp} ({pv}, {pk})"));
        }
    }
    let limit = q.limit.max(1);
    let pl = w.arg(Box::new(int(limit as u64 + 1)));
    let filter = if w.when.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", w.when.join(" AND "))
    };
    let sql = format!(
        "SELECT r.key, {sort} FROM runtape.runs r JOIN runtape.run_summary m ON m.run = r.key \
         {filter} ORDER BY {sort} {dir}, r.key {dir} LIMIT {pl}"
    );
    let args: Vec<&(dyn ToSql + Sync)> = w
        .args
        .iter()
        .map(|a| a.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = c.client().query(&sql, &args).await?;
    let mut found: Vec<Cursor> = rows
        .iter()
        .map(|r| {
            Ok(Cursor {
                key: r.try_get(0)?,
                value: r.try_get(1)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()?;
    let next = (found.len() > limit).then(|| found[limit - 1]);
    found.truncate(limit);
    let keys: Vec<i64> = found.iter().map(|c| c.key).collect();
    let runs = runs_by_key(c, &keys)
        .await?
        .into_iter()
        .filter(|r| q.matches(r, now_ms))
        .collect();
    Ok(RunPage { runs, next })
}

/// A count as stored (never negative).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The aggregates of the runs created at or after `since_ms`, per `bucket_ms` (see
/// [`crate::store::Store::run_stats`]): each one `GROUP BY` over `runs` and the summary, none
/// reading a run's spec.
pub(super) async fn stats(c: &Conn, since_ms: u64, bucket_ms: u64) -> Result<RunStats, ReadError> {
    let since = int(since_ms);
    let bucket = int(bucket_ms.max(1));
    let mut by_status = c
        .query(
            "SELECT m.created_ms / $2 * $2, r.status, count(*) \
             FROM runtape.runs r JOIN runtape.run_summary m ON m.run = r.key \
             WHERE m.created_ms >= $1 GROUP BY 1, 2",
            &[&since, &bucket],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(StatusCount {
                bucket_ms: count(r.try_get(0)?),
                status: r.try_get(1)?,
                runs: count(r.try_get(2)?),
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    // Byte order, as every store lists them (not the database's collation).
    by_status.sort_by(|a, b| (a.bucket_ms, &a.status).cmp(&(b.bucket_ms, &b.status)));
    let spend = c
        .query(
            "SELECT m.agent, m.model, count(*), sum(r.cost_nanos)::bigint, sum(r.tokens)::bigint \
             FROM runtape.runs r JOIN runtape.run_summary m ON m.run = r.key \
             WHERE m.created_ms >= $1 GROUP BY m.agent, m.model",
            &[&since],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(Spend {
                agent: r.try_get(0)?,
                model: r.try_get(1)?,
                runs: count(r.try_get(2)?),
                cost_nanos: count(r.try_get(3)?),
                tokens: count(r.try_get(4)?),
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    // The class is what comes before the reason's first `:` (`run_stats::class_of`); the
    // example is the reason of the newest run of the class.
    let failures = c
        .query(
            "SELECT split_part(m.ended, ':', 1), count(*), \
                    (array_agg(m.ended ORDER BY m.run DESC))[1] \
             FROM runtape.runs r JOIN runtape.run_summary m ON m.run = r.key \
             WHERE m.created_ms >= $1 AND r.status = 'failed' GROUP BY 1",
            &[&since],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(FailureCount {
                class: r.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
                runs: count(r.try_get(1)?),
                example: r.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    Ok(finish(by_status, spend, failures))
}
