//! `runtape schedule add|ls|pause|resume|rm|trigger`: what each does, and bad input — a bad
//! cron expression, an unknown time zone, policy or spec file, a name taken — refused with one
//! line, the database left byte for byte as it was (and not created when it did not exist).

use crate::support::cli::{err, ok, runtape};

use super::{listed, report_spec};

#[test]
fn a_schedule_is_added_listed_paused_resumed_triggered_and_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = report_spec(dir.path());
    let db = dir.path().join("s.db");
    let added = ok(
        &db,
        &[
            "schedule",
            "add",
            "morning",
            spec.to_str().expect("utf8"),
            "--cron",
            "0 9 * * 1-5",
            "--tz",
            "Europe/Paris",
            "--overlap",
            "queue",
            "--catch-up",
            "last",
        ],
    );
    assert!(
        added.starts_with("added schedule morning (0 9 * * 1-5 Europe/Paris); next run "),
        "{added}"
    );
    let all = listed(&db);
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(
        (s["name"].as_str(), s["status"].as_str()),
        (Some("morning"), Some("active"))
    );
    assert_eq!(
        (s["overlap"].as_str(), s["catch_up"].as_str()),
        (Some("queue"), Some("last"))
    );
    let next = s["next_local"].as_str().expect("a next fire time");
    assert!(
        next.ends_with(" 09:00 CET") || next.ends_with(" 09:00 CEST"),
        "{next}"
    );

    ok(&db, &["schedule", "pause", "morning"]);
    let s = &listed(&db)[0];
    assert_eq!(s["status"], "paused");
    assert!(
        s.get("next").is_none(),
        "a paused schedule fires at no time: {s}"
    );
    ok(&db, &["schedule", "resume", "morning"]);
    assert_eq!(listed(&db)[0]["status"], "active");

    let fired = ok(&db, &["schedule", "trigger", "morning", "--json"]);
    let fired: serde_json::Value = serde_json::from_str(&fired).expect("json");
    assert_eq!(fired["fire"]["state"], "pending", "{fired}");
    assert_eq!(fired["fire"]["manual"], true);
    assert!(
        fired["fire"]["run"]
            .as_str()
            .expect("run")
            .starts_with("morning-")
    );
    assert_eq!(listed(&db)[0]["fired"], 1);

    ok(&db, &["schedule", "rm", "morning"]);
    assert!(listed(&db).is_empty());
}

/// Runs `runtape schedule ARGS…` on `db`, which must refuse it with one line (exit 2) that
/// contains `says`, and change nothing.
/// Every row of the schedules' tables and of the runs' (none when the file does not exist):
/// compared before and after a command that must change nothing. Rows, not bytes: a command
/// that only reads may still checkpoint the write-ahead log as its connection closes, which
/// moves bytes between the two files and changes no row.
fn rows(db: &std::path::Path) -> Option<String> {
    if !db.exists() {
        return None;
    }
    let conn = crate::support::cli::read_only(db);
    let mut out = String::new();
    for table in [
        "schedules",
        "schedule_fires",
        "runs",
        "run_specs",
        "transitions",
    ] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1"))
            .expect("prepares");
        let n = stmt.column_count();
        let mut all = stmt.query([]).expect("reads");
        while let Some(r) = all.next().expect("row") {
            for i in 0..n {
                out.push_str(&format!("{:?}|", r.get_ref(i).expect("value")));
            }
            out.push('\n');
        }
    }
    Some(out)
}

fn refused(db: &std::path::Path, args: &[&str], says: &str) {
    let before = rows(db);
    let o = runtape(db, &[&["schedule"], args].concat());
    let line = err(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {line}");
    assert_eq!(
        line.trim_end().lines().count(),
        1,
        "{args:?}: one line: {line}"
    );
    assert!(line.contains(says), "{args:?}: {line}");
    assert_eq!(rows(db), before, "{args:?} changed the database");
}

#[test]
fn bad_input_gets_one_line_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = report_spec(dir.path());
    let spec = spec.to_str().expect("utf8");
    let fresh = dir.path().join("fresh.db");
    // Refused before a database is created.
    refused(
        &fresh,
        &["add", "a", spec, "--cron", "0 9 * *"],
        "bad cron expression",
    );
    assert!(!fresh.exists(), "no database for a refused schedule");

    let db = dir.path().join("s.db");
    ok(
        &db,
        &["schedule", "add", "daily", spec, "--cron", "0 9 * * *"],
    );
    refused(
        &db,
        &["add", "b", spec, "--cron", "0 25 * * *"],
        "bad cron expression",
    );
    refused(
        &db,
        &[
            "add",
            "b",
            spec,
            "--cron",
            "0 9 * * *",
            "--tz",
            "Europe/Pariss",
        ],
        "unknown time zone \"Europe/Pariss\"",
    );
    refused(
        &db,
        &[
            "add",
            "b",
            spec,
            "--cron",
            "0 9 * * *",
            "--overlap",
            "never",
        ],
        "unknown overlap policy",
    );
    refused(
        &db,
        &[
            "add",
            "b",
            spec,
            "--cron",
            "0 9 * * *",
            "--catch-up",
            "some",
        ],
        "unknown catch-up policy",
    );
    refused(
        &db,
        &["add", "b", "missing.toml", "--cron", "0 9 * * *"],
        "missing.toml",
    );
    refused(
        &db,
        &["add", "b c", spec, "--cron", "0 9 * * *"],
        "bad schedule name",
    );
    refused(
        &db,
        &[
            "add",
            "b",
            spec,
            "--cron",
            "0 9 * * *",
            "--since",
            "yesterday",
        ],
        "--since",
    );
    refused(
        &db,
        &["add", "daily", spec, "--cron", "0 10 * * *"],
        "a schedule named daily exists already",
    );
    for verb in ["pause", "resume", "rm", "trigger"] {
        refused(&db, &[verb, "nightly"], "no schedule named nightly");
    }
    let all = listed(&db);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["cron"], "0 9 * * *", "the first schedule as it was");
}
