//! The run summary (schema 13): one narrow row per run with what the run list filters on
//! that `runs` does not hold — its creation time, entry agent and its model, spec digest, fork and
//! delegation parents, goal and how it ended — so [`page`] finds a page of runs by
//! reading narrow rows instead of every run's spec; `run_tags`, each run's tags found by
//! tag; and `runs_by_cost`, so the list sorted by cost reads one page of an index. Written with the run's row
//! ([`insert`]) and when its outcome is ([`set_ended`]), in the same transactions; filled for
//! the runs already stored when the schema is migrated ([`fill`]).
//!
//! It is an index, not a record: every run [`page`] returns is read from its own row and
//! checked against [`RunQuery::matches`], so a summary row that disagrees with its run can
//! hide the run from a filter but never show a run the filter excludes.

use rusqlite::types::Value;
use rusqlite::{Connection, params, params_from_iter};

use super::{RUN_COLUMNS, RUN_ROWS, run_record};
use crate::store::run_facts::{
    outcome_text, spec_child_of, spec_digest, spec_entry_route, spec_session, spec_tags,
};
use crate::store::{
    Cursor, Relation, RunPage, RunQuery, RunRecord, RunSort, StatusFilter, StoreError,
};

/// Migration 10 → 11: the run summary, and the summary of each run already stored.
pub(in crate::store) const RUN_SUMMARY: &str = r#"
-- what the run list filters on beyond `runs`, one narrow row per run (an index: every run
-- listed is checked against its own row)
CREATE TABLE run_summary (
    -- runs.key
    run INTEGER PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    -- the entry agent
    agent TEXT NOT NULL,
    -- its primary route, provider/model
    model TEXT NOT NULL,
    -- BLAKE3 of the stored spec without its tags (hex)
    spec_digest TEXT NOT NULL,
    -- the run a fork was forked from
    fork_of TEXT,
    -- the run whose delegation started a child run
    child_of TEXT,
    goal TEXT NOT NULL,
    -- the session it belongs to
    session TEXT,
    -- the answer, or why it failed or was cancelled; NULL until it ends
    ended TEXT
);
-- each run's tags, found by tag
CREATE TABLE run_tags (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    -- runs.key
    run INTEGER NOT NULL,
    PRIMARY KEY (key, value, run)
) WITHOUT ROWID;
-- the list sorted by cost, a page at a time at any depth
CREATE INDEX runs_by_cost ON runs (cost_nanos);
"#;

/// A run's summary row, from what its `run_specs` row holds.
struct Summary {
    agent: String,
    model: String,
    spec_digest: String,
    child_of: Option<String>,
}

fn summarise(spec: &str) -> Summary {
    let (agent, model) = spec_entry_route(spec);
    Summary {
        agent,
        model,
        spec_digest: spec_digest(spec),
        child_of: spec_child_of(spec).map(|r| r.to_string()),
    }
}

/// Writes the summary of the run at `key`, created now: call in the transaction that
/// inserts its `runs` and `run_specs` rows.
pub(super) fn insert(
    tx: &Connection,
    key: i64,
    spec: &str,
    fork_of: Option<&str>,
    goal: &str,
    created_ms: i64,
) -> rusqlite::Result<()> {
    let s = summarise(spec);
    tx.prepare_cached(
        "INSERT INTO run_summary (run, created_ms, agent, model, spec_digest, fork_of, child_of, goal, session, ended) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL)",
    )?
    .execute(params![
        key,
        created_ms,
        s.agent,
        s.model,
        s.spec_digest,
        fork_of,
        s.child_of,
        goal,
        spec_session(spec)
    ])?;
    let mut tag =
        tx.prepare_cached("INSERT INTO run_tags (key, value, run) VALUES (?1, ?2, ?3)")?;
    for (k, v) in spec_tags(spec) {
        tag.execute(params![k, v, key])?;
    }
    Ok(())
}

/// Records how the run at `key` ended: call in the transaction that stores its outcome.
pub(super) fn set_ended(tx: &Connection, key: i64, outcome: &str) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE run_summary SET ended = ?2 WHERE run = ?1")?
        .execute(params![key, outcome_text(Some(outcome))])?;
    Ok(())
}

/// A stored run as the migration reads it: key, spec, fork parent, goal, creation, outcome.
type StoredRun = (i64, String, Option<String>, String, i64, Option<String>);

/// Summarises every run already stored (the migration to schema 13).
pub(in crate::store) fn fill(conn: &Connection) -> rusqlite::Result<()> {
    let rows: Vec<StoredRun> = conn
        .prepare("SELECT run, spec, parent_id, goal, created_ms, outcome FROM run_specs")?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (key, spec, fork_of, goal, created_ms, outcome) in rows {
        insert(conn, key, &spec, fork_of.as_deref(), &goal, created_ms)?;
        if let Some(outcome) = outcome {
            set_ended(conn, key, &outcome)?;
        }
    }
    Ok(())
}

/// An unsigned number as SQLite's integer (the largest it holds past that).
fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// `text` for `LIKE … ESCAPE '\'`: its `%`, `_` and `\` taken literally, anywhere in the value.
fn contains(text: &str) -> Value {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    Value::Text(p)
}

