//! Long conversations: an agent's `[agents.context]` window, checked before every turn. The
//! real binary runs an agent on a local OpenAI-compatible server (127.0.0.1) that asks for a
//! 6,000-byte page three times, then answers; the server charges one input token per byte of
//! every message's text and of the tool definitions, plus 8 per message — a tokenizer at its
//! worst — and reports that count back. With a window of 14,000 tokens the fourth request
//! would not fit: `drop_oldest_tool_results` drops the first page and the run completes with
//! every request within the window; `fail` ends the run `context_exhausted` without sending
//! it. The compaction is in the record: `show` names it, `verify` re-folds it, a fork from
//! the tape and a cassette replay send the same compacted request, and a stored compaction
//! edited by hand is refused.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::cli::{on, out, text, utf8, write};
use support::provider::{Behaviour, MockServer, Recorded};
use support::spec::{agent, provider, tool};

const WINDOW: u64 = 14_000;
const KEY_VAR: &str = "RUNTAPE_TEST_API_KEY";
/// Bytes of one page.
const PAGE: usize = 6_000;

/// The tokens the server charges for `request`: every byte of message text and of the tools
/// array, plus 8 per message.
pub(super) fn charged(request: &Recorded) -> u64 {
    let body = request.json();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let text: usize = messages
        .iter()
        .map(|m| {
            m["content"].as_str().map_or(0, str::len)
                + m["tool_calls"]
                    .as_array()
                    .map_or(0, |c| Value::Array(c.clone()).to_string().len())
        })
        .sum();
    let tools = body["tools"].to_string().len();
    (text + tools) as u64 + 8 * messages.len() as u64
}

fn pages_read(request: &Recorded) -> usize {
    request.json()["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

/// Asks for `page` until three pages were read (dropped ones count: their result is still
/// there), then answers.
async fn pages_server() -> MockServer {
    MockServer::start(|request| {
        let read = pages_read(request);
        let message = if read < 3 {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("p{read}"),
                "type": "function", "function": {"name": "page", "arguments": "{}"}}]})
        } else {
            json!({"role": "assistant", "content": "read them all"})
        };
        completion(request, message)
    })
    .await
}

