//! The SQLite schema, its migrations, and the checks made when a file is opened.
//!
//! Row ids pack `(run key, seq)` as `run << 32 | seq`, so transitions, snapshots and receipts
//! need no secondary index and a run's history is one range scan.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// The schema version this runtape writes. Opening a database with a higher version is an
/// error; a lower one is migrated forward.
pub const SCHEMA_VERSION: i64 = 14;

/// One step of the schema: SQL, then (optionally) code that fills what the SQL added.
struct Migration {
    sql: &'static str,
    then: Option<fn(&Connection) -> rusqlite::Result<()>>,
}

/// Migration `i` takes the schema from version `i` to `i + 1`.
///
/// - 0 → 1: runtape 0.1.0's tables.
/// - 1 → 2: `runs.unpriced_turns`, model turns whose cost was unknown.
/// - 2 → 3: `heads`, each run's sealed head (see [`crate::receipt::RunHead`]); every run
///   already stored gets an unsigned head recording what is found now (trust on first use,
///   [`super::legacy_heads`]).
/// - 3 → 4: packed JSON in the event, effects, snapshot and blob columns; edge codes ([`V4`]).
/// - 4 → 5: global memory: its versioned rows and the removal records ([`V5_MEMORY`]).
/// - 5 → 6: `session_runs`, the runs of each session in order ([`V6`]).
/// - 6 → 7: `memory_removals.seal`, a removal record's signature ([`REMOVAL_SEALS`]).
/// - 7 → 8: transitions stored in commit order ([`APPEND_ORDERED_TRANSITIONS`]).
/// - 8 → 9: what every commit rewrites apart from what it never does: `runs` keeps a run's
///   standing and its head, packed; `run_specs` its spec, setup, goal, parent and outcome
///   ([`HOT_RUNS`]).
/// - 9 → 10: blobs stored in write order, found through the first 8 bytes of their digest
///   ([`BLOBS_IN_WRITE_ORDER`]).
/// - 10 → 11: `pruned_runs`, the chained tombstones of runs `runtape prune` removed
///   ([`TOMBSTONES`]).
/// - 11 → 12: `schedules` and `schedule_fires`, cron schedules and the instants they fired
///   ([`SCHEDULES`]).
/// - 12 → 13: `run_summary`, what the run list filters on beyond `runs`, one narrow row per
///   run ([`super::sqlite::run_summary`]).
/// - 13 → 14: `blob_refs`, which runs refer to each blob, so `runtape prune` can remove the
///   blobs only its runs used ([`BLOB_REFS`]).
const MIGRATIONS: &[Migration] = &[
    Migration {
        sql: V1,
        then: None,
    },
    Migration {
        sql: V2,
        then: None,
    },
    Migration {
        sql: V3,
        then: Some(super::legacy_heads::seal_existing_runs),
    },
    Migration {
        sql: V4,
        then: None,
    },
    Migration {
        sql: V5_MEMORY,
        then: None,
    },
    Migration {
        sql: V6,
        then: None,
    },
    Migration {
        sql: REMOVAL_SEALS,
        then: None,
    },
    Migration {
        sql: APPEND_ORDERED_TRANSITIONS,
        then: None,
    },
    Migration {
        sql: HOT_RUNS,
        then: Some(pack_stored_heads),
    },
    Migration {
        sql: BLOBS_IN_WRITE_ORDER,
        then: None,
    },
    Migration {
        sql: TOMBSTONES,
        then: None,
    },
    Migration {
        sql: SCHEDULES,
        then: None,
    },
    Migration {
        sql: super::sqlite::run_summary::RUN_SUMMARY,
        then: Some(super::sqlite::run_summary::fill),
    },
    Migration {
        sql: BLOB_REFS,
        then: None,
    },
];

/// Which runs refer to each blob (`run` = `runs.key`): a row for every blob of every commit,
/// written beside the blob whether it was stored then or already was, so `runtape prune`
/// removes a blob when the last run referring to it goes ([`crate::store::retention`]).
/// Blobs stored before this table existed get a row of run 0, which no run has: they are
/// kept, since which runs use them was not recorded.
const BLOB_REFS: &str = r#"
CREATE TABLE blob_refs (
    hash BLOB NOT NULL,
    run INTEGER NOT NULL,
    PRIMARY KEY (hash, run)
) WITHOUT ROWID;
CREATE INDEX blob_refs_by_run ON blob_refs (run);
INSERT OR IGNORE INTO blob_refs (hash, run) SELECT hash, 0 FROM blobs;
"#;

