//! `runtape run --env-file FILE` and `runtape resume --env-file FILE`: a provider key that is
//! only in the file reaches a 127.0.0.1 provider in its request header; a program gets a file
//! variable only when its spec names it (not under `env_all`); no value lands in the database
//! file, `show --json`, `log` or what the commands print; the run's stored setup names the
//! variables; a malformed line is one line `FILE:LINE: …`, exit 2, no run.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::{bin, err, out, run_id, temp_db, text, utf8, write};
use crate::support::provider::{Behaviour, MockServer};
use serde_json::{Value, json};

const KEY_VAR: &str = "RUNTAPE_TEST_ENV_FILE_KEY";
const KEY: &str = "sk-envfile-canary-7c1f0e9d";
const GIVEN: &str = "given-canary-9ab3d2e1f0";
const NOT_NAMED: &str = "unnamed-canary-55e0a1b2c3";

/// The env file: the key, a variable a tool is given, one no spec names.
fn env_file(dir: &Path) -> String {
    let path = write(
        dir,
        "keys.env",
        &format!(
            "# keys for this run\n\nexport {KEY_VAR}=\"{KEY}\"\nGIVEN_SOURCE='{GIVEN}'  # a tool gets it\nNOT_NAMED={NOT_NAMED}\n"
        ),
    );
    utf8(&path).to_owned()
}

/// The binary, with none of the file's variables in its environment.
fn runtape(db: &Path, args: &[&str]) -> Output {
    let mut c = bin();
    for name in [KEY_VAR, "GIVEN_SOURCE", "NOT_NAMED"] {
        c.env_remove(name);
    }
    c.arg("--db").arg(db).args(args).output().expect("runs")
}

