//! The PostgreSQL schema, its migrations, and how a database URL is shown and its errors worded.
//!
//! Every table lives in the schema `runtape`, so runtape shares a database with anything else.
//! The layout is SQLite's (see `store::schema`): row ids pack `(run key, seq)` as
//! `run << 32 | seq`, message bodies are content-addressed blobs, snapshots come every
//! [`SNAPSHOT_EVERY`](crate::store::SNAPSHOT_EVERY) transitions, so storage per transition stays
//! flat. Two things are PostgreSQL's own: lease expiries are on the database's clock
//! (`runtape.now_ms()`), and `workers` lists the `runtape worker` processes with their
//! heartbeats.

use tokio_postgres::error::SqlState;

use super::conn::Conn;
use crate::store::StoreError;

/// The PostgreSQL schema version this runtape writes (numbered on its own, not SQLite's).
/// Opening a database with a higher version is an error; a lower one is migrated forward.
pub const PG_SCHEMA_VERSION: i64 = 9;

/// Migration `i` takes the schema from version `i` to `i + 1`.
///
/// - 0 → 1: the tables of SQLite's schema 3 (runs with `unpriced_turns`, transitions,
///   snapshots, blobs, outbox, heads), the database clock, and `workers`.
/// - 1 → 2: global memory, as SQLite's schema 5 ([`V2_MEMORY`]).
/// - 2 → 3: `session_runs`, the runs of each session in order ([`V3`]).
/// - 3 → 4: `memory_removals.seal`, a removal record's signature ([`REMOVAL_SEALS`]).
/// - 4 → 5: SQLite's schema 9 layout: `runs` keeps a run's standing and its head, `run_specs`
///   its spec, setup, goal, parent and outcome ([`HOT_RUNS`]).
/// - 5 → 6: `pruned_runs`, the chained tombstones of runs `runtape prune` removed, as SQLite's
///   schema 11 ([`TOMBSTONES`]).
/// - 6 → 7: `schedules` and `schedule_fires`, cron schedules and the instants they fired, as
///   SQLite's schema 12 ([`SCHEDULES`]).
/// - 7 → 8: `blob_refs`, which runs refer to each blob, as SQLite's schema 14 ([`BLOB_REFS`]).
/// - 8 → 9: `run_summary`, `run_tags` and `runs_by_cost`, what the run list filters and sorts
///   on, as SQLite's schema 13 ([`super::run_summary`]); the rows of the runs already stored
///   are written in the same transaction ([`super::run_summary::fill`]).
const MIGRATIONS: &[&str] = &[
    V1,
    V2_MEMORY,
    V3,
    REMOVAL_SEALS,
    HOT_RUNS,
    TOMBSTONES,
    SCHEDULES,
    BLOB_REFS,
    super::run_summary::RUN_SUMMARY,
];

/// The version whose migration is followed by [`super::run_summary::fill`].
const RUN_SUMMARY_VERSION: i64 = 9;

/// Which runs refer to each blob (`run` = `runs.key`), as SQLite's `blob_refs`: a row for every
/// blob of every commit, so `runtape prune` removes a blob when the last run referring to it
/// goes ([`crate::store::retention`]). Blobs stored before get a row of run 0 (no run has it):
/// they are kept.
const BLOB_REFS: &str = r#"
CREATE TABLE runtape.blob_refs (
    hash bytea NOT NULL,
    run bigint NOT NULL,
    PRIMARY KEY (hash, run)
);
CREATE INDEX blob_refs_by_run ON runtape.blob_refs (run);
INSERT INTO runtape.blob_refs (hash, run) SELECT hash, 0 FROM runtape.blobs;
"#;

