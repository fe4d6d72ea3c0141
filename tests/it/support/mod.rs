//! What the tests share: running the binary, specs, databases, mock providers and MCP servers,
//! and a driver for the pure machine. One module per kind of help.
#![allow(dead_code, unreachable_pub)]

pub mod browser;
pub mod cassette;
pub mod cli;
pub mod clock;
pub mod config;
pub mod crash;
pub mod delegation;
pub mod durable;
pub mod machine;
pub mod many_runs;
pub mod mcp;
pub mod otlp;
pub mod pg;
pub mod protocol;
pub mod provider;
pub mod receipt;
pub mod saga;
pub mod serve;
pub mod session;
pub mod sources;
pub mod spec;
pub mod tamper;
pub mod tamper_catalogue;
pub mod workers;
