//! MCP calls in flight when the run is stopped from outside: `runtape cancel` from another
//! process tells the server `notifications/cancelled`, and a SIGKILL in the middle of a
//! non-idempotent call leaves it in doubt on resume (never silently performed twice), as for
//! command tools.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use crate::support::cli::{start_json, text, utf8};
use support::mcp::{canonical_tempdir, fake_server, lines, one_server_spec, out, runtape};

/// A fake server with one tool `op` (annotated by `annotations`) whose calls are logged to
/// `calls.log` and never answered; notifications go to `notes.log`. Returns the dir, the spec
/// (the agent calls `s__op` once, then answers; `agent_extra` is added to its table) and db.
fn hanging(annotations: &str, agent_extra: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, root) = canonical_tempdir();
    let body = format!(
        r#"
tools = [{{"name": "op", "inputSchema": {{"type": "object"}}, "annotations": {annotations}}}]
def call(req):
    with open({calls:?}, "a") as f:
        f.write(json.dumps(req) + "\n")
def note(req):
    with open({notes:?}, "a") as f:
        f.write(json.dumps(req) + "\n")
"#,
        calls = utf8(&root.join("calls.log")),
        notes = utf8(&root.join("notes.log")),
    );
    let server = fake_server(&root, "op.py", None, &body);
    let replies = r#"[{ tool_calls = [{ name = "s__op" }] }, { text = "over" }]"#;
    let (spec, db) = one_server_spec(
        &root,
        "go",
        ("s", &server),
        replies,
        &["s__op"],
        agent_extra,
    );
    (dir, spec, db)
}

/// [`hanging`] started with `runtape run --json` and waited for until its call reached the
/// server: the directory, the database, the running process and the rest of its stdout (kept
/// open: it goes on writing), the run's id and the call log.
fn call_in_flight(
    annotations: &str,
    agent_extra: &str,
) -> (tempfile::TempDir, PathBuf, InFlight, String, PathBuf) {
    let (dir, spec, db) = hanging(annotations, agent_extra);
    let (child, stdout, run) = start_json(&db, &spec);
    let calls = dir.path().join("calls.log");
    wait_until_20ms("the call never reached the server", || {
        !lines(&calls).is_empty()
    });
    (dir, db, (child, stdout), run, calls)
}

/// A running `runtape run --json` and the rest of its stdout.
type InFlight = (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
);

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn cancelling_a_run_from_another_process_tells_the_server_to_cancel_the_call() {
    let (dir, db, (mut child, _stdout), run, calls) =
        call_in_flight(r#"{"readOnlyHint": True}"#, "");
    let call: serde_json::Value = serde_json::from_str(&lines(&calls)[0]).expect("json");

    let c = runtape(&db, &["cancel", &run, "--reason", "enough"]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c));
    let status = child.wait().expect("the run process ends");
    assert!(!status.success(), "a cancelled run does not exit 0");

    let notes: Vec<serde_json::Value> = lines(&dir.path().join("notes.log"))
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|n: &serde_json::Value| n["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        notes[0]["params"]["requestId"], call["id"],
        "the request in flight is the one cancelled"
    );
    let show = out(&runtape(&db, &["show", &run]));
    assert!(show.contains("cancel"), "{show}");
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_sigkill_mid_non_idempotent_call_is_in_doubt_on_resume_and_not_sent_again() {
    // Not read-only, not idempotent, no approval needed: the call is marked started first.
    let (_dir, db, (mut child, _stdout), run, calls) =
        call_in_flight(r#"{"destructiveHint": False}"#, "on_in_doubt = \"ask\"\n");
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let r = runtape(&db, &["resume", &run]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        out(&r).contains("waiting for a person"),
        "in doubt, a person decides: {}",
        out(&r)
    );
    assert_eq!(lines(&calls).len(), 1, "the call was not sent again");

    let j = runtape(&db, &["resume", &run, "--reject", "not sure it ran"]);
    assert_eq!(j.status.code(), Some(0), "{}", text(&j));
    assert!(out(&j).contains("answer: over"), "{}", out(&j));
    assert_eq!(lines(&calls).len(), 1, "rejected: never sent again");
    let log = out(&runtape(&db, &["log", &run]));
    assert!(log.contains("in doubt"), "{log}");
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

/// Waits (at most a minute, which only a broken build reaches) until `ready` holds.
fn wait_until_20ms(what: &str, ready: impl FnMut() -> bool) {
    crate::support::cli::wait_until_every(what, Duration::from_millis(20), ready);
}
