//! The tool list a run was offered is part of its history (machine revision 3): a
//! `ToolsListed` row before the first model request, another after the server says its list
//! changed, `show` naming what each request offered and from which catalog, `verify` checking
//! the catalog blobs, and a list that changed between processes visible in `runtape log`.

use crate::support;

use std::path::{Path, PathBuf};

use crate::support::cli::{exported, text, utf8, write};
use support::mcp::{
    canonical_tempdir, edited_replay_refused, fake_server, log, ops_spec, out,
    replay_without_server, run_id, runtape, seqs_of, shown, tools_from_file,
};

const BOTH: &str = r#"[{"name": "deploy", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": false}}, {"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]"#;
const STATUS_ONLY: &str = r#"[{"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]"#;

/// A fake `ops` server whose tools are read from `tools.json` at each `tools/list`; every
/// call is appended to `calls.log`. A call to `status` with `{"drop": true}` first rewrites
/// `tools.json` to `status` alone and sends `notifications/tools/list_changed`, then answers.
/// Returns the temp dir, the spec (granting `ops__*`, scripted with `replies`) and the db.
fn ops(replies: &str) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let (dir, root) = canonical_tempdir();
    let tools = write(&root, "tools.json", BOTH);
    let calls = root.join("calls.log");
    let body = format!(
        r#"
{tools_class}def call(req):
    name = req["params"]["name"]
    with open({calls:?}, "a") as f:
        f.write(name + "\n")
    if (req["params"].get("arguments") or {{}}).get("drop"):
        open({tools:?}, "w").write({status_only:?})
        send({{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}})
    send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": name + " ok"}}]}}}})
"#,
        tools_class = tools_from_file(&tools),
        tools = utf8(&tools),
        calls = utf8(&calls),
        status_only = STATUS_ONLY,
    );
    let server = fake_server(&root, "ops.py", None, &body);
    let (spec, db) = ops_spec(&root, &server, replies, "");
    (dir, spec, db, calls)
}

