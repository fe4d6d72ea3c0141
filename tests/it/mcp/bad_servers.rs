//! Misbehaving MCP servers (small scripts written into a temp dir): each gives one clear line
//! when it is started, or an error result when it is called; nothing hangs and the process is
//! left with no server process behind.

use crate::support;

use std::path::Path;

use crate::support::cli::utf8;
use runtape::machine::{AgentId, RunId};
use runtape::tool::mcp::{self, McpHub, McpServerConfig};
use runtape::tool::{Tool, ToolContext};
use serde_json::json;
use support::mcp::{descendants_in, fake_server, listed_tool, script, stdio};
use tokio_util::sync::CancellationToken;

const ONE_TOOL: &str = r#"
tools = [{"name": "t", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]
def call(req):
    send({"jsonrpc": "2.0", "id": req["id"], "result": {"content": [{"type": "text", "text": "ok"}]}})
"#;

pub(super) fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        run_id: RunId::new("r"),
        agent: AgentId::from("a"),
        call_id: "c".into(),
        idempotency_key: "r/1/0".into(),
        lease_epoch: 1,
        cancel,
    }
}

fn config(dir: &Path, program: &Path, init_ms: u64) -> McpServerConfig {
    let mut c = stdio("bad", utf8(program), &[], dir);
    c.init_timeout_ms = Some(init_ms);
    c
}

async fn start_error(config: McpServerConfig) -> String {
    let hub = McpHub::new();
    let e = mcp::list_all(&hub, &[config], &[])
        .await
        .err()
        .expect("the server must not start")
        .to_string();
    hub.shutdown().await;
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(e.starts_with("MCP server `bad`: "), "names the server: {e}");
    e
}

#[tokio::test]
async fn a_program_that_does_not_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = start_error(config(
        dir.path(),
        Path::new("runtape-no-such-mcp-server"),
        5000,
    ))
    .await;
    assert!(
        e.contains("cannot start `runtape-no-such-mcp-server`"),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_that_exits_at_once_shows_its_status_and_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = script(
        dir.path(),
        "dies.sh",
        "#!/bin/sh\necho 'fatal: no config file' >&2\nexit 3\n",
    );
    let e = start_error(config(dir.path(), &s, 5000)).await;
    assert!(e.contains("exited during startup"), "{e}");
    assert!(e.contains("exit status: 3"), "{e}");
    assert!(e.contains("fatal: no config file"), "{e}");
}

#[tokio::test]
async fn a_server_printing_garbage_is_told_apart_from_a_silent_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = script(
        dir.path(),
        "garbage.sh",
        "#!/bin/sh\nwhile read line; do echo \"hello, I am not JSON\"; done\n",
    );
    let e = start_error(config(dir.path(), &garbage, 1000)).await;
    assert!(
        e.contains("did not answer `initialize` within 1000 ms"),
        "{e}"
    );
    assert!(
        e.contains("not JSON-RPC (first: `hello, I am not JSON`)"),
        "{e}"
    );

    let silent = script(dir.path(), "silent.sh", "#!/bin/sh\nexec sleep 600\n");
    let e = start_error(config(dir.path(), &silent, 500)).await;
    assert!(
        e.contains("did not answer `initialize` within 500 ms"),
        "{e}"
    );
    assert!(e.contains("raise `init_timeout_ms`"), "{e}");
    assert_eq!(descendants_in(dir.path()), Vec::<u32>::new(), "killed");
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn an_unsupported_protocol_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = fake_server(dir.path(), "old.py", Some("1999-01-01"), ONE_TOOL);
    let e = start_error(config(dir.path(), &s, 10_000)).await;
    assert!(
        e.contains("protocol version `1999-01-01`, which runtape does not support"),
        "{e}"
    );
    assert!(e.contains("2025-11-25"), "lists what it speaks: {e}");
    assert_eq!(descendants_in(dir.path()), Vec::<u32>::new(), "closed");
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn an_invalid_tool_schema_skips_that_tool_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = r#"
tools = [
  {"name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"type": 12}}}},
  {"name": "fine", "inputSchema": {"type": "object"}},
]
def call(req):
    send({"jsonrpc": "2.0", "id": req["id"], "result": {"content": []}})
"#;
    let s = fake_server(dir.path(), "schema.py", None, body);
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config(dir.path(), &s, 10_000)], &[])
        .await
        .expect("starts");
    let names: Vec<&str> = listed[0]
        .catalog
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["bad__fine"]);
    assert_eq!(listed[0].catalog.skipped.len(), 1);
    assert!(
        listed[0].catalog.skipped[0]
            .1
            .contains("not a valid JSON Schema")
    );
    hub.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn a_50_mb_result_fails_the_call_and_the_server_stays_usable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = r#"
