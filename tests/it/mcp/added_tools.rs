//! A tool an MCP server adds after a run started is offered to a `SERVER__*` grant (machine
//! revision 4): mid-run after `notifications/tools/list_changed`, and after a resume that
//! finds the server grew; `show` prints it, `verify` re-folds it without the server, a SIGKILL
//! in the middle of a call of it leaves it in doubt (never sent twice unasked), and a cassette
//! of the whole run replays the list change at the same boundary with no server.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::cli::{exported, start_json, text, utf8};
use support::mcp::{
    STAMP, STATUS, canonical_tempdir, edited_replay_refused, err, growing_server, lines, log,
    ops_spec, out, replay_without_server, run_id, runtape, seqs_of, shown,
};

const DEPLOY: &str = r#"{"name": "deploy", "inputSchema": {"type": "object"}}"#;

/// A fake `ops` server ([`growing_server`]) listing `tools` first. The spec grants `ops__*` and scripts
/// `replies`; `agent_extra` goes in the agent's table. Returns dir, spec, db, calls log.
fn ops(
    tools: &[&str],
    replies: &str,
    agent_extra: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let (dir, root) = canonical_tempdir();
    let (server, calls) = growing_server(&root, tools);
    let (spec, db) = ops_spec(&root, &server, replies, agent_extra);
    (dir, spec, db, calls)
}

/// `show RUN@SEQ --json`: the request's offered tools (name and schema).
fn offered(db: &Path, run: &str, seq: u64) -> Vec<(String, serde_json::Value)> {
    let view = shown(db, run, seq);
    view["request"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("name").to_owned(),
                t["schema"].clone(),
            )
        })
        .collect()
}

fn names(tools: &[(String, serde_json::Value)]) -> Vec<&str> {
    tools.iter().map(|(n, _)| n.as_str()).collect()
}

