//! Shared by the MCP tests: where the reference servers are installed, server configs for
//! them, fake misbehaving servers written as scripts, and counting a process's children.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::utf8;

pub use super::cli::{bin, err, ok, out, run_id, runtape, text};
use runtape::tool::mcp::{McpServerConfig, McpTransport};

/// The folder `tests/mcp_servers/install.sh` installs the reference servers into:
/// `$RUNTAPE_MCP_SERVERS`, else `target/mcp-servers`. Panics with what to run when they are
/// missing (a missing install is a failure, not a skip).
pub fn servers_dir() -> PathBuf {
    let dir = std::env::var_os("RUNTAPE_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
    for pkg in ["server-everything", "server-filesystem"] {
        let main = dir.join(format!(
            "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
        ));
        assert!(
            main.is_file(),
            "the MCP reference servers are not installed ({} is missing) – run tests/mcp_servers/install.sh (CI does this in .ci/run)",
            main.display()
        );
    }
    dir
}

/// The entry point of a reference server package (`server-everything`, `server-filesystem`).
pub fn server_main(pkg: &str) -> PathBuf {
    servers_dir().join(format!(
        "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
    ))
}

/// A stdio server config running `program args` in `dir`.
pub fn stdio(name: &str, program: &str, args: &[&str], dir: &Path) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Stdio {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
            env: Vec::new(),
            env_set: Default::default(),
            env_all: false,
            confine: None,
        },
        init_timeout_ms: Some(20_000),
        timeout_ms: None,
        tools: Default::default(),
        results: Default::default(),
    }
}

/// server-filesystem over stdio, allowed `sandbox`.
pub fn filesystem(name: &str, sandbox: &Path) -> McpServerConfig {
    let main = server_main("server-filesystem");
    stdio(name, "node", &[utf8(&main), utf8(sandbox)], sandbox)
}

/// server-everything over stdio.
pub fn everything(name: &str, dir: &Path) -> McpServerConfig {
    let main = server_main("server-everything");
    stdio(name, "node", &[utf8(&main), "stdio"], dir)
}

/// Writes an executable script `name` into `dir` and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write script");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    path
}

/// A python3 MCP server that answers `initialize` with `version` (or the requested one when
/// `None`) and then behaves as `tools_py`: a Python snippet defining `tools` (the
/// `tools/list` answer) and `call(req)` (answers `tools/call`), and optionally `note(req)`
/// (sees every notification). `send(obj)` writes one message.
pub fn fake_server(dir: &Path, name: &str, version: Option<&str>, tools_py: &str) -> PathBuf {
    let version = match version {
        Some(v) => format!("{v:?}"),
        None => "req['params']['protocolVersion']".into(),
    };
    let body = format!(
        r#"#!/usr/bin/env python3
import json, sys, time
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
{tools_py}
note = globals().get('note', lambda req: None)
for line in sys.stdin:
    req = json.loads(line)
    m = req.get('method')
    if 'id' not in req:
        note(req)
        continue
    if m == 'initialize':
        send({{"jsonrpc": "2.0", "id": req['id'], "result": {{"protocolVersion": {version}, "capabilities": {{"tools": {{}}}}, "serverInfo": {{"name": "fake", "version": "1"}}}}}})
    elif m == 'tools/list':
        send({{"jsonrpc": "2.0", "id": req['id'], "result": {{"tools": tools}}}})
    elif m == 'tools/call':
        call(req)
    elif 'id' in req:
        send({{"jsonrpc": "2.0", "id": req['id'], "error": {{"code": -32601, "message": "Method not found"}}}})
"#
    );
    script(dir, name, &body)
}

/// Every process on the machine as `(pid, parent pid, state letter)`, read from `/proc`.
fn processes() -> Vec<(u32, u32, String)> {
    let mut all = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        all.push((pid, ppid, state.to_owned()));
    }
    all
}

/// Pids of the live (not zombie) descendants of this process.
pub fn descendants() -> Vec<u32> {
    let parent_of = processes();
    let mut out = Vec::new();
    let mut frontier = vec![std::process::id()];
    while let Some(p) = frontier.pop() {
        for (pid, ppid, state) in &parent_of {
            if *ppid == p && !out.contains(pid) {
                if state != "Z" {
                    out.push(*pid);
                }
                frontier.push(*pid);
            }
        }
    }
    out
}

/// Zombie children of this process.
pub fn zombies() -> Vec<u32> {
    let me = std::process::id();
    processes()
        .into_iter()
        .filter(|(_, ppid, state)| *ppid == me && state == "Z")
        .map(|(pid, ..)| pid)
        .collect()
}

/// Live descendants of this process that run in `dir` or name it on their command line (tests
/// in one binary run at once, so each counts only its own servers).
pub fn descendants_in(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    descendants()
        .into_iter()
        .filter(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            cwd.starts_with(&dir) || cmdline.contains(&dir)
        })
        .collect()
}

