//! The operations called directly, as a program embedding runtape calls them: no binary, real
//! SQLite files or the in-memory store, scripted and Rust-written models, real command tools.

mod counting;
mod flow;
mod history_length;
mod reads;
mod views;

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::json;
use tokio::sync::{Notify, watch};

use crate::config::RunFile;
use crate::exec::{Engine, RunHandle, new_run_id};
use crate::machine::{AgentSpec, ModelReply, RunId, RunSpec, Spec, ToolCallRequest, ToolSpec};
use crate::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};
use crate::tool::FnTool;

/// A spec file that stops for a person's approval of its one tool call, then completes.
const APPROVAL: &str = r#"
goal = "Deploy 1.4.2."
[[providers]]
name = "script"
kind = "scripted"
replies = [
  { text = "Deploying.", tool_calls = [{ name = "deploy", arguments = { version = "1.4.2" } }] },
  { text = "Deployed." },
]
[[tools]]
name = "deploy"
description = "Deploy a version"
command = ["sh", "-c", "printf deployed"]
schema = { type = "object", properties = { version = { type = "string" } }, required = ["version"] }
requires_approval = true
[[agents]]
id = "operator"
provider = "script"
tools = ["deploy"]
"#;

/// A spec file whose agent runs out of turns and rests until its budget is raised.
const BUDGET: &str = r#"
goal = "Two turns."
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [{ name = "echo", arguments = { n = 1 } }] },
  { text = "done" },
]
[[tools]]
name = "echo"
description = "Echo"
command = ["cat"]
read_only = true
idempotent = true
[[agents]]
id = "a"
provider = "s"
tools = ["echo"]
on_exhausted = "pause"
[agents.budget]
max_turns = 1
"#;

/// `text` as a spec file in `dir`, loaded.
fn spec_file(dir: &Path, text: &str) -> RunFile {
    crate::config::load_text(&dir.join("spec.toml"), text).expect("the spec loads")
}

/// Starts a run of the spec file `text` in `engine` as `runtape run` does.
async fn start_file(engine: &Engine, dir: &Path, text: &str) -> RunHandle {
    let (file, goal) = super::prepare(spec_file(dir, text), None, super::trace_warning)
        .await
        .expect("prepares");
    file.install(engine).expect("installs");
    super::start(engine, new_run_id(), &file, &goal, None)
        .await
        .expect("starts")
}

/// A model that calls the `note` tool on its first two turns and then answers the first user
/// message. Its second turn waits until the gate opens, and says so on `reached` first, so a
/// test can act while the run is known to be in the middle of that call.
struct Gated {
    gate: watch::Receiver<bool>,
    reached: Arc<Notify>,
}

impl ModelProvider for Gated {
    fn describe(&self) -> String {
        "gated".into()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        _tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let turn = request.turn();
            if turn == 1 {
                self.reached.notify_one();
                let mut gate = self.gate.clone();
                let _ = gate.wait_for(|open| *open).await;
            }
            Ok(match turn {
                0 | 1 => ModelReply::tools(vec![ToolCallRequest::new(
                    format!("c{turn}"),
                    "note",
                    json!({}),
                )]),
                _ => {
                    let question = request
                        .messages
                        .iter()
                        .find(|m| m.role == crate::machine::Role::User)
                        .and_then(|m| m.content.clone())
                        .unwrap_or_default();
                    ModelReply::text(format!("answer to: {question}"))
                }
            })
        })
    }
}

/// What a test holds of a [`Gated`] model: the gate and the signal.
struct Gate {
    open: watch::Sender<bool>,
    reached: Arc<Notify>,
}

/// Registers a [`Gated`] model (`model`) and the `note` tool in `engine`, and returns the gate
/// and a spec of one agent that uses them.
fn gated(engine: &Engine) -> (Gate, RunSpec) {
    let (open, gate) = watch::channel(false);
    let reached = Arc::new(Notify::new());
    engine.register_provider(
        "model",
        Arc::new(Gated {
            gate,
            reached: reached.clone(),
        }),
    );
    let note = ToolSpec {
        read_only: true,
        idempotent: true,
        ..ToolSpec::new("note", "Take a note")
    };
    engine.register_tool(Arc::new(FnTool::new(note.clone(), |_, _| {
        Ok(json!("noted"))
    })));
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec {
            tools: Some(vec![note.name.clone()]),
            ..AgentSpec::new("clerk", "model", "gated-1")
        }],
        tools: vec![note],
        ..Spec::default()
    })
    .expect("a valid spec");
    (Gate { open, reached }, spec)
}

/// Starts a run of `spec` (a [`Gated`] model's) and pauses it from another task while its
/// second model call is in flight; returns the run, paused at the step boundary after it.
async fn started_then_paused(engine: &Engine, gate: &Gate, spec: RunSpec) -> RunId {
    let handle = super::start_spec(engine, new_run_id(), spec, "Which colour?", None)
        .await
        .expect("starts");
    let run = handle.run_id().clone();
    gate.reached.notified().await;
    let pausing = {
        let (engine, run) = (engine.clone(), run.clone());
        tokio::spawn(async move { super::request_pause(&engine, &run).await })
    };
    // The pause is asked for (this engine's driver has it) before the model answers, so the
    // run rests at the boundary after that answer.
    let request = pausing.await.expect("the task ran").expect("pause asked");
    gate.open.send_replace(true);
    let paused = request.wait().await.expect("pauses");
    assert!(
        matches!(&paused, super::Paused::Paused { run: r, .. } if *r == run),
        "{paused}"
    );
    let end = handle.wait().await.expect("the handle ends");
    assert_eq!(end.status, crate::store::RunStatus::Paused);
    run
}
