//! A deadline that escalates (`then = { escalate = { to, after_ms, then } }`): when nobody
//! answered in time, the call waits for the named person under a new deadline instead of
//! being decided — `show`, `ls` and the resume hint say who — and when that one passes too,
//! the chain's final policy decides it. On the stepped clock both pass at once, each a
//! `timer_fired` step `verify` accepts, and a fork from before the first deadline and a
//! replay of the run's cassette escalate the same way; `serve`'s JSON views name who the call
//! waits for; a worker started after the run rested fires both; and chains that are too
//! long, hand the call twice to one name, name no one or approve a question are refused at load.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::{first_id, ok, runtape, text, utf8, wait_until_every, write};

use super::deadline::spec_text;
use super::worker_wakes::started;
use super::{fired, only_run, show, steps, verifies};

/// An hour's deadline that escalates to `oncall-lead` for half an hour, then `last` decides.
fn chain(last: &str) -> String {
    format!(
        "{{ after_ms = 3600000, then = {{ escalate = {{ to = \"oncall-lead\", after_ms = 1800000, then = {last} }} }} }}"
    )
}

fn spec(dir: &Path, call: &str, deadline: &str) -> PathBuf {
    write(dir, "escalate.toml", &spec_text(call, deadline))
}

/// Runs the `deploy` spec under [`chain`]`(last)` on the system clock, where it rests for its
/// person, an hour from its deadline: the database and the run.
fn rested(dir: &Path, last: &str) -> (PathBuf, String) {
    let path = spec(dir, "deploy", &chain(last));
    let db = dir.join("rested.db");
    let out = runtape(&db, &["run", utf8(&path)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = only_run(&db);
    (db, run)
}

/// The first slot of the batch in `state` (a `show --json` state).
fn slot(state: &Value) -> Value {
    state["batch"]["slots"][0].clone()
}

/// The seq of the step whose transition first made the run wait for a person.
fn asked_at(db: &Path, run: &str) -> (u64, u64) {
    let asked = steps(db, run)
        .into_iter()
        .find(|s| s["to"] == "awaiting_input")
        .expect("the call waited for a person");
    (
        asked["seq"].as_u64().expect("seq"),
        asked["at_ms"].as_u64().expect("at"),
    )
}

/// Checks the two firings of `run` (asked at `asked_ms`): the first, an hour after the
/// request, re-addressed the call to `oncall-lead` with a new deadline half an hour on; the
/// second, at that deadline, took `edge`. Returns the seq of the escalation.
fn escalated_then_decided(db: &Path, run: &str, asked_ms: u64, edge: &str) -> u64 {
    let fired = fired(db, run);
    assert_eq!(fired.len(), 2, "two deadlines passed: {fired:?}");
    assert_eq!(fired[0]["edge"], "awaiting_input.deadline.escalate");
    assert_eq!(fired[0]["to"], "awaiting_input", "still waits for a person");
    assert_eq!(fired[0]["at_ms"].as_u64(), Some(asked_ms + 3_600_000));
    assert_eq!(fired[1]["edge"], edge);
    assert_eq!(
        fired[1]["at_ms"].as_u64(),
        Some(asked_ms + 3_600_000 + 1_800_000),
        "the escalation's own deadline, half an hour after it"
    );
    let seq = fired[0]["seq"].as_u64().expect("seq");
    let step = show(db, run, seq);
    let waiting = slot(&step["state"]);
    assert_eq!(
        waiting["escalated"],
        serde_json::json!({"to": "oncall-lead", "times": 1}),
        "{waiting}"
    );
    let timers: Vec<&Value> = step["effects"]
        .as_array()
        .expect("effects")
        .iter()
        .filter(|e| e["type"] == "start_timer")
        .collect();
    assert_eq!(
        timers.len(),
        1,
        "the new deadline is armed: {}",
        step["effects"]
    );
    let due = timers[0]["due"].as_str().expect("due");
    assert_eq!(
        super::ms_of(due.parse().expect("HLC")),
        asked_ms + 3_600_000 + 1_800_000
    );
    assert_eq!(waiting["deadline"]["due"].as_str(), Some(due), "{waiting}");
    seq
}

#[test]
fn an_escalated_call_waits_for_its_new_approver_then_the_final_policy_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = spec(dir.path(), "deploy", &chain("\"reject\""));
    let db = dir.path().join("e.db");
    let out = runtape(&db, &["run", "--stepped-clock", utf8(&path)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = only_run(&db);
    let (_, asked_ms) = asked_at(&db, &run);
    escalated_then_decided(&db, &run, asked_ms, "awaiting_input.deadline.done");
    verifies(&db, &run);
    let request = steps(&db, &run)
        .into_iter()
        .filter(|s| s["edge"] == "preparing.proceed.call")
        .nth(1)
        .and_then(|s| s["seq"].as_u64())
        .expect("a second model request");
    let told = super::tool_result_seen(&db, &run, request);
    assert!(
        told.starts_with(
            "a person declined this call: nobody answered (escalated to oncall-lead) before the deadline"
        ),
        "{told}"
    );

    // A fork from the step that asked escalates, then rejects, exactly as its parent did.
    let (asked, _) = asked_at(&db, &run);
    let forked = ok(&db, &["fork", &format!("{run}@{asked}"), "--stepped-clock"]);
    let fork = first_id(&forked);
    let fork_fired = fired(&db, &fork);
    let edges = |f: &[Value]| f.iter().map(|s| s["edge"].clone()).collect::<Vec<_>>();
    assert_eq!(edges(&fork_fired), edges(&fired(&db, &run)), "{forked}");
    let (_, fork_asked_ms) = asked_at(&db, &fork);
    escalated_then_decided(&db, &fork, fork_asked_ms, "awaiting_input.deadline.done");
    verifies(&db, &fork);

    // A replay of the run's cassette escalates, then rejects, at the same instants.
    let cassette = dir.path().join("escalate.cassette.json");
    let exported = crate::support::cli::export(&db, &run, &cassette);
    assert!(exported.status.success(), "{}", text(&exported));
    let (fresh, _) = crate::support::cli::replay_fresh(dir.path(), utf8(&path), utf8(&cassette));
    let replayed = only_run(&fresh);
    let (_, replay_asked_ms) = asked_at(&fresh, &replayed);
    escalated_then_decided(
        &fresh,
        &replayed,
        replay_asked_ms,
        "awaiting_input.deadline.done",
    );
    verifies(&fresh, &replayed);
}

#[test]
fn an_escalated_call_shows_who_it_waits_for_and_is_answered_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run) = rested(dir.path(), "\"fail\"");
    // A person brings the deadline forward: the call is escalated, not decided.
    let woke = runtape(&db, &["wake", &run]);
    assert_eq!(woke.status.code(), Some(0), "{}", text(&woke));
    assert!(
        text(&woke).contains("answer deploy from oncall-lead (escalated 1×) with: runtape resume"),
        "{}",
        text(&woke)
    );
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["edge"], "awaiting_input.deadline.escalate");

    let shown = ok(&db, &["show", &run]);
    assert!(
        shown.contains("waiting for approval from oncall-lead (escalated 1×)"),
        "{shown}"
    );
    let listed = ok(&db, &["ls"]);
    assert!(listed.contains(", waits for oncall-lead)"), "{listed}");
    let listed = ok(&db, &["ls", "--json"]);
    let row: Value = serde_json::from_str(listed.lines().next().expect("a row")).expect("JSON");
    assert_eq!(
        row["waits_for"],
        serde_json::json!(["oncall-lead"]),
        "{row}"
    );
    let latest = show(&db, &run, fired[0]["seq"].as_u64().expect("seq"));
    assert_eq!(slot(&latest["state"])["escalated"]["to"], "oncall-lead");

    // The server's JSON views say the same: who the call waits for, and what its current
    // deadline (the escalation's own) decides.
    {
        let server = crate::support::serve::serve(dir.path(), &db);
        let (status, view) = server.get(&format!("/api/runs/{run}"));
        assert_eq!(status, 200, "{view}");
        let waiting = &view["waiting"][0];
        assert_eq!(
            waiting["escalated"],
            serde_json::json!({"to": "oncall-lead", "times": 1}),
            "{view}"
        );
        assert_eq!(waiting["deadline"]["then"], "fail", "{view}");
        let (_, list) = server.get("/api/runs");
        assert_eq!(
            list["runs"][0]["waits_for"],
            serde_json::json!(["oncall-lead"]),
            "{list}"
        );
    }

    // Answered as before: approving runs the call, and the escalation's deadline never fires.
    let approved = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved));
    assert_eq!(super::fired(&db, &run).len(), 1, "no second firing");
    let last = steps(&db, &run).pop().expect("steps");
    assert_eq!(last["to"], "done");
    verifies(&db, &run);
}

