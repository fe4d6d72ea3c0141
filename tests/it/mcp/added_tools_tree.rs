//! A delegation tree's cassette keeps each child's own MCP tool lists: a child whose server
//! added a tool during the child's run (after `notifications/tools/list_changed`) records its
//! lists in its own section, at the count of its own model calls; `replay` of the cassette, in
//! a fresh database with no server, serves the child its lists at its own step boundaries and
//! the parent its own, reaching the recorded final states. An edited child list fails the
//! envelope hash with one line, and a tree cassette written before child lists were kept
//! (tests/fixtures/cassette-tree-v4, by the build before this change) still loads and replays.

use crate::support;
use crate::support::spec::{agent, lead};

use std::path::{Path, PathBuf};

use crate::support::cli::{first_id, replay_stepped, text, utf8, write};
use serde_json::Value;
use support::mcp::{
    STATUS, canonical_tempdir, err, growing_server, log, ok, out, run_id, seqs_of, server_gone,
    shown,
};

/// What the worker asks when its server adds `stamp` mid-run: `status` with `grow` (the
/// server adds `stamp` and sends `list_changed`), then `stamp`, then its answer.
const GROWING_WORKER: &str = r#"[{ tool_calls = [{ id = "w1", name = "ops__status", arguments = { grow = true } }] }, { tool_calls = [{ id = "w2", name = "ops__stamp", arguments = { text = "v1" } }] }, { text = "stamped v1" }]"#;

/// What the worker asks when nothing changes: `status`, then its answer.
const STEADY_WORKER: &str =
    r#"[{ tool_calls = [{ id = "w1", name = "ops__status" }] }, { text = "status ok" }]"#;

/// A tree in `root`: `lead` delegates to `worker`, which is granted `ops__*` of a fake `ops`
/// server whose tools are read from `tools.json` at each `tools/list` (`status` with
/// `{"grow": true}` adds `stamp` and sends `list_changed`; every call is appended to
/// `calls.log`). Both agents are in one spec, so the lead's run lists `ops` too. Returns the
/// spec and the calls log.
fn tree(root: &Path, worker: &str) -> (PathBuf, PathBuf) {
    let (server, calls) = growing_server(root, &[STATUS]);
    let spec = write(
        root,
        "tree.toml",
        &format!(
            r#"goal = "ship it"
[[mcp]]
name = "ops"
command = [{server:?}]

[[providers]]
name = "p"
kind = "scripted"
[providers.by_agent]
lead = [{{ tool_calls = [{{ id = "d1", name = "delegate_worker", arguments = {{ task = "Ship it." }} }}] }}, {{ text = "Shipped." }}]
worker = {worker}

{lead}{worker_agent}"#,
            lead = lead("lead", "p", &["worker"], ""),
            worker_agent = agent("worker", "p", &["ops__*"], ""),
            server = utf8(&server),
        ),
    );
    (spec, calls)
}

/// Replaces the `ops` server with a script that only leaves a marker: a replay that started
/// it would be seen. Returns the marker.
fn no_server(root: &Path) -> PathBuf {
    let marker = root.join("started");
    server_gone(&root.join("ops.py"), &marker);
    marker
}

/// The final state hash `verify --json` reports for `run` (its tree verified too).
fn final_hash(db: &Path, run: &str) -> String {
    let v: Value = serde_json::from_str(&ok(db, &["verify", run, "--json"])).expect("json");
    v["final_state_hash"].as_str().expect("a hash").to_owned()
}