/// Schedules ([`crate::schedule`]), as SQLite's: each with its cursor, the last instant it
/// considered; one row per instant fired, keyed by (schedule, instant), so an instant is
/// claimed once however many workers race for it ([`crate::store::schedules`]).
const SCHEDULES: &str = r#"
CREATE TABLE runtape.schedules (
    name text PRIMARY KEY,
    spec_path text NOT NULL,
    cron text NOT NULL,
    tz text NOT NULL,
    goal text,
    overlap text NOT NULL,
    catch_up text NOT NULL,
    paused boolean NOT NULL,
    cursor_ms bigint NOT NULL,
    created_ms bigint NOT NULL
);
-- state: pending (its run not started yet), started, skipped (overlap)
CREATE TABLE runtape.schedule_fires (
    schedule text NOT NULL,
    instant_ms bigint NOT NULL,
    run text NOT NULL,
    state text NOT NULL,
    manual boolean NOT NULL,
    fired_ms bigint NOT NULL,
    PRIMARY KEY (schedule, instant_ms)
);
"#;

/// The tombstones of pruned runs ([`crate::store::retention`]), as SQLite's `pruned_runs`.
const TOMBSTONES: &str = r#"
CREATE TABLE runtape.pruned_runs (
    id bigint PRIMARY KEY,
    run_id text NOT NULL UNIQUE,
    body bytea NOT NULL,
    chain bytea NOT NULL
);
"#;

/// As SQLite's schema 9 (`store::schema`): what every commit rewrites (the standing and the
/// head) apart from what it never does, so both stores have one layout and `verify` names the
/// same columns on either. The heads move as they are (JSON: this store does not pack them).
const HOT_RUNS: &str = r#"
CREATE TABLE runtape.run_specs (
    run bigint PRIMARY KEY,
    parent_id text,
    fork_seq bigint,
    spec text NOT NULL,
    setup text,
    goal text NOT NULL,
    created_ms bigint NOT NULL,
    outcome text
);
INSERT INTO runtape.run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome)
    SELECT key, parent_id, fork_seq, spec, setup, goal, created_ms, outcome FROM runtape.runs;
ALTER TABLE runtape.runs ADD COLUMN head bytea, ADD COLUMN seal bytea;
UPDATE runtape.runs r SET head = h.body, seal = h.seal FROM runtape.heads h WHERE h.run = r.key;
DROP TABLE runtape.heads;
ALTER TABLE runtape.runs DROP COLUMN parent_id, DROP COLUMN fork_seq, DROP COLUMN spec,
    DROP COLUMN setup, DROP COLUMN goal, DROP COLUMN created_ms, DROP COLUMN outcome;
"#;

/// A removal record's signature over its chain link, when it was made with a key
/// ([`crate::receipt::check_removal_seal`]); NULL: hash-chained only.
const REMOVAL_SEALS: &str = r#"
ALTER TABLE runtape.memory_removals ADD COLUMN seal bytea;
"#;

/// Global memory (revision 5, [`crate::store::global_memory`]): one row per version of each
/// key, naming the publish (run and effect) or the removal that wrote it; removal records
/// chained by hash.
const V2_MEMORY: &str = r#"
CREATE TABLE runtape.memory_global (
    name text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL,
    value text,
    run_id text,
    effect_seq bigint,
    effect_index bigint,
    removal bigint,
    PRIMARY KEY (name, key, version)
);
CREATE INDEX memory_global_origin ON runtape.memory_global (run_id, effect_seq, effect_index);
CREATE TABLE runtape.memory_removals (
    id bigint PRIMARY KEY,
    body bytea NOT NULL,
    chain bytea NOT NULL
);
"#;

/// The runs of each session, in order (see [`crate::store::SessionLink`]): `run` is
/// `runs.key`; `(session, idx)` is unique, so two processes cannot both take a session's next
/// place, and a run has at most one place. A fork is never in it.
const V3: &str = r#"
CREATE TABLE runtape.session_runs (
    session text NOT NULL,
    idx bigint NOT NULL,
    run bigint NOT NULL UNIQUE,
    PRIMARY KEY (session, idx)
);
"#;

