//! Ctrl-C stops an experiment gracefully: nothing more starts, the run in flight pauses and
//! `runtape resume` continues it, and the report of what ran is still written.

use std::process::Stdio;

use serde_json::Value;

use super::echo_dataset;
use crate::support::cli::{
    exit_and_stderr, on, runtape, signal, slow_tick_spec, temp_db, utf8, wait_until,
};

/// `(id, status)` of every run in `db`, in the order they were created (none before the
/// database is).
fn runs(db: &std::path::Path) -> Vec<(String, String)> {
    let Ok(c) = rusqlite::Connection::open(db) else {
        return Vec::new();
    };
    let Ok(mut q) = c.prepare("SELECT id, status FROM runs ORDER BY rowid") else {
        return Vec::new(); // Not created yet.
    };
    q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

#[test]
fn ctrl_c_writes_the_report_of_what_ran_and_pauses_the_run_in_flight() {
    let (dir, db) = temp_db();
    // Each run: ten slow model turns (150 ms each), one at a time.
    let spec = slow_tick_spec(dir.path(), 10);
    let dataset = echo_dataset(dir.path());
    let report_file = dir.path().join("report.json");
    let mut child = on(&db)
        .args([
            "eval",
            utf8(&spec),
            "--dataset",
            utf8(&dataset),
            "--concurrency",
            "1",
            "--grace-ms",
            "2000",
            "-o",
            utf8(&report_file),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    // Stop it while the second item's run is in flight and the first has completed.
    wait_until("the first item completed and the second started", || {
        let r = runs(&db);
        if let Ok(Some(status)) = child.try_wait() {
            let (_, stderr) = exit_and_stderr(&mut child);
            panic!("eval ended before it was stopped ({status}): {stderr}");
        }
        r.len() == 2 && r[0].1 == "completed" && r[1].1 == "running"
    });
    signal(child.id(), "INT");
    let (code, stderr) = exit_and_stderr(&mut child);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout)
        .expect("reads stdout");
    assert_eq!(
        code,
        Some(4),
        "a stopped experiment exits 4 (paused): {stderr}"
    );
    assert!(stderr.contains("stopping the experiment"), "{stderr}");

    // Nothing started after the signal: two runs, the second paused.
    let r = runs(&db);
    assert_eq!(r.len(), 2, "no item starts once stopped: {r:?}");
    assert_eq!(r[1].1, "paused", "{r:?}");

    // The report says so and holds the two items that ran, as they stood.
    let printed: Value = serde_json::from_str(&stdout).expect("the report on stdout");
    let written: Value =
        serde_json::from_slice(&std::fs::read(&report_file).expect("the report is written"))
            .expect("JSON");
    for report in [&printed, &written] {
        assert_eq!(report["stopped"], true, "{report}");
        let results: Vec<(&str, &str)> = report["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| {
                let r = &i["results"]["base"];
                Some((i["id"].as_str()?, r["status"].as_str()?))
            })
            .collect();
        assert_eq!(results, [("one", "completed"), ("two", "paused")]);
        assert_eq!(report["variants"][0]["items"], 2);
        assert_eq!(report["variants"][0]["completed"], 1);
    }

    // The paused run goes on where it stopped.
    let o = runtape(&db, &["resume", &r[1].0]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(runtape(&db, &["verify", &r[1].0]).status.success());
}

/// An experiment that runs to its end says nothing of stopping.
#[test]
fn a_finished_report_has_no_stopped_key() {
    let (dir, db) = temp_db();
    let spec = super::echo_spec(dir.path());
    let dataset = echo_dataset(dir.path());
    let report = super::eval_ok(
        &db,
        &[
            utf8(&spec),
            "--dataset",
            utf8(&dataset),
            "-o",
            utf8(&dir.path().join("r.json")),
        ],
    );
    assert!(report.get("stopped").is_none(), "{report}");
}
