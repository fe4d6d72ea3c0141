//! A database written by runtape 0.1.0 (`tests/fixtures/db-0.1.0/`, see its README) still
//! opens, lists, shows, verifies and resumes with this runtape: the storage format is a
//! promise to users, and this is the test that holds us to it.

use crate::support;
use crate::support::cli::{all_verify, fixture_copy, ok};
use support::cli::runtape;

const SIGNED: &str = "01m8317chsmtcx7p";
const HANDOFF: &str = "01m8317cjg1r44vz";
const AWAITING: &str = "01m8317cshve14rs";
const FORK: &str = "01m8317csz42mhjc";
const COMPLETED_DEMO: &str = "01m8317ctj9eedpy";
const CRASHED: &str = "01m8317g1wqw338t";
const PAUSED: &str = "01m8317gknyz5g6p";

#[test]
fn an_old_database_lists_and_shows_every_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-0.1.0/runtape.db");
    let ls = ok(&db, &["ls", "--json"]);
    for run in [
        SIGNED,
        HANDOFF,
        AWAITING,
        FORK,
        COMPLETED_DEMO,
        CRASHED,
        PAUSED,
    ] {
        assert!(ls.contains(run), "ls lists {run}: {ls}");
        let log = ok(&db, &["log", run]);
        assert!(log.lines().count() > 2, "log of {run}: {log}");
        let shown = ok(&db, &["show", &format!("{run}@2")]);
        assert!(!shown.is_empty(), "show {run}@2");
    }
    let shown = ok(&db, &["show", &format!("{SIGNED}@2")]);
    assert!(
        shown.contains("count_words") || shown.contains("utc_now"),
        "{shown}"
    );
}

#[test]
fn an_old_database_verifies_including_its_signed_receipts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-0.1.0/runtape.db");
    all_verify(
        &db,
        "db-0.1.0/fixture.key.pub",
        &[SIGNED, FORK],
        &[HANDOFF, AWAITING, COMPLETED_DEMO, CRASHED, PAUSED],
    );
}

#[test]
fn an_old_database_resumes_its_paused_crashed_and_waiting_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-0.1.0/runtape.db");
    for (run, extra) in [
        (PAUSED, None),
        (CRASHED, None),
        (AWAITING, Some("--approve")),
    ] {
        let mut args = vec!["resume", run];
        args.extend(extra);
        let out = ok(&db, &args);
        assert!(out.contains("completed"), "resume {run}: {out}");
        let verified = ok(&db, &["verify", run]);
        assert!(verified.starts_with("OK"), "{verified}");
    }
    let ls = ok(&db, &["ls"]);
    assert!(
        !ls.contains("running") && !ls.contains("paused") && !ls.contains("awaiting"),
        "{ls}"
    );
}

#[test]
fn old_runs_get_a_head_on_first_open_that_then_guards_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fixture_copy(dir.path(), "db-0.1.0/runtape.db");
    // Sealed when first opened, without a key: verify says the head was trusted on first use.
    let out = ok(&db, &["verify", HANDOFF]);
    assert!(out.contains("head trusted on first use"), "{out}");
    // From then on the head guards the run: an edited setup is refused, nothing written.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let n = conn
        .execute(
            "UPDATE run_specs SET setup = replace(setup, '\"sh\"', '\"/bin/sh\"') WHERE run = (SELECT key FROM runs WHERE id = ?1)",
            [PAUSED],
        )
        .expect("edits");
    assert_eq!(n, 1);
    drop(conn);
    let refused = runtape(&db, &["resume", PAUSED]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("run_specs.setup"), "{err}");
    let verified = runtape(&db, &["verify", PAUSED]);
    assert_eq!(verified.status.code(), Some(1));
    // A run continued by this runtape is sealed by the engine from then on.
    let out = ok(&db, &["resume", CRASHED]);
    assert!(out.contains("completed"), "{out}");
    let out = ok(&db, &["verify", CRASHED]);
    assert!(out.contains("head unsigned (digest only)"), "{out}");
}