const V1: &str = r#"
CREATE SCHEMA IF NOT EXISTS runtape;
CREATE TABLE runtape.meta (
    name text PRIMARY KEY,
    value bigint NOT NULL
);
-- The database's clock in Unix milliseconds: every lease expiry is computed and compared with
-- it, never with a worker's clock. `now()` is the start of the transaction, which begins after
-- the write it carries was queued, so a lease never ends earlier than its holder expects.
CREATE FUNCTION runtape.now_ms() RETURNS bigint LANGUAGE sql STABLE
    AS $$ SELECT (extract(epoch FROM now()) * 1000)::bigint $$;
CREATE TABLE runtape.runs (
    key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text NOT NULL UNIQUE,
    parent_id text,
    fork_seq bigint,
    spec text NOT NULL,
    setup text,
    goal text NOT NULL,
    status text NOT NULL,
    state_kind text NOT NULL,
    seq bigint NOT NULL,
    lease_epoch bigint NOT NULL,
    lease_owner text,
    -- on the database's clock (runtape.now_ms()); 0 when released
    lease_expires_ms bigint NOT NULL,
    control text,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    cost_nanos bigint NOT NULL,
    tokens bigint NOT NULL,
    outcome text,
    unpriced_turns bigint NOT NULL DEFAULT 0
);
-- what workers scan for: runs that should be moving
CREATE INDEX runs_running ON runtape.runs (key) WHERE status = 'running';
-- id = run key << 32 | seq
CREATE TABLE runtape.transitions (
    id bigint PRIMARY KEY,
    at bigint NOT NULL,
    event bytea NOT NULL,
    edge text NOT NULL,
    effects bytea NOT NULL,
    state_hash bytea NOT NULL,
    chain bytea NOT NULL,
    seal bytea
);
-- id = run key << 32 | seq
CREATE TABLE runtape.snapshots (
    id bigint PRIMARY KEY,
    state bytea NOT NULL
);
CREATE TABLE runtape.blobs (
    hash bytea PRIMARY KEY,
    bytes bytea NOT NULL
);
CREATE TABLE runtape.outbox (
    run bigint NOT NULL,
    seq bigint NOT NULL,
    idx bigint NOT NULL,
    status text NOT NULL,
    idempotency_key text,
    PRIMARY KEY (run, seq, idx)
);
-- run = runs.key; body = the head's canonical JSON; seal = its seal
CREATE TABLE runtape.heads (
    run bigint PRIMARY KEY,
    body bytea NOT NULL,
    seal bytea NOT NULL
);
-- `runtape worker` processes; heartbeat and expiry on the database's clock
CREATE TABLE runtape.workers (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    spec_dir text NOT NULL,
    concurrency bigint NOT NULL,
    started_ms bigint NOT NULL,
    heartbeat_ms bigint NOT NULL,
    expires_ms bigint NOT NULL,
    draining boolean NOT NULL DEFAULT false
);
INSERT INTO runtape.meta (name, value) VALUES ('schema_version', 0);
"#;

/// Serialises migrations of one database across processes (many workers starting at once).
const MIGRATION_LOCK: i64 = 0x0072_756e_7461_7065; // "runtape"

/// The schema version stored, or 0 when runtape's tables are absent. Reads only.
pub(super) async fn version(conn: &Conn, shown: &str) -> Result<i64, StoreError> {
    // Read from pg_class under this statement's snapshot, not through `to_regclass`: that
    // looks the name up in the backend's catalog cache, which taking an advisory lock does not
    // refresh, so a process that waited on `MIGRATION_LOCK` while another created the tables
    // would still see none and run the first migration again ("relation meta already exists").
    let present: bool = conn
        .client()
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'runtape' AND c.relname = 'meta')",
            &[],
        )
        .await
        .map_err(|e| classify(shown, &e))?
        .get(0);
    if !present {
        return Ok(0);
    }
    let row = conn
        .client()
        .query_opt(
            "SELECT value FROM runtape.meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(|e| classify(shown, &e))?;
    row.map(|r| r.get::<_, i64>(0))
        .ok_or_else(|| StoreError::Corrupt {
            path: shown.to_owned(),
            detail: "the schema `runtape` exists but records no schema version".into(),
        })
}

