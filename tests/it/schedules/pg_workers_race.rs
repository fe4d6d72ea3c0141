//! On PostgreSQL, three `runtape worker` processes racing over the same due schedule instants
//! fire each once: after five days down, a daily schedule with `--catch-up all --overlap
//! queue` starts five runs, oldest first, each once its predecessor ended; a yearly one with
//! `--catch-up last` starts one, for its latest instant; one with `--catch-up none` starts
//! none; and one whose spec file is outside the workers' `--spec-dir` is left alone. Each
//! instant is inserted once under its key, each run is claimed by one worker once, names its
//! schedule and instant, and verifies. Real PostgreSQL, the real binary.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{ok, utf8, wait_until_every};
use crate::support::pg::{PgServer, Reaper, worker};
use crate::support::workers::{events, stop};

use super::{DAY, caught_up, now_ms, pg_fires, report_spec, rfc3339, runs, slow_report_spec};

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn three_workers_fire_each_instant_once_under_each_catch_up_policy() {
    let server = PgServer::start();
    let (url, _tmp, d) = super::pg_scratch(&server);
    let db = Path::new(&url);
    let spec = report_spec(&d);
    let spec = utf8(&spec);
    // Each daily run lasts a moment, so the next instant finds it live and queues.
    let slow = slow_report_spec(&d, 0.3);
    let slow = utf8(&slow);
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let foreign = report_spec(elsewhere.path());
    let now = now_ms();
    let five_days_ago = rfc3339(now - 5 * DAY);
    let three_years_ago = rfc3339(now - 3 * 365 * DAY);
    let add = |name: &str, spec: &str, cron: &str, more: &[&str]| {
        ok(
            db,
            &[&["schedule", "add", name, spec, "--cron", cron], more].concat(),
        )
    };
    add(
        "daily",
        slow,
        "0 0 * * *",
        &[
            "--catch-up",
            "all",
            "--overlap",
            "queue",
            "--since",
            &five_days_ago,
        ],
    );
    let last = ["--catch-up", "last", "--since", &three_years_ago];
    add("yearly", spec, "0 0 1 1 *", &last);
    add(
        "missed",
        spec,
        "0 0 1 1 *",
        &["--catch-up", "none", "--since", &three_years_ago],
    );
    add("foreign", utf8(&foreign), "0 0 1 1 *", &last);

    let mut workers = Reaper(
        ["a", "b", "c"]
            .iter()
            .map(|w| worker(&url, &d, &format!("{w}.log"), &[], &[]))
            .collect(),
    );
    wait_until_every(
        "six scheduled runs completed",
        Duration::from_millis(100),
        || {
            runs(db)
                .iter()
                .filter(|r| r["status"] == "completed")
                .count()
                == 6
        },
    );
    stop(&mut workers);

    let fires = pg_fires(&server, &url);
    let (daily, yearly) = caught_up(&fires);
    assert!(
        !fires.iter().any(|f| f.0 == "foreign"),
        "no worker serves the foreign spec's directory"
    );

    let logs = ["a", "b", "c"];
    let all = |event: &str| -> Vec<serde_json::Value> {
        logs.iter().flat_map(|w| events(&d, w, event)).collect()
    };
    let fired = all("schedule.fired");
    assert_eq!(
        fired.len(),
        6,
        "each instant fired by one worker once: {fired:?}"
    );
    let claimed = all("run.claimed");

    let listed = runs(db);
    assert_eq!(listed.len(), 6, "{listed:?}");
    for f in daily.iter().chain(&yearly) {
        let run = listed
            .iter()
            .find(|r| r["id"] == f.2.as_str())
            .expect("the fire's run");
        assert_eq!(run["schedule"]["name"], f.0.as_str(), "{run}");
        assert_eq!(run["schedule"]["instant_ms"].as_i64(), Some(f.1), "{run}");
        let claims = claimed.iter().filter(|c| c["run"] == f.2.as_str()).count();
        assert_eq!(claims, 1, "{} claimed once: {claimed:?}", f.2);
        ok(db, &["verify", &f.2]);
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
