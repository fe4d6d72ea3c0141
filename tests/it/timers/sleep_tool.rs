//! `sleep_for` and `sleep_until` on the stepped clock (`--stepped-clock`): the transition
//! that takes the call commits its due instant, computed from the event's time; the run does
//! not wait on a clock whose time is not the wall's, yet `TimerFired` is committed once,
//! stamped at the due instant, and the model's next request carries the call's result. A spec
//! without `[timers]` offers no sleep, a sleep past the maximum is refused, `verify` re-derives
//! the due instant, and a cassette replay reproduces the sleep without waiting.

use crate::support::cli::{export, replay_fresh, runtape, text, utf8, write};

use super::{ms_of, nap_spec, only_run, show, steps, the_timer, tool_result_seen};

const TIMERS: &str = "[timers]\nmax_sleep_ms = 3600000\n";

/// Runs `spec` (text) with `--stepped-clock` in a fresh database in `dir`; its run id.
fn run_stepped(dir: &std::path::Path, spec: &str) -> (std::path::PathBuf, String) {
    let path = write(dir, "nap.toml", spec);
    let db = dir.join("nap.db");
    let out = runtape(&db, &["run", "--stepped-clock", utf8(&path)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = only_run(&db);
    (db, run)
}

#[test]
fn sleep_for_commits_its_due_instant_and_fires_once_at_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = nap_spec(
        TIMERS,
        "{ name = \"sleep_for\", arguments = { seconds = 1800 } }",
    );
    let (db, run) = run_stepped(dir.path(), &spec);
    let all = steps(&db, &run);
    let (started_seq, due) = the_timer(&db, &run);
    let started_at = all[started_seq as usize - 1]["at_ms"]
        .as_u64()
        .expect("at_ms");
    assert_eq!(
        ms_of(due),
        started_at + 1_800_000,
        "due 30 minutes after the transition that took the call"
    );
    let fired: Vec<_> = all.iter().filter(|s| s["event"] == "timer_fired").collect();
    assert_eq!(fired.len(), 1, "fired once: {all:?}");
    assert_eq!(fired[0]["edge"], "calling_tools.timer.done");
    assert_eq!(
        fired[0]["at_ms"].as_u64(),
        Some(ms_of(due)),
        "stamped at its due instant, not before"
    );
    let fired_seq = fired[0]["seq"].as_u64().expect("seq");
    let woke = tool_result_seen(&db, &run, fired_seq + 1);
    assert!(
        woke.starts_with("slept until 2023-11-14T22:43:20"),
        "{woke}"
    );
    assert_eq!(all.last().expect("steps")["to"], "done");

    let out = runtape(&db, &["verify", &run]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn sleep_until_wakes_at_the_time_it_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The stepped clock starts at 2023-11-14T22:13:20Z.
    let spec = nap_spec(
        TIMERS,
        "{ name = \"sleep_until\", arguments = { until = \"2023-11-14T23:00:00+00:00\" } }",
    );
    let (db, run) = run_stepped(dir.path(), &spec);
    let (_, due) = the_timer(&db, &run);
    assert_eq!(ms_of(due), 1_700_002_800_000, "2023-11-14T23:00:00Z");
    let fired: Vec<_> = steps(&db, &run)
        .into_iter()
        .filter(|s| s["event"] == "timer_fired")
        .collect();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0]["at_ms"].as_u64(), Some(1_700_002_800_000));
}

#[test]
fn without_timers_no_sleep_is_offered_or_taken() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = nap_spec("", "{ name = \"sleep_for\", arguments = { seconds = 5 } }");
    let (db, run) = run_stepped(dir.path(), &spec);
    let all = steps(&db, &run);
    assert!(all.iter().all(|s| s["event"] != "timer_fired"), "{all:?}");
    let first_request = show(&db, &run, 2)["request"].clone();
    assert!(
        !first_request["tools"].to_string().contains("sleep_"),
        "not offered: {first_request}"
    );
    assert_eq!(tool_result_seen(&db, &run, 4), "tool unavailable");
}

#[test]
fn a_sleep_past_the_maximum_is_refused_and_sleeps_not_at_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = nap_spec(
        "[timers]\nmax_sleep_ms = 60000\n",
        "{ name = \"sleep_for\", arguments = { seconds = 3600 } }",
    );
    let (db, run) = run_stepped(dir.path(), &spec);
    let all = steps(&db, &run);
    assert!(all.iter().all(|s| s["event"] != "timer_fired"), "{all:?}");
    let refused = tool_result_seen(&db, &run, 4);
    assert!(
        refused.contains("at most 60 seconds"),
        "the model hears the cap: {refused}"
    );
    assert_eq!(all.last().expect("steps")["to"], "done");
}

#[test]
fn a_cassette_replay_sleeps_the_same_sleep_without_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = nap_spec(
        TIMERS,
        "{ name = \"sleep_for\", arguments = { seconds = 3600 } }",
    );
    let (db, run) = run_stepped(dir.path(), &spec);
    let cassette = dir.path().join("nap.cassette.json");
    let out = export(&db, &run, &cassette);
    assert!(out.status.success(), "{}", text(&out));
    let spec_path = dir.path().join("nap.toml");
    let (fresh, _) = replay_fresh(dir.path(), utf8(&spec_path), utf8(&cassette));
    let replayed = only_run(&fresh);
    let shape = |db: &std::path::Path, run: &str| -> Vec<(String, u64)> {
        steps(db, run)
            .iter()
            .map(|s| {
                (
                    s["edge"].as_str().unwrap_or_default().to_owned(),
                    s["at_ms"].as_u64().unwrap_or_default(),
                )
            })
            .collect()
    };
    assert_eq!(
        shape(&fresh, &replayed),
        shape(&db, &run),
        "the same edges at the same instants, the hour's sleep included"
    );
}
