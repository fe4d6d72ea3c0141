//! The driver SIGKILLed while an undo runs, then `runtape resume`: nothing is undone twice
//! and nothing is lost. An idempotent undo is performed again with the same key (the tool
//! finishes it once); a non-idempotent one is in doubt, which stops the saga for a person.

use super::{Saga, logged, saga_spec};
use crate::support::cli::{out, runtape, signal, start_json, temp_db, text, wait_until, write};

/// Starts the saga run with the first undo held, kills the driver while it runs, and
/// resumes in a fresh process. Returns the directory, the database and the run.
fn killed_then_resumed(
    idempotent: bool,
) -> (tempfile::TempDir, std::path::PathBuf, String, String) {
    let (dir, db) = temp_db();
    let spec = saga_spec(
        dir.path(),
        &Saga {
            failing: None,
            idempotent,
            wait: false,
        },
    );
    write(dir.path(), "hold", "");
    let (mut child, _stdout, run) = start_json(&db, &spec);
    wait_until("the first undo runs", || {
        !logged(dir.path(), "undo").is_empty()
    });
    signal(child.id(), "KILL");
    child.wait().expect("reaped");
    assert!(
        logged(dir.path(), "undone").is_empty(),
        "the held undo did not finish"
    );
    let resumed = runtape(&db, &["resume", &run]);
    (dir, db, run, text(&resumed))
}

#[test]
fn an_idempotent_undo_is_performed_again_with_its_key_and_the_saga_ends() {
    let (dir, db, run, resumed) = killed_then_resumed(true);
    assert!(
        resumed.contains("saga: compensated: 2 call(s) undone"),
        "{resumed}"
    );
    let b = format!(r#"{{"name":"b"}} {run}:6:0:undo"#);
    let a = format!(r#"{{"name":"a"}} {run}:3:0:undo"#);
    // b's undo started twice (killed, then again with the same key), finished once.
    assert_eq!(
        logged(dir.path(), "undo"),
        [b.clone(), b.clone(), a.clone()]
    );
    assert_eq!(logged(dir.path(), "undone"), [b, a]);
    assert_eq!(
        logged(dir.path(), "create").len(),
        2,
        "nothing created again"
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_non_idempotent_undo_in_doubt_stops_the_saga() {
    let (dir, db, run, resumed) = killed_then_resumed(false);
    assert!(
        resumed.contains("saga: compensation_failed: 0 of 2"),
        "{resumed}"
    );
    assert_eq!(logged(dir.path(), "undo").len(), 1, "not performed again");
    assert!(logged(dir.path(), "undone").is_empty());
    let shown = out(&runtape(&db, &["show", &run]));
    assert!(shown.contains("compensating.in_doubt.stopped"), "{shown}");
    assert!(
        shown.contains(r#"delete {"name":"b"} — IN DOUBT"#),
        "{shown}"
    );
    assert!(
        shown.contains(r#"delete {"name":"a"} — not performed"#),
        "{shown}"
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}