fn verify_ok(db: &Path, run: &str) {
    let v = runtape(db, &["verify", run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

/// [`ops`] with `status` only, its model calling `ops__status` with `grow = true` (the server
/// then adds `ops__stamp`), then `ops__stamp` with `text`, then answering `answer`.
fn stamping_after_growth(
    text: &str,
    answer: &str,
    agent_extra: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let replies = format!(
        r#"[{{ tool_calls = [{{ name = "ops__status", arguments = {{ grow = true }} }}] }}, {{ tool_calls = [{{ name = "ops__stamp", arguments = {{ text = "{text}" }} }}] }}, {{ text = "{answer}" }}]"#
    );
    ops(&[STATUS], &replies, agent_extra)
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_tool_added_mid_run_is_offered_called_shown_verified_and_replayed_without_the_server() {
    let (dir, spec, db, calls) = stamping_after_growth("v1", "stamped", "");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("answer: stamped"), "{}", out(&o));
    let run = run_id(&o);
    assert_eq!(
        lines(&calls),
        [r#"status {"grow": true}"#, r#"stamp {"text": "v1"}"#],
        "the added tool was called through the server"
    );

    let rows = log(&db, &run);
    let listed = seqs_of(&rows, "preparing.tools_listed");
    let requests = seqs_of(&rows, "preparing.proceed.call");
    assert_eq!(listed.len(), 2, "{rows:?}");
    assert!(
        requests[0] < listed[1] && listed[1] < requests[1],
        "{rows:?}"
    );
    assert_eq!(names(&offered(&db, &run, requests[0])), ["ops__status"]);
    let second = offered(&db, &run, requests[1]);
    assert_eq!(names(&second), ["ops__status", "ops__stamp"]);
    assert_eq!(
        second[1].1["required"],
        serde_json::json!(["text"]),
        "shown with the schema the server gave"
    );
    let text = out(&runtape(&db, &["log", &run]));
    assert!(
        text.contains("added since the run started: ops__stamp"),
        "{text}"
    );
    let show = out(&runtape(&db, &["show", &format!("{run}@{}", requests[1])]));
    assert!(show.contains("ops__stamp"), "{show}");
    verify_ok(&db, &run);

    // The cassette carries both lists; the replay serves the change at the same boundary.
    let tape = dir.path().join("tape.json");
    let cassette = exported(&db, &run, &tape);
    assert_eq!(
        cassette["catalogs"]["ops"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(cassette["catalogChanges"][0]["server"], "ops");
    assert_eq!(cassette["catalogChanges"][0]["atEntry"], 1);
    assert_eq!(
        cassette["catalogChanges"][0]["catalog"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    let (r, fresh, marker) =
        replay_without_server(&dir.path().join("ops.py"), &spec, &tape, "stamped");
    assert_eq!(
        lines(&calls).len(),
        2,
        "only the recording called the server"
    );
    let replayed = run_id(&r);
    let replay_rows = log(&fresh, &replayed);
    assert_eq!(
        seqs_of(&replay_rows, "preparing.tools_listed"),
        listed,
        "the list change is replayed at the same step"
    );
    assert_eq!(offered(&fresh, &replayed, requests[1]), second);
    verify_ok(&fresh, &replayed);

    // The later lists are covered by the envelope hash: an edited one is refused.
    edited_replay_refused(&spec, &tape, "stamps a text", "stamps anything", &marker);
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_resume_after_the_server_gained_a_tool_offers_it() {
    let (dir, spec, db, calls) = ops(
        &[STATUS, DEPLOY],
        r#"[{ tool_calls = [{ name = "ops__deploy" }] }, { tool_calls = [{ name = "ops__stamp", arguments = { text = "after" } }] }, { text = "done" }]"#,
        "",
    );
    // `deploy` (no annotations) needs approval: the run rests there.
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("waiting for a person"), "{}", out(&o));
    let run = run_id(&o);

    // Between the two processes the server gains `stamp`.
    std::fs::write(
        dir.path().join("tools.json"),
        format!("[{STATUS}, {DEPLOY}, {STAMP}]"),
    )
    .expect("tools");
    let r = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(out(&r).contains("answer: done"), "{}", out(&r));
    assert_eq!(
        lines(&calls),
        ["deploy {}", r#"stamp {"text": "after"}"#],
        "the tool the server gained was offered and called"
    );
    let rows = log(&db, &run);
    assert_eq!(
        seqs_of(&rows, "preparing.tools_listed").len(),
        2,
        "{rows:?}"
    );
    let last = *seqs_of(&rows, "preparing.proceed.call")
        .last()
        .expect("a request");
    assert_eq!(
        names(&offered(&db, &run, last)),
        ["ops__status", "ops__deploy", "ops__stamp"]
    );
    verify_ok(&db, &run);
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_sigkill_mid_call_of_an_added_tool_is_in_doubt_and_sent_again_only_when_approved() {
    let (dir, spec, db, calls) = stamping_after_growth("once", "over", "on_in_doubt = \"ask\"\n");
    std::fs::write(dir.path().join("hang"), "").expect("hang");
    let (mut child, _stdout, run) = start_json(&db, &spec);
    wait_until_20ms("the added tool's call never reached the server", || {
        lines(&calls).iter().any(|l| l.starts_with("stamp"))
    });
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    // Resumed by a process whose setup never saw `stamp`: the recorded catalog says it is not
    // idempotent, so the call is in doubt and a person decides.
    let r = runtape(&db, &["resume", &run]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(out(&r).contains("waiting for a person"), "{}", out(&r));
    assert_eq!(lines(&calls).len(), 2, "not sent again unasked");

    // Approved: performed again (with the same key) through the recorded definition.
    std::fs::remove_file(dir.path().join("hang")).expect("unhang");
    let a = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(a.status.code(), Some(0), "{}", text(&a));
    assert!(out(&a).contains("answer: over"), "{}", out(&a));
    assert_eq!(
        lines(&calls),
        [
            r#"status {"grow": true}"#,
            r#"stamp {"text": "once"}"#,
            r#"stamp {"text": "once"}"#
        ]
    );
    let text = out(&runtape(&db, &["log", &run]));
    assert!(text.contains("in doubt"), "{text}");
    verify_ok(&db, &run);
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_spec_tool_named_with_a_servers_prefix_is_refused_so_an_added_tool_cannot_shadow_it() {
    let (_dir, spec, db, calls) = ops(&[STATUS], r#"[{ text = "x" }]"#, "");
    let text = std::fs::read_to_string(&spec).expect("spec");
    std::fs::write(
        &spec,
        text.replace(
            "[[agents]]",
            "[[tools]]\nname = \"ops__stamp\"\nkind = \"human\"\n[[agents]]",
        ),
    )
    .expect("spec");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_ne!(o.status.code(), Some(0), "{}", out(&o));
    let said = err(&o);
    assert!(
        said.contains("`ops__stamp` is named like a tool of MCP server `ops`"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    assert!(lines(&calls).is_empty());
    assert!(!db.exists(), "nothing was written");
}

/// Waits (at most a minute, which only a broken build reaches) until `ready` holds.
fn wait_until_20ms(what: &str, ready: impl FnMut() -> bool) {
    crate::support::cli::wait_until_every(what, Duration::from_millis(20), ready);
}
