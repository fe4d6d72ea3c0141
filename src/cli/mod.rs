//! The `runtape` command line.
//!
//! Conventions (those of cargo and ripgrep): results on stdout, one `error: ...` line on stderr
//! for a failure, `--json` for one JSON object per line with a stable `type` field, and the
//! exit status below.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod common;
mod control;
mod inspect;
mod receipts;
mod statechart;

use common::{CliError, db_path};

/// Exit status: the run completed (or the command did what was asked).
pub const EXIT_OK: u8 = 0;
/// Exit status: the run failed, was cancelled or ran out of budget; a check found a problem.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage, a bad spec or bad input (nothing was changed).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: an internal or storage error.
pub const EXIT_INTERNAL: u8 = 3;

const AFTER_HELP: &str = "\
The database is --db PATH, else $RUNTAPE_DB, else the spec file's `database`, else ./runtape.db.

Exit status:
  0  the run completed, or the command succeeded
  1  the run failed, was cancelled or exhausted its budget; a check (verify, statechart --check) failed
  2  usage error, invalid spec or bad input, such as an unknown run id (nothing was changed)
  3  internal or storage error, such as a file that is not a runtape database";

/// runtape: durable, replayable LLM agent runs.
#[derive(Debug, Parser)]
#[command(name = "runtape", version, about, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// The SQLite database holding the runs.
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List runs: id, status, steps, cost, age, goal (newest first).
    Ls {
        /// One JSON object per run.
        #[arg(long)]
        json: bool,
    },
    /// Show a run's timeline: seq, time, event, state before → after, agent, tokens, cost.
    Log {
        /// The run id.
        run: String,
        /// One JSON object per step.
        #[arg(long)]
        json: bool,
    },
    /// Show one step in full: the state, the event, the effects, and the exact model request.
    Show {
        /// RUN or RUN@SEQ (RUN alone: its latest step).
        run: String,
        /// The step as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Show where two runs (e.g. a run and its fork) first differ.
    Diff {
        /// The first run.
        a: String,
        /// The second run.
        b: String,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Replay a run through the current machine and check every stored state hash, effect
    /// list, chain link and receipt; exit 1 naming the first problem.
    Verify {
        /// The run id.
        run: String,
        /// Check the receipts' signatures against this public key (64 hex, or a .pub file);
        /// without it they are checked against the key they name.
        #[arg(long, value_name = "KEY")]
        pubkey: Option<String>,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a new receipt signing key (mode 0600) and its public key (FILE.pub).
    Keygen {
        /// Where to write the signing key.
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Export or verify a run's signed, hash-chained receipts.
    Receipts {
        /// What to do.
        #[command(subcommand)]
        action: ReceiptsAction,
    },
    /// Ask the process driving a run to pause at its next step boundary.
    Pause {
        /// The run id.
        run: String,
    },
    /// Cancel a run: in-flight model and tool calls are aborted and the cancellation committed.
    Cancel {
        /// The run id.
        run: String,
        /// Why, recorded with the cancellation.
        #[arg(long)]
        reason: Option<String>,
    },
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

/// `runtape receipts ...`.
#[derive(Debug, Subcommand)]
pub enum ReceiptsAction {
    /// Write a run's receipts (across fork ancestry) as JSON lines.
    Export {
        /// The run id.
        run: String,
        /// The file to write.
        #[arg(short, long, value_name = "FILE.jsonl")]
        out: PathBuf,
    },
    /// Verify exported receipts offline: chain, order, signatures. Exit 1 naming the first
    /// bad receipt.
    Verify {
        /// The exported file.
        file: PathBuf,
        /// The trusted public key (64 hex, or a .pub file); required for signed receipts.
        #[arg(long, value_name = "KEY")]
        pubkey: Option<String>,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command line; returns the process exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, CliError> {
    let db = db_path(cli.db.as_deref(), None);
    match cli.command {
        Command::Statechart { check, file } => Ok(statechart::run(check, &file)),
        Command::Ls { json } => inspect::ls(&db, json).map(|_| EXIT_OK),
        Command::Log { run, json } => inspect::log(&db, &run, json).map(|_| EXIT_OK),
        Command::Show { run, json } => inspect::show(&db, &run, json).map(|_| EXIT_OK),
        Command::Diff { a, b, json } => inspect::diff(&db, &a, &b, json).map(|_| EXIT_OK),
        Command::Verify { run, pubkey, json } => inspect::verify(&db, &run, pubkey.as_deref(), json).map(|_| EXIT_OK),
        Command::Keygen { out } => receipts::keygen(&out).map(|_| EXIT_OK),
        Command::Receipts { action: ReceiptsAction::Export { run, out } } => receipts::export(&db, &run, &out).map(|_| EXIT_OK),
        Command::Receipts { action: ReceiptsAction::Verify { file, pubkey, json } } => {
            receipts::verify(&file, pubkey.as_deref(), json).map(|_| EXIT_OK)
        }
        Command::Pause { run } => runtime()?
            .block_on(control::pause(&db, &run))
            .map(|_| EXIT_OK),
        Command::Cancel { run, reason } => runtime()?
            .block_on(control::cancel(&db, &run, reason))
            .map(|_| EXIT_OK),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))
}
