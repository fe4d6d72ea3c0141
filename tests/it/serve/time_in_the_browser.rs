//! Durable time on the page, in Debian's Chromium: a run asleep for an hour (its process
//! killed) is `sleeping` in the list with its wake time, and its page counts down to the
//! instant the server gave — from the server's clock, so a browser clock three days ahead
//! changes nothing; an approval under a day's deadline shows when it passes and that it is
//! rejected then, beside the inputs to answer it; a schedule shows its next fire time, local
//! time and countdown; a compensated saga's steps stand out in the timeline and say they
//! compensate. The API carries each instant: `wakes_ms` and `now_ms` of a run,
//! `waiting[].deadline` (`due_ms`, `then`), and `GET /api/schedules` with `next_ms`.
//!
//! Needs `/usr/bin/chromium` and the pinned playwright-core and axe-core
//! (`tests/extras/install.sh browser`); `.ci/run` installs them.

use crate::support::browser::{DEADLINE_MS, SCHEDULE, SLEEP_S, chromium, timed_runs};
use crate::support::serve::{field, scratch_db, serve};

#[test]
#[ignore = "needs Chromium, playwright-core and axe-core: tests/extras/install.sh browser"]
fn sleeping_runs_deadlines_schedules_and_compensations_show_in_chromium() {
    let browser = chromium();
    let (dir, db) = scratch_db();
    let runs = timed_runs(dir.path(), &db);
    let server = serve(dir.path(), &db);

    // The instants the page counts down to, as the API gives them.
    let (_, sleeping) = server.get(&format!("/api/runs/{}", field(&runs, "sleeping")));
    let now = sleeping["now_ms"].as_u64().expect("now_ms");
    let wakes = sleeping["wakes_ms"].as_u64().expect("wakes_ms");
    assert_eq!(sleeping["sleeping"], true, "{sleeping}");
    assert_eq!(sleeping["interrupted"], false, "asleep is not interrupted");
    assert!(wakes > now && wakes <= now + SLEEP_S * 1000, "{sleeping}");
    let (_, waiting) = server.get(&format!("/api/runs/{}", field(&runs, "waiting")));
    let deadline = &waiting["waiting"][0]["deadline"];
    assert_eq!(deadline["then"], "reject", "{waiting}");
    let due = deadline["due_ms"].as_u64().expect("due_ms");
    assert!(due > now && due <= now + DEADLINE_MS, "{waiting}");
    assert_eq!(waiting["wakes_ms"].as_u64(), Some(due), "{waiting}");
    let (status, schedules) = server.get("/api/schedules");
    assert_eq!(status, 200, "{schedules}");
    let mine = &schedules["schedules"][0];
    assert_eq!(mine["name"], SCHEDULE.0, "{schedules}");
    assert!(
        mine["next_ms"].as_u64().is_some_and(|n| n > now),
        "{schedules}"
    );

    let shown = browser.drive_ok("time.mjs", &server.url, &runs);
    eprintln!("durable time in Chromium: {shown}");
    assert_eq!(
        shown["saga_rows"],
        serde_json::json!([9, 10, 11]),
        "{shown}"
    );
}
