//! runtape: a durable engine for LLM agent runs.
//!
//! # The model
//!
//! A run of one or more agents is an explicit, typed state machine ([`machine`]). Its
//! transitions are a pure function, [`machine::step`]`(state, event, spec) -> (next state,
//! effects)`: no I/O, no clock, no randomness — time and ids arrive inside the [`Event`]. An
//! effect is something to do (call a model, call a tool, ask a person); its result comes back
//! as the next event. The edges the machine may take are one table
//! ([`machine::table`]), from which `statechart.md` is generated.
//!
//! # The run loop
//!
//! An [`Engine`] drives runs on tokio ([`exec`]). For each run, one task repeats: take the next
//! event, step the machine, record the transition in the run's ledger ([`ledger`]) and submit
//! it to the [`Store`], and — only once it is durable — perform its effects. The ledger is the
//! one owner of what is stored: the event and effects as bytes, state hashes, a hash chain,
//! receipts, a sealed head, and the list of what `verify` recomputes. [`history`] reads it all
//! back: the timeline, any step in full, a diff of two runs, `verify`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use runtape::machine::{AgentSpec, ModelReply, Outcome, Spec};
//! use runtape::provider::ScriptedProvider;
//! use runtape::{Engine, RunSpec, history};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::in_memory(); // or Engine::open(path) for a SQLite file
//! engine.register_provider(
//!     "model",
//!     Arc::new(ScriptedProvider::replies("demo", vec![ModelReply::text("Paris")])),
//! );
//! let spec = RunSpec::build(Spec {
//!     agents: vec![AgentSpec::new("geo", "model", "any")],
//!     ..Spec::default()
//! })?;
//! let end = engine.start(spec, "Capital of France?").await?.wait().await?;
//! assert!(matches!(
//!     end.state.outcome(),
//!     Some(Outcome::Completed { answer: Some(a), .. }) if a == "Paris"
//! ));
//! // Every step replays through the machine to the hashes that were stored.
//! let report = history::verify(engine.store().as_ref(), &end.run_id, None)??;
//! assert_eq!(report.transitions, end.state.seq());
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Durable before acted on.** A transition is committed (fsynced, at the default
//!   durability) before any effect it asks for starts; its trace is published after that.
//! - **Crashes lose nothing committed.** A killed run resumes from its last committed step;
//!   finished work is not repeated, a model call in flight is asked again, an idempotent tool
//!   call is performed again with the same idempotency key, a non-idempotent one that had
//!   started is *in doubt* and handled by the agent's `on_in_doubt` policy — never silently
//!   repeated.
//! - **One writer per run.** A lease taken by compare-and-swap before anything is read;
//!   every write fenced by its epoch. The protocol is model-checked.
//! - **Verifiable.** [`history::verify`] re-folds every stored event through the current
//!   machine and checks every stored column against the run's sealed head and the replayed
//!   history; receipts are hash-chained and signed with Ed25519 when a key is given.
//! - **Secrets never land.** Keys are read at call time and never written to the database, a
//!   cassette, a receipt, a trace or a log ([`secrets`]).
//!
//! # Panics and errors
//!
//! A panic is a bug in runtape; an error is bad input. Nothing a user, a file, a database, a
//! provider, a model or a tool sends makes runtape panic: it is refused with an error whose
//! `Display` is one line saying what is wrong and what to do, and nothing is changed. Every
//! `unwrap` or `expect` outside tests carries a comment saying why it cannot fail.
//!
//! # The crate
//!
//! The types most programs need are re-exported here. What to call first:
//!
//! - **[`ops`]**, to do what the `runtape` command does — start a run from a spec file (or a
//!   spec built in Rust), pause, resume with an answer or a budget raise, fork with edits,
//!   cancel, list, show a step, the timeline, diff, verify — with typed views whose JSON is
//!   what `--json` prints and an [`ops::OpsError`] with a stable code. The command line and
//!   `runtape serve` are built on it; `examples/ops.rs` walks through it.
//! - **[`Engine`]**, to drive runs of specs and providers built in Rust, as above.
//! - **[`guide`]**, the manual: spec files, models, tools and MCP, delegation, memory and
//!   sessions, `serve`, PostgreSQL workers, the guarantees and their limits, performance,
//!   embedding and the command line, one chapter each.
//!
//! # Layers
//!
//! Each module imports only from the layers below it; `tests/it/layers.rs` reads this drawing
//! and the source, and fails on an import that runs upward (and on anything impure in the
//! core). Modules on one line do not import each other.
//!
//! ```text
//! cli                        the `runtape` command: parse, call ops, render
//! serve, bench               the HTTP API and web UI; the benchmarks
//! term                       what the command line and serve print alike
//! ops                        every operation a front end offers, typed views and errors
//! worker                     the worker loop, its health and metrics
//! otel                       OpenTelemetry export
//! config                     spec files into a setup of providers and tools
//! exec                       the engine: one driver per run, effects, leases
//! cassette                   recorded model exchanges; what a replay is served from
//! history                    a run read back: timeline, steps, diff, verify
//! ledger                     what each transition writes, and what verify recomputes
//! store                      SQLite, PostgreSQL and in-memory stores behind one trait
//! format                     the stored byte format
//! provider, tool             model providers; tools, command tools, MCP
//! secrets, http_server       secret values kept out of records; the HTTP/1 accept loop
//! receipt                    signed, hash-chained receipts
//! clock, schedule, eval      the clock seam; cron plans; datasets, scorers, reports
//! machine                    the pure core: state, events, effects, the edge table
//! scratch                    reused encode buffers
//! compact_json               compact JSON writing
//! text, guide                text helpers; the manual
//! ```
//!
//! A run's life through them: a front end calls [`ops`] (say `ops::start`), which reads the
//! spec with [`config`] and hands it to the [`Engine`] ([`exec`]); the driver steps
//! [`machine`], has the [`ledger`] turn each transition into a commit in the [`format`](mod@format) the
//! [`store`] writes, and performs the effects through [`provider`] and [`tool`] only once
//! the commit is durable. Reading back ([`history`]) and `verify` go through the ledger again.
//!
//! The modules: [`ops`] (the operations), [`machine`] (the pure core), [`exec`] (the engine),
//! [`ledger`] (the stored record), [`history`] (reading it back), [`store`] (SQLite,
//! PostgreSQL and in-memory stores behind one trait), [`provider`] (model providers),
//! [`tool`] (tools, command tools, MCP), [`cassette`] (recorded model exchanges), [`receipt`]
//! (signed receipts), [`config`] (`runtape.toml` spec files), [`secrets`], [`worker`] (the
//! worker loop of `runtape worker`, its health and metrics), [`otel`] (OpenTelemetry export),
//! [`http_server`] (the bounded HTTP/1 accept loop `runtape serve` and the worker's endpoint
//! share). The `runtape` command,
//! its benchmarks and its HTTP server (`runtape serve`) are the binary's, not this library's
//! API: they parse their input, call [`ops`], and render what it returns.

pub mod cassette;
mod clock;
mod compact_json;
pub mod config;
pub mod eval;
pub mod exec;
pub mod format;
pub mod guide;
pub mod history;
pub mod http_server;
pub mod ledger;
pub mod machine;
pub mod ops;
pub mod otel;
pub mod provider;
pub mod receipt;
pub mod schedule;
mod scratch;
pub mod secrets;
pub mod store;
mod text;
pub mod tool;
pub mod worker;

pub use exec::{Engine, EngineConfig, EngineError, RunEnd, RunHandle, TraceEvent};
pub use machine::{Event, RunId, RunSpec};
pub use provider::ModelProvider;
pub use store::Store;
pub use tool::Tool;
