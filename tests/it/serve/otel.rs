//! OpenTelemetry export of the runs `runtape serve` drives, received by a local OTLP/HTTP
//! (JSON) receiver on loopback: the span tree of known runs (a run span, `chat {model}` per
//! agent turn, `execute_tool {name}` per tool call), GenAI attributes, links across resume
//! and fork, counters, and no content unless asked for.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::cli::{err, out as stdout};
use support::otlp::{Span, counter_total, named, of_run, receiver, spans};
use support::serve::{Server, field, run_spec, scratch_db};

/// Whether `span` hangs under `agent`'s activation, itself a child of the take-up `parent`.
fn in_activation(all: &[Span], span: &Span, agent: &str, parent: &str) -> bool {
    all.iter().any(|a| {
        a.id == span.parent && a.name == format!("invoke_agent {agent}") && a.parent == parent
    })
}

#[test]
fn the_runs_it_drives_become_a_span_tree_with_links_and_counters() {
    let (url, got) = receiver();
    let (dir, db) = scratch_db();
    let waiting = run_spec(dir.path(), &db, "examples/approval.toml");
    let server = Server::start(dir.path(), &db, &["--otlp-endpoint", &url], &[]);
    let (_, started) = server.post("/api/runs", &json!({"spec": "examples/quickstart.toml"}));
    let run = field(&started, "id").to_owned();
    server.wait_run(&run, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    server.post(&format!("/api/runs/{waiting}/approve"), &json!({}));
    server.wait_run(&waiting, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let (_, f) = server.post(
        &format!("/api/runs/{run}/fork"),
        &json!({"seq": 1, "edits": ["user=Count the words of 'a b c'."]}),
    );
    let fork = field(&f, "id").to_owned();
    server.wait_run(&fork, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));

    let all = spans(&got);
    let tree = of_run(&all, &run);
    let root: Vec<_> = tree
        .iter()
        .filter(|s| s.name == "invoke_workflow runtape")
        .collect();
    assert_eq!(root.len(), 1, "{tree:#?}");
    let root = root[0];
    assert!(
        root.parent.is_empty(),
        "the first take-up is the trace's root"
    );
    assert_eq!(
        root.attrs["gen_ai.operation.name"],
        json!("invoke_workflow")
    );
    assert_eq!(root.attrs["runtape.status"], json!("completed"));
    assert_eq!(root.status["code"], json!(1), "Ok: {:?}", root.status);
    let chats: Vec<_> = tree
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 2, "{tree:#?}");
    for c in &chats {
        assert_eq!(c.name, "chat scripted");
        assert!(in_activation(&all, c, "assistant", &root.id), "{c:#?}");
        assert_eq!(c.trace, root.trace);
        assert_eq!(c.attrs["gen_ai.operation.name"], json!("chat"));
        assert_eq!(c.attrs["gen_ai.provider.name"], json!("runtape.scripted"));
        assert_eq!(c.attrs["gen_ai.system"], json!("runtape.scripted"));
        assert_eq!(c.attrs["gen_ai.request.model"], json!("scripted"));
        assert_eq!(c.attrs["gen_ai.agent.name"], json!("assistant"));
        assert!(
            !c.attrs.contains_key("gen_ai.input.messages"),
            "no content unless asked"
        );
        assert!(!c.attrs.contains_key("gen_ai.output.messages"));
    }
    let mut usage: Vec<_> = chats
        .iter()
        .map(|c| {
            (
                c.attrs["gen_ai.usage.input_tokens"].clone(),
                c.attrs["gen_ai.usage.output_tokens"].clone(),
                c.attrs["gen_ai.response.finish_reasons"].clone(),
            )
        })
        .collect();
    usage.sort_by_key(|u| u.0.as_i64());
    assert_eq!(
        usage,
        vec![
            (json!(120), json!(30), json!(["tool_calls"])),
            (json!(180), json!(20), json!(["stop"]))
        ]
    );
    let mut tools: Vec<_> = all
        .iter()
        .filter(|s| s.trace == root.trace && s.name.starts_with("execute_tool "))
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["execute_tool count_words", "execute_tool utc_now"]
    );
    for t in &tools {
        assert!(in_activation(&all, t, "assistant", &root.id), "{t:#?}");
        assert_eq!(t.attrs["gen_ai.operation.name"], json!("execute_tool"));
        assert!(t.attrs["gen_ai.tool.call.id"].is_string());
        assert!(!t.attrs.contains_key("gen_ai.tool.call.arguments"));
    }

    // The approval run was started by the command line and resumed here: its span is a child
    // of the run's root (in the run's own trace) and links to it.
    let resumed: Vec<_> = of_run(&all, &waiting)
        .into_iter()
        .filter(|s| s.name == "invoke_workflow runtape")
        .collect();
    assert_eq!(resumed.len(), 1);
    let resumed = resumed[0];
    assert!(!resumed.parent.is_empty());
    assert_eq!(resumed.links.len(), 1);
    assert_eq!(resumed.links[0]["spanId"], json!(resumed.parent));
    assert_eq!(resumed.links[0]["traceId"], json!(resumed.trace));
    assert!(all.iter().any(|s| s.trace == resumed.trace
        && s.name == "execute_tool deploy"
        && in_activation(&all, s, "operator", &resumed.id)));
    assert!(resumed.attrs.contains_key("runtape.resumed_in"));

    // The fork's root links to its parent's root, in the parent's trace.
    let fork_root: Vec<_> = of_run(&all, &fork)
        .into_iter()
        .filter(|s| s.name == "invoke_workflow runtape")
        .collect();
    assert_eq!(fork_root.len(), 1);
    let link = &fork_root[0].links[0];
    assert_eq!(link["traceId"], json!(root.trace));
    assert_eq!(link["spanId"], json!(root.id));
    assert_ne!(fork_root[0].trace, root.trace);
    assert_eq!(fork_root[0].attrs["runtape.fork.parent"], json!(run));

    let (transitions, points) = counter_total(&got, "runtape.transitions");
    assert!(
        transitions >= 8.0 + 5.0,
        "transitions counted: {transitions} {points:?}"
    );
    let (tokens, points) = counter_total(&got, "runtape.tokens");
    assert!(tokens >= 350.0, "tokens counted: {tokens} {points:?}");
    assert!(points.iter().any(|p| p.to_string().contains("output")));
    let (_, cost) = counter_total(&got, "runtape.cost");
    assert!(
        !cost.is_empty(),
        "cost is counted (zero for scripted models)"
    );
}

