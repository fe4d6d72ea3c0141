//! Opening a bad database is a typed error that writes nothing: a newer schema, a file that is
//! not SQLite, a foreign SQLite database, a path in a missing directory.

use crate::support::cli::temp_db;
use runtape::exec::Engine;
use runtape::store::{Durability, SCHEMA_VERSION, SqliteStore, StoreError};

/// The database file's bytes, to compare before and after a refused open.
fn bytes(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("reads the database file")
}

fn open(path: &std::path::Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(path, Durability::Full)
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("future.db");
    drop(open(&path).expect("creates"));
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 7)
            .expect("sets");
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .expect("checkpoints");
    }
    let before = bytes(&path);
    match open(&path) {
        Err(StoreError::NewerSchema {
            found, supported, ..
        }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 7, SCHEMA_VERSION));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    assert_eq!(bytes(&path), before, "nothing written");
    let message = Engine::open(&path)
        .expect_err("engine refuses too")
        .to_string();
    assert!(message.contains("upgrade runtape"), "{message}");
    assert_eq!(message.lines().count(), 1);
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.db");
    let junk = b"this is not a database, it is a grocery list\n".repeat(200);
    std::fs::write(&path, &junk).expect("writes");
    let err = open(&path).expect_err("refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("not a runtape database"), "{err}");
    assert_eq!(bytes(&path), junk);
}

#[test]
fn another_programs_sqlite_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO photos (name) VALUES ('cat');")
            .expect("creates");
    }
    let before = bytes(&path);
    let err = open(&path).expect_err("refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(bytes(&path), before);
}

#[test]
fn a_missing_directory_is_refused_and_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir
        .path()
        .join("no")
        .join("such")
        .join("dir")
        .join("runs.db");
    let err = open(&path).expect_err("refused");
    assert!(
        matches!(err, StoreError::MissingDirectory { .. }),
        "{err:?}"
    );
    assert!(!dir.path().join("no").exists(), "nothing created");
}

/// [`changed_by`] on `runs.db` in a new directory: the directory, the database and its bytes.
fn changed_db(sql: &str) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let (dir, path) = temp_db();
    let before = changed_by(&path, sql);
    (dir, path, before)
}

/// A runtape database at the current version, changed by `sql` with a plain SQLite
/// connection (checkpointed, so the main file holds everything); returns its bytes.
fn changed_by(path: &std::path::Path, sql: &str) -> Vec<u8> {
    drop(open(path).expect("creates"));
    let conn = rusqlite::Connection::open(path).expect("opens");
    conn.execute_batch(sql).expect("changes");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoints");
    drop(conn);
    std::fs::read(path).expect("reads")
}

/// The engine's one line for opening `path`.
fn engine_line(path: &std::path::Path) -> String {
    let message = Engine::open(path).expect_err("refused").to_string();
    assert_eq!(message.lines().count(), 1, "{message}");
    message
}

#[test]
fn a_database_missing_a_table_is_refused_before_anything_is_written() {
    let (_dir, path, before) = changed_db("DROP TABLE outbox;");
    let err = open(&path).expect_err("refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let line = engine_line(&path);
    assert!(line.contains("table `outbox`"), "{line}");
    assert!(!line.contains("resume"), "nothing to resume: {line}");
    assert_eq!(bytes(&path), before, "nothing written");
    let runs: i64 = rusqlite::Connection::open(&path)
        .and_then(|c| c.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)))
        .expect("reads");
    assert_eq!(runs, 0);
}

#[test]
fn a_negative_schema_label_is_one_line_without_the_schema() {
    let (dir, path, before) = changed_db("PRAGMA user_version = -1;");
    match open(&path) {
        Err(StoreError::MislabelledSchema {
            labelled, actual, ..
        }) => assert_eq!((labelled, actual), (-1, SCHEMA_VERSION)),
        other => panic!("expected MislabelledSchema, got {other:?}"),
    }
    let line = engine_line(&path);
    assert!(!line.contains("CREATE TABLE"), "no DDL: {line}");
    assert!(line.contains("the label is wrong"), "{line}");
    assert_eq!(bytes(&path), before, "nothing written");

    // With a table gone as well, the tables are of no version: still one line, no DDL.
    let other = dir.path().join("other.db");
    changed_by(&other, "PRAGMA user_version = -1; DROP TABLE outbox;");
    let line = engine_line(&other);
    assert!(!line.contains("CREATE TABLE"), "no DDL: {line}");
    assert!(line.contains("-1"), "{line}");
}

#[test]
fn tables_under_the_wrong_label_are_told_as_a_wrong_label() {
    // The current tables labelled as an older version: a migration would replay over them.
    let (dir, path, before) = changed_db("PRAGMA user_version = 5;");
    match open(&path) {
        Err(StoreError::MislabelledSchema {
            labelled, actual, ..
        }) => assert_eq!((labelled, actual), (5, SCHEMA_VERSION)),
        other => panic!("expected MislabelledSchema, got {other:?}"),
    }
    let line = engine_line(&path);
    assert!(line.contains("the label is wrong"), "{line}");
    assert!(!line.contains("already exists"), "{line}");
    assert_eq!(bytes(&path), before, "nothing written");

    // Schema 3's tables (a stored fixture) labelled as the current version: reads would find
    // no such column.
    let old = dir.path().join("old.db");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/db-schema-3/runtape.db"
        ),
        &old,
    )
    .expect("copies");
    {
        let conn = rusqlite::Connection::open(&old).expect("opens");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .expect("labels");
    }
    let before = std::fs::read(&old).expect("reads");
    let line = engine_line(&old);
    assert!(
        line.contains(&format!("labelled schema version {SCHEMA_VERSION}")),
        "{line}"
    );
    assert!(line.contains("the label is wrong"), "{line}");
    assert!(!line.contains("no such"), "{line}");
    assert_eq!(
        std::fs::read(&old).expect("reads"),
        before,
        "nothing written"
    );
}
