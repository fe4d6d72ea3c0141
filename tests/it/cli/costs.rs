//! Costs on the command line, with the real binary and providers over HTTP on 127.0.0.1: a
//! model without a price gets exactly one warning on stderr, and the summary, `ls` and
//! `show` say its cost is unknown, never `$0.0000`; `--json` carries the running total; a
//! local Ollama model costs zero without a warning; the request settings appear in
//! `show RUN@SEQ`.

use crate::support;

use std::path::Path;

use crate::support::cli::{err as stderr, out as stdout, runtape, temp_db, write};
use serde_json::Value;
use support::provider::{Behaviour, MockServer};

const TOOL_CALL: &str = r#"{"id":"c1","object":"chat.completion","model":"MODEL","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1000,"completion_tokens":100}}"#;
const ANSWER: &str = r#"{"id":"c2","object":"chat.completion","model":"MODEL","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":20}}"#;

/// An OpenAI-compatible server answering a tool call, then text, as `model`.
async fn two_turns(model: &'static str) -> MockServer {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    MockServer::start(move |_| {
        let body = if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            TOOL_CALL
        } else {
            ANSWER
        };
        Behaviour::json(200, &body.replace("MODEL", model))
    })
    .await
}

fn spec(dir: &Path, url: &str, model: &str) -> std::path::PathBuf {
    let text = format!(
        "goal = \"go\"\n[[providers]]\nname = \"local\"\nkind = \"openai\"\nmodel = \"{model}\"\n\
         base_url = \"{url}/v1\"\napi_key_env = \"\"\nstream = false\n\
         [[tools]]\nname = \"echo\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"local\"\n\
         [agents.model_settings]\ntemperature = 0.3\nseed = 11\n"
    );

    write(dir, "spec.toml", &text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_warns_once_and_its_cost_is_unknown_everywhere() {
    let server = two_turns("mystery-model-1").await;
    let (dir, db) = temp_db();
    let spec = spec(dir.path(), &server.url(), "mystery-model-1");
    let (db2, spec2) = (db.clone(), spec.clone());
    let out = tokio::task::spawn_blocking(move || runtape(&db2, &["run", spec2.to_str().unwrap()]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let warnings = err
        .matches("warning: no price for local/mystery-model-1")
        .count();
    assert_eq!(warnings, 1, "one warning for two turns: {err}");
    let summary = stdout(&out);
    assert!(summary.contains("cost unknown"), "{summary}");
    assert!(!summary.contains("$0.0000"), "{summary}");

    let ls = runtape(&db, &["ls"]);
    assert!(stdout(&ls).contains("cost unknown"), "{}", stdout(&ls));
    let ls_json: Value =
        serde_json::from_str(stdout(&runtape(&db, &["ls", "--json"])).trim()).unwrap();
    assert_eq!(ls_json["cost_known"], false);
    assert_eq!(ls_json["unpriced_turns"], 2);
    let run = ls_json["id"].as_str().unwrap().to_owned();
    let show = runtape(&db, &["show", &run]);
    assert!(stdout(&show).contains("cost unknown"), "{}", stdout(&show));

    // The exact request of step 2 carries the agent's settings.
    let step: Value = serde_json::from_str(&stdout(&runtape(
        &db,
        &["show", &format!("{run}@2"), "--json"],
    )))
    .unwrap();
    assert_eq!(step["request"]["settings"]["temperature"], 0.3);
    assert_eq!(step["request"]["settings"]["seed"], 11);
    let human = stdout(&runtape(&db, &["show", &format!("{run}@2")]));
    assert!(
        human.contains("settings {\"temperature\":0.3,\"seed\":11}"),
        "{human}"
    );
    let sent = server.requests()[0].json();
    assert_eq!(sent["temperature"], 0.3);
    assert_eq!(sent["seed"], 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_cost_is_in_every_json_reply_event() {
    let server = two_turns("gpt-4o-mini").await;
    let (dir, db) = temp_db();
    let spec = spec(dir.path(), &server.url(), "gpt-4o-mini");
    let out = tokio::task::spawn_blocking(move || {
        runtape(&db, &["run", spec.to_str().unwrap(), "--json"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let events: Vec<Value> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let totals: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "model.reply")
        .map(|e| e["run_cost_nanos"].as_u64().expect("a running total"))
        .collect();
    // gpt-4o-mini: $0.15/M in, $0.60/M out: 1000/100 then 1200/20 tokens.
    assert_eq!(totals, [210_000, 210_000 + 192_000]);
    let end = events.last().unwrap();
    assert_eq!(end["cost_nanos"], 402_000);
    assert_eq!(end["cost_known"], true);
}

const OLLAMA_ANSWER: &str = r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"hi"},"done":true,"done_reason":"stop","prompt_eval_count":10,"eval_count":2}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_ollama_model_costs_zero_without_a_warning() {
    let server = MockServer::always(Behaviour::json(200, OLLAMA_ANSWER)).await;
    let (dir, db) = temp_db();
    let text = format!(
        "goal = \"hi\"\n[[providers]]\nname = \"ollama\"\nkind = \"ollama\"\nmodel = \"llama3.2\"\n\
         base_url = \"{}\"\nstream = false\n[[agents]]\nid = \"a\"\nprovider = \"ollama\"\n",
        server.url()
    );
    let spec = dir.path().join("spec.toml");
    std::fs::write(&spec, text).unwrap();
    let (db2, spec2) = (db.clone(), spec.clone());
    let out = tokio::task::spawn_blocking(move || runtape(&db2, &["run", spec2.to_str().unwrap()]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert!(stdout(&out).contains("$0.0000"), "{}", stdout(&out));
    let ls = stdout(&runtape(&db, &["ls"]));
    assert!(ls.contains("$0.0000") && !ls.contains("unknown"), "{ls}");
}
