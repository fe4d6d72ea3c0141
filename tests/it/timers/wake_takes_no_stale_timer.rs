//! `runtape wake` of a run asleep for an hour does not start that hour's wait again: the
//! take-up fires the sleep now, so the process has nothing of the old timer left in flight.
//! Seen where it matters: after the wake the model asks a person a question, and the run
//! rests for that person — the process exits at once, where a driver still holding the
//! hour-long wait would sit on it for the hour before it could rest.

use std::process::Stdio;
use std::time::Duration;

use crate::support::cli::{on, scripted, text, wait_until_within};
use crate::support::pg::Reaper;

use super::{TIMERS, fired, killed_asleep_in, state_kind, steps};

/// A spec whose agent sleeps an hour, then asks a person a question, then answers `done`.
fn sleep_then_ask() -> String {
    let replies = concat!(
        "  { tool_calls = [ { name = \"sleep_for\", arguments = { seconds = 3600 } } ] },\n",
        "  { tool_calls = [ { name = \"ask\", arguments = { question = \"which region?\" } } ] },\n",
        "  { text = \"done\" },\n",
    );
    format!(
        "goal = \"Check back later.\"\n{TIMERS}\n{}\n[[tools]]\nname = \"ask\"\ndescription = \"Ask a person\"\nkind = \"human\"\n\n[[agents]]\nid = \"napper\"\nprovider = \"script\"\ntools = [\"sleep_for\", \"ask\"]\n",
        scripted(replies)
    )
}

#[test]
fn a_woken_run_that_then_waits_for_a_person_rests_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, _) = killed_asleep_in(dir.path(), &sleep_then_ask());

    let child = on(&db)
        .args(["wake", &run])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runtape wake starts");
    // Killed (by the reaper) if it is still running when the wait below gives up: a wake
    // left waiting on the hour-long timer fails here rather than hang the suite.
    let mut wake = Reaper(vec![child]);
    let mut status = None;
    wait_until_within(
        "runtape wake exits (a driver still waiting on the hour's sleep does not)",
        Duration::from_secs(120),
        Duration::from_millis(20),
        || {
            status = wake.0[0].try_wait().expect("polls the child");
            status.is_some()
        },
    );
    let output = wake.0.remove(0).wait_with_output().expect("reaped");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", text(&output));

    assert_eq!(fired(&db, &run).len(), 1, "the sleep fired once, early");
    assert_eq!(state_kind(&db), "awaiting_input", "rests for its person");
    let last = steps(&db, &run).last().cloned().expect("steps");
    assert_eq!(last["to"], "awaiting_input", "{last}");
}
