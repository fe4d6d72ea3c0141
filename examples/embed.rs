//! Embedding runtape in a Rust program: a custom `Tool`, a scripted model, a durable run on a
//! real SQLite file, its trace as it happens, and a verification of what was stored.
//!
//! Runs offline:
//!
//! ```sh
//! cargo run --example embed              # a fresh database in the temp directory
//! cargo run --example embed -- runs.db   # or one you name (kept afterwards)
//! ```
//!
//! Swap the `ScriptedProvider` for `runtape::provider::http` adapters (or load a spec file with
//! `runtape::config`) to talk to a real model; everything else stays the same.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use runtape::exec::{Engine, Trace, TraceEvent};
use runtape::history;
use runtape::machine::{AgentSpec, ModelReply, Outcome, RunSpec, Spec, ToolCallRequest, ToolSpec};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::tool::{Tool, ToolContext, ToolError};
use serde_json::{Value, json};

/// A warehouse tool that reserves stock. It changes the world, so it uses the idempotency key
/// the engine hands it: a call repeated with the same key (a retry, or a resume after a crash)
/// returns the first reservation instead of taking the stock twice. That is what lets it
/// declare itself `idempotent`.
struct Reserve {
    stock: Mutex<BTreeMap<String, u32>>,
    done: Mutex<BTreeMap<String, Value>>,
}

impl Tool for Reserve {
    fn name(&self) -> &str {
        "reserve"
    }

    fn description(&self) -> &str {
        "Reserve `count` units of `item` from the warehouse."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "item": { "type": "string" },
                "count": { "type": "integer", "minimum": 1 }
            },
            "required": ["item", "count"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            // The engine validated `args` against `schema()`, so both fields are present.
            let item = args["item"].as_str().unwrap_or_default().to_owned();
            let count = u32::try_from(args["count"].as_u64().unwrap_or(0)).unwrap_or(u32::MAX);
            let mut done = self
                .done
                .lock()
                .map_err(|_| ToolError::new("lock poisoned"))?;
            if let Some(earlier) = done.get(&ctx.idempotency_key) {
                return Ok(earlier.clone());
            }
            let mut stock = self
                .stock
                .lock()
                .map_err(|_| ToolError::new("lock poisoned"))?;
            let left = stock.get_mut(&item).ok_or_else(|| {
                // An error result goes back to the model, which can correct itself.
                ToolError::new(format!("no such item `{item}`"))
            })?;
            if *left < count {
                return Err(ToolError::new(format!("only {left} {item} left")));
            }
            *left -= count;
            let receipt = json!({ "item": item, "reserved": count, "left": *left });
            done.insert(ctx.idempotency_key, receipt.clone());
            Ok(receipt)
        })
    }
}

/// Turn 0 asks for two reservations at once (run in parallel); turn 1 reports the results it
/// was sent back. A real provider decides this itself; the script makes the example offline.
fn clerk_model() -> ScriptedProvider {
    ScriptedProvider::new("shop", |req| {
        if req.turn() == 0 {
            return ScriptOutcome::reply(
                ModelReply::tools(vec![
                    ToolCallRequest::new("c1", "reserve", json!({"item": "tea", "count": 2})),
                    ToolCallRequest::new("c2", "reserve", json!({"item": "cups", "count": 9})),
                ])
                .with_usage(120, 30),
            );
        }
        let results: Vec<&str> = req
            .messages
            .iter()
            .filter(|m| m.tool_call_id.is_some())
            .filter_map(|m| m.content.as_deref())
            .collect();
        ScriptOutcome::reply(
            ModelReply::text(format!("Reservations: {}", results.join("; "))).with_usage(200, 20),
        )
    })
}

/// One line for the trace events worth narrating; `None` for the rest.
fn narrate(e: &TraceEvent) -> Option<String> {
    let seq = e
        .seq
        .map(|s| format!("#{s:<3}"))
        .unwrap_or_else(|| "    ".into());
    let line = match &e.kind {
        Trace::Transition { edge, state } => format!("{edge} -> {state:?}"),
        Trace::ToolCall { tool, args, .. } => format!("  calls {tool} {args}"),
        Trace::ToolResult { tool, ok, .. } => {
            format!("  {tool} {}", if *ok { "ok" } else { "error" })
        }
        _ => return None,
    };
    Some(format!("{seq} {line}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let keep = std::env::args_os().nth(1).map(PathBuf::from);
    let db = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("runtape-embed-{}.db", std::process::id()))
    });

    // The engine owns the SQLite file; every transition is committed before its effects run.
    let engine = Engine::open(&db)?;
    let reserve = Arc::new(Reserve {
        stock: Mutex::new(BTreeMap::from([("tea".into(), 5), ("cups".into(), 4)])),
        done: Mutex::new(BTreeMap::new()),
    });
    engine.register_provider("shop", Arc::new(clerk_model()));
    engine.register_tool(reserve.clone());

    // The spec says who runs and what they may touch; the tool's entry comes from the tool.
    let tool = ToolSpec {
        schema: reserve.schema(),
        idempotent: reserve.idempotent(),
        read_only: reserve.read_only(),
        ..ToolSpec::new(reserve.name(), reserve.description())
    };
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec {
            system_prompt: "You are a shop clerk. Reserve what the customer asks for.".into(),
            tools: Some(vec![tool.name.clone()]),
            ..AgentSpec::new("clerk", "shop", "scripted-1")
        }],
        tools: vec![tool],
        ..Spec::default()
    })?;

    let run = engine
        .start(spec, "Two packs of tea and nine cups, please.")
        .await?;
    let id = run.run_id().clone();
    println!("run {id} in {}", db.display());
    let end = run
        .wait_with(|e| {
            if let Some(line) = narrate(e) {
                println!("{line}");
            }
        })
        .await?;

    match end.state.outcome() {
        Some(Outcome::Completed { answer, .. }) => {
            println!("answer: {}", answer.as_deref().unwrap_or("(none)"));
        }
        other => return Err(format!("the run did not complete: {other:?}").into()),
    }

    // Everything above is in the file: replay it through the machine and check the receipts.
    let report = history::verify(engine.store().as_ref(), &id, None)??;
    println!(
        "verified: {} transitions replay, {} receipts check",
        report.transitions, report.receipts.receipts
    );

    if keep.is_none() {
        drop(engine);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    Ok(())
}
