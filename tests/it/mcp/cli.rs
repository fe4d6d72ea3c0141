//! The `runtape` binary with MCP servers: `runtape tools`, whole runs calling the real
//! filesystem server and server-everything over Streamable HTTP, spec errors, a SIGKILL in
//! the middle of an MCP call then resume, and no server process left behind.

use crate::support;
use crate::support::cli::on;
use crate::support::mcp::{canonical_tempdir, one_server_spec};
use crate::support::spec::{agent, scripted_as};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::cli::{export, text, utf8, write};
use support::mcp::{
    bin, err, everything_http, fake_server, fs_sandbox, out, processes_mentioning,
    replay_without_server, run_id, runtape, server_main,
};

/// A temp dir holding `sandbox/` (with `notes.txt`) and `spec.toml` = `body` with `@FS@`
/// replaced by an `[[mcp]]` entry for the filesystem server on the sandbox.
fn fs_spec(body: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, root, sandbox, entry) = fs_sandbox();
    let spec = root.join("spec.toml");
    std::fs::write(&spec, body.replace("@FS@", &entry)).expect("write spec");
    (dir, spec, sandbox)
}

const RUN_BODY: &str = r#"
goal = "Copy the notes."
@FS@
[mcp.tools.write_file]
requires_approval = false
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [{ name = "fs__read_text_file", arguments = { path = "notes.txt" } }] },
  { tool_calls = [{ name = "fs__write_file", arguments = { path = "copy.txt", content = "remember the milk" } }] },
  { text = "Copied." },
]
[[agents]]
id = "clerk"
provider = "s"
tools = ["fs__*"]
"#;

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn a_run_calls_the_filesystem_server_verifies_and_leaves_no_server_behind() {
    let (dir, spec, sandbox) = fs_spec(RUN_BODY);
    let db = dir.path().join("runs.db");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("answer: Copied."), "{}", out(&o));
    assert_eq!(
        std::fs::read_to_string(sandbox.join("copy.txt")).expect("the server wrote it"),
        "remember the milk"
    );
    let run = run_id(&o);
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));

    // The stored spec records the offered MCP tools and the expanded grant.
    let show = runtape(&db, &["show", &format!("{run}@4"), "--json"]);
    assert_eq!(show.status.code(), Some(0), "{}", err(&show));
    let log = runtape(&db, &["log", &run]);
    assert!(out(&log).contains("fs__read_text_file"), "{}", out(&log));
    assert!(out(&log).contains("fs__write_file"), "{}", out(&log));
    assert_eq!(
        processes_mentioning(utf8(&sandbox)),
        Vec::<u32>::new(),
        "the server was stopped when runtape exited"
    );
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn tools_lists_what_each_agent_is_offered() {
    let body = [
        "\n@FS@\n",
        &scripted_as("s", r#"{ text = "x" }"#),
        "[[tools]]\nname = \"ask\"\nkind = \"human\"\n",
        &agent(
            "reader",
            "s",
            &["fs__read_text_file", "fs__list_directory", "ask"],
            "",
        ),
        &agent("default", "s", &[], ""),
    ]
    .concat();
    let (dir, spec, sandbox) = fs_spec(&body);
    let o = runtape(&dir.path().join("x.db"), &["tools", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(
        text.contains("MCP server fs: secure-filesystem-server"),
        "{text}"
    );
    assert!(text.contains("agent reader (3 tools):"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("fs__read_text_file"))
        .expect("listed");
    assert!(
        line.contains("mcp:fs") && line.contains("read-only,idempotent"),
        "{line}"
    );
    assert!(line.contains("path*: string"), "{line}");
    assert!(
        text.lines()
            .any(|l| l.contains("ask") && l.contains("human")),
        "{text}"
    );
    // An agent without a grant gets every read-only tool, MCP ones included.
    let default_block = text.split("agent default").nth(1).expect("default agent");
    assert!(
        default_block.contains("fs__list_allowed_directories"),
        "{text}"
    );
    assert!(!default_block.contains("fs__write_file"), "{text}");

    let j = runtape(&dir.path().join("x.db"), &["tools", utf8(&spec), "--json"]);
    let lines: Vec<serde_json::Value> = out(&j)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines[0]["type"], "server");
    let write = lines
        .iter()
        .find(|l| l["agent"] == "default" && l["name"] == "fs__read_text_file")
        .expect("json tool line");
    assert_eq!(write["source"], "mcp:fs");
    assert_eq!(write["read_only"], true);
    assert!(
        !dir.path().join("x.db").exists(),
        "`tools` creates no database"
    );
    assert_eq!(processes_mentioning(utf8(&sandbox)), Vec::<u32>::new());
}

#[test]
fn tools_names_the_server_that_failed_to_start() {
    let (_dir, root) = canonical_tempdir();
    let dies = support::mcp::script(&root, "dies.sh", "#!/bin/sh\necho 'no token' >&2\nexit 1\n");
    let spec = write(
        &root,
        "spec.toml",
        &format!(
            "[[mcp]]\nname = \"broken\"\ncommand = [{:?}]\n[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n",
            utf8(&dies)
        ),
    );
    let o = runtape(&root.join("x.db"), &["tools", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(
        e.contains("spec.toml:1:1: mcp[0]: MCP server `broken`: exited during startup"),
        "{e}"
    );
    assert!(e.contains("no token"), "{e}");

    let r = runtape(&root.join("x.db"), &["run", utf8(&spec), "goal"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(err(&r).contains("MCP server `broken`"), "{}", err(&r));
    assert!(!root.join("x.db").exists(), "nothing was written");
}

#[test]
fn spec_errors_about_mcp_point_at_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "[[mcp]]\nname = \"a__b\"\ncommand = [\"sh\"]\n",
            "mcp[0].name: MCP server name `a__b` must not start or end with `_` or contain `__`",
        ),
        (
            "[[mcp]]\nname = \"w\"\nurl = \"http://example.com/mcp\"\n",
            "uses http:// on a host that is not loopback",
        ),
        (
            "[[mcp]]\nname = \"w\"\nurl = \"https://u:p@example.com/mcp\"\n",
            "carries a user name or password",
        ),
        (
            "[[mcp]]\nname = \"w\"\ncommand = [\"sh\"]\nurl = \"https://example.com/mcp\"\n",
            "either `command = [...]` (stdio) or `url",
        ),
        (
            "[[mcp]]\nname = \"w\"\ncommand = [\"runtape-no-such-server\"]\n",
            "mcp[0].command[0]: MCP server `w`: program `runtape-no-such-server` is not on PATH",
        ),
        (
            "[[mcp]]\nname = \"w\"\nurl = \"https://example.com/mcp\"\nheaders_env = { Authorization = \"\" }\n",
            "the variable's name, never its value",
        ),
        (
            "[[mcp]]\nname = \"w\"\ncommand = [\"sh\"]\nbogus = 1\n",
            "unknown field `bogus`",
        ),
    ];
    for (mcp, want) in cases {
        let spec = write(
            dir.path(),
            "spec.toml",
            &format!(
                "{mcp}[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"s\"\n"
            ),
        );
        let o = runtape(&dir.path().join("x.db"), &["tools", utf8(&spec)]);
        assert_eq!(o.status.code(), Some(2), "{mcp}");
        let e = err(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(want), "{mcp} → {e}");
        assert!(e.contains("spec.toml:"), "located: {e}");
    }
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn a_grant_of_a_tool_the_server_lacks_is_refused_at_its_line() {
    let body = "@FS@\n[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"nope\", \"fs__read_txt_file\"]\n";
    let (dir, spec, _) = fs_spec(body);
    // A non-MCP unknown grant is found at load, at its own index as written.
    let o = runtape(&dir.path().join("x.db"), &["tools", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("agents[0].tools[0]: agent `a` is granted unknown tool `nope`"),
        "{}",
        err(&o)
    );

    let body = "@FS@\n[[providers]]\nname = \"s\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"fs__list_directory\", \"fs__read_txt_file\"]\n";
    let (dir, spec, _) = fs_spec(body);
    let o = runtape(&dir.path().join("x.db"), &["tools", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(e.contains("agents[0].tools[1]: agent `a` is granted `fs__read_txt_file`, which MCP server `fs` does not offer (did you mean `fs__read_text_file`?)"), "{e}");
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn a_run_over_streamable_http_sends_header_values_it_never_stores() {
    let (mut server, port) = everything_http();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(
        dir.path(),
        "spec.toml",
        &format!(
            r#"goal = "add"
[[mcp]]
name = "web"
url = "http://127.0.0.1:{port}/mcp"
headers_env = {{ X-Api-Token = "RUNTAPE_TEST_WEB_TOKEN" }}
{model}{agent}"#,
            model = crate::support::spec::scripted_as(
                "s",
                r#"{ tool_calls = [{ name = "web__get-sum", arguments = { a = 2, b = 40 } }] }, { text = "42" }"#
            ),
            agent = crate::support::spec::agent("a", "s", &["web__get-sum", "web__echo"], ""),
        ),
    );
    let db = dir.path().join("runs.db");
    let secret = "tok-7f3a9c1e-never-stored";
    let o = on(&db)
        .args(["run", utf8(&spec)])
        .env("RUNTAPE_TEST_WEB_TOKEN", secret)
        .output()
        .expect("runs");
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = run_id(&o);
    let log = runtape(&db, &["log", &run]);
    assert!(out(&log).contains("tool result"), "{}", out(&log));
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        stored.extend(std::fs::read(entry.path()).unwrap_or_default());
    }
    let needle = secret.as_bytes();
    assert!(
        !stored.windows(needle.len()).any(|w| w == needle),
        "the header value reached the database"
    );
    assert!(
        stored.windows(22).any(|w| w == b"RUNTAPE_TEST_WEB_TOKEN"),
        "the variable's name is stored"
    );

    let missing = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        err(&missing).contains("$RUNTAPE_TEST_WEB_TOKEN, which is not set"),
        "{}",
        err(&missing)
    );
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn sigkill_in_the_middle_of_an_mcp_call_resumes_to_the_same_result() {
    let (_dir, root) = canonical_tempdir();
    let calls = root.join("calls.log");
    let body = format!(
        r#"
tools = [{{"name": "slow", "inputSchema": {{"type": "object", "properties": {{"n": {{"type": "number"}}}}}}, "annotations": {{"readOnlyHint": True}}}}]
def call(req):
    key = req["params"].get("_meta", {{}}).get("runtape/idempotencyKey")
    with open({calls:?}, "a") as f:
        f.write(str(key) + "\n")
    time.sleep(float(open({pace:?}).read()))
    send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": "slow result " + str(req["params"]["arguments"]["n"])}}]}}}})
"#,
        calls = utf8(&calls),
        pace = utf8(&root.join("pace")),
    );
    std::fs::write(root.join("pace"), "5").expect("pace");
    let server = fake_server(&root, "slow.py", None, &body);
    let spec = write(
        &root,
        "spec.toml",
        &format!(
            r#"goal = "slow"
[[mcp]]
name = "s"
command = [{:?}]
{model}{agent}"#,
            utf8(&server),
            model = crate::support::spec::scripted_as(
                "p",
                r#"{ tool_calls = [{ name = "s__slow", arguments = { n = 7 } }] }, { text = "finished" }"#
            ),
            agent = crate::support::spec::agent("a", "p", &["s__*"], ""),
        ),
    );
    let db = root.join("runs.db");
    let mut child = on(&db)
        .args(["run", utf8(&spec), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let start = Instant::now();
    while std::fs::read_to_string(&calls)
        .unwrap_or_default()
        .lines()
        .count()
        < 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the call never reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let mut first_line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut first_line,
    )
    .expect("reads");
    let _ = child.wait();
    let run: serde_json::Value = serde_json::from_str(&first_line).expect("run line");
    let run = run["id"].as_str().expect("id").to_owned();

    std::fs::write(root.join("pace"), "0").expect("pace");
    let r = runtape(&db, &["resume", &run]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(out(&r).contains("answer: finished"), "{}", out(&r));
    let keys: Vec<String> = std::fs::read_to_string(&calls)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        keys.len(),
        2,
        "the read-only (so idempotent) call was performed again"
    );
    assert_eq!(keys[0], keys[1], "with the same idempotency key in _meta");
    assert!(keys[0].starts_with(&run), "{keys:?}");
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    let log = runtape(&db, &["log", &run]);
    assert!(out(&log).contains("tool result"), "{}", out(&log));

    // A cassette of the run replays in a fresh database with no server: its command now only
    // leaves a mark and fails.
    let tape = root.join("tape.json");
    let e = export(&db, &run, &tape);
    assert_eq!(e.status.code(), Some(0), "{}", text(&e));
    let (r, fresh, _) = replay_without_server(&server, &spec, &tape, "finished");
    assert_eq!(
        std::fs::read_to_string(&calls)
            .expect("log")
            .lines()
            .count(),
        2,
        "the replay called no server"
    );
    let result_of = |db: &Path, run: &str| {
        let rows = out(&runtape(db, &["log", run, "--json"]));
        let seq = rows
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
            .find(|r| r["event"] == "tool_returned")
            .and_then(|r| r["seq"].as_u64())
            .expect("a tool result");
        let view: serde_json::Value = serde_json::from_str(&out(&runtape(
            db,
            &["show", &format!("{run}@{seq}"), "--json"],
        )))
        .expect("json");
        view["event"]["body"]["outcome"].clone()
    };
    let replayed = run_id(&r);
    assert_eq!(result_of(&fresh, &replayed), result_of(&db, &run));
    assert_eq!(
        result_of(&db, &run)["value"],
        "slow result 7",
        "the recorded result"
    );
    let v = runtape(&fresh, &["verify", &replayed]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_tape_fork_serves_recorded_mcp_results_without_starting_the_server() {
    let (_dir, root) = canonical_tempdir();
    let starts = root.join("starts.log");
    let body = format!(
        r#"
with open({starts:?}, "a") as f:
    f.write("start\n")
tools = [{{"name": "answer", "inputSchema": {{"type": "object"}}, "annotations": {{"readOnlyHint": True}}}}]
def call(req):
    send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": "forty-two"}}]}}}})
"#,
        starts = utf8(&starts),
    );
    let server = fake_server(&root, "answer.py", None, &body);
    let replies = r#"[{ tool_calls = [{ name = "s__answer" }] }, { text = "done" }]"#;
    let (spec, db) = one_server_spec(&root, "ask", ("s", &server), replies, &["s__answer"], "");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = run_id(&o);
    assert_eq!(
        std::fs::read_to_string(&starts)
            .expect("log")
            .lines()
            .count(),
        1
    );

    let f = runtape(&db, &["fork", &format!("{run}@2"), "--tape"]);
    assert_eq!(f.status.code(), Some(0), "{}", text(&f));
    assert!(out(&f).contains("answer: done"), "{}", out(&f));
    assert_eq!(
        std::fs::read_to_string(&starts)
            .expect("log")
            .lines()
            .count(),
        1,
        "the fork was served from the tape: the server was not started"
    );
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0));
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn progress_notifications_reach_the_run_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let main = server_main("server-everything");
    let spec = write(
        dir.path(),
        "spec.toml",
        &format!(
            r#"goal = "wait"
[[mcp]]
name = "ev"
command = ["node", {:?}, "stdio"]
{model}{agent}"#,
            utf8(&main),
            model = crate::support::spec::scripted_as(
                "p",
                r#"{ tool_calls = [{ name = "ev__trigger-long-running-operation", arguments = { duration = 1, steps = 3 } }] }, { text = "done" }"#
            ),
            agent = crate::support::spec::agent(
                "a",
                "p",
                &["ev__trigger-long-running-operation", "ev__echo"],
                ""
            ),
        ),
    );
    let o = runtape(&dir.path().join("runs.db"), &["run", utf8(&spec), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let events: Vec<serde_json::Value> = out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let progress: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.progress")
        .collect();
    assert!(!progress.is_empty(), "{}", out(&o));
    assert_eq!(progress[0]["tool"], "ev__trigger-long-running-operation");
    assert_eq!(progress[0]["total"], 3.0);
    let call = events
        .iter()
        .find(|e| e["type"] == "tool.call")
        .expect("the call");
    assert_eq!(progress[0]["call_id"], call["call_id"]);
    assert_eq!(progress[0]["run"], call["run"]);
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_resume_after_the_server_dropped_a_tool_shows_it_to_the_model() {
    let (_dir, root) = canonical_tempdir();
    let catalog = root.join("tools.json");
    std::fs::write(
        &catalog,
        r#"[{"name": "deploy", "inputSchema": {"type": "object"}}, {"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]"#,
    )
    .expect("tools");
    let body = format!(
        r#"
tools = json.load(open({catalog:?}))
def call(req):
    name = req["params"]["name"]
    if any(t["name"] == name for t in tools):
        send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": name + " ok"}}]}}}})
    else:
        send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": "MCP error -32602: Tool " + name + " not found"}}], "isError": True}}}})
"#,
        catalog = utf8(&catalog),
    );
    let server = fake_server(&root, "ops.py", None, &body);
    let replies = r#"[{ tool_calls = [{ name = "ops__deploy" }] }, { text = "gave up" }]"#;
    let (spec, db) = one_server_spec(&root, "deploy", ("ops", &server), replies, &["ops__*"], "");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        out(&o).contains("waiting for a person"),
        "an unannotated tool needs approval: {}",
        out(&o)
    );
    let run = run_id(&o);

    // Between the two processes the server stops offering `deploy`.
    std::fs::write(
        &catalog,
        r#"[{"name": "status", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]"#,
    )
    .expect("tools");
    let r = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(out(&r).contains("answer: gave up"), "{}", out(&r));
    let log = out(&runtape(&db, &["log", &run]));
    assert!(
        log.contains("tool error of ops__deploy: MCP error -32602: Tool deploy not found"),
        "the model saw the tool was gone: {log}"
    );
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", out(&v));
}

#[test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
fn a_stdio_server_is_started_without_the_providers_key_variables() {
    let (_dir, root) = canonical_tempdir();
    let env_log = root.join("env.json");
    let body = format!(
        r#"
import os
json.dump(sorted(os.environ.keys()), open({env_log:?}, "w"))
tools = []
def call(req):
    pass
"#,
        env_log = utf8(&env_log),
    );
    let server = fake_server(&root, "env.py", None, &body);
    let spec = write(
        &root,
        "spec.toml",
        &format!(
            "[[mcp]]\nname = \"s\"\ncommand = [{:?}]\nenv_all = true\n[[providers]]\nname = \"cloud\"\nkind = \"openai\"\nmodel = \"m\"\napi_key_env = \"X_CLOUD_ACCESS\"\n[[providers]]\nname = \"p\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"p\"\n",
            utf8(&server)
        ),
    );
    let o = bin()
        .args(["tools", utf8(&spec)])
        // Not shaped like a credential: only the provider's naming it keeps it out.
        .env("X_CLOUD_ACCESS", "sk-never-in-a-tool")
        .env("X_TEST_HARMLESS", "1")
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(&env_log).expect("env")).expect("json");
    assert!(
        names.iter().any(|n| n == "X_TEST_HARMLESS"),
        "env_all passes what is no credential: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n == "X_CLOUD_ACCESS"),
        "the provider key reached the MCP server: {names:?}"
    );
}
