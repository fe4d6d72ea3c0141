//! Shared support for the durable-run tests: specs, scripted providers and tools.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use runtape::exec::{Engine, EngineConfig, SteppedClock};
use runtape::machine::*;
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::tool::FnTool;
use serde_json::{Value, json};

/// A read-only, idempotent lookup tool.
pub fn lookup_spec() -> ToolSpec {
    ToolSpec {
        read_only: true,
        idempotent: true,
        schema: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        ..ToolSpec::new("lookup", "Look something up")
    }
}

/// One agent `solo` using provider `p`, granted `tools`, with generous caps.
pub fn spec(tools: Vec<ToolSpec>, f: impl FnOnce(&mut Spec)) -> RunSpec {
    let grant = tools.iter().map(|t| t.name.clone()).collect();
    let mut spec = Spec {
        agents: vec![AgentSpec {
            tools: Some(grant),
            system_prompt: "You are solo.".into(),
            ..AgentSpec::new("solo", "p", "m")
        }],
        tools,
        max_transitions: 100_000,
        ..Spec::default()
    };
    f(&mut spec);
    RunSpec::build(spec).expect("test spec is valid")
}

/// Turn `i < rounds` asks for one call to each of `tools` (ids `t{i}-{name}`); then "done".
pub fn rounds_provider(rounds: usize, tools: &[&str]) -> ScriptedProvider {
    let tools: Vec<String> = tools.iter().map(|s| (*s).to_owned()).collect();
    ScriptedProvider::new("p", move |req| {
        let turn = req.turn();
        if turn < rounds {
            let calls = tools
                .iter()
                .map(|t| {
                    ToolCallRequest::new(
                        format!("t{turn}-{t}"),
                        t.clone(),
                        json!({"q": format!("{turn}"), "text": format!("{turn}")}),
                    )
                })
                .collect();
            ScriptOutcome::reply(ModelReply::tools(calls).with_usage(10, 2))
        } else {
            ScriptOutcome::reply(ModelReply::text("done").with_usage(10, 1))
        }
    })
}

/// Counts calls and answers with the query.
pub fn counting_lookup(
    count: Arc<AtomicUsize>,
) -> FnTool<
    impl Fn(Value, runtape::tool::ToolContext) -> Result<Value, runtape::tool::ToolError> + Send + Sync,
> {
    FnTool::new(lookup_spec(), move |args, _ctx| {
        count.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"found": args["q"]}))
    })
}

/// Registers on `engine` the model `p`, asking for `rounds` rounds of `lookup` calls
/// ([`rounds_provider`]), and the [`counting_lookup`] tool whose count no one reads.
pub fn lookup_rounds(engine: &Engine, rounds: usize) {
    engine.register_provider("p", Arc::new(rounds_provider(rounds, &["lookup"])));
    engine.register_tool(Arc::new(counting_lookup(Arc::new(AtomicUsize::new(0)))));
}

/// Starts a run of `spec` toward `goal` on `engine` and waits for it to end (or rest).
pub async fn run_to_rest(engine: &Engine, spec: RunSpec, goal: &str) -> runtape::exec::RunEnd {
    engine
        .start(spec, goal)
        .await
        .expect("starts")
        .wait()
        .await
        .expect("runs")
}

/// The end of the run `begun` starts, resumes or forks (`engine.start(..)`, `engine.resume(..)`,
/// `engine.fork(..)`): awaits the handle, then the run.
pub async fn ended<F>(begun: F) -> runtape::exec::RunEnd
where
    F: std::future::IntoFuture<
            Output = Result<runtape::exec::RunHandle, runtape::exec::EngineError>,
        >,
{
    begun
        .await
        .expect("the run begins")
        .wait()
        .await
        .expect("the run ends")
}

/// The end of the run `handle` drives, which must come within `secs` seconds (`why` says why
/// it must: a run that hangs fails the test with that reason instead of never ending).
pub async fn ends_within(
    secs: u64,
    handle: runtape::exec::RunHandle,
    why: &str,
) -> runtape::exec::RunEnd {
    tokio::time::timeout(std::time::Duration::from_secs(secs), handle.wait())
        .await
        .expect(why)
        .expect("the run ends")
}

/// An engine over a fresh SQLite file in `dir`, with a deterministic clock.
pub fn engine_in(dir: &std::path::Path) -> Engine {
    let config = EngineConfig {
        clock: Arc::new(SteppedClock {
            start_ms: 1_000_000,
            step_ms: 10,
        }),
        ..EngineConfig::default()
    };
    Engine::open_with(&dir.join("runs.db"), config).expect("opens")
}

/// Collects strings from inside tools.
#[derive(Clone, Default)]
pub struct Log(pub Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().expect("log lock").push(s.into());
    }

    pub fn all(&self) -> Vec<String> {
        self.0.lock().expect("log lock").clone()
    }
}

pub mod child;

/// Spawns this test binary as a child running `test_name` (its full path:
/// `concat!(module_path!(), "::NAME")`) with `env`.
pub fn spawn_child(test_name: &str, env: &[(&str, String)]) -> std::process::Child {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--exact",
        crate::libtest_name(test_name),
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().expect("child starts")
}
