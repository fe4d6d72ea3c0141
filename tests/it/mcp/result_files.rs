//! An MCP tool result's image and embedded PDF resource, from a real stdio server (a `sh`
//! script), reach the model as files on each wire format (exact parts asserted), are stored
//! once as blobs that `verify` covers (and refuses altered), travel in the cassette so a replay
//! without the server stores them too, and reach a model that takes no files as the text
//! summary plus a placeholder and a warning.

use std::path::{Path, PathBuf};
use std::process::Output;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::cli::{err, first_id, out, runtape_keyed, utf8};
use crate::support::mcp::{replay_without_server, script};
use crate::support::provider::{Behaviour, MockServer, own_cases_dir};

/// The PNG of Ollama's documented image request, kept in
/// `tests/fixtures/providers/ollama-chat-image-input-nonstream`.
fn png() -> Vec<u8> {
    let path = own_cases_dir()
        .join("ollama-chat-image-input-nonstream")
        .join("request.json");
    let request: Value = serde_json::from_slice(&std::fs::read(path).expect("the case")).unwrap();
    b64d(request["messages"][0]["images"][0].as_str().expect("image"))
}

const PDF: &[u8] =
    b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn b64d(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

/// A stdio MCP server in `sh` with one read-only tool, `snap`, whose result is a text, the
/// PNG as an `image` block and the PDF as an embedded `resource` blob (read from
/// `result.json` beside it).
fn camera(dir: &Path) -> PathBuf {
    let result = json!({"content": [
        {"type": "text", "text": "two files"},
        {"type": "image", "data": b64(&png()), "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///shots/report.pdf", "mimeType": "application/pdf", "blob": b64(PDF)}}
    ]});
    std::fs::write(dir.join("result.json"), result.to_string()).expect("writes");
    let body = r#"#!/bin/sh
here=$(dirname "$0")
while IFS= read -r line; do
  case "$line" in *'"id":'*) ;; *) continue ;; esac
  id=$(printf '%s\n' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*)
      version=$(printf '%s\n' "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"%s","capabilities":{"tools":{}},"serverInfo":{"name":"cam","version":"1"}}}\n' "$id" "$version" ;;
    *'"method":"tools/list"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"snap","description":"takes a picture","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}\n' "$id" ;;
    *'"method":"tools/call"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$(cat "$here/result.json")" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}\n' "$id" ;;
  esac
done
"#;
    script(dir, "camera.sh", body)
}

