//! The real `runtape` binary on real database files: `ls`, `log`, `show`, `diff`, `verify`,
//! and their bad-input behaviour (one clear line on stderr, the documented exit status, the
//! database unchanged).

use crate::support;

use std::path::Path;

use crate::support::cli::{err, out, runtape};
use runtape::exec::{ForkEdit, ForkMode};
use runtape::machine::RunId;
use runtape::store::RunStatus;
use support::durable::*;

/// A database with one completed run and a fork of it.
fn world() -> (tempfile::TempDir, std::path::PathBuf, RunId, RunId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (run, fork) = rt.block_on(async {
        let engine = engine_in(dir.path());
        lookup_rounds(&engine, 2);
        let end = run_to_rest(
            &engine,
            spec(vec![lookup_spec()], |_| {}),
            "Count the stars.",
        )
        .await;
        assert_eq!(end.status, RunStatus::Completed);
        let edit = ForkEdit::ReplaceLastUserMessage {
            agent: None,
            text: "Count the moons.".into(),
        };
        let fork = ended(engine.fork(&end.run_id, 4, vec![edit], ForkMode::Live)).await;
        (end.run_id, fork.run_id)
    });
    let db = dir.path().join("runs.db");
    (dir, db, run, fork)
}

#[test]
fn ls_log_show_diff_verify() {
    let (_dir, db, run, fork) = world();
    let r = run.as_str();

    let ls = runtape(&db, &["ls"]);
    assert!(ls.status.success(), "{}", err(&ls));
    assert!(
        out(&ls).contains(r)
            && out(&ls).contains("completed")
            && out(&ls).contains(&format!("fork of {r}@4"))
    );

    let log = runtape(&db, &["log", r]);
    assert!(log.status.success());
    let text = out(&log);
    assert!(
        text.contains("created → preparing") || text.contains("created"),
        "{text}"
    );
    assert!(text.contains("tool calls: lookup"), "{text}");

    let log_json = runtape(&db, &["log", r, "--json"]);
    let lines: Vec<serde_json::Value> = out(&log_json)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 10);
    assert!(lines.iter().all(|l| l["type"] == "step"));
    assert_eq!(lines[0]["seq"], 1);

    let show = runtape(&db, &["show", &format!("{r}@5")]);
    assert!(show.status.success(), "{}", err(&show));
    let text = out(&show);
    assert!(
        text.contains("request to p/m — 4 messages, tools [lookup]"),
        "{text}"
    );
    assert!(text.contains("Count the stars."));

    let show_json = runtape(&db, &["show", r, "--json"]);
    let v: serde_json::Value = serde_json::from_str(out(&show_json).trim()).expect("JSON");
    assert_eq!(v["seq"], v["latest"]);
    assert_eq!(v["state"]["state"], "done");

    let diff = runtape(&db, &["diff", r, fork.as_str()]);
    assert!(diff.status.success());
    assert!(
        out(&diff).contains("agree on steps 1..=4 and first differ at step 5"),
        "{}",
        out(&diff)
    );

    for id in [r, fork.as_str()] {
        let verify = runtape(&db, &["verify", id]);
        assert_eq!(verify.status.code(), Some(0), "{}", err(&verify));
        assert!(out(&verify).starts_with("OK: "));
    }
}

#[test]
fn verify_fails_with_exit_1_naming_the_seq() {
    let (_dir, db, run, _) = world();
    let conn = rusqlite::Connection::open(&db).expect("opens");
    conn.execute("UPDATE transitions SET state_hash = zeroblob(32) WHERE id = (SELECT (key << 32) | 3 FROM runs WHERE id = ?1)", [run.as_str()]).expect("tampers");
    drop(conn);
    let out = runtape(&db, &["verify", run.as_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = err(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "error: run {run} does not verify: seq 3: state hash"
        )),
        "{err}"
    );
}

fn db_bytes(db: &Path) -> Vec<u8> {
    let conn = rusqlite::Connection::open(db).expect("opens");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoints");
    drop(conn);
    std::fs::read(db).expect("reads")
}

#[test]
fn bad_input_is_one_line_the_documented_status_and_changes_nothing() {
    let (dir, db, run, _) = world();
    let before = db_bytes(&db);
    let r = run.as_str();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["log".into(), "nosuchrun".into()],
            2,
            "no run with id `nosuchrun`",
        ),
        (
            vec!["show".into(), format!("{r}@999")],
            2,
            "there is no step 999",
        ),
        (
            vec!["show".into(), format!("{r}@x")],
            2,
            "malformed run reference",
        ),
        (
            vec!["show".into(), "@3".into()],
            2,
            "malformed run reference",
        ),
        (
            vec!["verify".into(), "nosuchrun".into()],
            2,
            "no run with id",
        ),
        (
            vec!["diff".into(), r.into(), "nosuchrun".into()],
            2,
            "no run with id",
        ),
        (vec!["cancel".into(), r.into()], 2, "already ended"),
        (
            vec!["pause".into(), r.into()],
            2,
            "only a running run can be paused",
        ),
    ];
    for (args, code, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = runtape(&db, &args);
        let err = err(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(needle),
            "{args:?}: {err}"
        );
    }
    assert_eq!(db_bytes(&db), before, "the database is unchanged");

    // Storage trouble is exit 3: a file that is not a database, a missing one.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, b"not a database at all, just text\n".repeat(100)).expect("writes");
    let out = runtape(&junk, &["ls"]);
    assert_eq!(out.status.code(), Some(3), "{}", err(&out));
    assert!(err(&out).contains("is not a runtape database"));
    assert_eq!(
        std::fs::read(&junk).expect("reads"),
        b"not a database at all, just text\n".repeat(100)
    );
    let missing = dir.path().join("missing.db");
    let out = runtape(&missing, &["ls"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(err(&out).contains("no database at"), "{}", err(&out));
    assert!(!missing.exists());
}
