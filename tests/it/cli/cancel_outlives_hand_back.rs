//! A cancel asked for while another process drove the run is not lost when that process stops
//! before its lease keeper reads the request: the run's `control` keeps the cancel across the
//! next take-up (`resume`, a worker's claim), which acts on it at once — where a pending pause,
//! meant for the driver that held the run, is dropped. The request is written into the row as
//! `runtape cancel` writes it for a driven run; the driver is SIGKILLed first, so it never read
//! it.

use crate::support::cli::{runtape, slow_tick_spec, start_json, temp_db, text, wait_for_step};

/// A run killed mid-way with `control` set to `request`, then resumed: its `show --json`.
fn resumed_with_pending(request: &str) -> (i32, serde_json::Value, bool) {
    let (dir, db) = temp_db();
    let spec = slow_tick_spec(dir.path(), 8);
    let (mut child, mut lines, run) = start_json(&db, &spec);
    wait_for_step(&mut lines, 3);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let set = conn
        .execute(
            "UPDATE runs SET control = ?1 WHERE id = ?2",
            rusqlite::params![request, run],
        )
        .expect("sets the request");
    assert_eq!(set, 1);
    drop(conn);

    let resumed = runtape(&db, &["resume", &run]);
    let code = resumed.status.code().expect("exits");
    let o = runtape(&db, &["show", &run, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = serde_json::from_slice(&o.stdout).expect("json");
    let verified = runtape(&db, &["verify", &run]).status.success();
    (code, shown, verified)
}

#[test]
fn a_cancel_its_driver_never_read_is_carried_out_by_the_next_take_up() {
    let (code, shown, verified) = resumed_with_pending("cancel:stop it");
    assert_eq!(code, 1, "a cancelled run exits 1: {shown}");
    assert_eq!(shown["state"]["outcome"]["outcome"], "cancelled", "{shown}");
    assert_eq!(shown["state"]["outcome"]["reason"], "stop it", "{shown}");
    assert!(verified);
}

#[test]
fn a_pause_meant_for_the_driver_that_held_the_run_is_dropped_by_the_next_take_up() {
    let (code, shown, verified) = resumed_with_pending("pause");
    assert_eq!(code, 0, "{shown}");
    assert_eq!(shown["state"]["outcome"]["outcome"], "completed", "{shown}");
    assert!(verified);
}