tools = [{"name": "big", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
         {"name": "small", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]
def call(req):
    if req["params"]["name"] == "big":
        send({"jsonrpc": "2.0", "id": req["id"], "result": {"content": [{"type": "text", "text": "x" * 50_000_000}]}})
    else:
        send({"jsonrpc": "2.0", "id": req["id"], "result": {"content": [{"type": "text", "text": "small"}]}})
"#;
    let s = fake_server(dir.path(), "big.py", None, body);
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config(dir.path(), &s, 10_000)], &[])
        .await
        .expect("starts");
    let e = listed_tool(&listed[0], "bad__big")
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect_err("too big");
    assert!(e.message.contains("more than the"), "{}", e.message);
    assert!(e.message.contains("50000"), "says how big: {}", e.message);
    let ok = listed_tool(&listed[0], "bad__small")
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect("the next call works");
    assert_eq!(ok, json!("small"));
    hub.shutdown().await;
}

/// A server whose `hang` tool never answers, logging every notification to `notes.log`.
fn hanging_server(dir: &Path) -> std::path::PathBuf {
    let log = dir.join("notes.log");
    let body = format!(
        r#"
tools = [{{"name": "hang", "inputSchema": {{"type": "object"}}}}]
def call(req):
    pass
def note(req):
    with open({log:?}, "a") as f:
        f.write(json.dumps(req) + "\n")
"#,
        log = utf8(&log)
    );
    fake_server(dir, "hang.py", None, &body)
}

fn cancelled_notes(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("notes.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|n| n["method"] == "notifications/cancelled")
        .collect()
}

async fn wait_for_cancel_note(dir: &Path) -> Vec<serde_json::Value> {
    for _ in 0..200 {
        let notes = cancelled_notes(dir);
        if !notes.is_empty() {
            return notes;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    Vec::new()
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn a_hanging_call_times_out_and_the_server_is_told_to_cancel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = hanging_server(dir.path());
    let mut cfg = config(dir.path(), &s, 10_000);
    cfg.timeout_ms = Some(300);
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[cfg], &[]).await.expect("starts");
    let tool = listed_tool(&listed[0], "bad__hang");
    assert!(
        tool.info().requires_approval,
        "no annotations: destructive by default"
    );
    let e = tool
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect_err("times out");
    assert!(e.message.contains("timed out after 300 ms"), "{e:?}");
    let notes = wait_for_cancel_note(dir.path()).await;
    assert_eq!(notes.len(), 1, "one notifications/cancelled");
    assert_eq!(notes[0]["params"]["reason"], "timed out");
    hub.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn cancelling_a_run_sends_notifications_cancelled_for_the_call_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = hanging_server(dir.path());
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config(dir.path(), &s, 10_000)], &[])
        .await
        .expect("starts");
    let tool = listed_tool(&listed[0], "bad__hang");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let e = tool
        .invoke(json!({}), ctx(cancel))
        .await
        .expect_err("cancelled");
    assert!(e.message.contains("was cancelled"), "{}", e.message);
    let notes = wait_for_cancel_note(dir.path()).await;
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0]["params"]["reason"], "the run was cancelled");
    assert!(notes[0]["params"]["requestId"].is_number());

    // Dropping a call's future (the engine does so on its own timeout) cancels it too.
    let dropped = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        tool.invoke(json!({}), ctx(CancellationToken::new())),
    )
    .await;
    assert!(dropped.is_err(), "still hanging when dropped");
    for _ in 0..200 {
        if cancelled_notes(dir.path()).len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(cancelled_notes(dir.path()).len(), 2);
    hub.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn a_server_that_keeps_dying_is_restarted_once_then_given_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let starts = dir.path().join("starts.log");
    let body = format!(
        r#"
with open({starts:?}, "a") as f:
    f.write("start\n")
tools = [{{"name": "crash", "inputSchema": {{"type": "object"}}, "annotations": {{"readOnlyHint": False, "destructiveHint": False}}}}]
def call(req):
    sys.stderr.write("crashing on purpose\n"); sys.stderr.flush()
    sys.exit(7)
"#,
        starts = utf8(&starts)
    );
    let s = fake_server(dir.path(), "crash.py", None, &body);
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config(dir.path(), &s, 10_000)], &[])
        .await
        .expect("starts");
    let tool = listed_tool(&listed[0], "bad__crash");
    let first = tool
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect_err("died");
    assert!(
        first.message.contains("stopped during the call"),
        "{first:?}"
    );
    assert!(first.message.contains("may or may not have taken effect"));
    let second = tool
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect_err("died again after its restart");
    assert!(
        second.message.contains("stopped during the call"),
        "{second:?}"
    );
    let third = tool
        .invoke(json!({}), ctx(CancellationToken::new()))
        .await
        .expect_err("given up");
    assert!(third.message.contains("is unavailable"), "{third:?}");
    assert!(third.message.contains("not restarted again"), "{third:?}");
    let count = std::fs::read_to_string(&starts)
        .expect("log")
        .lines()
        .count();
    assert_eq!(count, 2, "started once, restarted once, then no more");
    hub.shutdown().await;
    assert_eq!(descendants_in(dir.path()), Vec::<u32>::new());
}
