//! A child process driving a run: the crash-safety and lease tests run the test binary itself
//! again with these environment variables set, then kill it or race two of them.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use runtape::exec::{Engine, EngineConfig, EngineError, SteppedClock};
use runtape::machine::*;
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::{RunStatus, StoreError};
use runtape::tool::FnTool;
use serde_json::json;

pub const MODE: &str = "RUNTAPE_CHILD_MODE";
pub const DB: &str = "RUNTAPE_CHILD_DB";
pub const RUN: &str = "RUNTAPE_CHILD_RUN";
pub const FILE: &str = "RUNTAPE_CHILD_FILE";
pub const POLICY: &str = "RUNTAPE_CHILD_POLICY";
pub const LATENCY_MS: &str = "RUNTAPE_CHILD_LATENCY_MS";
pub const ROUNDS: usize = 5;

/// The spec every child runs: `ROUNDS` rounds of [idem, once] in parallel, then an answer.
pub fn child_spec(policy: OnInDoubt) -> RunSpec {
    let tools = vec![
        ToolSpec {
            idempotent: true,
            ..ToolSpec::new("idem", "appends a line; safe to repeat")
        },
        ToolSpec {
            idempotent: false,
            ..ToolSpec::new("once", "appends a line; not safe to repeat")
        },
    ];
    RunSpec::build(Spec {
        agents: vec![AgentSpec {
            tools: Some(vec!["idem".into(), "once".into()]),
            on_in_doubt: policy,
            ..AgentSpec::new("solo", "p", "m")
        }],
        tools,
        ..Spec::default()
    })
    .expect("child spec is valid")
}

fn append(file: &str, line: String) -> Result<(), runtape::tool::ToolError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| runtape::tool::ToolError::new(e.to_string()))?;
    f.write_all(line.as_bytes())
        .and_then(|_| f.sync_data())
        .map_err(|e| runtape::tool::ToolError::new(e.to_string()))
}

/// Runs the child's part, if this process is a child; returns false otherwise.
pub fn child_main() -> bool {
    let Ok(mode) = std::env::var(MODE) else {
        return false;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set by the parent"));
    let (db, run, file) = (var(DB), RunId::new(var(RUN)), var(FILE));
    let policy = match std::env::var(POLICY).as_deref() {
        Ok("retry") => OnInDoubt::Retry,
        Ok("ask") => OnInDoubt::Ask,
        _ => OnInDoubt::Fail,
    };
    let latency: u64 = std::env::var(LATENCY_MS)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let code = rt.block_on(async move {
        let config = EngineConfig {
            clock: Arc::new(SteppedClock {
                start_ms: 5_000_000,
                step_ms: 10,
            }),
            ..EngineConfig::default()
        };
        let engine =
            Engine::open_with(std::path::Path::new(&db), config).expect("child opens the database");
        engine.register_provider(
            "p",
            Arc::new(ScriptedProvider::new("p", move |req| {
                let turn = req.turn();
                let mut out = if turn < ROUNDS {
                    ScriptOutcome::reply(ModelReply::tools(vec![
                        ToolCallRequest::new(format!("i{turn}"), "idem", json!({})),
                        ToolCallRequest::new(format!("o{turn}"), "once", json!({})),
                    ]))
                } else {
                    ScriptOutcome::reply(ModelReply::text("all done"))
                };
                out.latency = Duration::from_millis(latency);
                out
            })),
        );
        let f = file.clone();
        engine.register_tool(Arc::new(FnTool::new(
            ToolSpec {
                idempotent: true,
                ..ToolSpec::new("idem", "")
            },
            move |_a, ctx| {
                append(&f, format!("idem {}\n", ctx.idempotency_key)).map(|_| json!("idem ok"))
            },
        )));
        let f = file.clone();
        engine.register_tool(Arc::new(runtape::tool::FnTool::new(
            ToolSpec::new("once", ""),
            move |_a, ctx| {
                append(&f, format!("once {}\n", ctx.idempotency_key))?;
                // The window between the side effect and the recorded result, where a kill
                // leaves the call in doubt.
                std::thread::sleep(Duration::from_millis(30));
                Ok(json!("once ok"))
            },
        )));
        let exists = engine.store().run(&run).expect("reads").is_some();
        let handle = if mode == "start" || !exists {
            engine
                .start(child_spec(policy), "crash me")
                .with_id(run.clone())
                .await
        } else {
            engine.resume(&run).await
        };
        let handle = match handle {
            Ok(h) => h,
            Err(EngineError::Store(StoreError::LeaseHeld { .. }))
            | Err(EngineError::Finished { .. }) => {
                eprintln!("{}", handle.expect_err("an error"));
                return 4;
            }
            Err(e) => panic!("child could not drive the run: {e}"),
        };
        let mut end = handle.wait().await.expect("child drives the run");
        if end.status == RunStatus::AwaitingInput {
            // on_in_doubt = ask: a person approves retrying the call.
            end = engine
                .provide_input(&run, None, HumanInput::Approve)
                .await
                .expect("input")
                .wait()
                .await
                .expect("runs");
        }
        println!("\nSTATUS={}", end.status);
        0
    });
    std::process::exit(code);
}