/// The chat completion answering `request` with `message`, charged as [`charged`] counts.
pub(super) fn completion(request: &Recorded, message: Value) -> Behaviour {
    let usage = json!({"prompt_tokens": charged(request), "completion_tokens": 5});
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    let reply = json!({"id": "c1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage});
    Behaviour::json(200, &reply.to_string())
}

/// A finished run of the reader: its files, its id and output, what the server received.
pub(super) struct Ran {
    pub(super) _dir: tempfile::TempDir,
    pub(super) db: PathBuf,
    pub(super) spec: PathBuf,
    pub(super) run: String,
    pub(super) output: Output,
    pub(super) requests: Vec<Recorded>,
}

pub(super) fn runtape(db: &Path, args: &[&str]) -> Output {
    on(db)
        .env(KEY_VAR, "sk-test")
        .args(args)
        .output()
        .expect("runs the binary")
}

/// Runs the reader with `on_overflow` on a fresh server and database.
async fn read_pages(on_overflow: &str) -> Ran {
    let server = pages_server().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(
        dir.path(),
        "reader.toml",
        &format!(
            "goal = \"read three pages\"\n{}{}{}",
            provider(
                "local",
                "openai",
                &format!(
                    "model = \"m\"\nbase_url = \"{}/v1\"\napi_key_env = \"{KEY_VAR}\"",
                    server.url()
                )
            ),
            tool(
                "page",
                &format!(r#"["sh", "-c", "printf '%0{PAGE}d' 0"]"#),
                "description = \"The next page.\"\nread_only = true\nidempotent = true"
            ),
            agent(
                "reader",
                "local",
                &["page"],
                &format!("[agents.context]\nwindow = {WINDOW}\non_overflow = \"{on_overflow}\"\n")
            ),
        ),
    );
    Ran::of(dir, spec, &server)
}

impl Ran {
    /// Runs `spec` (written in `dir`, whose `runs.db` it uses) on the stepped clock; `server`
    /// is the provider it calls.
    pub(super) fn of(dir: tempfile::TempDir, spec: PathBuf, server: &MockServer) -> Ran {
        let db = dir.path().join("runs.db");
        let spec_arg = utf8(&spec).to_owned();
        let db_arg = db.clone();
        let output = tokio::task::block_in_place(|| {
            runtape(&db_arg, &["run", "--stepped-clock", &spec_arg])
        });
        let run = support::cli::first_id(&out(&output));
        Ran {
            _dir: dir,
            db,
            spec,
            run,
            output,
            requests: server.requests(),
        }
    }
}

/// The seq of the first step `edge` took, from `log --json`.
pub(super) fn seq_of(db: &Path, run: &str, edge: &str) -> u64 {
    let log = runtape(db, &["log", run, "--json"]);
    out(&log)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["edge"] == edge)
        .and_then(|v| v["seq"].as_u64())
        .unwrap_or_else(|| panic!("a {edge} step in the log: {}", text(&log)))
}

/// The seq of the transition that compacted.
fn compacting_seq(db: &Path, run: &str) -> u64 {
    seq_of(db, run, "preparing.proceed.compact")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_would_overflow_drops_the_oldest_page_and_completes_within_the_window() {
    let ran = read_pages("drop_oldest_tool_results").await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    assert!(
        out(&ran.output).contains("read them all"),
        "{}",
        text(&ran.output)
    );
    assert_eq!(ran.requests.len(), 4, "three pages, then the answer");
    for (i, r) in ran.requests.iter().enumerate() {
        assert!(
            charged(r) <= WINDOW,
            "request {i} holds {} tokens, past the window of {WINDOW}",
            charged(r)
        );
    }
    // The last request has the first page dropped and the two others whole.
    let last = ran.requests[3].json();
    let tools: Vec<&str> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        tools[0],
        format!("[tool result dropped to fit the context window: {PAGE} bytes]")
    );
    assert_eq!(tools[1].len(), PAGE);
    assert_eq!(tools[2].len(), PAGE);
    // Without the compaction it would not have fit.
    let seq = compacting_seq(&ran.db, &ran.run);
    let shown = runtape(&ran.db, &["show", &format!("{}@{seq}", ran.run)]);
    let shown = out(&shown);
    assert!(
        shown.contains("compacted message [2]: tool result dropped to fit the context window"),
        "{shown}"
    );
    assert!(
        shown.contains("[tool result dropped to fit the context window: 6000 bytes]"),
        "show prints the request as sent: {shown}"
    );
    let verified = runtape(&ran.db, &["verify", &ran.run]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_overflow_fail_ends_the_run_context_exhausted_without_sending_the_request() {
    let ran = read_pages("fail").await;
    assert_ne!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    assert_eq!(ran.requests.len(), 3, "the fourth request is never sent");
    assert!(ran.requests.iter().all(|r| charged(r) <= WINDOW));
    let shown = out(&runtape(&ran.db, &["show", &ran.run]));
    assert!(
        shown.contains("failed  context_exhausted: agent reader: the next request (at least"),
        "{shown}"
    );
    assert!(
        shown.contains("would not fit its context window of 14000 tokens; on_overflow is fail"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_from_the_tape_and_a_cassette_replay_send_the_same_compacted_request() {
    let ran = read_pages("drop_oldest_tool_results").await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    let seq = compacting_seq(&ran.db, &ran.run);

    // A fork from just before the compaction, from the tape: the server is gone, so every
    // reply must come from the recording, which serves only an identical request.
    let fork = tokio::task::block_in_place(|| {
        runtape(
            &ran.db,
            &[
                "fork",
                &format!("{}@{}", ran.run, seq - 1),
                "--tape",
                "--stop-on-divergence",
            ],
        )
    });
    assert_eq!(fork.status.code(), Some(0), "{}", text(&fork));
    assert!(out(&fork).contains("read them all"), "{}", text(&fork));
    let forked = support::cli::first_id(&out(&fork));
    assert_eq!(compacting_seq(&ran.db, &forked), seq);

    // A cassette of the run replayed into a fresh database: strict, so a request that
    // differs from the recorded one (an uncompacted page) would be refused.
    let (fresh, replay_run, traces) = replayed_offline(&ran.db, &ran.run, &ran.spec);
    let compacted = traces
        .iter()
        .find(|t| t["type"] == "context.compacted")
        .unwrap_or_else(|| panic!("a context.compacted trace: {traces:?}"));
    assert_eq!(compacted["policy"], "drop_oldest_tool_results");
    assert_eq!(compacted["messages"], json!([2]));
    assert_eq!(compacting_seq(&fresh, &replay_run), seq);
    let verified = runtape(&fresh, &["verify", &replay_run]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_a_compaction_edited_in_the_database() {
    let ran = read_pages("drop_oldest_tool_results").await;
    assert_eq!(ran.output.status.code(), Some(0), "{}", text(&ran.output));
    let seq = compacting_seq(&ran.db, &ran.run);
    // The recorded CallModel now says the page was shortened rather than dropped: what a
    // resumed or replayed run would send differs from what the machine decided.
    let verified = refused_once_edited(
        &ran.db,
        &ran.run,
        (seq, "effects"),
        r#""how":"dropped""#,
        r#""how":"shortened""#,
    );
    assert!(
        verified.contains(&format!("seq {seq}: effects: expected")),
        "{verified}"
    );
}

/// `run` of `db` exported to a cassette beside `db` and replayed strictly into a fresh
/// database there under `spec`, which must succeed: that database, the replayed run's id and
/// its `--json` trace.
pub(super) fn replayed_offline(db: &Path, run: &str, spec: &Path) -> (PathBuf, String, Vec<Value>) {
    let dir = db.parent().expect("a database in a folder");
    let cassette = dir.join("run.cassette.json");
    let exported = support::cli::export(db, run, &cassette);
    assert_eq!(exported.status.code(), Some(0), "{}", text(&exported));
    let fresh = dir.join("fresh.db");
    let replayed = tokio::task::block_in_place(|| {
        support::cli::replay(
            &fresh,
            utf8(spec),
            utf8(&cassette),
            &["--stepped-clock", "--json"],
        )
    });
    assert_eq!(replayed.status.code(), Some(0), "{}", text(&replayed));
    let traces = support::cli::json_lines(&replayed);
    let replay_run = traces[0]["id"].as_str().expect("the run id").to_owned();
    (fresh, replay_run, traces)
}

/// Replaces `from` by `to` in `column` (`event` or `effects`) of step `at.0` of `run` in the
/// SQLite file `db`, as someone editing the file would, and checks that `verify` refuses the
/// run and a fork from the tape after that step does nothing with it; returns what `verify`
/// said.
pub(super) fn refused_once_edited(
    db: &Path,
    run: &str,
    (seq, column): (u64, &str),
    from: &str,
    to: &str,
) -> String {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let id: i64 = conn
        .query_row(
            "SELECT id FROM transitions WHERE (id & 4294967295) = ?1",
            [seq as i64],
            |r| r.get(0),
        )
        .expect("the step");
    let stored: Vec<u8> = conn
        .query_row(
            &format!("SELECT {column} FROM transitions WHERE id = ?1"),
            [id],
            |r| r.get(0),
        )
        .expect("its column");
    let json = runtape::format::packed::unpack(&stored)
        .expect("unpacks")
        .into_owned();
    let json = String::from_utf8(json).expect("JSON text");
    assert!(json.contains(from), "{json}");
    let edited = json.replace(from, to);
    conn.execute(
        &format!("UPDATE transitions SET {column} = ?1 WHERE id = ?2"),
        rusqlite::params![runtape::format::packed::pack(edited.as_bytes()), id],
    )
    .expect("edits");
    drop(conn);
    let verified = runtape(db, &["verify", run]);
    assert_ne!(verified.status.code(), Some(0), "{}", text(&verified));
    // Nor does a fork act on it.
    let fork = tokio::task::block_in_place(|| {
        runtape(db, &["fork", &format!("{run}@{}", seq + 1), "--tape"])
    });
    assert_ne!(fork.status.code(), Some(0), "{}", text(&fork));
    assert!(
        text(&fork).contains("nothing was done with it"),
        "{}",
        text(&fork)
    );
    text(&verified)
}
