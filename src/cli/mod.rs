//! The `runtape` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod statechart;

/// Exit status: the run completed (or the command did what was asked).
pub const EXIT_OK: u8 = 0;
/// Exit status: the run failed, was cancelled or ran out of budget; a check found a problem.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage, a bad spec or bad input.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: an internal or storage error.
pub const EXIT_INTERNAL: u8 = 3;

const AFTER_HELP: &str = "\
Exit status:
  0  the run completed, or the command succeeded
  1  the run failed, was cancelled or exhausted its budget; a check (verify, statechart --check) failed
  2  usage error, invalid spec or bad input (nothing was changed)
  3  internal or storage error";

/// runtape: durable, replayable LLM agent runs.
#[derive(Debug, Parser)]
#[command(name = "runtape", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the statechart generated from the transition table (the content of statechart.md).
    Statechart {
        /// Compare with the file instead of printing; exit 1 when they differ.
        #[arg(long)]
        check: bool,
        /// The file `--check` compares with.
        #[arg(long, default_value = "statechart.md")]
        file: PathBuf,
    },
}

/// Runs the command line; returns the process exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Statechart { check, file } => statechart::run(check, &file),
    };
    ExitCode::from(code)
}
