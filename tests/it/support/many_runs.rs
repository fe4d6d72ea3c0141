//! Many real runs in a SQLite file, written through the engine and the store as `runtape run`
//! writes them: for the run list's filter, sort and paging tests and its measurement at
//! 100,000 runs. Run `i` varies by `i`: its agent (`planner` for even `i`, `writer` for odd),
//! its tags (`team=a|b|c` by `i % 3`, `batch=N` by `i / 1000`), its goal (`goal i`, with
//! `fail` for every 7th run, whose model refuses it so it ends failed), and its spend (`i % 5`
//! × 100 input tokens costing `i % 5` thousandths of a dollar).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use runtape::exec::{Engine, EngineConfig};
use runtape::machine::*;
use runtape::provider::{ProviderError, ScriptOutcome, ScriptedProvider};
use runtape::store::Durability;

/// The spec of run `i`.
pub fn spec_of(i: usize) -> RunSpec {
    let agent = if i.is_multiple_of(2) {
        "planner"
    } else {
        "writer"
    };
    let tags: BTreeMap<String, String> = [
        ("team".to_owned(), ["a", "b", "c"][i % 3].to_owned()),
        ("batch".to_owned(), (i / 1000).to_string()),
    ]
    .into();
    RunSpec::build(Spec {
        agents: vec![AgentSpec::new(agent, "p", "m")],
        tags,
        ..Spec::default()
    })
    .expect("the generated spec is valid")
}

/// The goal of run `i`.
pub fn goal_of(i: usize) -> String {
    if i.is_multiple_of(7) {
        format!("goal {i} fail")
    } else {
        format!("goal {i}")
    }
}

/// Writes `count` runs (run `i` as the module says), `batch` started together at a time, on
/// `db` at `synchronous=NORMAL`; returns their ids in order of `i`.
pub async fn generate(db: &Path, count: usize, batch: usize) -> Vec<RunId> {
    let engine = Engine::open_with(
        db,
        EngineConfig {
            durability: Durability::Normal,
            max_concurrent_runs: batch,
            ..EngineConfig::default()
        },
    )
    .expect("opens the database");
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", |req| {
            let goal = req
                .messages
                .last()
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            if goal.ends_with("fail") {
                return ScriptOutcome::fail(ProviderError::new(
                    "p",
                    ProviderErrorClass::BadRequest,
                    "this goal is refused",
                ));
            }
            let n: u64 = goal
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            ScriptOutcome::reply(
                ModelReply::text(format!("answer {n}"))
                    .with_usage((n % 5) * 100, 1)
                    .with_cost_nanos((n % 5) * 1_000_000),
            )
        })),
    );
    let mut ids = Vec::with_capacity(count);
    let mut i = 0;
    while i < count {
        let end = (i + batch).min(count);
        let mut handles = Vec::with_capacity(end - i);
        for j in i..end {
            let h = engine.start(spec_of(j), &goal_of(j)).await.expect("starts");
            ids.push(h.run_id().clone());
            handles.push(h);
        }
        for h in handles {
            h.wait().await.expect("ends");
        }
        i = end;
    }
    ids
}
