//! Opening a bad database is a typed error that writes nothing: a newer schema, a file that is
//! not SQLite, a foreign SQLite database, a path in a missing directory.

use runtape::exec::Engine;
use runtape::store::{Durability, SCHEMA_VERSION, SqliteStore, StoreError};

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
    let before = std::fs::read(&path).expect("reads");
    match open(&path) {
        Err(StoreError::NewerSchema {
            found, supported, ..
        }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 7, SCHEMA_VERSION));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        before,
        "nothing written"
    );
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
    assert_eq!(std::fs::read(&path).expect("reads"), junk);
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
    let before = std::fs::read(&path).expect("reads");
    let err = open(&path).expect_err("refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).expect("reads"), before);
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