/// Schedules ([`crate::schedule`]): each with its cursor, the last instant it considered; and
/// one row per instant fired, keyed by (schedule, instant), so an instant is claimed once
/// whoever races for it ([`crate::store::schedules`]).
pub(super) const SCHEDULES: &str = r#"
CREATE TABLE schedules (
    name TEXT PRIMARY KEY,
    spec_path TEXT NOT NULL,
    cron TEXT NOT NULL,
    tz TEXT NOT NULL,
    goal TEXT,
    overlap TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    paused INTEGER NOT NULL,
    cursor_ms INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
-- state: pending (its run not started yet), started, skipped (overlap)
CREATE TABLE schedule_fires (
    schedule TEXT NOT NULL,
    instant_ms INTEGER NOT NULL,
    run TEXT NOT NULL,
    state TEXT NOT NULL,
    manual INTEGER NOT NULL,
    fired_ms INTEGER NOT NULL,
    PRIMARY KEY (schedule, instant_ms)
);
"#;

/// Each migration's SQL in order: the one at index `i` takes the schema from version `i` to
/// `i + 1` ([`super::schema_shape`] builds every version's tables from them).
pub(super) fn migration_sql() -> impl Iterator<Item = &'static str> {
    MIGRATIONS.iter().map(|m| m.sql)
}

/// The tombstones of pruned runs ([`crate::store::retention`]): `body` is a tombstone's
/// canonical JSON, `chain` = blake3(previous chain || body), ids 1, 2, ... without a gap.
const TOMBSTONES: &str = r#"
CREATE TABLE pruned_runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL,
    chain BLOB NOT NULL
);
"#;

/// Blobs are stored in the order they are written (SQLite's own rowid: each new one goes at
/// the end) and found through an index of the first 8 bytes of their digest, compared whole
/// in the row ([`crate::store::sqlite`]'s `BLOB_BY_HASH`). Keyed by the whole digest, a blob
/// went to a random place in a table of ~100-byte rows: at 10,000 runs in flight a group
/// commit wrote a page of it for nearly every blob. Now the rows of a commit share the last
/// pages, and the random place is in an index of ~16-byte entries, six times denser. Same
/// columns, same bytes; a digest is still stored once (the writer looks before it inserts).
const BLOBS_IN_WRITE_ORDER: &str = r#"
CREATE TABLE blobs_in_write_order (
    hash BLOB NOT NULL,
    bytes BLOB NOT NULL
);
INSERT INTO blobs_in_write_order (hash, bytes) SELECT hash, bytes FROM blobs;
DROP TABLE blobs;
ALTER TABLE blobs_in_write_order RENAME TO blobs;
CREATE INDEX blobs_by_prefix ON blobs (substr(hash, 1, 8));
"#;

/// A run's row holds only what its commits change, and its head: every commit of a run
/// rewrites its row, and at 10,000 runs in flight a group commit of a thousand runs rewrote a
/// thousand rows of about 1.2 KiB (the spec and goal with the standing) and a thousand heads of
/// about 0.8 KiB, in two tables — most of the pages each transaction wrote. Now the row is the
/// standing and the head packed ([`crate::format::packed_head`]), about 350 bytes, so many
/// runs' rows share a page; the spec, setup, goal, parent and outcome (written when the run is
/// created, and the outcome once when it ends) are in `run_specs`, keyed by the run's key.
/// The heads are packed after the copy ([`pack_stored_heads`]). Same values, same keys.
const HOT_RUNS: &str = r#"
CREATE TABLE run_specs (
    -- runs.key
    run INTEGER PRIMARY KEY,
    parent_id TEXT,
    fork_seq INTEGER,
    spec TEXT NOT NULL,
    setup TEXT,
    goal TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    outcome TEXT
);
INSERT INTO run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome)
    SELECT key, parent_id, fork_seq, spec, setup, goal, created_ms, outcome FROM runs;
CREATE TABLE runs_standing (
    key INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    state_kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    lease_epoch INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires_ms INTEGER NOT NULL,
    control TEXT,
    updated_ms INTEGER NOT NULL,
    cost_nanos INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    unpriced_turns INTEGER NOT NULL DEFAULT 0,
    -- the sealed head: packed (crate::format::packed_head), or its JSON as written
    head BLOB,
    -- its seal
    seal BLOB
);
INSERT INTO runs_standing (key, id, status, state_kind, seq, lease_epoch, lease_owner,
        lease_expires_ms, control, updated_ms, cost_nanos, tokens, unpriced_turns, head, seal)
    SELECT r.key, r.id, r.status, r.state_kind, r.seq, r.lease_epoch, r.lease_owner,
        r.lease_expires_ms, r.control, r.updated_ms, r.cost_nanos, r.tokens, r.unpriced_turns,
        h.body, h.seal
    FROM runs r LEFT JOIN heads h ON h.run = r.key;
DROP TABLE heads;
DROP TABLE runs;
ALTER TABLE runs_standing RENAME TO runs;
"#;