/// The `WHERE` conditions of `q` (without its cursor) and their parameters.
fn conditions(q: &RunQuery) -> (Vec<String>, Vec<Value>) {
    let mut when: Vec<String> = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    let mut add = |sql: &str, values: Vec<Value>| {
        when.push(sql.to_owned());
        args.extend(values);
    };
    match &q.status {
        None => {}
        Some(StatusFilter::Queued) => {
            add("r.status = 'running' AND r.lease_owner IS NULL", vec![]);
        }
        // Which of these have lost their driver is judged on each row read.
        Some(StatusFilter::Interrupted) => {
            add("r.status = 'running' AND r.lease_owner IS NOT NULL", vec![]);
        }
        Some(StatusFilter::Stored(s)) => add(
            "r.status = ? AND NOT (r.status = 'running' AND r.lease_owner IS NULL)",
            vec![Value::Text(s.as_str().to_owned())],
        ),
    }
    if let Some(a) = &q.agent {
        add("m.agent = ?", vec![Value::Text(a.clone())]);
    }
    if let Some(s) = &q.spec {
        add(
            "substr(m.spec_digest, 1, ?) = ?",
            vec![int(s.len() as u64), Value::Text(s.clone())],
        );
    }
    if let Some(t) = q.created_from_ms {
        add("m.created_ms >= ?", vec![int(t)]);
    }
    if let Some(t) = q.created_to_ms {
        add("m.created_ms < ?", vec![int(t)]);
    }
    if let Some(c) = q.cost_min {
        add("r.cost_nanos >= ?", vec![int(c)]);
    }
    if let Some(c) = q.cost_max {
        add("r.cost_nanos <= ?", vec![int(c)]);
    }
    if let Some(d) = q.duration_min_ms {
        add("max(r.updated_ms - m.created_ms, 0) >= ?", vec![int(d)]);
    }
    if let Some(d) = q.duration_max_ms {
        add("max(r.updated_ms - m.created_ms, 0) <= ?", vec![int(d)]);
    }
    match q.relation {
        None => {}
        Some(Relation::Root) => add("m.fork_of IS NULL AND m.child_of IS NULL", vec![]),
        Some(Relation::Fork) => add("m.fork_of IS NOT NULL", vec![]),
        Some(Relation::Child) => add("m.child_of IS NOT NULL", vec![]),
    }
    if let Some(p) = &q.parent {
        let p = Value::Text(p.to_string());
        add("(m.fork_of = ? OR m.child_of = ?)", vec![p.clone(), p]);
    }
    for (k, v) in &q.tags {
        add(
            "r.key IN (SELECT run FROM run_tags WHERE key = ? AND value = ?)",
            vec![Value::Text(k.clone()), Value::Text(v.clone())],
        );
    }
    if let Some(t) = &q.text {
        let like = contains(t);
        add(
            "(r.id LIKE ? ESCAPE '\\' OR m.goal LIKE ? ESCAPE '\\' OR m.ended LIKE ? ESCAPE '\\' \
             OR m.session LIKE ? ESCAPE '\\')",
            vec![like.clone(), like.clone(), like.clone(), like],
        );
    }
    (when, args)
}

/// A page of the runs `q` asks for (see [`crate::store::Store::run_page`]): the keys and
/// sort values of the page's runs from `runs` and the summary, in order, then each run's row,
/// kept when it passes [`RunQuery::matches`].
pub(super) fn page(
    c: &Connection,
    q: &RunQuery,
    now_ms: u64,
) -> rusqlite::Result<Result<RunPage, StoreError>> {
    let sort = match q.sort {
        RunSort::Started => "r.key",
        RunSort::Cost => "r.cost_nanos",
        RunSort::Duration => "max(r.updated_ms - m.created_ms, 0)",
    };
    let (mut when, mut args) = conditions(q);
    let (cmp, dir) = if q.ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    if let Some(Cursor { value, key }) = q.after {
        if q.sort == RunSort::Started {
            // The value is the key: the rowid alone, which SQLite seeks to.
            when.push(format!("r.key {cmp} ?"));
            args.push(Value::Integer(key));
        } else {
            // A row value, which SQLite compares as a whole and walks an index by.
            when.push(format!("({sort}, r.key) {cmp} (?, ?)"));
            args.extend([Value::Integer(value), Value::Integer(key)]);
        }
    }
    let limit = q.limit.max(1);
    args.push(int(limit as u64 + 1));
    let filter = if when.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", when.join(" AND "))
    };
    let sql = format!(
        "SELECT r.key, {sort} FROM runs r JOIN run_summary m ON m.run = r.key {filter} \
         ORDER BY {sort} {dir}, r.key {dir} LIMIT ?"
    );
    let mut keys: Vec<Cursor> = c
        .prepare(&sql)?
        .query_map(params_from_iter(args), |r| {
            Ok(Cursor {
                key: r.get(0)?,
                value: r.get(1)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let next = (keys.len() > limit).then(|| keys[limit - 1]);
    keys.truncate(limit);
    let mut read = c.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM {RUN_ROWS} WHERE r.key = ?1"
    ))?;
    let mut runs: Vec<RunRecord> = Vec::with_capacity(keys.len());
    for k in keys {
        let Some(row) = read
            .query_row([k.key], run_record)
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?
        else {
            continue;
        };
        match row {
            Ok(r) if q.matches(&r, now_ms) => runs.push(r),
            Ok(_) => {}
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(RunPage { runs, next }))
}
