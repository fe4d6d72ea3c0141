//! Durable time: the `sleep_for`/`sleep_until` tools of a spec with `[timers]` — the due
//! instant committed with the call, the firing committed once, on the stepped clock, on
//! virtual time, across SIGKILL and resume, and through a cassette replay.

mod deadline;
mod deadline_machine;
mod sleep_crash;
mod sleep_machine;
mod sleep_tool;
mod sleep_virtual_time;

use std::path::Path;

use serde_json::Value;

use crate::support::cli::{json_lines, runtape, scripted, text};

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