/// The offered tools of the request at `seq` of `run`, by name.
fn offered(db: &Path, run: &str, seq: u64) -> Vec<String> {
    let v = shown(db, run, seq);
    v["request"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

fn replay(db: &Path, spec: &Path, tape: &Path) -> std::process::Output {
    replay_stepped(db, utf8(spec), utf8(tape))
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_childs_tool_list_change_is_exported_in_its_section_and_replayed_without_the_server() {
    let (_dir, root) = canonical_tempdir();
    let (spec, calls) = tree(&root, GROWING_WORKER);
    let db = root.join("runs.db");
    let printed = ok(&db, &["run", "--stepped-clock", utf8(&spec)]);
    assert!(printed.contains("answer: Shipped."), "{printed}");
    let parent = first_id(&printed);
    // The child's place: the lead's delegating step (after its own first list) and index 0.
    let child_path = "4.0";
    let child = format!("{parent}.{child_path}");
    assert_eq!(
        std::fs::read_to_string(&calls)
            .expect("calls")
            .lines()
            .count(),
        2,
        "the child called status and the tool the server added"
    );

    // The child listed twice: before its first request, and after the server's change.
    let child_rows = log(&db, &child);
    let child_listed = seqs_of(&child_rows, "preparing.tools_listed");
    let child_requests = seqs_of(&child_rows, "preparing.proceed.call");
    assert_eq!(child_listed.len(), 2, "{child_rows:?}");
    assert_eq!(offered(&db, &child, child_requests[0]), ["ops__status"]);
    assert_eq!(
        offered(&db, &child, child_requests[1]),
        ["ops__status", "ops__stamp"]
    );
    let recorded_child = final_hash(&db, &child);
    let recorded_parent = final_hash(&db, &parent);
    let parent_listed = seqs_of(&log(&db, &parent), "preparing.tools_listed");

    // The child's lists are in its own section, at its own entry counts.
    let tape = root.join("tree.cassette.json");
    ok(&db, &["cassette", "export", &parent, "-o", utf8(&tape)]);
    let cassette: Value =
        serde_json::from_str(&std::fs::read_to_string(&tape).expect("tape")).expect("json");
    assert_eq!(cassette["version"], 4);
    assert_eq!(cassette["children"][0]["path"], child_path);
    let own = cassette["children"][0]["catalogChanges"]
        .as_array()
        .expect("the child's own lists");
    let shape: Vec<(&str, u64, usize)> = own
        .iter()
        .map(|c| {
            (
                c["server"].as_str().expect("server"),
                c["atEntry"].as_u64().expect("atEntry"),
                c["catalog"].as_array().expect("catalog").len(),
            )
        })
        .collect();
    assert_eq!(shape, [("ops", 0, 1), ("ops", 1, 2)], "{own:?}");

    // Replayed in a fresh database with no server: each run sees its own lists where it
    // recorded them, and the tree ends as recorded.
    let marker = no_server(&root);
    let fresh = root.join("fresh.db");
    // With a stepped clock, as recorded: the runs' final states match the recorded ones.
    let r = replay(&fresh, &spec, &tape);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(out(&r).contains("answer: Shipped."), "{}", out(&r));
    assert!(!marker.exists(), "no MCP server was started by the replay");
    assert_eq!(
        std::fs::read_to_string(&calls)
            .expect("calls")
            .lines()
            .count(),
        2,
        "only the recording called the server"
    );
    let replayed = run_id(&r);
    let replayed_child = format!("{replayed}.{child_path}");
    assert_eq!(
        seqs_of(&log(&fresh, &replayed_child), "preparing.tools_listed"),
        child_listed,
        "the child's list change is replayed at the same step"
    );
    assert_eq!(
        seqs_of(&log(&fresh, &replayed), "preparing.tools_listed"),
        parent_listed,
        "the parent's lists too"
    );
    assert_eq!(
        offered(&fresh, &replayed_child, child_requests[1]),
        ["ops__status", "ops__stamp"]
    );
    assert_eq!(final_hash(&fresh, &replayed_child), recorded_child);
    assert_eq!(final_hash(&fresh, &replayed), recorded_parent);
    ok(&fresh, &["verify", &replayed, "--recursive"]);

    // An edited child list is refused by the envelope hash, with one line, changing nothing.
    let mut edited = cassette.clone();
    edited["children"][0]["catalogChanges"][1]["catalog"][1]["description"] =
        Value::from("stamps anything");
    std::fs::write(
        &tape,
        serde_json::to_string_pretty(&edited).expect("json") + "\n",
    )
    .expect("edit");
    let third = root.join("third.db");
    let t = replay(&third, &spec, &tape);
    assert_ne!(t.status.code(), Some(0), "{}", text(&t));
    let stderr = err(&t);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cassette envelope was edited after recording"),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert!(!third.exists(), "the refused replay made no database");
}

#[test]
fn a_tree_cassette_written_before_child_lists_were_kept_still_loads_and_replays() {
    // Written by `runtape cassette export` of the build before this change (main at 87ecedb)
    // from this file's tree with the steady worker, recorded with `--stepped-clock`.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cassette-tree-v4/steady.v4.cassette.json");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).expect("fixture")).expect("json");
    assert_eq!(file["version"], 4);
    assert!(
        file["children"][0].get("catalogChanges").is_none(),
        "an older tree cassette: no child lists"
    );
    let (_dir, root) = canonical_tempdir();
    let (spec, _) = tree(&root, STEADY_WORKER);
    let marker = no_server(&root);
    let fresh = root.join("fresh.db");
    let r = replay(&fresh, &spec, &fixture);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let printed = out(&r);
    assert!(printed.contains("answer: Shipped."), "{printed}");
    assert!(
        printed.contains("replayed 4 of 4 recorded model turns")
            && printed.contains("1 child runs from their own sections"),
        "{printed}"
    );
    assert!(!marker.exists(), "no MCP server was started by the replay");
    ok(&fresh, &["verify", &run_id(&r), "--recursive"]);
}
