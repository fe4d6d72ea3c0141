//! `runtape schedule add|ls|pause|resume|trigger|rm` on a PostgreSQL database do what they do
//! on a SQLite file, and a bad cron expression is refused with one line, writing nothing.
//! Real PostgreSQL, the real binary.

use std::path::Path;

use crate::support::cli::{err, ok, runtape, utf8};
use crate::support::pg::PgServer;

use super::{listed, report_spec};

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_schedule_is_managed_in_postgresql() {
    let server = PgServer::start();
    let url = server.fresh_db();
    let db = Path::new(&url);
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = report_spec(dir.path());
    let bad = runtape(
        db,
        &[
            "schedule",
            "add",
            "morning",
            utf8(&spec),
            "--cron",
            "0 9 * *",
        ],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", err(&bad));
    assert_eq!(err(&bad).trim_end().lines().count(), 1, "{}", err(&bad));
    let args = [
        "schedule",
        "add",
        "morning",
        utf8(&spec),
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Paris",
        "--overlap",
        "cancel-previous",
        "--catch-up",
        "all",
    ];
    ok(db, &args);
    let again = runtape(db, &args);
    assert_eq!(
        again.status.code(),
        Some(2),
        "a name taken: {}",
        err(&again)
    );
    let all = listed(db);
    assert_eq!(all.len(), 1, "{all:?}");
    let s = &all[0];
    assert_eq!(
        (s["status"].as_str(), s["tz"].as_str()),
        (Some("active"), Some("Europe/Paris"))
    );
    assert_eq!(
        (s["overlap"].as_str(), s["catch_up"].as_str()),
        (Some("cancel-previous"), Some("all"))
    );
    assert!(s["next"].is_string(), "{s}");

    ok(db, &["schedule", "pause", "morning"]);
    assert_eq!(listed(db)[0]["status"], "paused");
    ok(db, &["schedule", "resume", "morning"]);
    assert_eq!(listed(db)[0]["status"], "active");

    let fired = ok(db, &["schedule", "trigger", "morning", "--json"]);
    let fired: serde_json::Value = serde_json::from_str(&fired).expect("json");
    assert_eq!(fired["fire"]["state"], "pending", "{fired}");
    assert_eq!(fired["fire"]["manual"], true);
    let rows = server.sql(
        PgServer::db_of(&url),
        "SELECT schedule, run, state, manual FROM runtape.schedule_fires",
    );
    let run = fired["fire"]["run"].as_str().expect("run");
    assert_eq!(rows.trim(), format!("morning|{run}|pending|t"));
    assert_eq!(listed(db)[0]["fired"], 1);

    ok(db, &["schedule", "rm", "morning"]);
    assert!(listed(db).is_empty());
    let left = server.sql(
        PgServer::db_of(&url),
        "SELECT count(*) FROM runtape.schedule_fires",
    );
    assert_eq!(left.trim(), "0", "its fired instants went with it");
}
