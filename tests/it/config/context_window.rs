//! `[agents.context]`: the window an agent's requests are measured against (the spec's, else
//! the built-in table's for its models) and the overflow policy, each bad value refused with
//! one line.

use crate::support;

use runtape::machine::context::{ContextSpec, OnOverflow};
use runtape::machine::context_summary::SummarizeSpec;
use support::config::*;

/// A spec with provider `p` of `kind` serving `model`, and one agent on it with `context`
/// (TOML lines of `[agents.context]`; no table when empty).
fn spec(kind: &str, model: &str, context: &str) -> SpecFile {
    let table = if context.is_empty() {
        String::new()
    } else {
        format!("[agents.context]\n{context}\n")
    };
    let http = if kind == "echo" {
        String::new()
    } else {
        format!("model = \"{model}\"\napi_key_env = \"K\"\n")
    };
    SpecFile::new(&format!(
        "[[providers]]\nname = \"p\"\nkind = \"{kind}\"\n{http}\n[[agents]]\nid = \"a\"\nprovider = \"p\"\n{table}"
    ))
}

fn context_of(f: &SpecFile) -> Option<ContextSpec> {
    let file = f.load().unwrap_or_else(|e| panic!("loads: {e}"));
    file.spec.spec().agents[0].context.clone()
}

#[test]
fn a_known_model_gets_its_documented_window_and_a_spec_overrides_it() {
    let window = |kind, model, context| context_of(&spec(kind, model, context)).map(|c| c.window);
    assert_eq!(window("openai", "gpt-4o-2024-08-06", ""), Some(128_000));
    assert_eq!(window("anthropic", "claude-sonnet-4-5", ""), Some(200_000));
    // Unknown models, local servers and offline providers are not measured.
    assert_eq!(window("openai", "my-finetune", ""), None);
    assert_eq!(window("ollama", "gpt-4o", ""), None);
    assert_eq!(window("echo", "", ""), None);
    // The spec's window wins, on any provider.
    assert_eq!(window("openai", "gpt-4o", "window = 50000"), Some(50_000));
    assert_eq!(window("ollama", "llama3.1", "window = 8192"), Some(8_192));
    let policy = context_of(&spec(
        "anthropic",
        "claude-opus-4",
        "on_overflow = \"shorten_tool_results\"",
    ));
    assert_eq!(
        policy,
        Some(ContextSpec {
            window: 200_000,
            on_overflow: OnOverflow::ShortenToolResults
        })
    );
}

#[test]
fn a_fallback_with_a_smaller_window_sets_the_agent_s() {
    let f = SpecFile::new(
        "[[providers]]\nname = \"p\"\nkind = \"openai\"\napi_key_env = \"K\"\n\n[[agents]]\nid = \"a\"\nprovider = \"p\"\nmodel = \"gpt-4.1\"\n\n[[agents.fallbacks]]\nprovider = \"p\"\nmodel = \"gpt-3.5-turbo\"\n",
    );
    assert_eq!(context_of(&f).map(|c| c.window), Some(16_385));
}

#[test]
fn bad_context_settings_get_one_line_each() {
    spec("openai", "gpt-4o", "on_overflow = \"shorten_tool_result\"").assert_error(
        "11:15: agents[0].context.on_overflow: unknown value `shorten_tool_result` (did you mean `shorten_tool_results`?) – use one of `fail`, `drop_oldest_tool_results`, `shorten_tool_results`, `summarize`",
    );
    spec("openai", "gpt-4o", "window = 0").assert_error(
        "11:10: agents[0].context.window: window must be at least 1 token – e.g. window = 200000",
    );
    spec("openai", "my-finetune", "on_overflow = \"fail\"").assert_error(
        "10:1: agents[0].context.window: no context window is known for model `my-finetune` – set window = TOKENS",
    );
}

/// A spec whose agent `a` summarises with `summarize` (the inline table's body) and has a
/// second agent `scribe` described by `scribe` (TOML lines).
fn summarized_by(summarize: &str, scribe: &str) -> SpecFile {
    SpecFile::new(&format!(
        "[[providers]]\nname = \"p\"\nkind = \"openai\"\nmodel = \"gpt-4o\"\napi_key_env = \"K\"\n\n[[agents]]\nid = \"a\"\nprovider = \"p\"\n[agents.context]\non_overflow = {{ summarize = {{ {summarize} }} }}\n\n[[agents]]\nid = \"scribe\"\nprovider = \"p\"\n{scribe}\n"
    ))
}

#[test]
fn a_summarising_agent_is_named_checked_and_stored() {
    let context = context_of(&summarized_by("agent = \"scribe\"", "tools = []"));
    assert_eq!(
        context,
        Some(ContextSpec {
            window: 128_000,
            on_overflow: OnOverflow::Summarize(SummarizeSpec {
                agent: "scribe".into(),
                keep_last: 4
            })
        })
    );
    let kept = context_of(&summarized_by(
        "agent = \"scribe\", keep_last = 9",
        "tools = []",
    ));
    assert!(matches!(
        kept.map(|c| c.on_overflow),
        Some(OnOverflow::Summarize(SummarizeSpec { keep_last: 9, .. }))
    ));
}

#[test]
fn a_bad_summarising_agent_gets_one_line() {
    summarized_by("agent = \"scrib\"", "tools = []").assert_error(
        "11:39: agents[0].context.on_overflow.summarize.agent: unknown agent `scrib` (did you mean `scribe`?) – use the id of an [[agents]] entry",
    );
    summarized_by("agent = \"scribe\"", "tools = [\"x\"]\n[[tools]]\nname = \"x\"\ncommand = [\"true\"]").assert_error(
        "11:39: agents[0].context.on_overflow.summarize.agent: agent `scribe` writes the summaries of agent `a`'s conversation, so it may use no tools – give it `tools = []` and no delegates or handoffs, or name another agent",
    );
    // Without a `tools` list it would be granted the read-only tools.
    summarized_by(
        "agent = \"scribe\"",
        "[[tools]]\nname = \"x\"\ncommand = [\"true\"]\nread_only = true",
    )
    .assert_error(
        "11:39: agents[0].context.on_overflow.summarize.agent: agent `scribe` writes the summaries of agent `a`'s conversation, so it may use no tools – give it `tools = []` and no delegates or handoffs, or name another agent",
    );
    summarized_by("agent = \"scribe\", keep_last = 0", "tools = []").assert_error(
        "11:61: agents[0].context.on_overflow.summarize.keep_last: keep_last must be at least 1 – the latest messages are never summarised",
    );
    summarized_by("keep_last = 3", "tools = []").assert_error(
        "11:29: agents[0].context.on_overflow.summarize.agent: missing field `agent` – add it",
    );
    spec("openai", "gpt-4o", "on_overflow = \"summarize\"").assert_error(
        "11:15: agents[0].context.on_overflow: on_overflow = \"summarize\" needs the agent that writes the summary – write on_overflow = { summarize = { agent = \"NAME\" } }",
    );
}