/// A model server speaking `kind` that calls `cam__snap` first and answers "done" once the
/// request carries the tool's result.
async fn model(kind: &str) -> MockServer {
    let (call, done, answered) = match kind {
        "anthropic" => (
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "cam__snap", "input": {}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}}),
            json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "done"}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}}),
            "\"tool_result\"",
        ),
        "openai-responses" => (
            json!({"id": "resp_1", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1",
                    "name": "cam__snap", "arguments": "{}", "status": "completed"}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
            json!({"id": "resp_2", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}]}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
            "\"function_call_output\"",
        ),
        _ => (
            json!({"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                    "type": "function", "function": {"name": "cam__snap", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
            json!({"id": "c2", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
            "\"role\":\"tool\"",
        ),
    };
    let (call, done) = (call.to_string(), done.to_string());
    MockServer::start(move |r| {
        let body = String::from_utf8_lossy(&r.body).into_owned();
        Behaviour::json(
            200,
            if body.contains(answered) {
                &done
            } else {
                &call
            },
        )
    })
    .await
}

/// A directory with the camera server and a spec whose one agent, on `kind`'s `model`
/// served by `server`, may call `cam__snap`. The directory, the spec and the database.
fn setup(server: &MockServer, kind: &str, model: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let cam = camera(dir);
    let url = server.url();
    let base = match kind {
        "openai" | "openai-responses" => format!("{url}/v1"),
        _ => url,
    };
    let spec = format!(
        "goal = \"look\"\n[[mcp]]\nname = \"cam\"\ncommand = [{:?}]\n\
         [[providers]]\nname = \"p\"\nkind = \"{kind}\"\nmodel = \"{model}\"\n\
         base_url = \"{base}\"\napi_key_env = \"TEST_KEY\"\nstream = false\nmax_tokens = 100\n\
         [[agents]]\nid = \"a\"\nprovider = \"p\"\ntools = [\"cam__*\"]\n",
        utf8(&cam)
    );
    std::fs::write(dir.join("spec.toml"), spec).expect("writes");
    let (spec, db) = (dir.join("spec.toml"), dir.join("runs.db"));
    (tmp, spec, db)
}

/// Runs the spec off the async runtime; the output.
async fn run(db: &Path, spec: &Path) -> Output {
    let (db, spec) = (db.to_owned(), spec.to_owned());
    tokio::task::spawn_blocking(move || runtape_keyed(&db, &["run", utf8(&spec), "look"]))
        .await
        .unwrap()
}

/// The body of the request that answered the tool (the second).
fn answering(server: &MockServer) -> Value {
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "a call and its answer");
    sent[1].json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_image_and_pdf_reach_every_wire_format_in_its_vendors_shape() {
    let (png, pdf) = (b64(&png()), b64(PDF));
    for (kind, model) in [
        ("openai", "gpt-4o"),
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-4o"),
    ] {
        let server = self::model(kind).await;
        let (_dir, spec, db) = setup(&server, kind, model);
        let o = run(&db, &spec).await;
        assert_eq!(o.status.code(), Some(0), "{kind}: {}", err(&o));
        assert!(out(&o).contains("done"), "{kind}: {}", out(&o));
        assert!(!err(&o).contains("does not take"), "{kind}: {}", err(&o));
        let body = answering(&server);
        match kind {
            // Chat completions take only text in a tool message: the files follow the batch
            // in one user message.
            "openai" => {
                let m = &body["messages"];
                assert_eq!(m[2]["role"], "tool", "{m}");
                assert!(
                    m[2]["content"].as_str().unwrap().contains("attached"),
                    "{m}"
                );
                assert_eq!(m[3]["role"], "user", "{m}");
                assert_eq!(
                    m[3]["content"],
                    json!([
                        {"type": "text", "text": "[files from cam__snap]"},
                        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
                        {"type": "file", "file": {"filename": "report.pdf", "file_data": format!("data:application/pdf;base64,{pdf}")}},
                    ]),
                    "{m}"
                );
            }
            "anthropic" => {
                let result = &body["messages"][2]["content"][0];
                assert_eq!(result["type"], "tool_result", "{body}");
                let parts = result["content"].as_array().expect("parts");
                assert_eq!(parts[0]["type"], "text", "{result}");
                assert_eq!(
                    parts[1..],
                    [
                        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}),
                        json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}),
                    ],
                    "{result}"
                );
            }
            _ => {
                let output = body["input"]
                    .as_array()
                    .expect("input")
                    .iter()
                    .find(|i| i["type"] == "function_call_output")
                    .expect("the tool's output")
                    .clone();
                let parts = output["output"].as_array().expect("a list output");
                assert_eq!(parts[0]["type"], "input_text", "{output}");
                assert_eq!(
                    parts[1..],
                    [
                        json!({"type": "input_image", "detail": "auto", "image_url": format!("data:image/png;base64,{png}")}),
                        json!({"type": "input_file", "filename": "report.pdf", "file_data": format!("data:application/pdf;base64,{pdf}")}),
                    ],
                    "{output}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_takes_no_files_gets_the_summary_a_placeholder_and_a_warning() {
    let server = model("openai").await;
    let (_dir, spec, db) = setup(&server, "openai", "gpt-3.5-turbo");
    let o = run(&db, &spec).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let m = answering(&server)["messages"].clone();
    assert_eq!(
        m.as_array().map(Vec::len),
        Some(3),
        "no user message of files: {m}"
    );
    let text = m[2]["content"].as_str().expect("text only");
    assert!(
        text.contains("\"mimeType\":\"image/png\""),
        "the summary: {text}"
    );
    assert!(
        text.contains("[image attachment.png (image/png, 3648 bytes) not shown"),
        "{text}"
    );
    assert!(text.contains("[PDF report.pdf (application/pdf,"), "{text}");
    assert!(!text.contains(&b64(PDF)), "no bytes: {text}");
    let stderr = err(&o);
    assert!(
        stderr.contains("gpt-3.5-turbo does not take attachment.png (image/png), report.pdf"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_covers_the_files_a_replay_stores_them_and_an_altered_one_is_refused() {
    let server = model("anthropic").await;
    let (dir, spec, db) = setup(&server, "anthropic", "claude-sonnet-4-5");
    let o = run(&db, &spec).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let run = first_id(&out(&o));
    let verified = runtape_keyed(&db, &["verify", &run]);
    assert_eq!(verified.status.code(), Some(0), "{}", err(&verified));
    // Each file is named by the tool's result and by the tool message: four checks, two blobs.
    assert!(
        out(&verified).contains(", 4 attached files"),
        "{}",
        out(&verified)
    );
    // `show` lists them under the tool's result (and under the tool message).
    let shown: String = (1..=8)
        .map(|seq| out(&runtape_keyed(&db, &["show", &format!("{run}@{seq}")])))
        .collect();
    let pdf = format!(
        "attached report.pdf (application/pdf, {} bytes) blob {}",
        PDF.len(),
        blake3::hash(PDF).to_hex()
    );
    assert!(shown.matches(&pdf).count() >= 2, "{shown}");
    // The cassette carries the bytes: a replay without the server stores and verifies them.
    let tape = dir.path().join("tape.json");
    let exported = runtape_keyed(&db, &["cassette", "export", &run, "-o", utf8(&tape)]);
    assert_eq!(exported.status.code(), Some(0), "{}", err(&exported));
    drop(server);
    let cam = dir.path().join("camera.sh");
    let (replayed, fresh, _) = replay_without_server(&cam, &spec, &tape, "done");
    let again = first_id(&out(&replayed));
    let v = runtape_keyed(&fresh, &["verify", &again]);
    assert_eq!(v.status.code(), Some(0), "{}{}", out(&v), err(&v));
    assert!(out(&v).contains(", 4 attached files"), "{}", out(&v));
    // One byte cut from the stored PDF: verify refuses the run.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let changed = conn
        .execute(
            "UPDATE blobs SET bytes = substr(bytes, 1, length(bytes) - 1) WHERE hash = ?1",
            [blake3::hash(PDF).as_bytes().to_vec()],
        )
        .expect("updates");
    assert_eq!(changed, 1, "the file is one blob");
    drop(conn);
    let refused = runtape_keyed(&db, &["verify", &run]);
    assert_ne!(refused.status.code(), Some(0), "{}", out(&refused));
    let said = format!("{}{}", out(&refused), err(&refused));
    assert!(
        said.contains("attachment blob") && said.contains("blobs.bytes"),
        "{said}"
    );
}
