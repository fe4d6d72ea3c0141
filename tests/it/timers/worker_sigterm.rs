//! `runtape worker --db FILE` leaves no run it could drive stranded. SIGTERM while a run it
//! woke is in the middle of a tool call: the call finishes within the grace period and its
//! result is committed, the worker hands the run back (`running`, no lease) and exits 0, and
//! the next worker finishes the run without performing the call again. A `runtape run`
//! SIGKILLed mid-run (no timer involved) is finished by a worker too. Real processes, real
//! signals, a real SQLite file.

use crate::support::cli::{
    runtape, scripted, start_json, text, wait_for_step, wait_until_every, write,
};
use crate::support::pg::Reaper;
use crate::support::protocol::{charge_lines, charges};
use crate::support::workers::{events, stop};

use super::{TIMERS, fired, killed_asleep_in, steps, verifies};

/// A spec whose agent sleeps a second, then calls `charge` (non-idempotent: it appends its
/// idempotency key to `dir/charges.log`, then takes a second), then answers "done".
fn sleep_then_charge(dir: &std::path::Path) -> String {
    let log = dir.join("charges.log");
    let replies = "  { tool_calls = [ { name = \"sleep_for\", arguments = { seconds = 1 } } ] },\n  \
                   { tool_calls = [ { name = \"charge\", arguments = { n = 1 } } ] },\n  \
                   { text = \"done\" },\n";
    format!(
        "goal = \"Charge after a nap.\"\n{TIMERS}\n{}\n\
         [[tools]]\nname = \"charge\"\ndescription = \"charge the card\"\n\
         command = [\"sh\", \"-c\", \"echo \\\"$RUNTAPE_IDEMPOTENCY_KEY\\\" >> {}; sleep 1\"]\n\
         [[agents]]\nid = \"payer\"\nprovider = \"script\"\ntools = [\"charge\", \"sleep_for\"]\n",
        scripted(replies),
        log.display()
    )
}

#[test]
fn sigterm_mid_call_hands_the_woken_run_back_and_the_next_worker_finishes_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, _) = killed_asleep_in(dir.path(), &sleep_then_charge(dir.path()));
    let dir = dir.path();

    let mut first = Reaper(vec![super::worker_wakes::started(&db, dir, "a", &[])]);
    wait_until_every(
        "the woken run's charge is in flight",
        std::time::Duration::from_millis(20),
        || charge_lines(dir) >= 1,
    );
    stop(&mut first);
    assert_eq!(events(dir, "a", "run.woken").len(), 1);
    let handed = events(dir, "a", "run.handed_back");
    assert_eq!(handed.len(), 1, "{handed:?}");
    assert_eq!(handed[0]["run"], run.as_str());
    let edges: Vec<String> = steps(&db, &run)
        .iter()
        .map(|s| s["edge"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        edges.iter().any(|e| e == "calling_tools.returned.done"),
        "the call's result was committed before the worker left: {edges:?}"
    );
    let listed = runtape(&db, &["ls", "--json"]);
    let row = &crate::support::cli::json_lines(&listed)[0];
    assert_eq!(
        row["status"],
        "queued",
        "handed back, no lease: {}",
        text(&listed)
    );

    let mut second = Reaper(vec![super::worker_wakes::started(&db, dir, "b", &[])]);
    wait_until_every(
        "the next worker finished the run",
        std::time::Duration::from_millis(50),
        || steps(&db, &run).last().is_some_and(|s| s["to"] == "done"),
    );
    stop(&mut second);
    let performed = charges(dir);
    assert_eq!(performed.len(), 1, "one charge: {performed:?}");
    assert!(
        performed.values().all(|n| *n == 1),
        "charged once: {performed:?}"
    );
    assert_eq!(fired(&db, &run).len(), 1, "the timer fired once");
    verifies(&db, &run);
}

#[test]
fn a_worker_finishes_a_run_whose_process_was_killed_mid_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replies = "  { tool_calls = [ { name = \"charge\", arguments = { n = 1 } } ] },\n  \
                   { text = \"done\" },\n";
    let spec = format!(
        "goal = \"Charge once.\"\n{}latency_ms = 1500\n\
         [[tools]]\nname = \"charge\"\ndescription = \"charge the card\"\n\
         command = [\"sh\", \"-c\", \"echo \\\"$RUNTAPE_IDEMPOTENCY_KEY\\\" >> {}\"]\n\
         [[agents]]\nid = \"payer\"\nprovider = \"script\"\ntools = [\"charge\"]\n",
        scripted(replies),
        dir.path().join("charges.log").display()
    );
    let spec = write(dir.path(), "charge.toml", &spec);
    let db = dir.path().join("charge.db");
    let (mut child, mut lines, run) = start_json(&db, &spec);
    // Step 2 calls the model, which takes 1.5 s to answer: killed waiting for it.
    wait_for_step(&mut lines, 2);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(charges(dir.path()).is_empty(), "killed before the charge");

    let mut worker = Reaper(vec![super::worker_wakes::started(
        &db,
        dir.path(),
        "w",
        &[],
    )]);
    wait_until_every(
        "the worker finished the killed run",
        std::time::Duration::from_millis(50),
        || steps(&db, &run).last().is_some_and(|s| s["to"] == "done"),
    );
    stop(&mut worker);
    assert_eq!(events(dir.path(), "w", "run.woken").len(), 1);
    assert_eq!(
        charges(dir.path()).values().sum::<usize>(),
        1,
        "charged once"
    );
    verifies(&db, &run);
}