/// server-everything in `streamableHttp` mode on a free loopback port (it reads `PORT`),
/// once it says it listens. Kill and wait for the child when done (dropping it leaves it running).
pub fn everything_http() -> (std::process::Child, u16) {
    use std::io::BufRead;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mut child = std::process::Command::new("node")
        .arg(server_main("server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("listening on port"));
    assert!(
        listening,
        "server-everything did not start listening on {port}"
    );
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    (child, port)
}

/// Pids of every live process on the machine whose command line contains `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim().chars().next()))
                .flatten();
            if state == Some('Z') || state.is_none() {
                continue;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            if cmdline.contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// Replaces the MCP server program at `server` with one that only appends a line to `marker`
/// and fails: after a replay that must start no server, `marker` must not exist.
pub fn server_gone(server: &Path, marker: &Path) {
    std::fs::write(
        server,
        format!("#!/bin/sh\necho started >> {:?}\nexit 1\n", utf8(marker)),
    )
    .expect("script");
}

/// Runs `runtape replay SPEC --cassette TAPE` on the database `db` to completion.
pub fn replay(db: &Path, spec: &Path, tape: &Path) -> Output {
    runtape(db, &["replay", utf8(spec), "--cassette", utf8(tape)])
}

/// Replaces the MCP server program `server` with one that only leaves a mark (`started`
/// beside it) and fails, replays the cassette `tape` into `fresh.db` beside it, and checks the
/// replay ends with `answer: ANSWER` without starting the server. The replay's output, the
/// fresh database and the mark's path.
pub fn replay_without_server(
    server: &Path,
    spec: &Path,
    tape: &Path,
    answer: &str,
) -> (Output, PathBuf, PathBuf) {
    let marker = server.with_file_name("started");
    server_gone(server, &marker);
    let fresh = tape.with_file_name("fresh.db");
    let r = replay(&fresh, spec, tape);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        out(&r).contains(&format!("answer: {answer}")),
        "{}",
        out(&r)
    );
    assert!(!marker.exists(), "no MCP server was started by the replay");
    (r, fresh, marker)
}

/// Edits the cassette `tape` (`from` becomes `to`) and checks that `replay` of it into a new
/// database beside it is refused without starting the MCP server (`marker` stays absent).
pub fn edited_replay_refused(spec: &Path, tape: &Path, from: &str, to: &str, marker: &Path) {
    let edited = std::fs::read_to_string(tape)
        .expect("tape")
        .replace(from, to);
    std::fs::write(tape, edited).expect("edit");
    let third = tape.with_file_name("third.db");
    let t = replay(&third, spec, tape);
    assert_ne!(t.status.code(), Some(0), "{}", out(&t));
    assert!(!marker.exists());
}

/// The lines of the file at `path` (none when it does not exist yet).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `runtape log RUN --json` rows.
pub fn log(db: &Path, run: &str) -> Vec<serde_json::Value> {
    ok(db, &["log", run, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// The seqs of the `rows` (of [`log`]) that took `edge`.
pub fn seqs_of(rows: &[serde_json::Value], edge: &str) -> Vec<u64> {
    rows.iter()
        .filter(|r| r["edge"] == edge)
        .map(|r| r["seq"].as_u64().expect("seq"))
        .collect()
}

/// `runtape show RUN@SEQ --json`.
pub fn shown(db: &Path, run: &str, seq: u64) -> serde_json::Value {
    serde_json::from_str(&ok(db, &["show", &format!("{run}@{seq}"), "--json"])).expect("json")
}

/// A new temporary directory and its canonical path (the one a server started in it reports).
pub fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    (dir, root)
}

/// A temp dir (its path resolved) holding `sandbox/notes.txt` ("remember the milk"), and the
/// `[[mcp]]` entry of a filesystem reference server named `fs` on that sandbox.
pub fn fs_sandbox() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
    let (dir, root) = canonical_tempdir();
    let sandbox = root.join("sandbox");
    std::fs::create_dir(&sandbox).expect("mkdir");
    std::fs::write(sandbox.join("notes.txt"), "remember the milk\n").expect("write");
    let main = server_main("server-filesystem");
    let entry = format!(
        "[[mcp]]\nname = \"fs\"\ncommand = [\"node\", {:?}, {:?}]\ntimeout_ms = 10000\n",
        utf8(&main),
        utf8(&sandbox)
    );
    (dir, root, sandbox, entry)
}

/// Python for a fake server (see [`fake_server`]) whose `tools` are read from the JSON file
/// `list` at each `tools/list`, so a test can change them while the server runs.
pub fn tools_from_file(list: &Path) -> String {
    format!(
        "class Tools(list):\n    def __iter__(self):\n        return iter(json.load(open({:?})))\ntools = Tools()\n",
        utf8(list)
    )
}

/// The tool `status` as a server lists it: read-only, no arguments.
pub const STATUS: &str = r#"{"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}"#;

/// The tool `stamp` as a server lists it: one required `text`, not destructive.
pub const STAMP: &str = r#"{"name": "stamp", "description": "stamps a text", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}, "annotations": {"destructiveHint": false}}"#;

/// A fake `ops` server in `root` (`ops.py`) whose tools are read from `tools.json` (first
/// `tools`) at each `tools/list`; every call is appended to `calls.log` as `NAME ARGS`. A call
/// with `{"grow": true}` adds [`STAMP`] to `tools.json` and sends `list_changed` before
/// answering; `stamp` never answers while the file `hang` exists. The server and the log.
pub fn growing_server(root: &Path, tools: &[&str]) -> (PathBuf, PathBuf) {
    let list = super::cli::write(root, "tools.json", &format!("[{}]", tools.join(", ")));
    let calls = root.join("calls.log");
    let body = format!(
        r#"
import os
{tools_class}def call(req):
    name = req["params"]["name"]
    args = req["params"].get("arguments") or {{}}
    with open({calls:?}, "a") as f:
        f.write(name + " " + json.dumps(args, sort_keys=True) + "\n")
    if args.get("grow"):
        now = json.load(open({list:?}))
        now.append(json.loads({stamp:?}))
        open({list:?}, "w").write(json.dumps(now))
        send({{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}})
    if name == "stamp" and os.path.exists({hang:?}):
        return
    send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": name + " ok"}}]}}}})
"#,
        tools_class = tools_from_file(&list),
        list = super::cli::utf8(&list),
        calls = super::cli::utf8(&calls),
        hang = super::cli::utf8(&root.join("hang")),
        stamp = STAMP,
    );
    (fake_server(root, "ops.py", None, &body), calls)
}

/// Writes `spec.toml` in `root`: the MCP server `ops` (the program `server`), a scripted model
/// with `replies` (a TOML array) and one agent granted `ops__*`, with `agent_extra` in its
/// table. The spec's path and the path of a database beside it.
pub fn ops_spec(
    root: &Path,
    server: &Path,
    replies: &str,
    agent_extra: &str,
) -> (PathBuf, PathBuf) {
    one_server_spec(
        root,
        "ship it",
        ("ops", server),
        replies,
        &["ops__*"],
        agent_extra,
    )
}

/// Writes `spec.toml` in `root` toward `goal`: one MCP server (`name`, the program at its
/// path), a scripted model `p` with `replies` (a TOML array) and one agent `a` granted
/// `tools`, with `agent_extra` in its table. The spec's path and the path of a database
/// beside it.
pub fn one_server_spec(
    root: &Path,
    goal: &str,
    (name, server): (&str, &Path),
    replies: &str,
    tools: &[&str],
    agent_extra: &str,
) -> (PathBuf, PathBuf) {
    let spec = format!(
        "goal = \"{goal}\"\n[[mcp]]\nname = \"{name}\"\ncommand = [{:?}]\n[[providers]]\nname = \"p\"\nkind = \"scripted\"\nreplies = {replies}\n{}",
        utf8(server),
        super::spec::agent("a", "p", tools, agent_extra),
    );
    (
        super::cli::write(root, "spec.toml", &spec),
        root.join("runs.db"),
    )
}

/// The tool `name` of a server runtape listed, ready to call.
pub fn listed_tool(listed: &runtape::tool::mcp::Listed, name: &str) -> runtape::tool::mcp::McpTool {
    let info = listed
        .catalog
        .tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
        .clone();
    runtape::tool::mcp::McpTool::new(info, listed.server.clone())
}

/// A stdio MCP server in `sh` (no Python needed) with one read-only tool, `dump`, described
/// as `description` (a double-quoted shell word: `$VAR` expands). A call runs `on_call`, shell
/// lines that set `text`, and answers with `text` as the tool's text; `escape` (a function in
/// the script) turns what it reads into a JSON string's contents. `out="$1"` is its first
/// argument.
pub fn sh_server(description: &str, on_call: &str) -> String {
    r#"#!/bin/sh
out="$1"
escape() { tr -d '\000-\010\013-\037' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' | awk 'BEGIN{ORS=""} NR>1{print "\\n"} {print}'; }
while IFS= read -r line; do
  case "$line" in *'"id":'*) ;; *) continue ;; esac
  id=$(printf '%s\n' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*)
      version=$(printf '%s\n' "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"%s","capabilities":{"tools":{}},"serverInfo":{"name":"dump","version":"1"}}}\n' "$id" "$version" ;;
    *'"method":"tools/list"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"dump","description":"%s","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}\n' "$id" "DESCRIPTION" ;;
    *'"method":"tools/call"'*)
      ON_CALL
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$id" "$text" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}\n' "$id" ;;
  esac
done
"#
    .replace("DESCRIPTION", description)
    .replace("ON_CALL", on_call)
}
