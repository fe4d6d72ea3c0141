//! `runtape serve` fires schedules while it is up, as a worker does.

use std::time::Duration;

use crate::support::cli::{ok, utf8};

use super::{fires, report_spec};

#[test]
fn serve_starts_the_run_of_a_triggered_schedule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = report_spec(dir.path());
    let db = dir.path().join("s.db");
    ok(
        &db,
        &[
            "schedule",
            "add",
            "weekly",
            utf8(&spec),
            "--cron",
            "0 9 * * 1",
        ],
    );
    ok(&db, &["schedule", "trigger", "weekly"]);
    let run = fires(&db)[0].2.clone();
    let server = crate::support::serve::serve(dir.path(), &db);
    let done = server.wait_run(&run, Duration::from_secs(60), |v| {
        v["status"] == "completed"
    });
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(done["status"], "completed", "{done}");
    let fires = fires(&db);
    assert_eq!(fires.len(), 1);
    assert_eq!(fires[0].3, "started");
}
