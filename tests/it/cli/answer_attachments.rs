//! `runtape resume RUN --input TEXT --attach FILE`: a person's answer carries an image to the
//! model (OpenAI chat over HTTP on 127.0.0.1, the exact parts asserted), stored once as a
//! blob that `verify` covers; a bad file is one line, exit 2, and the run still waits.

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::cli::{err, first_id, out, runtape_keyed, utf8};
use crate::support::provider::{Behaviour, MockServer, own_cases_dir};

/// The PNG of Ollama's documented image request (`tests/fixtures/providers`).
fn png() -> Vec<u8> {
    let path = own_cases_dir()
        .join("ollama-chat-image-input-nonstream")
        .join("request.json");
    let request: Value = serde_json::from_slice(&std::fs::read(path).expect("the case")).unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(request["messages"][0]["images"][0].as_str().expect("image"))
        .expect("base64")
}

fn status_of(db: &Path, run: &str) -> String {
    rusqlite::Connection::open(db)
        .expect("opens")
        .query_row("SELECT status FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .expect("run row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_carries_an_image_to_the_model_and_verify_covers_it() {
    let call = json!({"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "ask_person", "arguments": "{\"question\":\"Which one?\"}"}}]},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    .to_string();
    let done =
        json!({"id": "c2", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "seen"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        .to_string();
    let server = MockServer::start(move |r| {
        let body = String::from_utf8_lossy(&r.body).into_owned();
        Behaviour::json(
            200,
            if body.contains("\"role\":\"tool\"") {
                &done
            } else {
                &call
            },
        )
    })
    .await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_owned();
    let spec = format!(
        "goal = \"pick\"\n[[providers]]\nname = \"p\"\nkind = \"openai\"\nmodel = \"gpt-4o\"\n\
         base_url = \"{}/v1\"\napi_key_env = \"TEST_KEY\"\nstream = false\nmax_tokens = 100\n\
         [[tools]]\nname = \"ask_person\"\ndescription = \"Ask the person\"\nkind = \"human\"\n\
         schema = {{ type = \"object\", properties = {{ question = {{ type = \"string\" }} }}, required = [\"question\"] }}\n\
         [[agents]]\nid = \"a\"\nprovider = \"p\"\ntools = [\"ask_person\"]\n",
        server.url()
    );
    std::fs::write(dir.join("spec.toml"), spec).expect("writes");
    std::fs::write(dir.join("shot.png"), png()).expect("writes");
    std::fs::write(dir.join("notes.png"), "not an image").expect("writes");
    let db = dir.join("runs.db");
    let requests = tokio::task::spawn_blocking(move || {
        let o = runtape_keyed(&db, &["run", utf8(&dir.join("spec.toml"))]);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let run = first_id(&out(&o));
        assert_eq!(status_of(&db, &run), "awaiting_input");
        // A file of another kind: one line, exit 2, and the run still waits.
        let bad = runtape_keyed(
            &db,
            &[
                "resume",
                &run,
                "--input",
                "this one",
                "--attach",
                utf8(&dir.join("notes.png")),
            ],
        );
        assert_eq!(bad.status.code(), Some(2), "{}", err(&bad));
        assert_eq!(err(&bad).trim_end().lines().count(), 1, "{}", err(&bad));
        assert!(err(&bad).contains("not an image or PDF"), "{}", err(&bad));
        assert_eq!(status_of(&db, &run), "awaiting_input");
        // --attach needs --input.
        let alone = runtape_keyed(
            &db,
            &["resume", &run, "--attach", utf8(&dir.join("shot.png"))],
        );
        assert_eq!(alone.status.code(), Some(2), "{}", err(&alone));
        let o = runtape_keyed(
            &db,
            &[
                "resume",
                &run,
                "--input",
                "this one",
                "--attach",
                utf8(&dir.join("shot.png")),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        assert_eq!(status_of(&db, &run), "completed");
        let v = runtape_keyed(&db, &["verify", &run]);
        assert_eq!(v.status.code(), Some(0), "{}{}", out(&v), err(&v));
        // Named by the answer and by the tool message.
        assert!(out(&v).contains(", 2 attached files"), "{}", out(&v));
    })
    .await;
    requests.expect("the CLI steps");
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "the call and the answer");
    let m = sent[1].json()["messages"].clone();
    assert_eq!(m[2]["role"], "tool", "{m}");
    assert_eq!(m[2]["content"], "this one", "{m}");
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png())
    );
    assert_eq!(
        m[3]["content"],
        json!([
            {"type": "text", "text": "[files from ask_person]"},
            {"type": "image_url", "image_url": {"url": url}},
        ]),
        "{m}"
    );
}