/// `show RUN@SEQ --json`: the request's offered tool names and catalogs.
fn offered(db: &Path, run: &str, seq: u64) -> (Vec<String>, serde_json::Value) {
    let view = shown(db, run, seq);
    let request = &view["request"];
    let names = request["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect();
    (names, request["catalogs"].clone())
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn the_offered_list_is_recorded_before_the_first_request_shown_and_verified() {
    let (_dir, spec, db, _calls) =
        ops(r#"[{ tool_calls = [{ name = "ops__status" }] }, { text = "fine" }]"#);
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = run_id(&o);

    let rows = log(&db, &run);
    assert_eq!(
        seqs_of(&rows, "preparing.tools_listed"),
        [2],
        "listed once, right after Start: {rows:?}"
    );
    assert_eq!(seqs_of(&rows, "preparing.proceed.call")[0], 3);
    let logged = out(&runtape(&db, &["log", &run]));
    assert!(logged.contains("MCP server ops lists 2 tools"), "{logged}");

    let (names, catalogs) = offered(&db, &run, 3);
    assert_eq!(names, ["ops__deploy", "ops__status"]);
    let digest = catalogs["ops"]
        .as_str()
        .expect("the catalog digest")
        .to_owned();
    let show = out(&runtape(&db, &["show", &format!("{run}@3")]));
    assert!(
        show.contains(&format!(
            "MCP server ops: tools as listed in catalog {digest}"
        )),
        "{show}"
    );

    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    assert!(out(&v).contains("1 MCP catalogs"), "{}", out(&v));

    // The catalog blob is covered: other bytes under its digest fail verify at seq 2.
    let conn = rusqlite::Connection::open(&db).expect("open");
    let hash = (0..32)
        .map(|i| u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>();
    let changed = conn
        .execute(
            "UPDATE blobs SET bytes = ?1 WHERE hash = ?2",
            rusqlite::params![STATUS_ONLY.as_bytes(), hash],
        )
        .expect("update");
    assert_eq!(changed, 1, "the catalog is a blob under its digest");
    drop(conn);
    let v = runtape(&db, &["verify", &run]);
    assert_ne!(v.status.code(), Some(0), "{}", out(&v));
    let said = text(&v);
    assert!(said.contains("catalog blob"), "{said}");
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_list_changed_mid_run_is_recorded_at_the_next_boundary_and_the_dropped_tool_is_not_called() {
    let (_dir, spec, db, calls) = ops(
        r#"[{ tool_calls = [{ name = "ops__status", arguments = { drop = true } }] }, { tool_calls = [{ name = "ops__deploy" }] }, { text = "could not" }]"#,
    );
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = run_id(&o);

    let rows = log(&db, &run);
    let listed = seqs_of(&rows, "preparing.tools_listed");
    assert_eq!(listed.len(), 2, "{rows:?}");
    let calls_at = seqs_of(&rows, "preparing.proceed.call");
    assert!(
        calls_at[0] < listed[1] && listed[1] < calls_at[1],
        "the new list is recorded between the two requests: {rows:?}"
    );
    let (first, first_catalogs) = offered(&db, &run, calls_at[0]);
    let (second, second_catalogs) = offered(&db, &run, calls_at[1]);
    assert_eq!(first, ["ops__deploy", "ops__status"]);
    assert_eq!(second, ["ops__status"], "the dropped tool is not offered");
    assert_ne!(first_catalogs, second_catalogs);

    assert_eq!(
        std::fs::read_to_string(&calls).expect("calls"),
        "status\n",
        "a call to the dropped tool is refused by the machine, never sent"
    );
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    assert!(out(&v).contains("2 MCP catalogs"), "{}", out(&v));
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_resume_after_the_list_changed_between_processes_records_the_new_list() {
    let (dir, spec, db, calls) =
        ops(r#"[{ tool_calls = [{ name = "ops__deploy" }] }, { text = "done" }]"#);
    // Without destructiveHint = false, `deploy` needs approval: the run rests there.
    std::fs::write(
        dir.path().join("tools.json"),
        BOTH.replace(r#", "annotations": {"destructiveHint": false}"#, ""),
    )
    .expect("tools");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("waiting for a person"), "{}", out(&o));
    let run = run_id(&o);
    assert_eq!(seqs_of(&log(&db, &run), "preparing.tools_listed"), [2]);

    // Between the two processes the server stops offering `deploy`.
    std::fs::write(dir.path().join("tools.json"), STATUS_ONLY).expect("tools");
    let r = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let rows = log(&db, &run);
    let listed = seqs_of(&rows, "preparing.tools_listed");
    assert_eq!(
        listed.len(),
        2,
        "the changed list is a row of the history: {rows:?}"
    );
    let logged = out(&runtape(&db, &["log", &run]));
    assert!(logged.contains("MCP server ops lists 1 tools"), "{logged}");
    let last_call = *seqs_of(&rows, "preparing.proceed.call")
        .last()
        .expect("a request after the resume");
    assert!(last_call > listed[1]);
    assert_eq!(offered(&db, &run, last_call).0, ["ops__status"]);
    assert_eq!(
        std::fs::read_to_string(&calls).expect("calls"),
        "deploy\n",
        "the approved call was sent"
    );
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_cassette_of_an_mcp_run_replays_in_a_fresh_database_without_starting_the_server() {
    let (dir, spec, db, calls) = ops(
        r#"[{ tool_calls = [{ name = "ops__status" }] }, { tool_calls = [{ name = "ops__deploy", arguments = { target = "prod" } }] }, { text = "shipped" }]"#,
    );
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = run_id(&o);
    let tape = dir.path().join("tape.json");
    let cassette = exported(&db, &run, &tape);
    assert_eq!(
        cassette["catalogs"]["ops"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        cassette["toolResults"][1],
        serde_json::json!({"tool": "ops__deploy", "args": {"target": "prod"}, "outcome": {"status": "ok", "value": "deploy ok"}})
    );

    // The server is gone: its command now only leaves a mark and fails.
    let (r, fresh, marker) =
        replay_without_server(&dir.path().join("ops.py"), &spec, &tape, "shipped");
    assert_eq!(
        std::fs::read_to_string(&calls).expect("calls"),
        "status\ndeploy\n",
        "only the recording called the server"
    );
    let replayed = run_id(&r);
    let rows = log(&fresh, &replayed);
    let results: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["event"] == "tool_returned")
        .map(|r| &r["summary"])
        .collect();
    assert_eq!(
        results,
        ["tool result of ops__status", "tool result of ops__deploy"],
        "{rows:?}"
    );
    assert_eq!(
        offered(&fresh, &replayed, 3),
        offered(&db, &run, 3),
        "the replay recorded the same tool list, from the cassette"
    );
    let v = runtape(&fresh, &["verify", &replayed]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));

    // A cassette whose recorded results were edited is refused before anything runs.
    edited_replay_refused(&spec, &tape, "deploy ok", "deploy skipped", &marker);
}