fn sse(deltas: &[Value]) -> String {
    deltas
        .iter()
        .map(|d| format!("data: {d}\n\n"))
        .collect::<String>()
        + "data: [DONE]\n\n"
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// A provider that calls `printenv`, then answers `done` and the authorization header it got.
async fn provider() -> MockServer {
    MockServer::start(|req| {
        // The answer echoes the key the request carried: it must come back scrubbed.
        let key = req.header("authorization").unwrap_or("no key").to_owned();
        let body: Value = req.json();
        let answered = body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if answered {
            return Behaviour::sse(&sse(&[
                chunk(json!({"role": "assistant", "content": format!("done {key}")}), None),
                chunk(json!({}), Some("stop")),
            ]));
        }
        Behaviour::sse(&sse(&[
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "p1", "type": "function",
                    "function": {"name": "printenv", "arguments": "{}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]))
    })
    .await
}

/// A spec whose provider key and tool variable come only from the env file; the tool prints
/// its whole environment and is given everything `env_all` allows.
fn spec(dir: &Path, url: &str, approval: bool) -> String {
    let path = write(
        dir,
        "spec.toml",
        &format!(
            r#"goal = "print the environment"
[[providers]]
name = "local"
kind = "openai"
model = "m"
base_url = "{url}/v1"
api_key_env = "{KEY_VAR}"
stream = true
[[tools]]
name = "printenv"
command = ["sh", "-c", "env"]
schema = {{ type = "object" }}
read_only = true
requires_approval = {approval}
env = {{ GIVEN = "${{GIVEN_SOURCE}}" }}
env_all = true
[[agents]]
id = "a"
provider = "local"
"#
        ),
    );
    utf8(&path).to_owned()
}

/// Every byte a run left and every step shown as JSON, as text.
fn everything(db: &Path, run: &str, printed: &[&Output]) -> String {
    let mut all = String::new();
    for o in printed {
        all += &out(o);
        all += &err(o);
    }
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(bytes) = std::fs::read(format!("{}{suffix}", db.display())) {
            all += &String::from_utf8_lossy(&bytes);
        }
    }
    let log = runtape(db, &["log", run, "--json"]);
    all += &out(&log);
    all += &out(&runtape(db, &["log", run]));
    let steps = out(&log).lines().count();
    for seq in 0..=steps {
        all += &out(&runtape(db, &["show", &format!("{run}@{seq}"), "--json"]));
    }
    all
}

/// The provider, a scratch database, the spec against it (`approval`: its tool needs
/// approval) and the env file beside it.
async fn keyed(approval: bool) -> (MockServer, tempfile::TempDir, PathBuf, String, String) {
    let server = provider().await;
    let (dir, db) = temp_db();
    let spec = spec(dir.path(), &server.url(), approval);
    let env = env_file(dir.path());
    (server, dir, db, spec, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_only_in_the_env_file_is_sent_and_lands_nowhere() {
    let (server, _dir, db, spec, env) = keyed(false).await;
    let (db2, spec2, env2) = (db.clone(), spec.clone(), env.clone());
    let o =
        tokio::task::spawn_blocking(move || runtape(&db2, &["run", &spec2, "--env-file", &env2]))
            .await
            .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let run = run_id(&o);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.header("authorization"), Some(&*format!("Bearer {KEY}")));
    }
    // The tool's output, as the model was sent it: the named variable, scrubbed; the file's
    // other variable not there although `env_all` is on.
    let sent = requests[1].json().to_string();
    assert!(sent.contains("GIVEN=[redacted:GIVEN_SOURCE]"), "{sent}");
    assert!(!sent.contains("NOT_NAMED"), "{sent}");
    let all = everything(&db, &run, &[&o]);
    for value in [KEY, GIVEN, NOT_NAMED] {
        assert!(!all.contains(value), "{value} landed");
    }
    // The stored setup names the file's variables, in order.
    let names = format!(r#""env_file":["{KEY_VAR}","GIVEN_SOURCE","NOT_NAMED"]"#);
    assert!(all.contains(&names), "the setup records the names");
    let v = runtape(&db, &["verify", &run]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_reads_the_env_file_again() {
    let (server, _dir, db, spec, env) = keyed(true).await;
    let (db2, env2) = (db.clone(), env.clone());
    let (first, without, resumed) = tokio::task::spawn_blocking(move || {
        let first = runtape(&db2, &["run", &spec, "--env-file", &env2]);
        let run = run_id(&first);
        let without = runtape(&db2, &["resume", &run, "--approve"]);
        let resumed = runtape(&db2, &["resume", &run, "--approve", "--env-file", &env2]);
        (first, without, resumed)
    })
    .await
    .unwrap();
    assert!(out(&first).contains("waiting"), "{}", text(&first));
    assert_ne!(without.status.code(), Some(0), "{}", out(&without));
    assert!(err(&without).contains(KEY_VAR), "{}", err(&without));
    assert_eq!(resumed.status.code(), Some(0), "{}", err(&resumed));
    assert!(out(&resumed).contains("done"), "{}", out(&resumed));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    let all = everything(&db, &run_id(&first), &[&first, &without, &resumed]);
    for value in [KEY, GIVEN, NOT_NAMED] {
        assert!(!all.contains(value), "{value} landed");
    }
}

#[test]
fn a_malformed_line_is_one_line_naming_it_exit_2_and_no_run() {
    let (dir, db) = temp_db();
    let spec = spec(dir.path(), "http://127.0.0.1:9", false);
    let env = write(
        dir.path(),
        "bad.env",
        &format!("# fine\n{KEY_VAR}={KEY}\nGIVEN_SOURCE={GIVEN} and more\n"),
    );
    let o = runtape(&db, &["run", &spec, "--env-file", utf8(&env)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(&format!("{}:3: ", env.display())), "{e}");
    assert!(!e.contains(GIVEN) && !e.contains(KEY), "{e}");
    assert!(out(&o).is_empty(), "{}", out(&o));
    if db.exists() {
        let conn = rusqlite::Connection::open(&db).expect("opens");
        let runs: i64 = conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .expect("counts");
        assert_eq!(runs, 0);
    }
    // With --detach the file is refused before anything is read or written too.
    let ok = write(dir.path(), "ok.env", &format!("{KEY_VAR}={KEY}\n"));
    let o = runtape(&db, &["run", &spec, "--detach", "--env-file", utf8(&ok)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--detach"), "{}", err(&o));
}
