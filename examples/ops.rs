//! Doing what the `runtape` command does, from Rust, through `runtape::ops` — the operations
//! the command line and `runtape serve` are built on: start a run on a SQLite file, pause it
//! from another task, resume it, fork it with an edit, show a step, verify both runs.
//!
//! Runs offline:
//!
//! ```sh
//! cargo run --example ops              # a fresh database in the temp directory
//! cargo run --example ops -- runs.db   # or one you name (kept afterwards; `runtape ls` it)
//! ```
//!
//! The model is written in Rust here so the example can hold its second call until the pause
//! has been asked for; a spec file works the same way (`ops::load`, `ops::prepare`,
//! `ops::start`), and so does a real provider.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use runtape::exec::{ForkMode, RunEnd, new_run_id};
use runtape::machine::{
    AgentSpec, ModelReply, Outcome, Role, RunSpec, Spec, ToolCallRequest, ToolSpec,
};
use runtape::ops::{self, Answer, Edit, EngineSettings};
use runtape::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};
use runtape::tool::FnTool;
use serde_json::json;
use tokio::sync::{Notify, watch};

/// A model that takes two notes, then answers the question it was asked. Its second call
/// waits for `gate` (and says it has begun on `reached`), which is how the example pauses the
/// run at a step it knows; a real model call takes a moment anyway.
struct NoteTaker {
    gate: watch::Receiver<bool>,
    reached: Arc<Notify>,
}

impl ModelProvider for NoteTaker {
    fn describe(&self) -> String {
        "note-taker".into()
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
            if turn < 2 {
                let call = ToolCallRequest::new(format!("c{turn}"), "note", json!({}));
                return Ok(ModelReply::tools(vec![call]));
            }
            let question = request
                .messages
                .iter()
                .find(|m| m.role == Role::User)
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            Ok(ModelReply::text(format!("answer to: {question}")))
        })
    }
}

fn answer(end: &RunEnd) -> String {
    match end.state.outcome() {
        Some(Outcome::Completed { answer, .. }) => answer.clone().unwrap_or_default(),
        other => format!("(not completed: {other:?})"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let keep = std::env::args_os().nth(1).map(PathBuf::from);
    let db = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("runtape-ops-{}.db", std::process::id()))
    });

    // An engine over the SQLite file, configured as `runtape run` configures one (receipt
    // key, clock and durability from the settings; lease and size limits from the
    // environment).
    let engine = ops::engine(&db, &EngineSettings::default(), true)?;
    let (open, gate) = watch::channel(false);
    let reached = Arc::new(Notify::new());
    engine.register_provider(
        "notes",
        Arc::new(NoteTaker {
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
            ..AgentSpec::new("clerk", "notes", "rust-1")
        }],
        tools: vec![note],
        ..Spec::default()
    })?;

    // `runtape run`: start it.
    let handle = ops::start_spec(&engine, new_run_id(), spec, "Which colour?", None).await?;
    let run = handle.run_id().clone();
    println!("started run {run} in {}", db.display());

    // `runtape pause RUN`, from another task, while the model's second call is in flight: the
    // request is made at once (this engine drives the run), the run pauses at its next step
    // boundary, and the pause says where.
    reached.notified().await;
    let pausing = tokio::spawn({
        let (engine, run) = (engine.clone(), run.clone());
        async move {
            let request = ops::request_pause(&engine, &run).await?;
            open.send_replace(true); // let the model answer
            request.wait().await
        }
    });
    println!("{}", pausing.await??);
    println!("the run rests {}", handle.wait().await?.status);

    // `runtape resume RUN`: it goes on from its last committed step.
    let end = ops::resume(&engine, &run, Answer::None, None, &[])
        .await?
        .wait()
        .await?;
    println!("resumed: {}", answer(&end));

    // `runtape fork RUN@1 --edit "user=…"`: a branch with another question.
    let edits = [Edit::parse("user=Which shape?")?];
    let fork = ops::fork(&engine, &run, 1, &edits, ForkMode::Live).await?;
    let fork_id = fork.run_id().clone();
    println!(
        "forked {run}@1 as run {fork_id}: {}",
        answer(&fork.wait().await?)
    );

    // `runtape show FORK@2 --json`: the edit, as a typed view whose JSON is what the command
    // line and the HTTP API give.
    let step = ops::show(engine.store().as_ref(), &fork_id, Some(2))?;
    let shown = ops::json::encode(&step)?;
    let edge = step.step.edge.map(|e| e.to_string()).unwrap_or_default();
    println!(
        "step 2 of {fork_id}: {edge}, then {} ({} bytes of JSON)",
        step.step.state.kind(),
        shown.len()
    );

    // `runtape verify RUN`: each replays through the machine to what was stored.
    for id in [&run, &fork_id] {
        let report = ops::verify(engine.store().as_ref(), id, None)?.check()?;
        println!("verified {id}: {} transitions replay", report.transitions);
    }

    if keep.is_none() {
        drop(engine);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    Ok(())
}