/// Brings the schema to [`PG_SCHEMA_VERSION`], one transaction per database (concurrent
/// callers wait for each other). Returns the version found before. A database newer than this
/// runtape is refused and nothing is written; a role without the rights to create the tables
/// gets one line saying so.
pub(super) async fn migrate(conn: &Conn, shown: &str) -> Result<i64, StoreError> {
    let found = version(conn, shown).await?;
    if found > PG_SCHEMA_VERSION {
        return Err(newer(shown, found));
    }
    if found == PG_SCHEMA_VERSION {
        return Ok(found);
    }
    let c = conn.client();
    let ddl = |e: tokio_postgres::Error| denied_or(shown, &e);
    c.batch_execute("BEGIN").await.map_err(ddl)?;
    let result = async {
        c.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(ddl)?;
        // Another process may have migrated while this one waited for the lock.
        let now = version(conn, shown).await?;
        if now > PG_SCHEMA_VERSION {
            return Err(newer(shown, now));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(now as usize) {
            c.batch_execute(sql).await.map_err(ddl)?;
            if i as i64 + 1 == RUN_SUMMARY_VERSION {
                super::run_summary::fill(conn).await.map_err(ddl)?;
            }
            c.execute(
                "UPDATE runtape.meta SET value = $1 WHERE name = 'schema_version'",
                &[&(i as i64 + 1)],
            )
            .await
            .map_err(ddl)?;
        }
        c.batch_execute("COMMIT").await.map_err(ddl)
    }
    .await;
    if result.is_err() {
        let _ = c.batch_execute("ROLLBACK").await;
    }
    result.map(|()| found)
}

fn newer(shown: &str, found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: shown.to_owned(),
        found,
        supported: PG_SCHEMA_VERSION,
    }
}

/// A migration failure: lack of rights is worded as such, anything else as [`classify`] does.
fn denied_or(shown: &str, e: &tokio_postgres::Error) -> StoreError {
    if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        let detail = e
            .as_db_error()
            .map_or(e.to_string(), |d| d.message().to_owned());
        return StoreError::Io(format!(
            "{shown}: this role may not create runtape's tables ({detail}); run `runtape migrate` once as a role that may (e.g. the database owner), or GRANT CREATE ON DATABASE to this role"
        ));
    }
    classify(shown, e)
}

/// A database error as one line naming the database (never its password) and, where it is
/// known, what to do.
pub(super) fn classify(shown: &str, e: &tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        if e.is_closed() {
            return StoreError::Io(format!(
                "{shown}: the connection to the database was lost; check that the server is up and reachable"
            ));
        }
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        return StoreError::Io(format!("{shown}: {text}"));
    };
    let code = db.code();
    let message = db.message();
    if *code == SqlState::DISK_FULL {
        return StoreError::Full {
            path: shown.to_owned(),
            detail: message.to_owned(),
            cap_bytes: None,
        };
    }
    let hint = if *code == SqlState::INVALID_CATALOG_NAME {
        "; create the database first (createdb), or fix the URL"
    } else if *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    {
        "; check the user and the password (in the URL, or in $PGPASSWORD)"
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        "; grant this role SELECT, INSERT, UPDATE and DELETE on the tables of schema runtape"
    } else if *code == SqlState::ADMIN_SHUTDOWN {
        "; the server stopped or an administrator ended this connection"
    } else {
        ""
    };
    StoreError::Io(format!("{shown}: {message}{hint}"))
}

/// True for an error after which the transaction can be tried again as a whole (a deadlock, a
/// serialisation failure): nothing of it was written.
pub(super) fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    )
}

/// True when the connection is gone: closed, or ended by the server (an administrator's
/// `pg_terminate_backend`, a shutdown).
pub(super) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || matches!(
            e.code(),
            Some(c) if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        )
}
