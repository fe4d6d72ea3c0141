//! Deadlines on calls that wait for a person (`[timers.deadlines]`). On the stepped clock the
//! deadline passes at once, so every policy is decided deterministically: `reject` declines the
//! call, `approve` runs it, `{ input = … }` answers it, `fail` ends the run `tool_denied` — each
//! a `timer_fired` transition `verify` accepts. On the system clock the run rests for its
//! person as before: one who answers first wins and the deadline never fires; a run nobody
//! answered is decided when it is next resumed after its deadline. A deadline on a tool that
//! waits for nobody, or approving a question, is refused with one line and no run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::cli::{runtape, text, utf8, write};

use super::{fired, ms_of, only_run, show, steps};

/// A spec whose agent `ops` calls `call` (`deploy` needs an approval, `ask` asks a question)
/// once and then answers `done`; the deadline of the tool `call` names is `deadline` (TOML).
fn spec(dir: &Path, call: &str, deadline: &str) -> PathBuf {
    write(dir, "deadline.toml", &spec_text(call, deadline))
}

/// The text of [`spec`].
pub(super) fn spec_text(call: &str, deadline: &str) -> String {
    let tool = if call == "deploy" {
        "{ name = \"deploy\", arguments = { target = \"prod\" } }"
    } else {
        "{ name = \"ask\", arguments = { question = \"which region?\" } }"
    };
    format!(
        r#"goal = "Deploy."

[timers.deadlines]
{call} = {deadline}

[[providers]]
name = "script"
kind = "scripted"
replies = [
  {{ tool_calls = [ {tool} ] }},
  {{ text = "done" }},
]

[[tools]]
name = "deploy"
description = "Deploy"
command = ["sh", "-c", "echo deployed"]
requires_approval = true

[[tools]]
name = "ask"
description = "Ask a person"
kind = "human"

[[agents]]
id = "ops"
provider = "script"
tools = ["deploy", "ask"]
"#
    )
}

/// What the model was told about its call, in its second request (`None` when the run never
/// made one).
fn result_seen(db: &Path, run: &str) -> Option<String> {
    let all = steps(db, run);
    let second = all
        .iter()
        .filter(|s| s["edge"] == "preparing.proceed.call")
        .nth(1)?;
    let request = show(db, run, second["seq"].as_u64()?)["request"].clone();
    let tool = request["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "tool")?
        .clone();
    Some(tool["content"].as_str()?.to_owned())
}

fn run_stepped(dir: &Path, call: &str, deadline: &str) -> (PathBuf, String, Option<i32>) {
    let path = spec(dir, call, deadline);
    let db = dir.join(format!("{call}-{}.db", deadline.len()));
    let out = runtape(&db, &["run", "--stepped-clock", utf8(&path)]);
    let run = only_run(&db);
    let verified = runtape(&db, &["verify", &run]);
    assert!(verified.status.success(), "{}", text(&verified));
    (db, run, out.status.code())
}

#[test]
fn every_policy_decides_at_the_deadline_on_the_stepped_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let day = 86_400_000;
    let cases: [(&str, &str, &str, Option<&str>, i32); 5] = [
        (
            "deploy",
            "\"reject\"",
            "awaiting_input.deadline.done",
            Some("a person declined this call: nobody answered before the deadline"),
            0,
        ),
        (
            "deploy",
            "\"approve\"",
            "awaiting_input.deadline.run",
            Some("deployed"),
            0,
        ),
        (
            "deploy",
            "{ input = \"wait for Monday\" }",
            "awaiting_input.deadline.done",
            Some("wait for Monday"),
            0,
        ),
        (
            "deploy",
            "\"fail\"",
            "awaiting_input.deadline.fail",
            None,
            1,
        ),
        (
            "ask",
            "{ input = \"eu-west\" }",
            "awaiting_input.deadline.done",
            Some("eu-west"),
            0,
        ),
    ];
    for (call, then, edge, seen, code) in cases {
        let deadline = format!("{{ after_ms = {day}, then = {then} }}");
        let (db, run, exit) = run_stepped(dir.path(), call, &deadline);
        assert_eq!(exit, Some(code), "{call} {then}");
        let fired = fired(&db, &run);
        assert_eq!(fired.len(), 1, "{call} {then}: fired once");
        assert_eq!(fired[0]["edge"], edge, "{call} {then}");
        let asked_at = steps(&db, &run)
            .iter()
            .find(|s| s["to"] == "awaiting_input")
            .and_then(|s| s["at_ms"].as_u64())
            .expect("the call waited for a person");
        assert_eq!(
            fired[0]["at_ms"].as_u64(),
            Some(asked_at + day),
            "{call} {then}: decided a day after it asked, not before"
        );
        let result = result_seen(&db, &run);
        match seen {
            Some(text) => assert!(
                result.as_deref().is_some_and(|r| r.starts_with(text)),
                "{call} {then}: {result:?}"
            ),
            None => {
                assert_eq!(result, None, "{call} {then}: the run ended");
                let last = steps(&db, &run).pop().expect("steps");
                assert_eq!(last["to"], "done");
            }
        }
    }
}

