//! A run that created `a` then `b` and failed undoes `b`, then `a`, each exactly once, with
//! keys derived from the run and the original call; `show` lists the saga, `verify` passes,
//! and an edited undo (its arguments, or its result) is detected.

use super::{Saga, logged, saga_spec};
use crate::support::cli::{out, run_id, runtape, temp_db, text};

fn failed_run() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (dir, db) = temp_db();
    let spec = saga_spec(
        dir.path(),
        &Saga {
            failing: None,
            idempotent: false,
            wait: false,
        },
    );
    let o = runtape(&db, &["run", crate::support::cli::utf8(&spec)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run = run_id(&o);
    assert!(
        out(&o).contains("saga: compensated: 2 call(s) undone"),
        "{}",
        text(&o)
    );
    (dir, db, run)
}

#[test]
fn both_things_are_undone_latest_first_each_once() {
    let (dir, db, run) = failed_run();
    assert_eq!(
        logged(dir.path(), "create"),
        [r#"{"name":"a"}"#, r#"{"name":"b"}"#]
    );
    // b was created at step 6 and a at step 3 (the model's replies that asked for them).
    assert_eq!(
        logged(dir.path(), "undone"),
        [
            format!(r#"{{"name":"b"}} {run}:6:0:undo"#),
            format!(r#"{{"name":"a"}} {run}:3:0:undo"#),
        ]
    );
    assert_eq!(logged(dir.path(), "undo").len(), 2);
    let shown = out(&runtape(&db, &["show", &run]));
    assert!(shown.contains("failed  provider_auth"), "{shown}");
    assert!(
        shown.contains("saga    compensated: 2 call(s) undone, latest first"),
        "{shown}"
    );
    let b = shown.find(r#"call_6_0 create (step 6) → delete {"name":"b"} — undone: deleted"#);
    let a = shown.find(r#"call_3_0 create (step 3) → delete {"name":"a"} — undone: deleted"#);
    assert!(b.is_some() && a.is_some() && b < a, "{shown}");
    let log = out(&runtape(&db, &["log", &run]));
    assert!(log.contains("generating → compensating"), "{log}");
    assert!(log.contains("compensating → compensating"), "{log}");
    assert!(log.contains("compensating → done"), "{log}");
}

#[test]
fn verify_rederives_the_saga_and_detects_an_edited_undo() {
    let (_dir, db, run) = failed_run();
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
    // The database file alone is the whole database from here.
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"))
        .expect("checkpoints");
    // The undo of b (emitted at step 9), its idempotency key edited; then its result.
    for (column, from, to) in [
        ("effects", ":6:0:undo", ":7:0:undo"),
        ("event", "deleted", "DELETED"),
    ] {
        let copy = db.with_file_name(format!("tampered-{column}.db"));
        std::fs::copy(&db, &copy).expect("copies");
        let conn = rusqlite::Connection::open(&copy).expect("opens");
        let changed = conn
            .execute(
                &format!(
                    "UPDATE transitions SET {column} = CAST(replace(CAST({column} AS TEXT), '{from}', '{to}') AS BLOB) \
                     WHERE id = (SELECT MIN(id) FROM transitions WHERE instr({column}, CAST('{from}' AS BLOB)) > 0 \
                     AND id & 4294967295 >= 9)"
                ),
                [],
            )
            .expect("updates");
        assert_eq!(changed, 1, "{column}: the saga's {from} is stored as text");
        drop(conn);
        let v = runtape(&copy, &["verify", &run]);
        assert!(!v.status.success(), "{column}: {}", text(&v));
        assert!(
            text(&v).contains("seq 9") || text(&v).contains("seq 10"),
            "{column}: {}",
            text(&v)
        );
    }
}
