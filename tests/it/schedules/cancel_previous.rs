//! `--overlap cancel-previous`: a due instant whose previous run is still live cancels it,
//! then starts its own run.

use std::time::Duration;

use crate::support::cli::{utf8, wait_until_every};
use crate::support::pg::{Reaper, worker};
use crate::support::workers::stop;

use super::{fires, runs, slow_report_spec};

#[test]
fn a_due_instant_cancels_the_live_previous_run_and_starts_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Each run waits 3 s on its tool: the second instant finds the first run live.
    let spec = slow_report_spec(d, 3.0);
    let db = d.join("s.db");
    super::add_daily_cancelling(&db, &spec, "all");
    let mut workers = Reaper(vec![worker(utf8(&db), d, "w.log", &[], &[])]);
    wait_until_every(
        "the second run completed",
        Duration::from_millis(100),
        || runs(&db).iter().any(|r| r["status"] == "completed"),
    );
    stop(&mut workers);
    let fires = fires(&db);
    assert_eq!(fires.len(), 2, "{fires:?}");
    assert!(fires.iter().all(|f| f.3 == "started"), "{fires:?}");
    let listed = runs(&db);
    let status = |run: &str| {
        listed
            .iter()
            .find(|r| r["id"] == run)
            .map(|r| r["status"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(
        status(&fires[0].2).as_deref(),
        Some("cancelled"),
        "{listed:?}"
    );
    assert_eq!(
        status(&fires[1].2).as_deref(),
        Some("completed"),
        "{listed:?}"
    );
}
