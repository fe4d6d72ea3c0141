//! `log` and `show` with the real binary, providers over HTTP on 127.0.0.1 serving the
//! vendors' recorded replies: a reply cut by the output-token limit is marked `[truncated]`
//! in the log and explained in `show` (and `on_truncated` is read from the spec file), a
//! refusal is shown with the model's words, and prompt-cache reads and writes are counted per
//! turn and over the run.

use crate::support::cli::{on, out as stdout};
use crate::support::provider as provider_support;

use std::path::Path;
use std::process::Output;

use provider_support::{case, serve_cases};
use serde_json::Value;

/// `runtape --db DB ARGS…` with the providers' key, `TEST_KEY`, set.
fn runtape(db: &Path, args: &[&str]) -> Output {
    on(db)
        .env("TEST_KEY", "k-1")
        .args(args)
        .output()
        .expect("runs")
}

/// Runs a one-agent spec against `url` (`kind` `openai` or `anthropic`) with `agent_extra`
/// appended to the agent's table; returns the database and the run id.
async fn run_spec(dir: &Path, kind: &str, url: &str, model: &str, agent_extra: &str) -> String {
    let base = if kind == "openai" {
        format!("{url}/v1")
    } else {
        url.to_owned()
    };
    let spec = format!(
        "goal = \"go\"\n[[providers]]\nname = \"p\"\nkind = \"{kind}\"\nmodel = \"{model}\"\n\
         base_url = \"{base}\"\napi_key_env = \"TEST_KEY\"\nstream = false\nmax_tokens = 100\n\
         [[agents]]\nid = \"a\"\nprovider = \"p\"\n{agent_extra}"
    );
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).expect("writes");
    let db = dir.join("runs.db");
    let out = tokio::task::spawn_blocking(move || runtape(&db, &["run", path.to_str().unwrap()]))
        .await
        .unwrap();
    let ls: Value = stdout(&runtape(&dir.join("runs.db"), &["ls", "--json"]))
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no run: {}", String::from_utf8_lossy(&out.stderr)));
    ls["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_reply_and_its_retry_are_in_log_and_show() {
    let server = serve_cases(vec![
        case("openai-chat-length-nonstream"),
        case("openai-chat-text-nonstream"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let run = run_spec(dir.path(), "openai", &server.url(), "gpt-4o", "").await;
    let db = dir.path().join("runs.db");
    let log = stdout(&runtape(&db, &["log", &run]));
    let cut = log
        .lines()
        .find(|l| l.contains("answer [truncated]: Designing a robust"))
        .unwrap_or_else(|| panic!("no truncated step in the log:\n{log}"));
    let seq = cut.split_whitespace().next().unwrap();
    assert!(log.contains("answer: Why did Opentelemetry"), "{log}");
    let show = stdout(&runtape(&db, &["show", &format!("{run}@{seq}")]));
    assert!(
        show.contains("reply   finish length, 1221 input / 100 output tokens"),
        "{show}"
    );
    assert!(
        show.contains("truncated the output-token limit cut this reply"),
        "{show}"
    );
    let json: Value = serde_json::from_str(&stdout(&runtape(
        &db,
        &["show", &format!("{run}@{seq}"), "--json"],
    )))
    .unwrap();
    assert_eq!(json["reply_end"], "truncated");
    assert_eq!(json["edge"], "generating.replied.truncated_retry");

    // With `on_truncated = "fail"` in the file, the same reply ends the run `truncated`.
    let server = serve_cases(vec![case("openai-chat-length-nonstream")]).await;
    let dir = tempfile::tempdir().unwrap();
    let run = run_spec(
        dir.path(),
        "openai",
        &server.url(),
        "gpt-4o",
        "on_truncated = \"fail\"\n",
    )
    .await;
    let show = stdout(&runtape(&dir.path().join("runs.db"), &["show", &run]));
    assert!(show.contains("truncated"), "{show}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_shown_with_the_models_words() {
    let refusal = case("openai-chat-refusal-nonstream");
    let words = refusal.expect["refusal"].as_str().unwrap().to_owned();
    let server = serve_cases(vec![refusal]).await;
    let dir = tempfile::tempdir().unwrap();
    let run = run_spec(dir.path(), "openai", &server.url(), "gpt-4o", "").await;
    let db = dir.path().join("runs.db");
    let log = stdout(&runtape(&db, &["log", &run]));
    let line = log
        .lines()
        .find(|l| l.contains("refused: "))
        .unwrap_or_else(|| panic!("no refused step:\n{log}"));
    let seq = line.split_whitespace().next().unwrap();
    let show = stdout(&runtape(&db, &["show", &format!("{run}@{seq}")]));
    assert!(
        show.contains(&format!("refused the model declined: {words}")),
        "{show}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reads_are_counted_per_turn_and_over_the_run() {
    let server = serve_cases(vec![case("anthropic-cache-read-nonstream")]).await;
    let dir = tempfile::tempdir().unwrap();
    let run = run_spec(
        dir.path(),
        "anthropic",
        &server.url(),
        "claude-sonnet-4-5",
        "",
    )
    .await;
    let db = dir.path().join("runs.db");
    let log = stdout(&runtape(&db, &["log", &run]));
    assert!(
        log.contains("prompt cache: 1111 input tokens read from it, 0 written to it"),
        "{log}"
    );
    let line = log
        .lines()
        .find(|l| l.contains("answer: # What is Python"))
        .unwrap_or_else(|| panic!("no answer:\n{log}"));
    let seq = line.split_whitespace().next().unwrap();
    let show = stdout(&runtape(&db, &["show", &format!("{run}@{seq}")]));
    // $3/M × 3 + $0.30/M × 1111 + $15/M × 406 = $0.0064323.
    assert!(
        show.contains("3 input / 406 output tokens (prompt cache: 1111 read, 0 written), $0.0064"),
        "{show}"
    );
}
