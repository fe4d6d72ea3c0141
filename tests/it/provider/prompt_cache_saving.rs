//! What prompt caching saves on a 50-turn tool loop, measured: the same run driven twice by
//! the engine against a scripted Anthropic server on 127.0.0.1, once with the cache marks
//! runtape places by default and once with `prompt_cache = false`, each priced by the built-in
//! table (claude-sonnet-4-5: $3/M input, $0.30/M cache reads, $3.75/M cache writes, $15/M
//! output).
//!
//! The server bills as Anthropic documents it: at each `cache_control` mark a request reads
//! from the cache the longest prefix (tools, system, messages, in that order) that an earlier
//! request wrote and that ends at most 20 blocks before the mark, writes the rest up to its
//! last mark, and is billed as plain input for what follows the last mark; a request without
//! marks is all input. Tokens are
//! counted as 4 bytes of each block's JSON. So the figures depend only on where runtape puts
//! its marks and on the prices.

use crate::support::provider as provider_support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use provider_support::{Behaviour, MockServer, Recorded, config, provider};
use runtape::exec::Engine;
use runtape::machine::*;
use runtape::provider::http::ProviderKind;
use runtape::store::RunStatus;
use runtape::tool::FnTool;
use serde_json::{Value, json};

const TURNS: usize = 50;
const OUTPUT_TOKENS: u64 = 50;

/// The request's blocks in cache order, each as (its JSON without the mark, marked).
fn blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |v: &Value| {
        let mut v = v.clone();
        let marked = v
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        out.push((v.to_string(), marked));
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        push(t);
    }
    match &body["system"] {
        Value::Array(list) => list.iter().for_each(&mut push),
        Value::String(s) => push(&json!({"type": "text", "text": s})),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::Array(list) => list.iter().for_each(&mut push),
            other => push(&json!({"type": "text", "text": other})),
        }
    }
    out
}

fn tokens(block: &str) -> u64 {
    (block.len() as u64).div_ceil(4)
}

/// How far before a mark Anthropic looks for an earlier write ("up to approximately 20
/// blocks before the explicit breakpoint").
const LOOKBACK: usize = 20;

/// Usage as Anthropic would bill `body`, given the prefixes earlier requests wrote: (plain
/// input, read from the cache, written to it). Prefixes are named by a hash chain over their
/// blocks.
fn bill(body: &Value, cache: &Mutex<HashSet<u64>>) -> (u64, u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut cache = cache.lock().unwrap();
    // For each block boundary: the prefix's name and its tokens so far.
    let mut bounds: Vec<(u64, u64)> = Vec::new();
    let (mut chain, mut total) = (0u64, 0u64);
    let (mut read, mut last_mark) = (0u64, 0u64);
    let mut marks = Vec::new();
    for (block, marked) in blocks(body) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (chain, &block).hash(&mut h);
        chain = h.finish();
        total += tokens(&block);
        bounds.push((chain, total));
        if marked {
            let i = bounds.len() - 1;
            let hit = bounds[i.saturating_sub(LOOKBACK - 1)..=i]
                .iter()
                .rev()
                .find(|(name, _)| cache.contains(name));
            if let Some((_, upto)) = hit {
                read = read.max(*upto);
            }
            last_mark = total;
            marks.push(chain);
        }
    }
    cache.extend(marks);
    let written = last_mark.saturating_sub(read);
    (total - read - written, read, written)
}

fn respond(r: &Recorded, cache: &Mutex<HashSet<u64>>) -> Behaviour {
    let body = r.json();
    let turn = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    let (input, read, written) = bill(&body, cache);
    let usage = json!({
        "input_tokens": input,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": OUTPUT_TOKENS,
    });
    let (content, stop) = if turn + 1 < TURNS {
        (
            json!([{"type": "tool_use", "id": format!("toolu_{turn}"), "name": "read_page", "input": {"page": turn}}]),
            "tool_use",
        )
    } else {
        (
            json!([{"type": "text", "text": "All pages read."}]),
            "end_turn",
        )
    };
    let reply = json!({
        "id": format!("msg_{turn}"), "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": content,
        "stop_reason": stop, "stop_sequence": null, "usage": usage,
    });
    Behaviour::json(200, &reply.to_string())
}

