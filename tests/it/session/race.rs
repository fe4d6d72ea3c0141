//! Two processes starting the next run of one session at the same moment (the real binary,
//! two real processes, one SQLite file): exactly one becomes run 3; the other exits 2 with
//! one line and writes nothing — whether it lost the race for the place in the store
//! ("started by another process at the same time") or found the winner's run already there
//! ("has not ended"). Never a run 3 twice, never a gap, and every run verifies.

use crate::support;

use crate::support::cli::{all_at_once, temp_db, utf8};
use serde_json::Value;
use support::session::*;

const TRIALS: usize = 6;

#[test]
fn two_processes_racing_for_the_next_run_of_a_session_make_exactly_one_run_3() {
    let mut taken_in_store = 0;
    for trial in 0..TRIALS {
        let (dir, db) = temp_db();
        let quick = write(
            dir.path(),
            "quick.toml",
            &chat_spec(10, &["a", "b", "c"], ""),
        );
        // The racers' model answers slowly, so the winner's run is still running while the
        // loser looks.
        let slow = write(
            dir.path(),
            "slow.toml",
            &chat_spec(10, &["a", "b", "c"], "").replace(
                "usage = { input = 10, output = 5 } }",
                "usage = { input = 10, output = 5 }, latency_ms = 1500 }",
            ),
        );
        let r1 = session_run(&db, &quick, "one", "race");
        let r2 = session_run(&db, &quick, "two", "race");

        let outputs = all_at_once(["left", "right"].map(|goal| {
            let mut run = on(&db);
            run.args(["run", utf8(&slow), goal, "--session", "race"]);
            run
        }));
        let winners: Vec<_> = outputs.iter().filter(|o| o.status.success()).collect();
        let losers: Vec<_> = outputs.iter().filter(|o| !o.status.success()).collect();
        assert_eq!(
            (winners.len(), losers.len()),
            (1, 1),
            "trial {trial}: {:?}",
            outputs.iter().map(text).collect::<Vec<_>>()
        );
        let loser = losers[0];
        assert_eq!(loser.status.code(), Some(2), "{}", text(loser));
        let err = String::from_utf8_lossy(&loser.stderr);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        if err.contains("was started by another process at the same time") {
            taken_in_store += 1;
        } else {
            assert!(err.contains("has not ended"), "{err}");
        }

        let r3 = first_id(&String::from_utf8_lossy(&winners[0].stdout));
        let places: Vec<(u64, String)> = ok(&db, &["log", "--session", "race", "--json"])
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json");
                (
                    v["index"].as_u64().expect("index"),
                    v["run"].as_str().expect("run").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            places,
            vec![(1, r1.clone()), (2, r2.clone()), (3, r3.clone())]
        );
        let all = ok(&db, &["ls", "--json"]);
        assert_eq!(all.lines().count(), 3, "the loser wrote no run: {all}");
        for run in [&r1, &r2, &r3] {
            verifies(&db, run);
        }
    }
    eprintln!(
        "{taken_in_store} of {TRIALS} losers were refused by the store's place check, the others found the winner's run"
    );
}
