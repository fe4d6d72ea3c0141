//! `runtape cancel RUN --reason TEXT` from a second process, while a first `runtape run`
//! drives the run: the driver records the reason given, not a stand-in, so `show` and the
//! history say why the run was cancelled.

use std::path::{Path, PathBuf};

use crate::support::cli::{runtape, slow_tick_spec, start_json, temp_db, text, wait_for_step};

/// A run of many slow turns, each calling a `cat` tool: long enough to be cancelled midway.
fn slow_spec(dir: &Path) -> PathBuf {
    slow_tick_spec(dir, 50)
}

#[test]
fn the_reason_given_to_cancel_from_another_process_is_recorded() {
    let (dir, db) = temp_db();
    let spec = slow_spec(dir.path());
    let (child, mut lines, run) = start_json(&db, &spec);
    wait_for_step(&mut lines, 3);

    let o = runtape(&db, &["cancel", &run, "--reason", "budget review: stop"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let driver = child.wait_with_output().expect("the driver exits");
    assert_eq!(driver.status.code(), Some(1), "a cancelled run exits 1");

    let o = runtape(&db, &["show", &run, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        shown["event"]["body"]["reason"], "budget review: stop",
        "the driver recorded the reason: {shown}"
    );
    assert_eq!(shown["state"]["outcome"]["outcome"], "cancelled", "{shown}");
    assert_eq!(
        shown["state"]["outcome"]["reason"], "budget review: stop",
        "{shown}"
    );
    let o = runtape(&db, &["show", &run]);
    assert!(
        text(&o).contains("cancelled budget review: stop"),
        "{}",
        text(&o)
    );
    assert!(runtape(&db, &["verify", &run]).status.success());
}