/// `runtape run` on the system clock: the run rests waiting for its person (exit 0).
pub(super) fn rests_for_a_person(dir: &Path, deadline_ms: u64) -> (PathBuf, String) {
    let path = spec(
        dir,
        "deploy",
        &format!("{{ after_ms = {deadline_ms}, then = \"reject\" }}"),
    );
    let db = dir.join("rest.db");
    let out = runtape(&db, &["run", utf8(&path)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = only_run(&db);
    let state = show(&db, &run, 3)["state"].clone();
    assert_eq!(state["state"], "awaiting_input", "{state}");
    (db, run)
}

#[test]
fn a_person_who_answers_before_the_deadline_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run) = rests_for_a_person(dir.path(), 3_600_000);
    let out = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(fired(&db, &run).is_empty(), "the deadline never fires");
    assert_eq!(result_seen(&db, &run).as_deref(), Some("deployed"));
    let verified = runtape(&db, &["verify", &run]);
    assert!(verified.status.success(), "{}", text(&verified));
}

#[test]
fn a_deadline_that_passed_while_the_run_rested_is_decided_when_it_is_resumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run) = rests_for_a_person(dir.path(), 1_000);
    let due = show(&db, &run, 3)["effects"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "start_timer").cloned())
        .and_then(|e| e["due"].as_str().and_then(|d| d.parse::<u64>().ok()))
        .expect("the deadline's due instant is committed with the request");
    let now = runtape::exec::wall_ms();
    std::thread::sleep(Duration::from_millis(ms_of(due).saturating_sub(now) + 50));
    let out = runtape(&db, &["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1);
    assert!(
        fired[0]["at_ms"]
            .as_u64()
            .is_some_and(|at| at >= ms_of(due))
    );
    assert!(
        result_seen(&db, &run).is_some_and(|r| r.contains("nobody answered before the deadline"))
    );
}

#[test]
fn a_deadline_on_a_tool_that_waits_for_nobody_or_approving_a_question_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (call, then, says) in [
        ("deploy", "\"sometimes\"", "timers.deadlines"),
        ("ask", "\"approve\"", "cannot be approved"),
    ] {
        refused_at_load(dir.path(), call, then, says);
    }
}

/// Checks that a run of the spec whose `call` has a 1 s deadline decided by `then` (TOML) is
/// refused at load: exit 2, one line saying `says`, no database written.
pub(super) fn refused_at_load(dir: &Path, call: &str, then: &str, says: &str) {
    let path = spec(dir, call, &format!("{{ after_ms = 1000, then = {then} }}"));
    let db = dir.join("refused.db");
    let out = runtape(&db, &["run", utf8(&path)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains(says), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    assert!(!db.exists(), "nothing written");
}
