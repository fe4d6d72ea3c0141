//! The manual: how to write a run spec, use models and tools, delegate, remember, serve,
//! scale out on PostgreSQL, and what runtape guarantees. One chapter per topic; each is a
//! doc-only module, read with `cargo doc --open` (or on docs.rs under `runtape::guide`). The
//! commands they show are run by the `readme` tests, like the README's.
//!
//! - [`concepts`]: runs, states, transitions, events, effects, checkpoints, cassettes,
//!   receipts, sessions, forks.
//! - [`specs`]: the run spec file.
//! - [`models`]: providers, structured output, reasoning, settings, fallback, costs, endpoints.
//! - [`tools`]: command tools, MCP servers, and compensation (undoing a failed run's calls).
//! - [`guarded`]: guarded tools: labels on what agents read, and the policy checked before
//!   every tool call, against prompt injection.
//! - [`delegation`]: agents that delegate to and hand off to each other.
//! - [`memory`]: memory, sessions and the retriever.
//! - [`time`]: durable time: sleeps and deadlines that survive crashes.
//! - [`serve`]: the web page and the HTTP API.
//! - [`eval`]: evaluation: a dataset run under variants of a spec, scored, compared with a
//!   baseline, and scored again without running.
//! - [`cli`]: the command line.
//! - [`embedding`]: runtape as a Rust library: the `ops` API, a whole program, writing a tool
//!   and a provider.
//! - [`guarantees`]: what holds under crashes, races and tampering, the test behind each claim,
//!   and the limits (time travel, replay, cassettes, receipts, `verify`, security).
//! - [`postgres`]: many workers on PostgreSQL.
//! - [`performance`]: the current figures, a comparison with LangGraph, how to reproduce them.
//! - [`developing`]: working on runtape itself.
//! - [`changelog`]: what changed per version, and what an upgrade does to stored data.

#[doc = include_str!("concepts.md")]
pub mod concepts {}
#[doc = include_str!("specs.md")]
pub mod specs {}
#[doc = include_str!("models.md")]
pub mod models {}
#[doc = include_str!("tools.md")]
pub mod tools {}
#[doc = include_str!("guarded.md")]
pub mod guarded {}
#[doc = include_str!("delegation.md")]
pub mod delegation {}
#[doc = include_str!("memory.md")]
pub mod memory {}
#[doc = include_str!("time.md")]
pub mod time {}
#[doc = include_str!("serve.md")]
pub mod serve {}
#[doc = include_str!("eval.md")]
pub mod eval {}
#[doc = include_str!("cli.md")]
pub mod cli {}
#[doc = include_str!("embedding.md")]
// The whole program the chapter ends with is examples/ops.rs, compiled and run as a doctest.
#[doc = concat!("\n```rust\n", include_str!("../../examples/ops.rs"), "```\n")]
pub mod embedding {}
#[doc = include_str!("guarantees.md")]
pub mod guarantees {}
#[doc = include_str!("postgres.md")]
pub mod postgres {}
#[doc = include_str!("performance.md")]
pub mod performance {}
#[doc = include_str!("developing.md")]
pub mod developing {}
#[doc = include_str!("changelog.md")]
pub mod changelog {}
