//! An undo that fails stops the saga: the run ends failed with its saga
//! `compensation_failed`, the failed undo's error recorded, the earlier calls' undos not
//! performed (they may depend on it), and nothing retried — a person takes it from there.

use super::{Saga, logged, saga_spec};
use crate::support::cli::{out, run_id, runtape, temp_db, text, utf8};

#[test]
fn a_failing_undo_stops_the_saga_for_a_person() {
    let (dir, db) = temp_db();
    let spec = saga_spec(
        dir.path(),
        &Saga {
            failing: Some("b"),
            idempotent: false,
            wait: false,
        },
    );
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let run = run_id(&o);
    assert!(
        out(&o).contains("saga: compensation_failed: 0 of 2 call(s) undone"),
        "{}",
        text(&o)
    );
    assert_eq!(
        logged(dir.path(), "undo").len(),
        1,
        "b's undo ran once, a's never"
    );
    assert!(logged(dir.path(), "undone").is_empty());
    let shown = out(&runtape(&db, &["show", &run]));
    assert!(shown.contains("compensating.returned.stopped"), "{shown}");
    assert!(
        shown.contains(r#"→ delete {"name":"b"} — FAILED: "#) && shown.contains("cannot delete b"),
        "{shown}"
    );
    assert!(
        shown.contains(r#"→ delete {"name":"a"} — not performed"#),
        "{shown}"
    );
    let ls = out(&runtape(&db, &["ls"]));
    assert!(ls.contains("failed"), "{ls}");
    // Resuming changes nothing: the run is over.
    let again = runtape(&db, &["resume", &run]);
    assert!(!again.status.success());
    assert_eq!(logged(dir.path(), "undo").len(), 1);
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}
