//! The `runtape` binary: the command line (`src/cli`) and its benchmarks (`src/bench`), built
//! on the library's public API. They are compiled into the binary only, so they are not part
//! of the library's API; `crate::exec`, `crate::history`, ... in their code resolve to the
//! library's modules through the imports below.

#[path = "bench/mod.rs"]
mod bench;
#[path = "cli/mod.rs"]
mod cli;
// Text helpers the library uses too (one file, compiled into both; the binary uses some).
#[allow(dead_code)]
#[path = "text.rs"]
mod text;

use runtape::{
    cassette, config, exec, history, ledger, machine, provider, receipt, secrets, store, tool,
};

fn main() -> std::process::ExitCode {
    cli::main()
}
