//! `resume` and `fork` refuse a run whose stored spec, setup, end or started calls
//! do not match its sealed head — with one line, writing nothing and running nothing (a setup
//! edited to `touch PWNED; …` never runs). The real binary on real SQLite files.

use crate::support;

use std::path::Path;

use crate::support::cli::{run_id, temp_db, utf8};
use rusqlite::Connection;
use support::tamper::*;

/// Every row of every table, for "nothing was written".
fn dump(db: &Path) -> String {
    let conn = Connection::open(db).expect("opens");
    let mut out = String::new();
    for table in [
        "runs",
        "transitions",
        "snapshots",
        "blobs",
        "outbox",
        "run_specs",
    ] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1"))
            .expect("prepares");
        let n = stmt.column_count();
        let mut rows = stmt.query([]).expect("reads");
        while let Some(r) = rows.next().expect("row") {
            for i in 0..n {
                out.push_str(&format!("{:?}|", r.get_ref(i).expect("value")));
            }
            out.push('\n');
        }
    }
    out
}

fn edit(db: &Path, sql: &str) {
    let conn = Connection::open(db).expect("opens");
    let n = conn.execute(sql, []).expect("edits");
    assert!(n > 0, "changed nothing: {sql}");
}

/// Runs `args` on a tampered copy: exit 1, one line naming `needle`, nothing written, nothing
/// run.
fn assert_refused(db: &Path, args: &[&str], needle: &str) {
    let f = fixture();
    let before = dump(db);
    let out = runtape(db, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not verify"), "{err}");
    assert!(err.contains(needle), "{needle}: {err}");
    assert_eq!(dump(db), before, "{args:?} wrote something");
    assert!(!f.dir.join("PWNED").exists(), "the edited command ran");
}

#[test]
fn a_fork_of_a_run_whose_setup_was_edited_is_refused_and_runs_nothing() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') WHERE run = (SELECT key FROM runs WHERE id = '{}')",
            f.long
        ),
    );
    let at = format!("{}@{FORK_SEQ}", f.long);
    assert_refused(&db, &["fork", &at, "--receipt-key", k], "run_specs.setup");
    // The same edit made to the fork's own row is refused when the fork is forked again.
    let (_dir, db) = copy();
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') WHERE run = (SELECT key FROM runs WHERE id = '{}')",
            f.fork
        ),
    );
    let at = format!("{}@{}", f.fork, FORK_SEQ + 2);
    assert_refused(&db, &["fork", &at, "--receipt-key", k], "run_specs.setup");
}

#[test]
fn a_resume_of_a_tampered_run_is_refused_and_performs_nothing() {
    let f = fixture();
    let k = utf8(&f.key);
    let killed = f.killed.as_str();
    let cases = [
        (
            format!(
                "UPDATE run_specs SET setup = replace(setup, 'touch started', 'touch PWNED; touch started') WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.setup",
        ),
        (
            format!(
                "UPDATE run_specs SET spec = replace(spec, '\"idempotent\":false', '\"idempotent\":true') WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.spec",
        ),
        (
            // The call that may have charged the card, made to look as if it never started:
            // a resume would charge it again.
            format!(
                "UPDATE outbox SET status = 'pending' WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "outbox.status",
        ),
        (
            format!("DELETE FROM outbox WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"),
            "outbox.status",
        ),
        (
            format!(
                "UPDATE run_specs SET goal = 'Charge it twice.' WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.goal",
        ),
        (
            format!("UPDATE runs SET seq = seq - 1 WHERE id = '{killed}'"),
            "runs.seq",
        ),
    ];
    for (sql, needle) in &cases {
        let (_dir, db) = copy();
        edit(&db, sql);
        assert_refused(&db, &["resume", killed, "--receipt-key", k], needle);
    }
}

#[test]
fn a_history_cut_short_is_not_resumed() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    let conn = Connection::open(&db).expect("opens");
    let key = key_of(&conn, &f.killed);
    let last: i64 = conn
        .query_row(
            "SELECT max(id) FROM transitions WHERE id BETWEEN ?1 AND ?2",
            [row(key, 1), row(key, 100_000)],
            |r| r.get(0),
        )
        .expect("reads");
    conn.execute("DELETE FROM transitions WHERE id = ?1", [last])
        .expect("cuts");
    conn.execute("UPDATE runs SET seq = seq - 1 WHERE key = ?1", [key])
        .expect("lowers");
    drop(conn);
    assert_refused(&db, &["resume", &f.killed, "--receipt-key", k], "seq");
}

#[test]
fn an_untampered_run_resumes_and_its_started_call_is_in_doubt_not_repeated() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    let out = runtape(&db, &["resume", &f.killed, "--receipt-key", k]);
    // The charge was in flight when the run was killed: in doubt, the run fails (default
    // policy) rather than charging again.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("in_doubt") || text(&out).contains("in doubt"),
        "{}",
        text(&out)
    );
    let v = runtape(&db, &["verify", &f.killed, "--pubkey", &f.pubkey]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_signed_run_is_not_continued_with_another_key_or_none() {
    let f = fixture();
    let (_dir, db) = copy();
    let before = dump(&db);
    let out = runtape(&db, &["resume", &f.killed]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("same receipt key"), "{}", text(&out));
    let at = format!("{}@{FORK_SEQ}", f.long);
    let out = runtape(&db, &["fork", &at]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(dump(&db), before);
}

#[test]
fn an_unsigned_run_at_rest_is_not_cancelled_or_answered_once_tampered() {
    let (_dir, db) = temp_db();
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/approval.toml");
    let out = runtape(&db, &["run", utf8(&spec)]);
    assert!(out.status.success(), "{}", text(&out));
    let run = run_id(&out);
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET goal = 'Deploy everything.' WHERE run = (SELECT key FROM runs WHERE id = '{run}')"
        ),
    );
    assert_refused(&db, &["cancel", &run], "run_specs.goal");
    assert_refused(&db, &["resume", &run, "--approve"], "run_specs.goal");
}
