//! runtape: a durable engine for LLM agent runs.
//!
//! A run of one or more agents is an explicit, typed state machine ([`machine`]). Transitions
//! are pure functions from `(state, event)` to `(state, effects)`; an executor performs the
//! effects (model calls, tool calls, asking a person) and feeds their results back as events.

pub mod bench;
pub mod cassette;
pub mod cli;
pub mod config;
pub mod exec;
pub mod history;
pub mod ledger;
pub mod machine;
pub mod provider;
pub mod receipt;
pub mod secrets;
pub mod store;
mod text;
pub mod tool;