struct Measured {
    cost_nanos: u64,
    read: u64,
    written: u64,
    input: u64,
}

async fn run(prompt_cache: Option<bool>) -> Measured {
    let cache = Arc::new(Mutex::new(HashSet::new()));
    let c = cache.clone();
    let server = MockServer::start(move |r| respond(r, &c)).await;
    let mut cfg = config(ProviderKind::Anthropic, &server.url(), "claude-sonnet-4-5");
    cfg.stream = false;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("runs.db")).unwrap();
    engine.register_provider("anthropic", Arc::new(provider(cfg, "k-1")));
    let page = "The quarterly report lists revenue by region and product line. ".repeat(40);
    engine.register_tool(Arc::new(FnTool::new(
        ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("read_page", "Read one page of the report.")
        },
        move |args: Value, _| Ok(json!({"page": args["page"], "text": page})),
    )));
    let mut agent = AgentSpec::new("analyst", "anthropic", "claude-sonnet-4-5");
    agent.system_prompt =
        "You are a careful analyst. Read every page before answering. ".repeat(130);
    agent.limits.max_turns = Some(TURNS as u64 + 5);
    agent.model_settings.prompt_cache = prompt_cache;
    let spec = RunSpec::build(Spec {
        agents: vec![agent],
        tools: vec![ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("read_page", "Read one page of the report.")
        }],
        ..Spec::default()
    })
    .unwrap();
    let end = engine
        .start(spec, "Summarise the report.")
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(
        end.status,
        RunStatus::Completed,
        "{:?}",
        end.state.outcome()
    );
    let requests = server.requests();
    assert_eq!(requests.len(), TURNS);
    let (mut read, mut written, mut input) = (0, 0, 0);
    let store = engine.store();
    for t in runtape::history::timeline(store.as_ref(), &end.run_id).unwrap() {
        read += t.cache_read_tokens;
        written += t.cache_write_tokens;
        input += t.tokens;
    }
    Measured {
        cost_nanos: end.state.data().unwrap().usage.cost_nanos,
        read,
        written,
        input: input - TURNS as u64 * OUTPUT_TOKENS,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caching_cuts_the_input_cost_of_a_50_turn_tool_loop() {
    let cached = run(None).await;
    let uncached = run(Some(false)).await;
    assert_eq!(
        (uncached.read, uncached.written),
        (0, 0),
        "no marks, no cache"
    );
    // Output: 50 turns × 50 tokens × $15/M, the same in both runs.
    let output = TURNS as u64 * OUTPUT_TOKENS * 15_000;
    let (with, without) = (cached.cost_nanos - output, uncached.cost_nanos - output);
    let prompt = cached.input + cached.read + cached.written;
    println!(
        "{TURNS} turns on claude-sonnet-4-5: {prompt} prompt tokens in all; with caching \
         {} read from the cache, {} written to it, {} plain input: input ${:.4}, without \
         ${:.4} ({:.1}% saved); the whole run ${:.4} against ${:.4}",
        cached.read,
        cached.written,
        cached.input,
        with as f64 / 1e9,
        without as f64 / 1e9,
        100.0 * (1.0 - with as f64 / without as f64),
        cached.cost_nanos as f64 / 1e9,
        uncached.cost_nanos as f64 / 1e9,
    );
    assert_eq!(uncached.input, prompt, "both runs sent the same prompts");
    // Every request after the first reads all but the newest turn from the cache.
    assert!(cached.read > prompt * 8 / 10, "{} of {prompt}", cached.read);
    assert!(
        with * 4 < without,
        "caching saves over three quarters of the input cost"
    );
}