/// Packs every stored head that is a head's canonical JSON (the rest stay as written).
fn pack_stored_heads(conn: &Connection) -> rusqlite::Result<()> {
    let heads: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT key, head FROM runs WHERE head IS NOT NULL")?
        .query_map([], |r| Ok((r.get(0)?, super::sqlite::bytes_at(r, 1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = conn.prepare("UPDATE runs SET head = ?2 WHERE key = ?1")?;
    for (key, body) in heads {
        if let Some(packed) = crate::format::packed_head::pack_head(&body) {
            update.execute(rusqlite::params![key, packed.as_bytes()])?;
        }
    }
    Ok(())
}

/// A removal record's signature over its chain link, when it was made with a key
/// ([`crate::receipt::check_removal_seal`]); NULL: hash-chained only.
const REMOVAL_SEALS: &str = r#"
ALTER TABLE memory_removals ADD COLUMN seal BLOB;
"#;

/// Global memory (revision 5, [`crate::store::global_memory`]): one row per version of each
/// key, naming the publish (run and effect) or the removal that wrote it; removal records
/// chained by hash.
const V5_MEMORY: &str = r#"
CREATE TABLE memory_global (
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    -- NULL: the key was forgotten (or removed) at this version
    value TEXT,
    -- a publish: the run and its PublishMemory effect
    run_id TEXT,
    effect_seq INTEGER,
    effect_index INTEGER,
    -- a removal: memory_removals.id
    removal INTEGER,
    PRIMARY KEY (name, key, version)
) WITHOUT ROWID;
CREATE INDEX memory_global_origin ON memory_global (run_id, effect_seq, effect_index);
-- body = the removal's canonical JSON; chain = blake3(previous chain || body)
CREATE TABLE memory_removals (
    id INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    chain BLOB NOT NULL
);
"#;

/// The runs of each session, in order (see [`crate::store::SessionLink`]): `run` is
/// `runs.key`; `(session, idx)` is unique, so two processes cannot both take a session's next
/// place, and a run has at most one place. A fork is never in it.
const V6: &str = r#"
CREATE TABLE session_runs (
    session TEXT NOT NULL,
    idx INTEGER NOT NULL,
    run INTEGER NOT NULL UNIQUE,
    PRIMARY KEY (session, idx)
) WITHOUT ROWID;
"#;

/// Transitions are stored in commit order: the table's rowid is SQLite's own (each new row
/// goes at the end), and `id` (`run << 32 | seq`, as before) is a unique column whose index
/// serves every read by run and seq. A group commit of a thousand runs then appends its
/// transitions to a few pages instead of writing into the middle of a thousand runs' ranges
/// (at 10,000 runs in flight that was the largest share of the pages each transaction wrote),
/// and the index it updates holds 8-byte keys. Nothing else changes: same columns, same ids,
/// same bytes; rows are copied over in `id` order.
const APPEND_ORDERED_TRANSITIONS: &str = r#"
CREATE TABLE transitions_in_commit_order (
    id INTEGER NOT NULL,
    at INTEGER NOT NULL,
    event BLOB NOT NULL,
    edge TEXT NOT NULL,
    effects BLOB NOT NULL,
    state_hash BLOB NOT NULL,
    chain BLOB NOT NULL,
    seal BLOB
);
INSERT INTO transitions_in_commit_order (id, at, event, edge, effects, state_hash, chain, seal)
    SELECT id, at, event, edge, effects, state_hash, chain, seal FROM transitions ORDER BY id;
DROP TABLE transitions;
ALTER TABLE transitions_in_commit_order RENAME TO transitions;
-- id = run key << 32 | seq
CREATE UNIQUE INDEX transitions_by_id ON transitions (id);
"#;

/// Nothing changes in the tables: from schema 4 on, `transitions.event`, `transitions.effects`
/// and `snapshots.state` may hold packed JSON ([`crate::format::packed`]) beside the plain JSON
/// of earlier rows, a blob may be a packed node ([`crate::format::packed_blob`]), and
/// `transitions.edge` may be a 4-byte code ([`crate::format::stored::edge_code`]) beside the
/// names of earlier rows. The version says so, so an older runtape refuses the file instead of
/// misreading it.
const V4: &str = "";

const V3: &str = r#"
-- run = runs.key; body = the head's canonical JSON; seal = its seal
CREATE TABLE heads (
    run INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    seal BLOB NOT NULL
);
"#;

const V2: &str = r#"
-- model turns whose cost was unknown (an unpriced model): `ls` shows such a run's cost as
-- unknown rather than as the priced part alone
ALTER TABLE runs ADD COLUMN unpriced_turns INTEGER NOT NULL DEFAULT 0;
"#;

const V1: &str = r#"
CREATE TABLE runs (
    key INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    parent_id TEXT,
    fork_seq INTEGER,
    spec TEXT NOT NULL,
    setup TEXT,
    goal TEXT NOT NULL,
    status TEXT NOT NULL,
    state_kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    lease_epoch INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires_ms INTEGER NOT NULL,
    control TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    cost_nanos INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    outcome TEXT
);
-- id = run key << 32 | seq
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    event BLOB NOT NULL,
    edge TEXT NOT NULL,
    effects BLOB NOT NULL,
    state_hash BLOB NOT NULL,
    chain BLOB NOT NULL,
    -- the seal of the receipt for the model turn or tool call this transition's event answers
    -- (the receipt's body is rebuilt from the history)
    seal BLOB
);
-- id = run key << 32 | seq
CREATE TABLE snapshots (
    id INTEGER PRIMARY KEY,
    state BLOB NOT NULL
);
CREATE TABLE blobs (
    hash BLOB PRIMARY KEY,
    bytes BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE outbox (
    run INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT,
    PRIMARY KEY (run, seq, idx)
) WITHOUT ROWID;
"#;

/// Opens `path` for reading and writing, creating it if absent, after checking (without
/// writing anything) that an existing file is a runtape database of a version we can read.
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
    let shown = path.display().to_string();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(StoreError::MissingDirectory {
            path: shown,
            dir: dir.display().to_string(),
        });
    }
    let existed = path.exists();
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(&shown, e))?;
    if existed {
        check_readable(&conn, &shown)?;
    }
    Ok(conn)
}

/// Reads the schema version and the tables in one read transaction: fails on a file that is
/// not SQLite, on a foreign SQLite database, on a newer schema, and on tables that are not
/// those of the version the file is labelled with ([`super::schema_shape::check`]: a wrong
/// label, a table or column missing). Reads only.
pub(super) fn check_readable(conn: &Connection, shown: &str) -> Result<(), StoreError> {
    let io = |e: rusqlite::Error| classify(shown, e);
    // Dropped unread: a read transaction ends with nothing to roll back.
    let read = conn.unchecked_transaction().map_err(io)?;
    let version: i64 = read
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(io)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: shown.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let found = super::schema_shape::shape_of(&read).map_err(io)?;
    super::schema_shape::check(&found, version, shown)
}

/// Sets WAL and the durability level, then applies pending migrations in one transaction.
pub(super) fn prepare(
    conn: &mut Connection,
    shown: &str,
    synchronous_full: bool,
) -> Result<(), StoreError> {
    let io = |e: rusqlite::Error| classify(shown, e);
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(io)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(io)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{shown}: could not enable WAL (journal_mode is {mode})"
        )));
    }
    let sync = if synchronous_full { "FULL" } else { "NORMAL" };
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync}; PRAGMA foreign_keys = OFF;"
    ))
    .map_err(io)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(io)?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(io)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: shown.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    // A label below 0 was refused by `check_readable`; one set since is refused here rather
    // than read as 0 (which would replay every migration over the tables).
    let Ok(from) = usize::try_from(version) else {
        return Err(StoreError::Corrupt {
            path: shown.to_owned(),
            detail: format!("labelled schema version {version}, which no runtape writes"),
        });
    };
    for (i, step) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.execute_batch(step.sql).map_err(io)?;
        if let Some(fill) = step.then {
            fill(&tx).map_err(io)?;
        }
        tx.pragma_update(None, "user_version", i as i64 + 1)
            .map_err(io)?;
    }
    tx.commit().map_err(io)
}

