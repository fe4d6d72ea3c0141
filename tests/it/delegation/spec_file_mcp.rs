//! `[[mcp]]` servers in a delegate's spec file, with the real binary, the reference
//! filesystem server and real SQLite files: the servers start with the parent's, the child run
//! of the file is offered and calls their tools (the parent's agents are not offered them),
//! the tree verifies, a cassette of the parent replays the tree with no server, and a server
//! both files name differently is refused at load.

use crate::support;

use std::path::{Path, PathBuf};

use crate::support::cli::{text, utf8, write};
use support::mcp::{err, fs_sandbox, out, processes_mentioning, run_id, runtape, server_main};

/// A temp dir holding `sandbox/notes.txt`, `reader.toml` (an agent reading the notes through
/// its own filesystem server) and `lead.toml` (delegating to `reader.toml`, with `lead_mcp`
/// as its own `[[mcp]]` entries): the dir, its database `runs.db`, `lead.toml` and the sandbox.
fn files(lead_mcp: &str) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let (dir, root, sandbox, fs) = fs_sandbox();
    let reader = format!(
        r#"
{fs}
{model}{agent}"#,
        model = crate::support::spec::scripted_as(
            "reading",
            r#"{ tool_calls = [{ id = "r1", name = "fs__read_text_file", arguments = { path = "notes.txt" } }] }, { text = "The notes say: remember the milk." }"#
        ),
        agent = crate::support::spec::agent("reader", "reading", &["fs__*"], ""),
    );
    std::fs::write(root.join("reader.toml"), reader).expect("write reader");
    let lead = format!(
        r#"
goal = "What do the notes say?"
{lead_mcp}
[[providers]]
name = "script"
kind = "scripted"
replies = [
  {{ tool_calls = [{{ id = "d1", name = "delegate_reader", arguments = {{ task = "Read the notes." }} }}] }},
  {{ text = "Done: remember the milk." }},
]

[[agents]]
id = "lead"
provider = "script"
delegates = [{{ spec = "reader.toml", as = "reader" }}]
"#
    );
    let spec = write(&root, "lead.toml", &lead);
    let db = dir.path().join("runs.db");
    (dir, db, spec, sandbox)
}

fn ok(db: &Path, args: &[&str]) -> String {
    let o = runtape(db, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}{}", out(&o), err(&o));
    out(&o)
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn a_delegate_file_with_mcp_servers_runs_verifies_and_replays_without_them() {
    let (dir, db, spec, sandbox) = files("");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        out(&o).contains("answer: Done: remember the milk."),
        "{}",
        out(&o)
    );
    let parent = run_id(&o);
    let child = format!("{parent}.3.0");

    // The child listed its server and read the file through it; the result came back up.
    let child_log = ok(&db, &["log", &child]);
    assert!(
        child_log.contains("MCP server fs lists") && child_log.contains("fs__read_text_file"),
        "{child_log}"
    );
    let log = ok(&db, &["log", &parent]);
    assert!(
        log.contains("ended: answer: The notes say: remember the milk."),
        "{log}"
    );
    // The lead was offered its delegate only, never the delegate file's MCP tools.
    let lead_request = ok(&db, &["show", &format!("{parent}@2"), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&lead_request).expect("json");
    let offered: Vec<&str> = v["request"]["tools"]
        .as_array()
        .expect("the tools sent")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(offered, ["delegate_reader"], "{v}");
    ok(&db, &["verify", &parent, "--recursive"]);
    assert_eq!(
        processes_mentioning(utf8(&sandbox)),
        Vec::<u32>::new(),
        "the server was stopped when runtape exited"
    );

    // The tree's cassette carries the child's server's catalog and results: a replay in a
    // fresh database starts no server.
    let cassette = dir.path().join("tree.cassette.json");
    ok(&db, &["cassette", "export", &parent, "-o", utf8(&cassette)]);
    std::fs::remove_file(sandbox.join("notes.txt")).expect("the file is gone");
    let fresh = dir.path().join("fresh.db");
    let replayed = ok(
        &fresh,
        &["replay", utf8(&spec), "--cassette", utf8(&cassette)],
    );
    assert!(
        replayed.contains("answer: Done: remember the milk.")
            && replayed.contains("replayed 4 of 4 recorded model turns"),
        "{replayed}"
    );
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn a_server_both_files_name_differently_is_refused_at_load() {
    let other = format!(
        "[[mcp]]\nname = \"fs\"\ncommand = [\"node\", {:?}, \"/tmp\"]\n",
        utf8(&server_main("server-filesystem"))
    );
    let (_dir, db, spec, _) = files(&other);
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = err(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("MCP server `fs` of `reader.toml` differs") && e.contains("delegates[0]"),
        "{e}"
    );
    assert!(!db.exists(), "nothing was written");
}

/// `runtape tools` lists what a run would offer: the lead its `delegate_reader`, and the
/// agent of the delegate file the tools of that file's MCP server, marked with the delegate.
#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn tools_lists_the_delegate_files_agents_and_their_mcp_tools() {
    let (_dir, db, spec, _sandbox) = files("");
    let text = ok(&db, &["tools", utf8(&spec)]);
    assert!(
        text.contains("agent lead (1 tools):") && text.contains("delegate_reader"),
        "{text}"
    );
    assert!(
        text.contains("agent reader of delegate reader (")
            && text.contains("fs__read_text_file")
            && text.contains("mcp:fs"),
        "{text}"
    );
    let json = ok(&db, &["tools", utf8(&spec), "--json"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let lead: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "tool" && l["agent"] == "lead")
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(lead, ["delegate_reader"]);
    assert!(
        lines.iter().any(|l| l["agent"] == "reader"
            && l["delegate"] == "reader"
            && l["name"] == "fs__read_text_file"
            && l["source"] == "mcp:fs"),
        "{json}"
    );
}
