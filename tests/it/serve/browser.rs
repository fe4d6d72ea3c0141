//! The page in a real browser: Debian's Chromium, headless, driven by playwright-core
//! (`tests/browser/e2e.mjs`) against a real `runtape serve` on a free loopback port. It opens
//! the runs list and a run, steps through the timeline, inspects a model request, approves a
//! waiting call and watches the run complete live, forks from a step with an edit and
//! compares the branches, shows a compensated run's saga steps, filters the runs list by tag
//! and status and reads a failed run's reason in the list and in its header, and measures a
//! 10,000-transition run. Screenshots of every screen go
//! to `target/browser-screenshots/` (not committed).
//!
//! Needs `/usr/bin/chromium` (`apt-get install chromium`) and the pinned playwright-core and
//! axe-core (`bash tests/browser/install.sh`); `.ci/run` installs them.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::durable::run_to_rest;
use runtape::exec::{Engine, EngineConfig};
use runtape::machine::{AgentSpec, Limits, ModelReply, RunSpec, Spec, ToolCallRequest, ToolSpec};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::Durability;
use runtape::tool::FnTool;
use serde_json::json;
use support::serve::{field, run_spec, scratch_db, serve};

/// A run of `rounds` tool rounds (three transitions each) then an answer, made through the
/// library on `db`.
fn long_run(db: &Path, rounds: u64) -> String {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let engine = Engine::open_with(
            db,
            EngineConfig {
                durability: Durability::Normal,
                ..EngineConfig::default()
            },
        )
        .expect("opens");
        let cap = rounds + 10;
        engine.register_provider(
            "scripted",
            Arc::new(ScriptedProvider::new("scripted", move |req| {
                let turn = cap.saturating_sub(req.remaining.turns.unwrap_or(cap));
                let reply = if turn < rounds {
                    ModelReply {
                        text: Some(format!("round {turn}: looking it up")),
                        ..ModelReply::tools(vec![ToolCallRequest::new(
                            format!("c{turn}"),
                            "lookup",
                            json!({"q": turn}),
                        )])
                    }
                } else {
                    ModelReply::text("found it")
                };
                ScriptOutcome {
                    result: Ok(reply.with_usage(100, 20)),
                    latency: Duration::ZERO,
                    chunks: Vec::new(),
                }
            })),
        );
        let tool = ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("lookup", "looks something up")
        };
        engine.register_tool(Arc::new(FnTool::new(tool.clone(), |args, _| {
            Ok(json!({"found": args}))
        })));
        let spec = RunSpec::build(Spec {
            agents: vec![AgentSpec {
                system_prompt: "You look things up.".into(),
                tools: Some(vec!["lookup".into()]),
                limits: Limits {
                    max_turns: Some(cap),
                    max_tool_calls: Some(cap),
                    ..Limits::default()
                },
                ..AgentSpec::new("searcher", "scripted", "model")
            }],
            tools: vec![tool],
            max_transitions: rounds * 3 + 20,
            ..Spec::default()
        })
        .expect("a valid spec");
        let end = run_to_rest(&engine, spec, "Look up 3,333 things").await;
        end.run_id.to_string()
    })
}

#[test]
#[ignore = "needs Chromium, playwright-core and axe-core: tests/extras/install.sh browser"]
fn the_page_works_in_chromium_end_to_end() {
    let browser = crate::support::browser::chromium();
    let shots = &browser.shots;
    let (dir, db) = scratch_db();
    let big = long_run(&db, 3_333);
    // Eight tagged runs (team=a|b|c by index), the first and the last failed with a reason.
    let many = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(crate::support::many_runs::generate(&db, 8, 8));
    let team_b: Vec<String> = [1, 4, 7].iter().map(|i| many[*i].to_string()).collect();
    let failed = many[7].to_string();
    let done = run_spec(dir.path(), &db, "examples/quickstart.toml");
    let waiting = run_spec(dir.path(), &db, "examples/approval.toml");
    // A run that created two things, failed, and undid them (steps 9 to 11).
    let saga_dir = tempfile::tempdir().expect("tempdir");
    let saga_spec = support::saga::saga_spec(
        saga_dir.path(),
        &support::saga::Saga {
            failing: None,
            idempotent: false,
            wait: false,
        },
    );
    let saga = run_spec(dir.path(), &db, support::cli::utf8(&saga_spec));
    let server = serve(dir.path(), &db);
    let (_, b) = server.get(&format!("/api/runs/{big}"));
    assert!(b["steps"].as_u64() >= Some(10_000), "{b}");

    let figures = browser.drive_ok(
        "e2e.mjs",
        &server.url,
        &json!({"done": done, "waiting": waiting, "big": big, "saga": saga, "team_b": team_b, "failed": failed}),
    );
    eprintln!("10,000-transition run in Chromium: {figures}");
    for shot in [
        "1-runs.png",
        "1b-filtered.png",
        "2-run-request.png",
        "3-waiting.png",
        "4-approved.png",
        "5-compare.png",
        "6-long-run.png",
        "7-saga.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot} was written");
    }
    // The fork the page made completed here and is stored like any other.
    let fork = field(&figures, "fork");
    server.wait_run(fork, Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let (_, approved) = server.get(&format!("/api/runs/{waiting}"));
    assert_eq!(approved["status"], "completed");
}
