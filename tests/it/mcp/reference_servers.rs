//! runtape's MCP client against the real reference servers from npm (installed by
//! tests/mcp_servers/install.sh): stdio for server-filesystem and server-everything, and
//! Streamable HTTP for server-everything. server-everything's `get-env` is never called.

use crate::support;

use runtape::machine::{AgentId, RunId};
use runtape::tool::mcp::{self, McpHub, McpServerConfig, McpTransport};
use runtape::tool::{Tool, ToolContext};
use serde_json::{Value, json};
use support::mcp::{descendants_in, everything, everything_http, filesystem, zombies};
use tokio_util::sync::CancellationToken;

fn ctx(call: &str) -> ToolContext {
    ToolContext {
        run_id: RunId::new("run-mcp"),
        agent: AgentId::from("a"),
        call_id: call.into(),
        idempotency_key: format!("run-mcp/{call}"),
        lease_epoch: 1,
        cancel: CancellationToken::new(),
    }
}

use support::mcp::listed_tool as tool;

#[tokio::test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
async fn filesystem_server_tools_are_listed_flagged_and_called_over_stdio() {
    let sandbox = tempfile::tempdir().expect("tempdir");
    let dir = sandbox.path().canonicalize().expect("canonical");
    std::fs::write(dir.join("hello.txt"), "hello from the sandbox\n").expect("write");
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[filesystem("fs", &dir)], &[])
        .await
        .expect("the filesystem server starts");
    let fs = &listed[0];
    assert_eq!(
        fs.protocol, "2025-11-25",
        "asked for the newest with initialize, got it"
    );
    assert!(
        fs.server_info.starts_with("secure-filesystem-server"),
        "{}",
        fs.server_info
    );

    let read = tool(fs, "fs__read_text_file");
    assert!(read.read_only() && read.idempotent());
    assert!(!read.info().requires_approval);
    let write = tool(fs, "fs__write_file");
    assert!(!write.read_only() && write.idempotent() && write.info().requires_approval);
    let edit = tool(fs, "fs__edit_file");
    assert!(!edit.idempotent() && edit.info().requires_approval);
    assert!(fs.catalog.skipped.is_empty(), "{:?}", fs.catalog.skipped);

    let path = dir.join("hello.txt");
    let value = read
        .invoke(json!({"path": path}), ctx("c1"))
        .await
        .expect("reads inside the sandbox");
    // The server sends the text as `content` and again as `structuredContent`: the model
    // gets it once.
    assert_eq!(value, Value::from("hello from the sandbox\n"));

    let denied = read
        .invoke(json!({"path": "/etc/passwd"}), ctx("c2"))
        .await
        .expect_err("isError: true is a tool error");
    assert!(denied.message.contains("Access denied"), "{denied:?}");

    write
        .invoke(
            json!({"path": dir.join("out.txt"), "content": "written"}),
            ctx("c3"),
        )
        .await
        .expect("writes");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).expect("file"),
        "written"
    );

    // Other tests of this binary start and reap processes of their own meanwhile: only this
    // test's server processes count.
    let servers = descendants_in(&dir);
    assert!(!servers.is_empty(), "the server is running");
    hub.shutdown().await;
    assert_eq!(
        descendants_in(&dir),
        Vec::<u32>::new(),
        "no server process is left"
    );
    assert_eq!(
        zombies()
            .into_iter()
            .filter(|pid| servers.contains(pid))
            .collect::<Vec<_>>(),
        Vec::<u32>::new(),
        "every server process was reaped"
    );
}

#[tokio::test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
async fn everything_server_results_keep_structure_summarise_images_and_report_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[everything("ev", dir.path())], &[])
        .await
        .expect("server-everything starts");
    let ev = &listed[0];
    assert!(ev.catalog.tools.iter().any(|t| t.name == "ev__get-sum"));

    let echo = tool(ev, "ev__echo");
    assert_eq!(
        echo.invoke(json!({"message": "hi"}), ctx("e1"))
            .await
            .expect("echo"),
        Value::from("Echo: hi")
    );

    let structured = tool(ev, "ev__get-structured-content")
        .invoke(json!({"location": "Chicago"}), ctx("e2"))
        .await
        .expect("structured");
    // Its text `content` is the structured result serialised: given once, as that text.
    let text = structured.as_str().expect("the text content");
    let parsed: Value = serde_json::from_str(text).expect("the text is the structured JSON");
    assert!(parsed.is_object(), "{structured}");

    let image = tool(ev, "ev__get-tiny-image")
        .invoke(json!({}), ctx("e3"))
        .await
        .expect("image");
    let blocks = image["content"].as_array().expect("blocks");
    let img = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .expect("the image is summarised, not dropped");
    assert_eq!(img["mimeType"], "image/png");
    assert!(img["bytes"].as_u64().expect("size") > 0);
    assert!(img.get("data").is_none());

    let links = tool(ev, "ev__get-resource-links")
        .invoke(json!({"count": 2}), ctx("e4"))
        .await
        .expect("links");
    let kept = links["content"]
        .as_array()
        .expect("blocks")
        .iter()
        .filter(|b| b["type"] == "resource_link")
        .count();
    assert_eq!(kept, 2, "{links}");

    let mut progress = mcp::progress_events();
    let long = tool(ev, "ev__trigger-long-running-operation");
    long.invoke(json!({"duration": 1, "steps": 3}), ctx("e5"))
        .await
        .expect("long operation");
    let mut seen = Vec::new();
    while let Ok(p) = progress.try_recv() {
        if p.call_id == "e5" {
            seen.push(p);
        }
    }
    assert!(
        !seen.is_empty(),
        "progress notifications reach the progress channel"
    );
    assert_eq!(seen[0].tool, "ev__trigger-long-running-operation");
    assert_eq!(seen[0].run, RunId::new("run-mcp"));
    hub.shutdown().await;
    assert_eq!(descendants_in(dir.path()), Vec::<u32>::new());
}

#[tokio::test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
async fn everything_server_over_streamable_http() {
    let (mut server, port) = everything_http();

    let config = McpServerConfig {
        name: "web".into(),
        transport: McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers_env: [(
                "X-Test-Token".to_owned(),
                "RUNTAPE_TEST_MCP_TOKEN".to_owned(),
            )]
            .into_iter()
            .collect(),
        },
        init_timeout_ms: Some(20_000),
        timeout_ms: Some(10_000),
        tools: Default::default(),
        results: Default::default(),
    };
    let hub = McpHub::new();
    let missing = mcp::list_all(&hub, std::slice::from_ref(&config), &[])
        .await
        .err()
        .expect("an unset header variable is an error");
    assert!(
        missing
            .to_string()
            .contains("$RUNTAPE_TEST_MCP_TOKEN, which is not set"),
        "{missing}"
    );
    let config = McpServerConfig {
        transport: McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers_env: Default::default(),
        },
        ..config
    };
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config], &[])
        .await
        .expect("connects over HTTP");
    let web = &listed[0];
    let sum = tool(web, "web__get-sum")
        .invoke(json!({"a": 2, "b": 3}), ctx("h1"))
        .await
        .expect("get-sum over HTTP");
    assert_eq!(sum, Value::from("The sum of 2 and 3 is 5."));
    hub.shutdown().await;
    let _ = server.kill();
    let _ = server.wait();
}
