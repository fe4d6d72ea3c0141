//! The integration tests, in one test binary: one module per area (`tests/it/<area>/`), one
//! file per behaviour. A test that needs a process of its own is a binary of its own beside
//! this one (see the header of `tests/fuzz_parsers.rs` and `tests/orphaned_tools.rs`).
//!
//! Run one area or one behaviour with a filter: `cargo test --test it machine::` or
//! `cargo test --test it store::conformance::`.

mod support;

mod cassette;
mod cli;
mod compensate;
mod config;
mod delegation;
mod eval;
mod front_ends_are_adapters;
mod guard;
mod layers;
mod lease;
mod machine;
mod mcp;
mod memory;
mod package_contents;
mod provider;
mod readme;
mod readme_deployment;
mod receipt;
mod repository_paths;
mod retention;
mod run;
mod schedules;
mod serve;
mod session;
mod store;
mod timers;
mod verify;
mod worker;

/// The name libtest knows a test by, from its full path (`concat!(module_path!(), "::NAME")`):
/// the path without this crate's name. A test that runs this binary again with `--exact`
/// passes it, so the name follows the test when its file moves.
fn libtest_name(path: &str) -> &str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}
