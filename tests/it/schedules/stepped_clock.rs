//! On the stepped clock (`runtape worker --stepped-clock`) schedule time does not wait for
//! the wall: a worker with no run in hand jumps to the next instant, so a daily 09:00
//! Europe/Paris schedule from 27 March 2026 fires 27, 28, 29 and 30 March at once, in order,
//! each once — 08:00Z before the clocks spring forward on the 29th, 07:00Z after — the same
//! instants and run ids on every machine, months before or after the real date.

use std::time::Duration;

use crate::support::cli::{ok, utf8, wait_until_every};
use crate::support::pg::{Reaper, worker};
use crate::support::workers::stop;

use super::{fires, report_spec, runs};

#[test]
fn a_stepped_worker_fires_each_instant_in_turn_without_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = report_spec(d);
    let db = d.join("s.db");
    ok(
        &db,
        &[
            "schedule",
            "add",
            "report",
            utf8(&spec),
            "--cron",
            "0 9 * * *",
            "--tz",
            "Europe/Paris",
            "--since",
            "2026-03-27T00:00:00Z",
        ],
    );
    let mut workers = Reaper(vec![worker(
        utf8(&db),
        d,
        "w.log",
        &["--stepped-clock"],
        &[],
    )]);
    wait_until_every(
        "four scheduled runs completed",
        Duration::from_millis(100),
        || {
            runs(&db)
                .iter()
                .filter(|r| r["status"] == "completed")
                .count()
                >= 4
        },
    );
    stop(&mut workers);

    let fired = fires(&db);
    let first: Vec<(&str, &str)> = fired
        .iter()
        .take(4)
        .map(|f| (f.2.as_str(), f.3.as_str()))
        .collect();
    assert_eq!(
        first,
        [
            ("report-20260327T080000Z", "started"),
            ("report-20260328T080000Z", "started"),
            ("report-20260329T070000Z", "started"),
            ("report-20260330T070000Z", "started"),
        ],
        "{fired:?}"
    );
    // However far it got before the stop, every instant fired once, in order, none skipped.
    let listed = runs(&db);
    for (i, f) in fired.iter().enumerate() {
        assert_eq!(f.3, "started", "{f:?}");
        assert_eq!(
            listed.iter().filter(|r| r["id"] == f.2.as_str()).count(),
            1,
            "{f:?}"
        );
        if i > 0 {
            let gap = f.1 - fired[i - 1].1;
            assert!(
                gap == 86_400_000 || gap == 82_800_000,
                "the next day's 09:00: {fired:?}"
            );
        }
    }
    ok(&db, &["verify", &fired[3].2]);
}
