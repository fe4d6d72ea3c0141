//! `runtape cancel` of a run that created things undoes them: the call in flight is
//! abandoned, the run ends cancelled with its saga compensated, latest first.

use super::{Saga, logged, saga_spec};
use crate::support::cli::{out, runtape, start_json, temp_db, text, wait_until};

#[test]
fn a_cancelled_run_undoes_what_it_created() {
    let (dir, db) = temp_db();
    let spec = saga_spec(
        dir.path(),
        &Saga {
            failing: None,
            idempotent: false,
            wait: true,
        },
    );
    let (mut child, _stdout, run) = start_json(&db, &spec);
    wait_until("the run waits in its third call", || {
        std::fs::read_to_string(dir.path().join("effects.log")).is_ok_and(|t| t.contains("waiting"))
    });
    let c = runtape(&db, &["cancel", &run]);
    assert!(c.status.success(), "{}", text(&c));
    child.wait().expect("the driver exits");
    assert_eq!(
        logged(dir.path(), "undone"),
        [
            format!(r#"{{"name":"b"}} {run}:6:0:undo"#),
            format!(r#"{{"name":"a"}} {run}:3:0:undo"#),
        ]
    );
    let shown = out(&runtape(&db, &["show", &run]));
    assert!(shown.contains("cancelled"), "{shown}");
    assert!(
        shown.contains("saga    compensated: 2 call(s) undone"),
        "{shown}"
    );
    let log = out(&runtape(&db, &["log", &run]));
    assert!(
        log.contains("cancel_requested") && log.contains("calling_tools → compensating"),
        "{log}"
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
}