#[test]
fn content_is_exported_only_when_asked_and_the_standard_variable_works() {
    let (url, got) = receiver();
    let (dir, db) = scratch_db();
    let server = Server::start(
        dir.path(),
        &db,
        &["--otlp-content"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &url)],
    );
    let (_, started) = server.post("/api/runs", &json!({"spec": "examples/quickstart.toml"}));
    let run = field(&started, "id").to_owned();
    server.wait_run(&run, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    server.stop();
    let all = spans(&got);
    let tree = of_run(&all, &run);
    let chat = named(&tree, "chat scripted");
    let input = chat.text("gen_ai.input.messages");
    assert!(input.contains("runtape keeps every step"), "{input}");
    assert!(chat.attrs["gen_ai.output.messages"].is_string());
    // The conventions' message shape: every message a role and typed parts; the tool call
    // the model made and the tool's response carry the same id; each output message says why
    // the generation finished.
    let chats: Vec<&&Span> = tree.iter().filter(|s| s.name == "chat scripted").collect();
    let messages = |s: &Span, key: &str| -> Vec<Value> {
        serde_json::from_str::<Value>(s.text(key))
            .expect("messages are JSON")
            .as_array()
            .expect("messages are an array")
            .clone()
    };
    let mut calls = Vec::new();
    let mut responses = Vec::new();
    for c in &chats {
        for m in messages(c, "gen_ai.input.messages") {
            assert!(
                ["system", "user", "assistant", "tool"].contains(&m["role"].as_str().unwrap_or("")),
                "{m}"
            );
            for p in m["parts"].as_array().expect("parts") {
                match p["type"].as_str() {
                    Some("text") => assert!(p["content"].is_string(), "{p}"),
                    Some("tool_call") => calls.push(p["id"].clone()),
                    Some("tool_call_response") => responses.push(p["id"].clone()),
                    other => panic!("an unknown part type {other:?}: {p}"),
                }
            }
            assert!(m.get("content").is_none(), "content sits in parts: {m}");
        }
        let out = messages(c, "gen_ai.output.messages");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["role"], "assistant");
        let finish = out[0]["finish_reason"].as_str().expect("a finish reason");
        assert!(
            ["stop", "tool_call", "length", "content_filter"].contains(&finish),
            "{finish}"
        );
        let asked = out[0]["parts"]
            .as_array()
            .expect("parts")
            .iter()
            .any(|p| p["type"] == "tool_call");
        assert_eq!(asked, finish == "tool_call", "{out:?}");
    }
    assert!(
        !responses.is_empty(),
        "a later request carries the tool's response"
    );
    assert!(
        responses.iter().all(|r| calls.contains(r)),
        "{responses:?} answer {calls:?}"
    );
    let root = named(&tree, "invoke_workflow runtape");
    assert!(root.text("runtape.goal").contains("UTC"));
    let tool = named(&all, "execute_tool count_words");
    let arguments = tool.text("gen_ai.tool.call.arguments");
    assert!(
        arguments.contains("runtape keeps every step"),
        "{arguments}"
    );
    let result = tool.text("gen_ai.tool.call.result");
    assert!(result.contains('4'), "{result}");
}

#[test]
fn the_command_line_exports_with_the_standard_variable_and_a_resume_joins_the_trace() {
    let (url, got) = receiver();
    let (dir, db) = scratch_db();
    let env_run = |args: &[&str]| {
        let out = std::process::Command::new(support::serve::bin())
            .args(args)
            .arg("--db")
            .arg(&db)
            .current_dir(dir.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
            .env_remove("RUNTAPE_DB")
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", err(&out));
        stdout(&out)
    };
    let first = env_run(&["run", "examples/approval.toml", "--json"]);
    let run =
        serde_json::from_str::<Value>(first.lines().next().expect("line")).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_owned();
    env_run(&["resume", &run, "--approve"]);
    let all = spans(&got);
    let takes: Vec<_> = of_run(&all, &run)
        .into_iter()
        .filter(|s| s.name == "invoke_workflow runtape")
        .collect();
    assert_eq!(takes.len(), 2, "{takes:#?}");
    let root = takes
        .iter()
        .find(|s| s.parent.is_empty())
        .expect("the run's first span");
    assert_eq!(root.attrs["runtape.status"], json!("awaiting_input"));
    let resumed = takes
        .iter()
        .find(|s| !s.parent.is_empty())
        .expect("the resume");
    assert_eq!(resumed.parent, root.id, "two processes, one trace");
    assert_eq!(resumed.trace, root.trace);
    assert_eq!(resumed.attrs["runtape.status"], json!("completed"));
    assert!(all.iter().any(
        |s| s.name == "execute_tool deploy" && in_activation(&all, s, "operator", &resumed.id)
    ));
    assert_eq!(
        all.iter()
            .filter(|s| s.trace == root.trace && s.name == "chat scripted")
            .count(),
        2
    );
}
