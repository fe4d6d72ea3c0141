//! `runtape run SPEC GOAL --attach FILE` with the real binary, the providers over HTTP on
//! 127.0.0.1 serving the vendors' recorded replies: the image reaches each wire format in the
//! vendor's shape (exact parts asserted), a model that does not take images gets a text
//! placeholder and a warning, `verify` covers the file's blob and refuses it altered, a
//! cassette replays offline with the file, and a bad file is one line, exit 2, no run.

use crate::support::cli::{err, out as stdout, runtape_keyed};
use crate::support::provider as provider_support;

use std::path::{Path, PathBuf};
use std::process::Output;

use base64::Engine as _;
use provider_support::{MockServer, case, serve_cases};
use serde_json::{Value, json};

/// The PNG of Ollama's documented image request (`docs/api.md`, "Chat request (with
/// images)"), kept in `tests/fixtures/providers/ollama-chat-image-input-nonstream`.
fn png() -> (String, Vec<u8>) {
    let path = provider_support::own_cases_dir()
        .join("ollama-chat-image-input-nonstream")
        .join("request.json");
    let request: Value = serde_json::from_slice(&std::fs::read(path).expect("the case")).unwrap();
    let b64 = request["messages"][0]["images"][0]
        .as_str()
        .expect("the image")
        .to_owned();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&b64)
        .expect("base64");
    (b64, bytes)
}

/// A directory holding `pig.png` and a one-agent spec calling `server` as `kind` with `model`.
fn setup(server: &MockServer, kind: &str, model: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("pig.png"), png().1).expect("writes");
    let url = server.url();
    let base = match kind {
        "openai" | "openai-responses" => format!("{url}/v1"),
        _ => url,
    };
    let key = if kind == "ollama" {
        String::new()
    } else {
        "api_key_env = \"TEST_KEY\"\n".to_owned()
    };
    let spec = format!(
        "goal = \"go\"\n[[providers]]\nname = \"p\"\nkind = \"{kind}\"\nmodel = \"{model}\"\n\
         base_url = \"{base}\"\n{key}stream = false\nmax_tokens = 100\n\
         [[agents]]\nid = \"a\"\nprovider = \"p\"\n"
    );
    std::fs::write(dir.join("spec.toml"), spec).expect("writes");
    let db = dir.join("runs.db");
    let spec = dir.join("spec.toml");
    (tmp, db, spec)
}

/// Runs the spec with `pig.png` attached (off the async runtime); the output.
async fn run_attached(db: &Path, spec: &Path) -> Output {
    let (db, spec) = (db.to_owned(), spec.to_owned());
    tokio::task::spawn_blocking(move || {
        let pig = spec.with_file_name("pig.png");
        runtape_keyed(
            &db,
            &[
                "run",
                spec.to_str().unwrap(),
                "go",
                "--attach",
                pig.to_str().unwrap(),
            ],
        )
    })
    .await
    .unwrap()
}

/// The run id `run` printed first.
fn run_id(o: &Output) -> String {
    crate::support::cli::first_id(&stdout(o))
}

