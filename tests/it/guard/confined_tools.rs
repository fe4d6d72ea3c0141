//! Confined programs (`confine = { … }` on a command tool or the retriever): a confined tool cannot read the
//! user's `~/.ssh`, cannot open a TCP connection, is stopped at its CPU-time limit, and still
//! reads what the spec lets it; the same tools unconfined reach all of it (so the denials are
//! the confinement's). The confinement is in the run's sealed setup: `runtape tools` shows it,
//! and a run whose stored setup lost it does not verify. Real programs under a real Landlock
//! domain, a real listener on 127.0.0.1.

use std::net::TcpListener;
use std::path::Path;

use serde_json::Value;

use crate::support::cli::{bin, json_lines, runtape, scripted, text, write};

/// The spec: `ssh` prints `$HOME/.ssh/id_ed25519`, `data` prints `data/in.txt`, `dial`
/// connects to 127.0.0.1:`port`, `spin` loops forever; each confined by `confine` (a TOML
/// inline table, or nothing); the model calls each once, then answers.
fn spec(dir: &Path, port: u16, confine: Option<&str>) -> std::path::PathBuf {
    let replies = ["ssh", "data", "dial", "spin"]
        .iter()
        .map(|t| format!("  {{ tool_calls = [ {{ name = \"{t}\", arguments = {{}} }} ] }},\n"))
        .collect::<String>()
        + "  { text = \"done\" },\n";
    let line = |c: Option<&str>| c.map(|c| format!("confine = {c}\n")).unwrap_or_default();
    let spin = confine.map(|_| "{ cpu_seconds = 1 }");
    let tool = |name: &str, command: &str, confine: Option<&str>| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"{name}\"\nidempotent = true\ntimeout_ms = 60000\nenv = [\"HOME\"]\ncommand = {command}\n{}",
            line(confine)
        )
    };
    let text = format!(
        "goal = \"Reach for things.\"\n{}\n{}{}{}{}[[agents]]\nid = \"a\"\nprovider = \"script\"\ntools = [\"ssh\", \"data\", \"dial\", \"spin\"]\n",
        scripted(&replies),
        tool(
            "ssh",
            r#"["sh", "-c", "cat \"$HOME/.ssh/id_ed25519\""]"#,
            confine
        ),
        tool("data", r#"["cat", "data/in.txt"]"#, confine),
        tool(
            "dial",
            &format!(r#"["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"]"#),
            confine
        ),
        tool("spin", r#"["sh", "-c", "while :; do :; done"]"#, spin),
    );
    write(dir, "reach.toml", &text)
}

/// Runs `spec` with `HOME` set to `home`; returns the run's tool messages as the model saw
/// them in its last request, in call order.
fn tool_messages(dir: &Path, home: &Path, spec: &Path) -> (String, Vec<String>) {
    let db = dir.join("reach.db");
    let out = bin()
        .args(["--db"])
        .arg(&db)
        .arg("run")
        .arg(spec)
        .env("HOME", home)
        .current_dir(dir)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let runs = json_lines(&runtape(&db, &["ls", "--json"]));
    let run = runs[0]["id"].as_str().expect("id").to_owned();
    let steps = json_lines(&runtape(&db, &["log", "--json", &run]));
    let last_call = steps
        .iter()
        .filter(|s| s["edge"] == "preparing.proceed.call")
        .filter_map(|s| s["seq"].as_u64())
        .max()
        .expect("a model call");
    let shown = runtape(&db, &["show", "--json", &format!("{run}@{last_call}")]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    let tools = shown["request"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    (run, tools)
}

/// A home with a private key in it, a data file beside the spec, and a listener.
fn setting() -> (tempfile::TempDir, std::path::PathBuf, TcpListener) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-MATERIAL\n").expect("key");
    std::fs::create_dir_all(dir.path().join("data")).expect("mkdir");
    std::fs::write(dir.path().join("data/in.txt"), "allowed data\n").expect("data");
    let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
    (dir, home, listener)
}

#[test]
fn a_confined_tool_cannot_read_ssh_keys_open_a_socket_or_spin_forever() {
    let (dir, home, listener) = setting();
    let port = listener.local_addr().expect("addr").port();
    let spec = spec(dir.path(), port, Some("{ read = [\"data\"] }"));

    let listed = runtape(
        &dir.path().join("tools.db"),
        &["tools", crate::support::cli::utf8(&spec)],
    );
    assert!(
        text(&listed).contains("confined: reads") && text(&listed).contains("no network"),
        "{}",
        text(&listed)
    );

    let (_, seen) = tool_messages(dir.path(), &home, &spec);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        !seen[0].contains("PRIVATE-KEY") && seen[0].contains("Permission denied"),
        "the key stays unread: {}",
        seen[0]
    );
    assert_eq!(seen[1], "allowed data", "what the spec allows is read");
    assert!(
        !seen[2].contains("connected") && seen[2].contains("Permission denied"),
        "no connection: {}",
        seen[2]
    );
    assert!(
        (seen[3].contains("SIGXCPU") || seen[3].contains("SIGKILL"))
            && !seen[3].contains("timed out"),
        "stopped at its CPU limit: {}",
        seen[3]
    );
}

#[test]
fn the_same_tools_unconfined_reach_everything() {
    let (dir, home, listener) = setting();
    let port = listener.local_addr().expect("addr").port();
    // Unconfined, `spin` would never end: the model's fourth call times out instead.
    let text_of = spec(dir.path(), port, None);
    let body = std::fs::read_to_string(&text_of).expect("spec");
    let body = body.replace("while :; do :; done", "true");
    std::fs::write(&text_of, body).expect("spec");
    let (_, seen) = tool_messages(dir.path(), &home, &text_of);
    assert_eq!(seen[0], "PRIVATE-KEY-MATERIAL");
    assert_eq!(seen[1], "allowed data");
    assert_eq!(seen[2].trim(), "connected");
    drop(listener);
}

#[test]
fn a_run_whose_stored_setup_lost_its_confinement_does_not_verify() {
    let (dir, home, listener) = setting();
    let port = listener.local_addr().expect("addr").port();
    let spec = spec(dir.path(), port, Some("{ read = [\"data\"] }"));
    let (run, _) = tool_messages(dir.path(), &home, &spec);
    let db = dir.path().join("reach.db");
    assert!(runtape(&db, &["verify", &run]).status.success());
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let changed = conn
        .execute(
            "UPDATE run_specs SET setup = replace(setup, '\"confine\"', '\"unconfined\"')",
            [],
        )
        .expect("updates");
    assert_eq!(changed, 1);
    let verified = runtape(&db, &["verify", &run]);
    assert_eq!(verified.status.code(), Some(1), "{}", text(&verified));
}

/// The first model request of a run whose `[retriever]` prints the key in `$HOME/.ssh` as a
/// passage, confined by `confine` (or not), as the model saw it.
fn retrieved(confine: Option<&str>) -> String {
    let (dir, home, _listener) = setting();
    let retriever = r#"["sh", "-c", "k=$(cat \"$HOME/.ssh/id_ed25519\") && printf '[{\"text\": \"%s\", \"source\": \"home\"}]' \"$k\""]"#;
    let spec = format!(
        "goal = \"Anything?\"\n{}\n[retriever]\ncommand = {retriever}\nenv = [\"HOME\"]\n{}\n[[agents]]\nid = \"a\"\nprovider = \"script\"\n",
        scripted("  { text = \"done\" },\n"),
        confine
            .map(|c| format!("confine = {c}\n"))
            .unwrap_or_default(),
    );
    let spec = write(dir.path(), "retrieve.toml", &spec);
    let db = dir.path().join("retrieve.db");
    let out = bin()
        .arg("--db")
        .arg(&db)
        .arg("run")
        .arg(&spec)
        .env("HOME", &home)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out));
    let run = json_lines(&runtape(&db, &["ls", "--json"]))[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let shown = runtape(&db, &["show", "--json", &format!("{run}@3")]);
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

#[test]
fn a_confined_retriever_cannot_read_ssh_keys_and_unconfined_it_can() {
    assert!(
        retrieved(None).contains("PRIVATE-KEY-MATERIAL"),
        "unconfined, the passage reaches the model"
    );
    let confined = retrieved(Some("{ }"));
    assert!(!confined.contains("PRIVATE-KEY-MATERIAL"), "{confined}");
    assert!(
        confined.contains("Anything?"),
        "the turn went on: {confined}"
    );
}
