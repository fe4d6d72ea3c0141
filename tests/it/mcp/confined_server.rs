//! A stdio MCP server declared with `confine` runs under it: its `peek` tool cannot read a key
//! outside what the confinement allows and its `dial` tool cannot open a TCP connection, while
//! it still reads the file the confinement names; the same server unconfined reaches both (so
//! the denials are the confinement's). A real python3 server, a real listener on 127.0.0.1.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use runtape::tool::Tool;
use runtape::tool::confine::Confine;
use runtape::tool::mcp::{self, McpHub, McpTransport};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::cli::utf8;
use crate::support::mcp::{fake_server, listed_tool, stdio};

/// A server whose `peek` returns the text of the file `path` names (or the error), and whose
/// `dial` connects to 127.0.0.1:`port` and says whether it could.
fn reaching_server(dir: &Path, port: u16) -> PathBuf {
    let body = format!(
        r#"
import socket
tools = [{{"name": "peek", "inputSchema": {{"type": "object"}}, "annotations": {{"readOnlyHint": True}}}},
         {{"name": "dial", "inputSchema": {{"type": "object"}}, "annotations": {{"readOnlyHint": True}}}}]
def call(req):
    if req["params"]["name"] == "peek":
        try:
            text = open(req["params"]["arguments"]["path"]).read()
        except Exception as e:
            text = "refused: " + type(e).__name__
    else:
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
            text = "connected"
        except Exception as e:
            text = "refused: " + type(e).__name__
    send({{"jsonrpc": "2.0", "id": req["id"], "result": {{"content": [{{"type": "text", "text": text}}]}}}})
"#
    );
    fake_server(dir, "reach.py", None, &body)
}

/// What `peek` of `key`, `peek` of `data` and `dial` answered, with the server under
/// `confine`.
async fn reach(dir: &Path, port: u16, confine: Option<Confine>) -> [Value; 3] {
    let server = reaching_server(dir, port);
    let mut config = stdio("reach", utf8(&server), &[], dir);
    config.init_timeout_ms = Some(20_000);
    if let McpTransport::Stdio { confine: c, .. } = &mut config.transport {
        *c = confine;
    }
    let hub = McpHub::new();
    let listed = mcp::list_all(&hub, &[config], &[]).await.expect("starts");
    let call = |tool: &str, args: Value| {
        let t = listed_tool(&listed[0], tool);
        async move {
            t.invoke(args, super::bad_servers::ctx(CancellationToken::new()))
                .await
                .expect("answers")
        }
    };
    let key = dir.join("home/.ssh/id_ed25519");
    let data = dir.join("data/in.txt");
    let out = [
        call("reach__peek", json!({"path": utf8(&key)})).await,
        call("reach__peek", json!({"path": utf8(&data)})).await,
        call("reach__dial", json!({})).await,
    ];
    hub.shutdown().await;
    out
}

fn setting() -> (tempfile::TempDir, TcpListener) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("home/.ssh")).expect("mkdir");
    std::fs::write(dir.path().join("home/.ssh/id_ed25519"), "PRIVATE-KEY").expect("key");
    std::fs::create_dir_all(dir.path().join("data")).expect("mkdir");
    std::fs::write(dir.path().join("data/in.txt"), "allowed").expect("data");
    (dir, TcpListener::bind("127.0.0.1:0").expect("binds"))
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn a_confined_mcp_server_reads_only_what_it_is_allowed_and_dials_nothing() {
    let (dir, listener) = setting();
    let port = listener.local_addr().expect("addr").port();
    // The server's own script lives in `dir`: readable, as a user would allow it.
    let confine = Confine {
        read: vec![dir.path().join("reach.py"), dir.path().join("data")],
        ..Confine::default()
    };
    let [key, data, dial] = reach(dir.path(), port, Some(confine)).await;
    assert_eq!(key, json!("refused: PermissionError"));
    assert_eq!(data, json!("allowed"));
    assert_eq!(dial, json!("refused: PermissionError"));
}

#[tokio::test]
#[ignore = "needs Python 3 (the scripted MCP test servers): tests/extras/install.sh python"]
async fn the_same_server_unconfined_reaches_both() {
    let (dir, listener) = setting();
    let port = listener.local_addr().expect("addr").port();
    let [key, data, dial] = reach(dir.path(), port, None).await;
    assert_eq!(key, json!("PRIVATE-KEY"));
    assert_eq!(data, json!("allowed"));
    assert_eq!(dial, json!("connected"));
}