/// The request body the server received first, without Anthropic's cache marks.
fn first_body(server: &MockServer) -> Value {
    let sent = server.requests();
    assert!(!sent.is_empty(), "no request reached the server");
    provider_support::recorded::without_cache_marks(&sent[0].json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_image_reaches_every_wire_format_in_its_vendors_shape() {
    let (b64, _) = png();
    let url = format!("data:image/png;base64,{b64}");
    let cases = [
        (
            "openai",
            "gpt-4o",
            "openai-chat-pdf-input-nonstream",
            "/messages/0/content",
            json!([
                {"type": "text", "text": "go"},
                {"type": "image_url", "image_url": {"url": url}},
            ]),
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "anthropic-pdf-input-nonstream",
            "/messages/0/content",
            json!([
                {"type": "text", "text": "go"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            ]),
        ),
        (
            "openai-responses",
            "gpt-4o",
            "openai-responses-pdf-input-nonstream",
            "/input/0/content",
            json!([
                {"type": "input_text", "text": "go"},
                {"type": "input_image", "detail": "auto", "image_url": url},
            ]),
        ),
        (
            "ollama",
            "llava",
            "ollama-chat-image-input-nonstream",
            "/messages/0/images",
            json!([b64]),
        ),
    ];
    for (kind, model, reply, pointer, want) in cases {
        let server = serve_cases(vec![case(reply)]).await;
        let (_dir, db, spec) = setup(&server, kind, model);
        let o = run_attached(&db, &spec).await;
        assert_eq!(o.status.code(), Some(0), "{kind}: {}", err(&o));
        assert!(!err(&o).contains("warning:"), "{kind}: {}", err(&o));
        let body = first_body(&server);
        assert_eq!(body.pointer(pointer), Some(&want), "{kind}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_takes_no_images_gets_a_placeholder_and_a_warning() {
    let server = serve_cases(vec![case("openai-chat-pdf-input-nonstream")]).await;
    let (_dir, db, spec) = setup(&server, "openai", "gpt-3.5-turbo");
    let o = run_attached(&db, &spec).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let body = first_body(&server);
    assert_eq!(
        body.pointer("/messages/0/content"),
        Some(&json!(
            "go\n[image pig.png (image/png, 3648 bytes) not shown: this model does not accept images]"
        )),
        "{body}"
    );
    assert!(
        err(&o).contains("warning: gpt-3.5-turbo does not take pig.png (image/png)"),
        "{}",
        err(&o)
    );
    // The history still carries the file: the placeholder is how it was sent, not what the
    // run holds.
    let run = run_id(&o);
    let show = stdout(&runtape_keyed(&db, &["show", &format!("{run}@2")]));
    assert!(
        show.contains("attached pig.png (image/png, 3648 bytes) blob "),
        "{show}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_covers_the_file_and_refuses_it_altered() {
    let server = serve_cases(vec![case("anthropic-pdf-input-nonstream")]).await;
    let (_dir, db, spec) = setup(&server, "anthropic", "claude-sonnet-4-5");
    let o = run_attached(&db, &spec).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let run = run_id(&o);
    let verified = runtape_keyed(&db, &["verify", &run]);
    assert_eq!(verified.status.code(), Some(0), "{}", err(&verified));
    assert!(
        stdout(&verified).contains(", 1 attached files"),
        "{}",
        stdout(&verified)
    );
    let digest = blake3::hash(&png().1);
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let changed = conn
        .execute(
            "UPDATE blobs SET bytes = substr(bytes, 1, length(bytes) - 1) WHERE hash = ?1",
            [digest.as_bytes().to_vec()],
        )
        .expect("updates");
    assert_eq!(changed, 1, "the file is one blob");
    drop(conn);
    let refused = runtape_keyed(&db, &["verify", &run]);
    assert_ne!(refused.status.code(), Some(0), "{}", stdout(&refused));
    let said = format!("{}{}", stdout(&refused), err(&refused));
    assert!(said.contains("attachment blob"), "{said}");
    assert!(said.contains("blobs.bytes"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_replays_offline_with_the_file() {
    let server = serve_cases(vec![case("anthropic-pdf-input-nonstream")]).await;
    let (dir, db, spec) = setup(&server, "anthropic", "claude-sonnet-4-5");
    let o = run_attached(&db, &spec).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let run = run_id(&o);
    let tape = dir.path().join("tape.json");
    let exported = runtape_keyed(
        &db,
        &["cassette", "export", &run, "-o", tape.to_str().unwrap()],
    );
    assert_eq!(exported.status.code(), Some(0), "{}", err(&exported));
    drop(server);
    let pig = dir.path().join("pig.png");
    let replay = |file: &Path| {
        runtape_keyed(
            &db,
            &[
                "replay",
                spec.to_str().unwrap(),
                "--cassette",
                tape.to_str().unwrap(),
                "go",
                "--attach",
                file.to_str().unwrap(),
            ],
        )
    };
    let replayed = replay(&pig);
    assert_eq!(replayed.status.code(), Some(0), "{}", err(&replayed));
    assert!(
        stdout(&replayed).contains("replayed 1 of 1 recorded model turns"),
        "{}",
        stdout(&replayed)
    );
    // Another image in its place is a divergence at the step that sent it.
    let mut other = png().1;
    other.extend_from_slice(b"trailing");
    let other_path = dir.path().join("other.png");
    std::fs::write(&other_path, other).expect("writes");
    let diverged = replay(&other_path);
    assert_ne!(diverged.status.code(), Some(0), "{}", stdout(&diverged));
    assert!(
        err(&diverged).contains("replay stopped"),
        "{}",
        err(&diverged)
    );
}

#[test]
fn a_bad_attachment_is_one_line_and_creates_no_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        "goal = \"go\"\n[[providers]]\nname = \"e\"\nkind = \"echo\"\n[[agents]]\nid = \"a\"\nprovider = \"e\"\n",
    )
    .expect("writes");
    let text = dir.join("notes.png");
    std::fs::write(&text, "not an image at all").expect("writes");
    let db = dir.join("runs.db");
    for (file, says) in [
        (text.clone(), "not an image or PDF runtape takes"),
        (dir.join("missing.png"), "cannot read it"),
        (dir.to_path_buf(), "not a file"),
    ] {
        let o = runtape_keyed(
            &db,
            &[
                "run",
                spec.to_str().unwrap(),
                "--attach",
                file.to_str().unwrap(),
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        let stderr = err(&o);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--attach") && stderr.contains(says),
            "{stderr}"
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    // Nothing was written: no database, so no run.
    assert!(!db.exists(), "a refused --attach created the database");
}
