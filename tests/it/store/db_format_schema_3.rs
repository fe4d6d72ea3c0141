//! A database written at schema 3 (`tests/fixtures/db-schema-3/`, see its README: every
//! event, effect and snapshot stored as plain JSON) opens, lists, shows, verifies and resumes
//! with this runtape, which moves it to schema 4: rows written from then on are packed JSON,
//! the old rows stay as they were, and a run holding both verifies.

use crate::support::cli::{all_verify, fixture, fixture_copy, ok, utf8};
use std::path::Path;

const SIGNED: &str = "01m83qcxb5b7nfcb";
const HANDOFF: &str = "01m83qcxcqwnk5sp";
const AWAITING: &str = "01m83qcxmjnt8ppg";
const COMPLETED_DEMO: &str = "01m83qcxnvbhjksa";
const PAUSED: &str = "01m83qcy9nqphkfp";
const FORK: &str = "01m83qd0n07w0320";
const CRASHED: &str = "01m83qd0nzxf4n0q";

/// The first byte of each stored event of `run`, in seq order.
fn event_first_bytes(db: &Path, run: &str) -> Vec<u8> {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let key: i64 = conn
        .query_row("SELECT key FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .expect("the run is stored");
    let mut stmt = conn
        .prepare("SELECT substr(event, 1, 1) FROM transitions WHERE id >> 32 = ?1 ORDER BY id")
        .expect("prepares");
    stmt.query_map([key], |r| r.get::<_, Vec<u8>>(0))
        .expect("queries")
        .map(|b| b.expect("reads").first().copied().unwrap_or(0))
        .collect()
}

#[test]
fn a_schema_3_database_lists_shows_and_verifies_every_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-schema-3/runtape.db");
    let ls = ok(&db, &["ls", "--json"]);
    let all = [
        SIGNED,
        HANDOFF,
        AWAITING,
        COMPLETED_DEMO,
        PAUSED,
        FORK,
        CRASHED,
    ];
    for run in all {
        assert!(ls.contains(run), "ls lists {run}: {ls}");
        let log = ok(&db, &["log", run]);
        assert!(log.lines().count() > 2, "log of {run}: {log}");
        let shown = ok(&db, &["show", &format!("{run}@2")]);
        assert!(!shown.is_empty(), "show {run}@2");
    }
    all_verify(
        &db,
        "db-schema-3/fixture.key.pub",
        &[SIGNED, FORK],
        &[HANDOFF, AWAITING, COMPLETED_DEMO, PAUSED, CRASHED],
    );
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("reads");
    assert_eq!(
        version,
        runtape::store::SCHEMA_VERSION,
        "opening moved the file to the current schema"
    );
    assert!(
        event_first_bytes(&db, SIGNED).iter().all(|&b| b == b'{'),
        "reading rewrites nothing: the old rows stay plain JSON"
    );
}

#[test]
fn a_schema_3_database_resumes_and_its_runs_verify_with_old_and_packed_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-schema-3/runtape.db");
    for (run, extra) in [
        (PAUSED, None),
        (CRASHED, None),
        (AWAITING, Some("--approve")),
    ] {
        let before = event_first_bytes(&db, run).len();
        let mut args = vec!["resume", run];
        args.extend(extra);
        let out = ok(&db, &args);
        assert!(out.contains("completed"), "resume {run}: {out}");
        let firsts = event_first_bytes(&db, run);
        assert!(firsts.len() > before, "{run} went on");
        assert!(
            firsts[..before].iter().all(|&b| b == b'{'),
            "{run}: the old rows are untouched"
        );
        assert!(
            firsts[before..].iter().all(|&b| b == 0x01),
            "{run}: the new rows are packed"
        );
        let verified = ok(&db, &["verify", run]);
        assert!(verified.starts_with("OK"), "{verified}");
    }
    // A fork of an old run, made now, verifies across the old parent rows and its own.
    let key = dir.path().join("fixture.key");
    std::fs::copy(fixture("db-schema-3/fixture.key"), &key).expect("copies the key");
    set_owner_only(&key);
    let key = utf8(&key);
    let out = ok(&db, &["fork", &format!("{SIGNED}@1"), "--receipt-key", key]);
    assert!(out.contains("answer"), "fork: {out}");
    let ls = ok(&db, &["ls", "--json"]);
    let forked: Vec<&str> = ls
        .split('"')
        .filter(|s| s.len() == 16 && s.starts_with("01") && !s.contains(' '))
        .collect();
    for run in forked {
        let verified = ok(&db, &["verify", run]);
        assert!(verified.starts_with("OK"), "{run}: {verified}");
    }
}

/// Gives a copied key file the mode `keygen` writes (a checkout does not keep it).
fn set_owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmods");
}
