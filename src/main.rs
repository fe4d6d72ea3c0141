//! The `runtape` binary: the command line (`src/cli`), its benchmarks (`src/bench`), its HTTP
//! server (`src/serve`, `runtape serve`), and what the command line and the server share about
//! the terminal and the process (`src/term`: exit statuses, one-line errors, stdout and stderr,
//! stop signals). They are adapters over the library's operations (`runtape::ops`): they parse
//! their input, call an operation, and render what it returns. `serve` imports nothing from
//! `cli`, and `cli` nothing from `serve` but its entry point (`serve::run` and its `Options`).
//!
//! They are compiled into the binary only, so they are not part of the library's API;
//! `crate::exec`, `crate::ops`, ... in their code resolve to the library's modules through the
//! imports below.

#[path = "bench/mod.rs"]
mod bench;
#[path = "cli/mod.rs"]
mod cli;
#[path = "serve/mod.rs"]
mod serve;
#[path = "term/mod.rs"]
mod term;
// The clock seam, compiled into both like `text.rs`: the command line and the server take
// their timeouts, intervals and measurements from it, so nothing outside it reads the system
// clock. Its `current` clock here is always the system's (the binary performs no run's call
// itself; the library's engines do, on their own clock).
#[allow(dead_code, unreachable_pub)]
#[path = "clock.rs"]
mod clock;
// Text helpers the library uses too (one file, compiled into both; the binary uses some).
#[allow(dead_code)]
#[path = "text.rs"]
mod text;

use runtape::{
    cassette, config, eval, exec, history, http_server, machine, ops, otel, provider, receipt,
    schedule, secrets, store, tool, worker,
};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