/// Maps a SQLite error to a store error, recognising "not a database", damage and a full disk
/// (see [`super::sqlite::space`]; a size cap is told apart by the writer, which knows it).
pub(super) fn classify(shown: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    if let Some(full) =
        super::sqlite::space::full(shown, None, e.sqlite_error_code(), &e.to_string())
    {
        return full;
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: shown.to_owned(),
            detail: e.to_string(),
        },
        Some(ErrorCode::CannotOpen) => StoreError::Io(format!("cannot open {shown}: {e}")),
        _ => StoreError::Io(format!("{shown}: {e}")),
    }
}

/// Packs a run key and a seq into a row id.
pub(crate) fn row_id(run_key: i64, seq: u64) -> i64 {
    (run_key << 32) | (seq as i64 & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synchronous_after_prepare(full: bool) -> i64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        let mut conn = open(&path).expect("opens");
        prepare(&mut conn, "s.db", full).expect("prepares");
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("reads")
    }

    #[test]
    fn full_is_the_default_and_normal_an_opt_in() {
        assert_eq!(
            super::super::Durability::default(),
            super::super::Durability::Full
        );
        assert_eq!(synchronous_after_prepare(true), 2, "FULL");
        assert_eq!(synchronous_after_prepare(false), 1, "NORMAL");
    }

    #[test]
    fn row_ids_pack_run_and_seq_in_order() {
        assert!(row_id(1, u64::from(u32::MAX)) < row_id(2, 0));
        assert_eq!(row_id(3, 7) & 0xffff_ffff, 7);
    }
}
