//! `log` and `show` with the real binary, providers over HTTP on 127.0.0.1 serving the
//! vendors' recorded replies: a reply cut by the output-token limit is marked `[truncated]`
//! in the log and explained in `show` (and `on_truncated` is read from the spec file), a
//! refusal is shown with the model's words, and prompt-cache reads and writes are counted per
//! turn and over the run.

use crate::support::cli::{out as stdout, runtape_keyed};
use crate::support::provider as provider_support;

use std::path::PathBuf;

use provider_support::{MockServer, case, serve_cases};
use serde_json::Value;

/// In a fresh directory, runs a one-agent spec against `server` (`kind` `openai` or
/// `anthropic`) with `agent_extra` appended to the agent's table; returns the directory, the
/// database and the run id.
async fn run_spec(
    server: &MockServer,
    kind: &str,
    model: &str,
    agent_extra: &str,
) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, url) = (tmp.path(), server.url());
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
    let out =
        tokio::task::spawn_blocking(move || runtape_keyed(&db, &["run", path.to_str().unwrap()]))
            .await
            .unwrap();
    let ls: Value = stdout(&runtape_keyed(&dir.join("runs.db"), &["ls", "--json"]))
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no run: {}", String::from_utf8_lossy(&out.stderr)));
    let (run, db) = (ls["id"].as_str().unwrap().to_owned(), dir.join("runs.db"));
    (tmp, db, run)
}

/// `RUN@SEQ` of the first step whose line in `log` (the output of `log RUN`) contains `marker`.
fn step_logged(log: &str, run: &str, marker: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no step logged with {marker:?}:\n{log}"));
    let seq = line.split_whitespace().next().expect("a seq");
    format!("{run}@{seq}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_reply_and_its_retry_are_in_log_and_show() {
    let server = serve_cases(vec![
        case("openai-chat-length-nonstream"),
        case("openai-chat-text-nonstream"),
    ])
    .await;
    let (_dir, db, run) = run_spec(&server, "openai", "gpt-4o", "").await;
    let log = stdout(&runtape_keyed(&db, &["log", &run]));
    let at = step_logged(&log, &run, "answer [truncated]: Designing a robust");
    assert!(log.contains("answer: Why did Opentelemetry"), "{log}");
    let show = stdout(&runtape_keyed(&db, &["show", &at]));
    assert!(
        show.contains("reply   finish length, 1221 input / 100 output tokens"),
        "{show}"
    );
    assert!(
        show.contains("truncated the output-token limit cut this reply"),
        "{show}"
    );
    let json: Value =
        serde_json::from_str(&stdout(&runtape_keyed(&db, &["show", &at, "--json"]))).unwrap();
    assert_eq!(json["reply_end"], "truncated");
    assert_eq!(json["edge"], "generating.replied.truncated_retry");

    // With `on_truncated = "fail"` in the file, the same reply ends the run `truncated`.
    let server = serve_cases(vec![case("openai-chat-length-nonstream")]).await;
    let (_dir, db, run) = run_spec(&server, "openai", "gpt-4o", "on_truncated = \"fail\"\n").await;
    let show = stdout(&runtape_keyed(&db, &["show", &run]));
    assert!(show.contains("truncated"), "{show}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_shown_with_the_models_words() {
    let refusal = case("openai-chat-refusal-nonstream");
    let words = refusal.expect["refusal"].as_str().unwrap().to_owned();
    let server = serve_cases(vec![refusal]).await;
    let (_dir, db, run) = run_spec(&server, "openai", "gpt-4o", "").await;
    let log = stdout(&runtape_keyed(&db, &["log", &run]));
    let at = step_logged(&log, &run, "refused: ");
    let show = stdout(&runtape_keyed(&db, &["show", &at]));
    assert!(
        show.contains(&format!("refused the model declined: {words}")),
        "{show}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reads_are_counted_per_turn_and_over_the_run() {
    let server = serve_cases(vec![case("anthropic-cache-read-nonstream")]).await;
    let (_dir, db, run) = run_spec(&server, "anthropic", "claude-sonnet-4-5", "").await;
    let log = stdout(&runtape_keyed(&db, &["log", &run]));
    assert!(
        log.contains("prompt cache: 1111 input tokens read from it, 0 written to it"),
        "{log}"
    );
    let line = log
        .lines()
        .find(|l| l.contains("answer: # What is Python"))
        .unwrap_or_else(|| panic!("no answer:\n{log}"));
    let seq = line.split_whitespace().next().unwrap();
    let show = stdout(&runtape_keyed(&db, &["show", &format!("{run}@{seq}")]));
    // $3/M × 3 + $0.30/M × 1111 + $15/M × 406 = $0.0064323.
    assert!(
        show.contains("3 input / 406 output tokens (prompt cache: 1111 read, 0 written), $0.0064"),
        "{show}"
    );
}
