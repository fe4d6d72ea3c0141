//! Two `runtape worker` processes on one SQLite file fire each due instant of its schedules
//! once: after five days down, a daily schedule with `--catch-up all --overlap queue` starts
//! five runs, oldest first, each once its predecessor ended; a yearly one with
//! `--catch-up last` starts one, for its latest instant; one with `--catch-up none` starts
//! none. Every run names its schedule and instant, and verifies.

use std::time::Duration;

use crate::support::cli::{ok, utf8, wait_until_every};
use crate::support::pg::{Reaper, worker};
use crate::support::workers::{events, stop};

use super::{DAY, caught_up, fires, now_ms, report_spec, rfc3339, runs, slow_report_spec};

#[test]
fn two_workers_fire_each_instant_once_under_each_catch_up_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = report_spec(d);
    let spec = utf8(&spec);
    // Each daily run lasts a moment, so the next instant finds it live and queues.
    let slow = slow_report_spec(d, 0.3);
    let slow = utf8(&slow);
    let db = d.join("s.db");
    let now = now_ms();
    let five_days_ago = rfc3339(now - 5 * DAY);
    let three_years_ago = rfc3339(now - 3 * 365 * DAY);
    ok(
        &db,
        &[
            "schedule",
            "add",
            "daily",
            slow,
            "--cron",
            "0 0 * * *",
            "--catch-up",
            "all",
            "--overlap",
            "queue",
            "--since",
            &five_days_ago,
        ],
    );
    ok(
        &db,
        &[
            "schedule",
            "add",
            "yearly",
            spec,
            "--cron",
            "0 0 1 1 *",
            "--catch-up",
            "last",
            "--since",
            &three_years_ago,
        ],
    );
    ok(
        &db,
        &[
            "schedule",
            "add",
            "missed",
            spec,
            "--cron",
            "0 0 1 1 *",
            "--catch-up",
            "none",
            "--since",
            &three_years_ago,
        ],
    );

    let mut workers = Reaper(vec![
        worker(utf8(&db), d, "a.log", &[], &[]),
        worker(utf8(&db), d, "b.log", &[], &[]),
    ]);
    wait_until_every(
        "six scheduled runs completed",
        Duration::from_millis(100),
        || {
            runs(&db)
                .iter()
                .filter(|r| r["status"] == "completed")
                .count()
                == 6
        },
    );
    stop(&mut workers);

    let (daily, yearly) = caught_up(&fires(&db));

    let fired = [
        events(d, "a", "schedule.fired"),
        events(d, "b", "schedule.fired"),
    ]
    .concat();
    assert_eq!(
        fired.len(),
        6,
        "each run started by one worker once: {fired:?}"
    );

    let listed = runs(&db);
    assert_eq!(listed.len(), 6);
    for f in daily.iter().chain(&yearly) {
        let run = listed
            .iter()
            .find(|r| r["id"] == f.2.as_str())
            .expect("the fire's run");
        assert_eq!(run["schedule"]["name"], f.0.as_str(), "{run}");
        assert_eq!(run["schedule"]["instant_ms"].as_i64(), Some(f.1), "{run}");
        ok(&db, &["verify", &f.2]);
    }
    // Queued: each daily run was created once the one before it had ended.
    let daily_runs: Vec<&serde_json::Value> = daily
        .iter()
        .map(|f| {
            listed
                .iter()
                .find(|r| r["id"] == f.2.as_str())
                .expect("run")
        })
        .collect();
    for w in daily_runs.windows(2) {
        assert!(
            w[1]["created_ms"].as_u64() >= w[0]["updated_ms"].as_u64(),
            "{} started before {} ended",
            w[1]["id"],
            w[0]["id"]
        );
    }
}
