//! The `runtape` binary: the command line (`src/cli`), its benchmarks (`src/bench`) and its
//! HTTP server (`src/serve`, `runtape serve`), built
//! on the library's public API. They are compiled into the binary only, so they are not part
//! of the library's API; `crate::exec`, `crate::history`, ... in their code resolve to the
//! library's modules through the imports below.

#[path = "bench/mod.rs"]
mod bench;
#[path = "cli/mod.rs"]
mod cli;
#[path = "serve/mod.rs"]
mod serve;
#[path = "term/mod.rs"]
mod term;
// Text helpers the library uses too (one file, compiled into both; the binary uses some).
#[allow(dead_code)]
#[path = "text.rs"]
mod text;

use runtape::{
    cassette, config, exec, history, machine, ops, otel, provider, receipt, secrets, store, tool,
    worker,
};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