#[test]
fn a_worker_started_after_the_run_rested_fires_the_escalation_and_its_final_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run) = rested(dir.path(), "\"approve\"");
    assert!(fired(&db, &run).is_empty());
    // The process that asked is gone; a worker on the stepped clock finds both deadlines due.
    let mut workers =
        crate::support::pg::Reaper(vec![started(&db, dir.path(), "w", &["--stepped-clock"])]);
    wait_until_every(
        "the worker drove the run to its end",
        std::time::Duration::from_millis(50),
        || steps(&db, &run).last().is_some_and(|s| s["to"] == "done"),
    );
    crate::support::workers::stop(&mut workers);
    let (_, asked_ms) = asked_at(&db, &run);
    escalated_then_decided(&db, &run, asked_ms, "awaiting_input.deadline.run");
    let last = steps(&db, &run).pop().expect("steps");
    assert_eq!(last["to"], "done");
    assert_eq!(
        show(&db, &run, last["seq"].as_u64().expect("seq"))["state"]["outcome"]["answer"],
        "done",
        "approved at the last deadline, the call ran and the run completed"
    );
    verifies(&db, &run);
}

#[test]
fn chains_too_long_repeating_a_name_naming_no_one_or_approving_a_question_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = |to: &str, then: &str| {
        format!("{{ escalate = {{ to = \"{to}\", after_ms = 1000, then = {then} }} }}")
    };
    let six = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .rev()
        .fold("\"reject\"".to_owned(), |then, to| link(to, &then));
    let cases = [
        (
            "deploy",
            six,
            "timers.deadlines.deploy.then.escalate.then.escalate.then.escalate.then.escalate.then.escalate.then.escalate: a call may be escalated at most 5 times",
        ),
        (
            "deploy",
            link("lead", &link("lead", "\"reject\"")),
            "the call is escalated to `lead` twice",
        ),
        ("deploy", link("", "\"reject\""), "`to` must name who"),
        (
            "deploy",
            "{ escalate = { to = \"lead\", after_ms = 0, then = \"reject\" } }".to_owned(),
            "after_ms must be between 1",
        ),
        (
            "ask",
            link("lead", "\"approve\""),
            "asks a question, which cannot be approved",
        ),
    ];
    for (call, then, says) in cases {
        super::deadline::refused_at_load(dir.path(), call, &then, says);
    }
}
