//! A scheduled run records its schedule and instant in its setup, which its head seals: `ls`
//! and `show` display the link, and an edit of the instant in the database is caught by
//! `verify`.

use std::time::Duration;

use crate::support::cli::{ok, runtape, text, utf8, wait_until_every};
use crate::support::pg::{Reaper, worker};
use crate::support::workers::stop;

use super::{report_spec, runs};

#[test]
fn the_schedule_and_instant_of_a_run_are_shown_and_verified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = report_spec(d);
    let db = d.join("s.db");
    ok(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            utf8(&spec),
            "--cron",
            "0 2 * * *",
        ],
    );
    ok(&db, &["schedule", "trigger", "nightly"]);
    let mut workers = Reaper(vec![worker(utf8(&db), d, "w.log", &[], &[])]);
    wait_until_every(
        "the triggered run completed",
        Duration::from_millis(100),
        || runs(&db).iter().any(|r| r["status"] == "completed"),
    );
    stop(&mut workers);
    let run = runs(&db)[0].clone();
    let id = run["id"].as_str().expect("id").to_owned();
    assert_eq!(run["schedule"]["name"], "nightly");
    assert_eq!(run["schedule"]["manual"], true);
    let ls = ok(&db, &["ls"]);
    assert!(ls.contains("[schedule nightly "), "{ls}");
    let show = ok(&db, &["show", &id]);
    assert!(
        show.contains("schedule nightly started it, triggered by hand at "),
        "{show}"
    );
    ok(&db, &["verify", &id]);

    // Move the recorded instant an hour: the sealed head no longer matches.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let instant = run["schedule"]["instant_ms"].as_u64().expect("instant");
    let changed = conn
        .execute(
            "UPDATE run_specs SET setup = replace(setup, ?1, ?2)",
            [instant.to_string(), (instant + 3_600_000).to_string()],
        )
        .expect("edits");
    assert_eq!(changed, 1);
    drop(conn);
    let o = runtape(&db, &["verify", &id]);
    assert!(
        !o.status.success(),
        "verify accepted an edited schedule link: {}",
        text(&o)
    );
}
