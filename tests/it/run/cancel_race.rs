//! `cancel` racing a run that is finishing, with real processes: `runtape cancel` succeeds
//! (exit 0, "cancelled RUN at step N") only when the run really was cancelled; when the run
//! completed first it says so in one line on stderr and exits 2, and nothing is changed.
//! The issue saw 13 of 40 such trials print `cancelled RUN: completed at step 34` and exit 0.

use crate::support;

use std::io::BufRead;

use support::protocol::*;

#[test]
fn cancel_reports_what_happened_when_racing_the_end_of_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = charge_spec(dir.path(), &ChargeSpec::paced(3, 60));
    let (mut cancelled, mut completed) = (0, 0);
    for trial in 0..40u64 {
        let db = dir.path().join(format!("runs{trial}.db"));
        let mut bg = start(&db, &spec, &[]);
        // Cancel at a step spread over the whole run (it ends at step 11).
        let target = 2 + trial % 10;
        let mut line = String::new();
        while bg.lines.read_line(&mut line).expect("reads") > 0 {
            let v: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
            if v["seq"].as_u64().is_some_and(|s| s >= target) || v["type"] == "run.end" {
                break;
            }
            line.clear();
        }
        let o = runtape(&db, &["cancel", &bg.run]);
        let driver = bg.child.wait().expect("the run's process exits");
        let row = run_row(&db, &bg.run);
        match row.status.as_str() {
            "cancelled" => {
                cancelled += 1;
                assert_eq!(o.status.code(), Some(0), "trial {trial}: {}", err(&o));
                assert!(
                    out(&o).starts_with(&format!("cancelled {} at step", bg.run)),
                    "trial {trial}: {}",
                    out(&o)
                );
                assert_eq!(driver.code(), Some(1), "a cancelled run exits 1");
            }
            "completed" => {
                completed += 1;
                assert_eq!(
                    o.status.code(),
                    Some(2),
                    "trial {trial}: cancel of a completed run is not a success: {}",
                    out(&o)
                );
                assert!(out(&o).is_empty(), "trial {trial}: {}", out(&o));
                let line = one_line(&err(&o)).to_owned();
                assert!(
                    line.contains("completed") && line.contains("nothing"),
                    "trial {trial}: {line}"
                );
                assert_eq!(driver.code(), Some(0));
            }
            other => panic!("trial {trial}: run left {other}: {row:?}"),
        }
        assert!(runtape(&db, &["verify", &bg.run]).status.success());
    }
    println!("{cancelled} cancelled, {completed} completed first");
}
