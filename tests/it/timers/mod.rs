//! Durable time: the `sleep_for`/`sleep_until` tools of a spec with `[timers]` — the due
//! instant committed with the call, the firing committed once, on the stepped clock, on
//! virtual time, across SIGKILL and resume, and through a cassette replay.

mod deadline;
mod deadline_escalate;
mod deadline_machine;
mod pg_deadline_claims;
mod pg_due_claim_refuses_tampered;
mod sleep_crash;
mod sleep_machine;
mod sleep_tool;
mod sleep_virtual_time;
mod wait_spans;
mod wake_now;
mod wake_takes_no_stale_timer;
mod worker_chaos;
mod worker_refuses_tampered;
mod worker_sigterm;
mod worker_wakes;

use std::path::Path;

use serde_json::Value;

use crate::support::cli::{
    json_lines, read_only, runtape, scripted, start_json, text, wait_for_step, write,
};

/// A spec whose one agent, `napper`, makes `call` (a TOML inline table: one tool call) and
/// then answers `awake`; `[timers]` is `timers` (empty: none).
pub(super) fn nap_spec(timers: &str, call: &str) -> String {
    let replies = format!("  {{ tool_calls = [ {call} ] }},\n  {{ text = \"awake\" }},\n");
    format!(
        "goal = \"Check back later.\"\n{timers}\n{}\n[[agents]]\nid = \"napper\"\nprovider = \"script\"\n",
        scripted(&replies)
    )
}

/// The one run in `db`.
pub(super) fn only_run(db: &Path) -> String {
    let out = runtape(db, &["ls", "--json"]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{}", text(&out));
    lines[0]["id"].as_str().expect("id").to_owned()
}

/// `runtape log --json RUN`'s steps.
pub(super) fn steps(db: &Path, run: &str) -> Vec<Value> {
    let out = runtape(db, &["log", "--json", run]);
    assert!(out.status.success(), "{}", text(&out));
    json_lines(&out)
        .into_iter()
        .filter(|l| l["type"] == "step")
        .collect()
}

/// `runtape show --json RUN@SEQ`.
pub(super) fn show(db: &Path, run: &str, seq: u64) -> Value {
    let out = runtape(db, &["show", "--json", &format!("{run}@{seq}")]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The due instant (HLC, as stored) of the one `StartTimer` effect of `run`, with its seq.
pub(super) fn the_timer(db: &Path, run: &str) -> (u64, u64) {
    let started: Vec<Value> = steps(db, run)
        .into_iter()
        .filter(|s| s["edge"] == "generating.replied.tools")
        .collect();
    assert_eq!(started.len(), 1, "one call started a timer");
    let seq = started[0]["seq"].as_u64().expect("seq");
    let effects = show(db, run, seq)["effects"].clone();
    let due = effects[0]["due"]
        .as_str()
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("a start_timer effect with its due instant: {effects}"));
    assert_eq!(effects[0]["type"], "start_timer");
    (seq, due)
}

/// Milliseconds of an HLC value as stored.
pub(super) fn ms_of(hlc: u64) -> u64 {
    hlc >> 16
}

/// Sends `body` (a `TimerFired`) to `h` and checks the machine refused it as early, changing
/// nothing.
pub(super) fn refused_early(
    h: &mut crate::support::machine::Harness,
    body: runtape::machine::EventBody,
) {
    let before = h.state.clone();
    let refused = h.try_send(body);
    assert!(
        matches!(
            refused,
            Err(runtape::machine::MachineError::TimerEarly { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(h.state, before);
}

/// `[timers]` letting a run sleep up to two hours.
pub(super) const TIMERS: &str = "[timers]\nmax_sleep_ms = 7200000\n";

/// The state kind of the one run in `db`.
pub(super) fn state_kind(db: &std::path::Path) -> String {
    read_only(db)
        .query_row("SELECT state_kind FROM runs", [], |r| r.get(0))
        .expect("reads")
}

/// The `timer_fired` steps of `run`.
pub(super) fn fired(db: &std::path::Path, run: &str) -> Vec<Value> {
    steps(db, run)
        .into_iter()
        .filter(|s| s["event"] == "timer_fired")
        .collect()
}

/// Asserts that `run`'s timer fired exactly once, not before its due instant `due` (HLC).
pub(super) fn fired_once_not_before(db: &std::path::Path, run: &str, due: u64) {
    let fired = fired(db, run);
    assert_eq!(fired.len(), 1, "fired once: {fired:?}");
    assert!(
        fired[0]["at_ms"]
            .as_u64()
            .is_some_and(|at| at >= ms_of(due)),
        "not before its due instant: {} < {}",
        fired[0],
        ms_of(due)
    );
}

/// Asserts that `runtape verify run` passes.
pub(super) fn verifies(db: &std::path::Path, run: &str) {
    let out = crate::support::cli::runtape(db, &["verify", run]);
    assert!(out.status.success(), "{}", crate::support::cli::text(&out));
}

/// Starts the nap run (`seconds` of sleep) on the system clock and SIGKILLs it as soon as the
/// transition taking the sleep call (step 3) is committed: the run and its timer's due
/// instant (HLC).
pub(super) fn killed_asleep(
    dir: &std::path::Path,
    seconds: u64,
) -> (std::path::PathBuf, String, u64) {
    let call = format!("{{ name = \"sleep_for\", arguments = {{ seconds = {seconds} }} }}");
    killed_asleep_in(dir, &nap_spec(TIMERS, &call))
}

/// [`killed_asleep`] for a spec of its own (`spec`, whose first reply calls a sleep tool).
pub(super) fn killed_asleep_in(
    dir: &std::path::Path,
    spec: &str,
) -> (std::path::PathBuf, String, u64) {
    let spec = write(dir, "nap.toml", spec);
    let db = dir.join("nap.db");
    let (mut child, mut lines, run) = start_json(&db, &spec);
    wait_for_step(&mut lines, 3);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(state_kind(&db), "calling_tools", "killed while asleep");
    assert!(fired(&db, &run).is_empty(), "killed before its due instant");
    let (_, due) = the_timer(&db, &run);
    (db, run, due)
}

/// The content of the tool message answering the run's first call, as the model's second
/// request (step `seq`) carried it.
pub(super) fn tool_result_seen(db: &std::path::Path, run: &str, seq: u64) -> String {
    let request = show(db, run, seq)["request"].clone();
    let messages = request["messages"].as_array().expect("messages").clone();
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("a tool message in {request}"));
    tool["content"].as_str().expect("content").to_owned()
}
