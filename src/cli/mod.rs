//! The `runtape` command line.
//!
//! Conventions (those of cargo and ripgrep): results on stdout, one `error: ...` line on stderr
//! for a failure, `--json` on every command that prints a result (one JSON object per line
//! with a stable `type` field for events and listings, one JSON document for a single result,
//! `sessions` one array), and the exit status below. Each command's help ends with examples
//! (`help.rs`); `src/guide/cli.md` says the same.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

mod bench;
mod cassettes;
pub(crate) mod common;
mod context_shown;
pub(crate) mod control;
mod demo;
pub(crate) mod drive;
mod eval;
mod help;
mod hidden;
pub(crate) mod inspect;
mod memory;
mod migrate;
mod otel;
mod receipts;
mod replay;
mod retention;
pub(crate) mod runs;
mod saga;
mod schedule;
mod serve;
mod sessions;
mod statechart;
mod summary;
mod tools;
mod worker;

use crate::store::Durability;
use common::{CliError, db_path};

pub(crate) use crate::term::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PAUSED, EXIT_USAGE};

/// The grace period of a graceful stop when neither `--grace-ms` nor
/// `$RUNTAPE_STOP_GRACE_MS` says otherwise: 5 s, well inside Docker's 10 s between SIGTERM and
/// SIGKILL.
pub(crate) const DEFAULT_GRACE_MS: u64 = 5_000;

const AFTER_HELP: &str = "\
The database is --db PATH, else $RUNTAPE_DB, else the spec file's `database`, else ./runtape.db.
A postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE URL there names a PostgreSQL database shared by
many processes and machines (the password may come from $PGPASSWORD); `runtape worker` drives runs
from it.

Stopping a run: the first Ctrl-C, SIGTERM or SIGHUP stops it gracefully: no new call starts, calls in
flight get --grace-ms (else $RUNTAPE_STOP_GRACE_MS, else 5000 ms) to finish and are committed, then
the run is paused (a call still running after that is killed and is in doubt on resume). A second
signal leaves at once. With --json, a closed stdout stops the run the same way.

Environment: RUNTAPE_LEASE_TTL_MS (default 15000) is how long a driver's lease on a run lasts
without renewal; RUNTAPE_DB_MAX_BYTES caps the database (a write past it fails like a full disk);
RUNTAPE_WRITER_NICE (-20..19) sets the SQLite writer thread's nice value (default: 10 ahead of the
process where the OS permits, e.g. as root or with systemd's LimitNICE=).

Exit status:
  0    the run completed or waits for a person, or the command succeeded
  1    the run failed, was cancelled or exhausted its budget; a check failed (verify, statechart --check,
       receipts verify, or resume/fork/cancel refusing a run that does not verify), two
       cassettes differ (cassette diff), or eval --baseline found a regression
  2    usage error, invalid spec or bad input, such as an unknown run id, a run another process
       drives, a run that has already ended, or a cassette without integrity hashes
       (nothing was changed)
  3    internal or storage error, such as a file that is not a runtape database or a full disk
  4    the run is paused and resumable: Ctrl-C, SIGTERM, SIGHUP, `runtape pause`, or a closed stdout
  130  a second stop signal: left at once, the run as a crash leaves it (`runtape resume` continues)";

/// runtape: durable, replayable LLM agent runs.
#[derive(Debug, Parser)]
#[command(name = "runtape", version, after_help = AFTER_HELP, propagate_version = true)]
pub(crate) struct Cli {
    /// The database holding the runs: a SQLite file, or postgres://USER@HOST/DATABASE.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub(crate) db: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options of the commands that drive a run.
#[derive(Debug, Args)]
pub(crate) struct DriveOpts {
    /// Print one JSON trace event per line (stable `type` field) instead of the progress line
    /// and summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Sign the run's receipts with this key file (default: $RUNTAPE_RECEIPT_KEY; neither means
    /// unsigned, hash-chained receipts).
    #[arg(long, value_name = "FILE")]
    pub(crate) receipt_key: Option<PathBuf>,
    /// Stamp events with a deterministic clock (1 ms per step from a fixed epoch), so a replay
    /// of this run reproduces its state hashes. Wall-time budgets then count steps, not time.
    #[arg(long)]
    pub(crate) stepped_clock: bool,
    /// On Ctrl-C, SIGTERM or SIGHUP: how long calls in flight may take to finish before they
    /// are cancelled and the run pauses (default: $RUNTAPE_STOP_GRACE_MS, else 5000).
    #[arg(long, value_name = "MS")]
    pub(crate) grace_ms: Option<u64>,
    /// How this process commits to a SQLite file: `full` (every commit fsynced before it
    /// counts; the default) or `normal` (faster; survives a process crash, but a power loss
    /// can drop the latest commits). Overrides the spec file's `[run] durability`.
    #[arg(long, value_name = "MODE", value_parser = ["full", "normal"])]
    pub(crate) durability: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a spec file toward a goal. Prints the run id first, then progress, then a summary.
    Run {
        /// The run spec file (runtape.toml).
        spec: PathBuf,
        /// The goal (default: the spec file's `goal`).
        goal: Option<String>,
        /// Queue the run for `runtape worker`s instead of driving it here: prints its id and
        /// exits (the workers need the provider keys; this process does not).
        #[arg(long)]
        detach: bool,
        /// Run it as the next run of this session: its agents begin with the conversation the
        /// session's latest completed run ended with (kept as the spec's [session] says).
        #[arg(long, value_name = "NAME")]
        session: Option<String>,
        /// The global memory this run reads and writes, instead of the spec's `[memory]
        /// global` (one memory per user or per project from one spec file).
        #[arg(long, value_name = "NAME")]
        memory: Option<String>,
        /// Per-run overrides of the spec file, recorded in the run's stored spec.
        #[command(flatten)]
        overrides: RunOverrides,
        /// Options shared by the commands that drive a run.
        #[command(flatten)]
        opts: DriveOpts,
    },
    /// Continue a run that stopped: paused, killed, waiting for a person or out of budget.
    Resume {
        /// The run id.
        run: String,
        /// Answer the call waiting for a person with this text.
        #[arg(long, group = "answer", value_name = "TEXT")]
        input: Option<String>,
        /// Approve the call waiting for approval (or retry the call in doubt).
        #[arg(long, group = "answer")]
        approve: bool,
        /// Decline the call waiting for a person; the model is told so.
        #[arg(long, group = "answer", value_name = "REASON", num_args = 0..=1, default_missing_value = "")]
        reject: Option<String>,
        /// A file given with --input: a PNG, JPEG, GIF or WebP image or a PDF (known by its
        /// bytes, at most 20 MiB), stored once as a blob and sent with the answer to models
        /// that take it (a placeholder and a warning for those that do not). Repeatable.
        #[arg(long, value_name = "FILE", requires = "input")]
        attach: Vec<PathBuf>,
        /// Which call to answer when several wait (its call id, see `runtape show RUN`).
        #[arg(long, value_name = "CALL_ID")]
        call: Option<String>,
        /// Raise a budget first: budget.KEY=VALUE (the exhausted or active agent's),
        /// run.KEY=VALUE or AGENT.KEY=VALUE; KEY is max_turns, max_tool_calls, max_tokens,
        /// max_cost_usd (dollars) or max_wall_ms. Repeatable.
        #[arg(long, value_name = "KEY=VALUE")]
        raise: Vec<String>,
        /// Read NAME=value lines (dotenv syntax) for the run's variable references again, as
        /// `run --env-file` did: a resumed run reads its keys anew. Nothing is recorded.
        #[arg(long, value_name = "FILE")]
        env_file: Option<PathBuf>,
        /// Options shared by the commands that drive a run.
        #[command(flatten)]
        opts: DriveOpts,
    },
    /// Fire a run's timer now: its sleep, or the deadline of a call waiting for a person.
    ///
    /// Takes the run up and commits the firing of its earliest timer, then drives it on as
    /// `resume` does. Before its due instant the firing is an early wake (a `timer_fired`
    /// step marked early, stamped now; a sleeping call's result says a person woke it, a
    /// deadline's policy is applied); at or after it, the timer's own firing. A run that
    /// waits on no timer is refused and nothing is written.
    Wake {
        /// The run id.
        run: String,
        /// Options shared by the commands that drive a run.
        #[command(flatten)]
        opts: DriveOpts,
    },
    /// Branch a new run off RUN at step SEQ, optionally with edits, and run it on.
    ///
    /// The fork shares the parent's history up to SEQ (it is not copied) and runs live from
    /// there, or with --tape from the parent's recording while it asks for what the parent did.
    Fork {
        /// RUN@SEQ: the run and the step to branch from.
        at: String,
        /// An edit at the fork point: user=TEXT (replace the last user message),
        /// tool:CALL_ID=VALUE (replace a tool result), budget.KEY=VALUE (set a budget),
        /// memory:SCOPE:KEY=VALUE (set a memory key; memory:SCOPE:KEY forgets it; SCOPE is
        /// agent, agent@AGENT, shared or global). Repeatable.
        #[arg(long, value_name = "EDIT")]
        edit: Vec<String>,
        /// Perform everything live from the fork point (the default).
        #[arg(long, conflicts_with = "tape")]
        live: bool,
        /// Serve model replies and tool results from the parent's recording while the fork asks
        /// for exactly what the parent did; go live at the first difference.
        #[arg(long)]
        tape: bool,
        /// With --tape: stop (paused) at the first difference instead of going live.
        #[arg(long, requires = "tape")]
        stop_on_divergence: bool,
        /// Options shared by the commands that drive a run.
        #[command(flatten)]
        opts: DriveOpts,
    },
    /// Run a spec with every model reply served from a cassette (no network, no spend).
    Replay {
        /// The run spec file.
        spec: PathBuf,
        /// The cassette to serve replies from.
        #[arg(long, value_name = "FILE")]
        cassette: PathBuf,
        /// The goal (default: the spec file's `goal`); it must match the recording.
        goal: Option<String>,
        /// Serve the next recorded reply even when the request differs (exploration).
        #[arg(long)]
        non_strict: bool,
        /// Accept a cassette without integrity hashes (version 1), with a warning. Without it
        /// such a file is refused: its replies cannot be checked for edits.
        #[arg(long)]
        allow_unverified: bool,
        /// A file the recorded goal carried (`run --attach`), given again: the recording names
        /// it by digest, so another file is a divergence. Repeatable.
        #[arg(long, value_name = "FILE")]
        attach: Vec<PathBuf>,
        /// Options shared by the commands that drive a run.
        #[command(flatten)]
        opts: DriveOpts,
    },
    /// Export a run's model exchanges as a cassette, or compare two cassettes.
    Cassette {
        /// What to do.
        #[command(subcommand)]
        action: CassetteAction,
    },
    /// Run every goal of a dataset under each variant of a spec, score the answers, and write
    /// a report; with --baseline, exit 1 on a regression.
    ///
    /// Every run is recorded like `runtape run`'s (inspect, verify, fork, export its cassette)
    /// and tagged experiment=ID, variant=NAME and item=ID; a bad dataset, variant, spec or
    /// scorers file is one line, exit 2, and nothing runs.
    Eval(eval::EvalArgs),
    /// List runs: id, status, steps, cost, age, the process driving it, goal (newest first).
    Ls {
        /// One JSON object per run (or per worker).
        #[arg(long)]
        json: bool,
        /// List the `runtape worker`s instead: live ones with the runs each drives, and
        /// those whose heartbeat stopped.
        #[arg(long)]
        workers: bool,
        /// Every run on its own line, newest first, instead of child runs indented under the
        /// run that started them.
        #[arg(long)]
        flat: bool,
        /// Also list the runs `runtape prune` removed, from their tombstones.
        #[arg(long, conflicts_with = "workers")]
        all: bool,
        /// Only the runs tagged KEY=VALUE (`run --tag`). Repeatable: every one must match.
        #[arg(long, value_name = "KEY=VALUE")]
        tag: Vec<String>,
    },
    /// Show a run's timeline: seq, time, event, state before → after, agent, tokens, cost; or,
    /// with --session, a session's runs in order.
    Log {
        /// The run id.
        #[arg(required_unless_present = "session", conflicts_with = "session")]
        run: Option<String>,
        /// List this session's runs in order instead.
        #[arg(long, value_name = "NAME")]
        session: Option<String>,
        /// One JSON object per step.
        #[arg(long)]
        json: bool,
        /// Only the last K steps, read without the rest of the history (as fast on a long run
        /// as on a short one).
        #[arg(long, value_name = "K", conflicts_with = "session")]
        tail: Option<u64>,
    },
    /// List sessions: name, runs, latest run, its status, age and goal.
    Sessions {
        /// The sessions as one JSON array (`[]` when there is none).
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
    /// Show where two runs first differ: the step and the fields.
    ///
    /// For a run and its fork, or two child runs: the first step they did not take alike,
    /// times and ids set aside, and the fields that differ there.
    Diff {
        /// The first run.
        a: String,
        /// The second run.
        b: String,
        /// Also compare the runs below them, paired by their place in the tree (`3.0`).
        #[arg(long)]
        recursive: bool,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check everything stored about a run; exit 1 naming the first seq or column at fault.
    ///
    /// Checks its sealed head (identity, spec, setup, where the history ends, status), every
    /// transition replayed through the current machine, message blobs, snapshots, outbox rows
    /// and receipts.
    Verify {
        /// The run id.
        run: String,
        /// Check the head's and receipts' signatures against this public key (64 hex, or a .pub
        /// file); without it they are checked against the key they name.
        #[arg(long, value_name = "KEY")]
        pubkey: Option<String>,
        /// The result as one JSON object (one per run with --recursive).
        #[arg(long)]
        json: bool,
        /// Verify every child run it started too (and theirs), each checked against the
        /// parent effect that started it; a child whose result a run took (revision 5 on) must
        /// still be stored and end where the run's history says, or the run does not verify.
        #[arg(long)]
        recursive: bool,
    },
    /// Write a new receipt signing key (mode 0600) and its public key (FILE.pub).
    Keygen {
        /// Where to write the signing key.
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
        /// What was written as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Export or verify a run's signed, hash-chained receipts.
    Receipts {
        /// What to do.
        #[command(subcommand)]
        action: ReceiptsAction,
    },
    /// Look at global memories and a run's memory at any step; forget a global key.
    ///
    /// Forgetting a key is recorded: the key gets a new version without a value, and a
    /// removal record chained to the ones before it.
    Memory {
        /// What to do.
        #[command(subcommand)]
        action: memory::MemoryAction,
    },
    /// Start runs on a timetable: add, list, pause, resume, remove or trigger a schedule.
    ///
    /// `runtape worker` (on a SQLite file or PostgreSQL) and `runtape serve` fire schedules;
    /// each instant fires once however many of them run.
    Schedule {
        /// What to do.
        #[command(subcommand)]
        action: schedule::ScheduleAction,
    },
    /// Ask the process driving a run to pause at its next step boundary.
    Pause {
        /// The run id.
        run: String,
        /// The outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run: in-flight model and tool calls are aborted and the cancellation committed.
    Cancel {
        /// The run id.
        run: String,
        /// Why, recorded with the cancellation.
        #[arg(long)]
        reason: Option<String>,
        /// The outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// A one-minute tour, fully offline: crash, resume, inspect, fork, verify.
    ///
    /// A two-agent run is killed mid-run, resumed, listed, inspected at an earlier step,
    /// forked there and verified. Its runs go to a new temporary database (kept for you to
    /// explore), or to `--db PATH` when given.
    Demo,
    /// Measure checkpointing speed, storage, resume and replay on this machine's disk.
    Bench {
        /// Rounds of the W1 and W4 runs (default 500), or of each W5 run when W5 is measured
        /// alone with `--only w5` (default 3).
        #[arg(long)]
        rounds: Option<usize>,
        /// W5: runs started together (default 10,000; at least 1).
        #[arg(long, value_parser = common::at_least_one)]
        runs: Option<usize>,
        /// Repetitions; medians are reported (default 3; at least 1).
        #[arg(long, value_parser = common::at_least_one)]
        reps: Option<usize>,
        /// Small sizes, a few seconds: checks the command works, not the machine.
        #[arg(long)]
        quick: bool,
        /// Where to put the scratch databases (default: a temporary directory).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// The report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Measure only this workload; repeatable.
        #[arg(
            long,
            value_name = "WORKLOAD",
            value_parser = clap::builder::PossibleValuesParser::new(crate::bench::WORKLOADS),
            ignore_case = true
        )]
        only: Vec<String>,
        /// Internal: the in-process half of W3 on RUN in --db.
        #[arg(long, hide = true, value_name = "RUN")]
        probe_resume: Option<String>,
    },
    /// List every tool each agent of a spec file would be offered, MCP servers' included.
    ///
    /// Starts the spec's MCP servers and lists each tool: name, source, read-only /
    /// idempotent / approval, and its arguments. Exit 2 naming a server that fails to start or
    /// initialise.
    Tools {
        /// The run spec file.
        spec: PathBuf,
        /// One JSON object per server and per (agent, tool).
        #[arg(long)]
        json: bool,
    },
    /// Remove finished run trees older than a duration, leaving a tombstone for each run.
    ///
    /// A run goes only with its whole tree (forks, child runs, its session), only when every
    /// run of it has ended with one of --status, none is leased, and none changed within
    /// --older-than. Each removed run leaves a chained tombstone that `verify` and `ls --all`
    /// read; `runtape export` keeps a copy first. Runs go in short writes of up to 64, so
    /// workers writing the same database are held up briefly at most.
    Prune {
        /// Runs whose last change is older than this: a number and a unit, s m h d w (`30d`).
        #[arg(long, value_name = "DURATION")]
        older_than: String,
        /// The ended statuses that may go, comma-separated.
        #[arg(
            long,
            value_name = "LIST",
            default_value = "completed,failed,cancelled"
        )]
        status: String,
        /// Print what would go; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// The outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a verified run tree (the run, its child runs, blobs and receipts) to one JSON file.
    ///
    /// The file names its format and version; `runtape import` reads it into another database
    /// (SQLite or PostgreSQL). A run that does not verify is not exported.
    Export {
        /// The run id.
        run: String,
        /// Where to write it (default: stdout).
        #[arg(short, long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// What was written as one JSON object (with --out).
        #[arg(long)]
        json: bool,
    },
    /// Read a file `runtape export` wrote into this database, verifying every run first.
    ///
    /// Nothing is written when a run does not verify (a changed file) or its id is taken by
    /// another run here; a run already here and the same is left as it is.
    Import {
        /// The file.
        file: PathBuf,
        /// What was imported as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Create or upgrade the database's schema.
    ///
    /// Every command also does it on first use; for PostgreSQL, run it once as a role that may
    /// create tables, and the workers as one that may only read and write rows.
    Migrate {
        /// The outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Drive runs from a shared PostgreSQL database, or wake a SQLite file's due runs, until
    /// stopped.
    ///
    /// On PostgreSQL: claims runnable runs (queued by `run --detach`, handed back by other
    /// workers, or left by a worker that died) and runs whose timer is due, whose spec file is
    /// in --spec-dir, and drives up to --concurrency at once. On a SQLite file: takes up the
    /// runs whose timer is due (a sleep whose instant passed, a deadline on a call waiting for
    /// a person) and drives them on. Logs one JSON object per line. SIGTERM drains: no new run
    /// is claimed, calls in flight get --grace-ms to finish and are committed, each run is
    /// handed back to the queue, and the worker exits 0.
    Worker {
        /// The directory of the spec files this worker serves (the same path on every worker
        /// machine); runs started from spec files elsewhere are left to other workers.
        /// Required on PostgreSQL; on a SQLite file, every run's timers are woken without it.
        #[arg(long, value_name = "DIR")]
        spec_dir: Option<PathBuf>,
        /// Runs driven at once.
        #[arg(long, default_value_t = 8, value_name = "N")]
        concurrency: usize,
        /// After SIGTERM: how long calls in flight may take to finish (default:
        /// $RUNTAPE_STOP_GRACE_MS, else 5000).
        #[arg(long, value_name = "MS")]
        grace_ms: Option<u64>,
        /// Sign receipts with this key file (default: $RUNTAPE_RECEIPT_KEY); it must be the key
        /// the runs were started with.
        #[arg(long, value_name = "FILE")]
        receipt_key: Option<PathBuf>,
        /// Answer GET /healthz (200 when the database answers and the loop turns, else 503,
        /// one line of JSON) and GET /metrics (Prometheus text) on HOST:PORT, e.g.
        /// 127.0.0.1:9464 (port 0: any free port, logged as worker.listening). Off by default.
        #[arg(long, value_name = "HOST:PORT")]
        metrics_addr: Option<String>,
        /// Run on a deterministic clock that does not wait: every timer counts as due at once
        /// and fires stamped at its due instant, and schedules fire their instants one after
        /// another (tests and demos).
        #[arg(long)]
        stepped_clock: bool,
    },
    /// Serve a web page and an HTTP API to watch and steer the database's runs.
    ///
    /// Listens on loopback by default, optionally exporting OpenTelemetry spans. Exits 0 when
    /// stopped by Ctrl-C, SIGTERM or SIGHUP (the runs it drives pause first), 2 when refused
    /// at start.
    Serve(serve::ServeArgs),
    /// Print the statechart generated from the transition table (the content of statechart.md).
    Statechart {
        /// Compare with the file instead of printing; exit 1 when they differ.
        #[arg(long)]
        check: bool,
        /// The file `--check` compares with.
        #[arg(long, default_value = "statechart.md")]
        file: PathBuf,
        /// One JSON object: the statechart's text, or with --check whether the file matches.
        #[arg(long)]
        json: bool,
    },
    /// Print a completion script for a shell, to be saved where the shell loads completions.
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print runtape's manual page (roff, for man(1)), or write one page per command.
    Man {
        /// Write runtape.1 and a page per command (runtape-run.1, …) into this directory
        /// instead of printing runtape.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `runtape cassette ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum CassetteAction {
    /// Write a run's model exchanges (exact requests and replies) as a cassette.
    Export {
        /// The run id.
        run: String,
        /// The file to write.
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
        /// What was written as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Show where two cassettes' tool-call behaviour differs (call ids ignored); exit 1 when
    /// they differ, as diff(1) does.
    Diff {
        /// The first cassette.
        a: PathBuf,
        /// The second cassette.
        b: PathBuf,
        /// Ignore assistant text; compare tool calls only.
        #[arg(long)]
        ignore_content: bool,
        /// Accept cassettes without integrity hashes (version 1), with a warning.
        #[arg(long)]
        allow_unverified: bool,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `runtape receipts ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ReceiptsAction {
    /// Write a run's receipts as JSON lines, then its sealed head.
    ///
    /// The receipts go across fork ancestry (for a delegated child, after its parent's
    /// receipts through the one it hangs from); the head line names the last receipt, so a
    /// file cut short is detected.
    Export {
        /// The run id.
        run: String,
        /// The file to write.
        #[arg(short, long, value_name = "FILE.jsonl")]
        out: PathBuf,
        /// Also every child run below it (children of children too), each its receipts and
        /// head line after its parent's: `receipts verify` checks the file as one tree.
        #[arg(long)]
        recursive: bool,
        /// What was written as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Verify exported receipts offline; exit 1 naming the first bad receipt or line.
    ///
    /// Checks the chain, the order, the signatures, and that the file is complete (its head
    /// line); a `--recursive` export as one tree (each child hangs from its parent and ends
    /// where its parent's receipt says).
    Verify {
        /// The exported file.
        file: PathBuf,
        /// The trusted public key (64 hex, or a .pub file); required for signed receipts.
        #[arg(long, value_name = "KEY")]
        pubkey: Option<String>,
        /// Accept a file without a head line (exported by runtape 0.1.0, or cut short): its
        /// receipts are checked, but nothing shows none was removed from its end.
        #[arg(long)]
        allow_headless: bool,
        /// The result as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `runtape run`'s per-run overrides of the spec file: each changes the spec the run is
/// created with (so `show --json`, replay and `verify` see it); checked before anything is
/// written ([`crate::ops::Overrides`]); and `--env-file`, which [`runs::run`] installs
/// before the spec is loaded and which the conversion to [`crate::ops::Overrides`] leaves out.
#[derive(clap::Args, Debug)]
pub(crate) struct RunOverrides {
    /// The model of every agent's primary route (PROVIDER/MODEL), or of one agent's
    /// (AGENT=PROVIDER/MODEL); PROVIDER is one of the spec's [[providers]]. Repeatable.
    #[arg(long, value_name = "[AGENT=]PROVIDER/MODEL")]
    model: Vec<String>,
    /// Run-wide cap on model turns (limits.max_turns): the run ends `turn_limit` there.
    #[arg(long, value_name = "N")]
    max_steps: Option<u64>,
    /// Run-wide wall-clock cap (limits.max_wall_ms): 500ms, 30s, 5m or 2h.
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Retries of a failed model call on every route (max_attempts = N + 1).
    #[arg(long, value_name = "N")]
    max_retries: Option<u32>,
    /// The run's id instead of a generated one: 1 to 64 letters, digits, `-`, `_` or `.`,
    /// beginning with a letter or digit; an id in use is refused, writing nothing.
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// A tag stored with the run (KEY=VALUE; the key 1 to 64 lowercase letters, digits, `_`,
    /// `-` or `.`); `ls --tag` and `runtape serve` filter on it, `verify` covers it.
    /// Repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    tag: Vec<String>,
    /// A file given with the goal: a PNG, JPEG, GIF or WebP image or a PDF (known by its
    /// bytes, at most 20 MiB), stored once as a blob and sent to models that take it (a
    /// placeholder and a warning for those that do not). Repeatable. Not with --detach.
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
    /// Read NAME=value lines (dotenv syntax) that the spec's variable references see as if
    /// they were in runtape's environment; the values are scrubbed and never stored, the
    /// names are recorded with the run. Not with --detach.
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Option<PathBuf>,
}

impl From<RunOverrides> for crate::ops::Overrides {
    fn from(o: RunOverrides) -> Self {
        crate::ops::Overrides {
            models: o.model,
            max_steps: o.max_steps,
            timeout: o.timeout,
            max_retries: o.max_retries,
            run_id: o.run_id,
            tags: o.tag,
            attach: o.attach,
        }
    }
}

/// Runs the command line; returns the process exit status. Every error is one line on stderr
/// (see [`common::one_line`]), usage errors from argument parsing included.
pub(crate) fn main() -> ExitCode {
    if std::env::args_os().len() <= 1 {
        return bare_usage();
    }
    let parsed = help::command()
        .try_get_matches()
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return parse_error(&e),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            crate::term::note(&format!("error: {}", common::one_line(&e.message)));
            ExitCode::from(e.code)
        }
    }
}

/// `runtape` with no arguments: the short usage and where to go next on stderr, exit 2 (a
/// usage error: nothing was asked for).
fn bare_usage() -> ExitCode {
    let usage = help::command().render_usage().to_string();
    crate::term::note(&format!(
        "{usage}\n\nruntape: durable, replayable LLM agent runs. `runtape demo` is a one-minute tour;\n`runtape help` lists the commands, `runtape help COMMAND` describes one."
    ));
    ExitCode::from(EXIT_USAGE)
}

/// Help and version go out as clap writes them; a usage error becomes one line: clap's
/// complaint, its tips, and which `--help` to read.
fn parse_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::from(EXIT_OK);
    }
    let text = e.to_string();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().map_or("invalid arguments", str::trim);
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let mut message = first.to_owned();
    // clap names the subcommand in its usage line; a refused value has none, so the
    // subcommand is then read from the arguments themselves.
    let mut command = subcommand_in_args();
    // clap puts what its first line refers to on indented lines of their own: the missing
    // arguments, the possible values. They join the line, then any tips.
    let (mut details, mut tips) = (Vec::new(), Vec::new());
    for raw in lines {
        let line = raw.trim();
        if let Some(tip) = line.strip_prefix("tip: ") {
            tips.push(tip);
        } else if let Some(usage) = line.strip_prefix("Usage: ") {
            command = usage
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ");
        } else if raw.starts_with(char::is_whitespace) {
            details.push(line);
        }
    }
    if !details.is_empty() {
        message.push(' ');
        message.push_str(&details.join(", "));
    }
    for tip in tips {
        message.push_str(&format!(" ({tip})"));
    }
    eprintln!(
        "error: {}; see `{command} --help`",
        common::one_line(&message)
    );
    ExitCode::from(EXIT_USAGE)
}

/// `runtape` and the subcommand the process's arguments name (the first argument that is one,
/// the value of `--db` aside), for pointing a usage error at the right `--help`.
fn subcommand_in_args() -> String {
    let cli = Cli::command();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--db" {
            args.next();
        } else if let Some(sub) = cli.find_subcommand(&arg) {
            return format!("runtape {}", sub.get_name());
        }
    }
    "runtape".to_owned()
}

fn run(cli: Cli) -> Result<u8, CliError> {
    // The signing key, the serve token and database passwords are secrets whether or not this
    // command uses them: nothing stored or printed may show them.
    crate::secrets::register_engine_env();
    let db = db_path(cli.db.as_deref(), None);
    let common = |opts: DriveOpts| runs::Common {
        db: cli.db.clone(),
        json: opts.json,
        receipt_key: opts.receipt_key,
        stepped_clock: opts.stepped_clock,
        grace_ms: opts.grace_ms,
        // The parser admits only the names `Durability::parse` knows.
        durability: opts.durability.as_deref().and_then(Durability::parse),
    };
    match cli.command {
        Command::Run {
            spec,
            goal,
            detach,
            session,
            memory,
            overrides,
            opts,
        } => drive(runs::run(
            &spec,
            goal,
            detach,
            session,
            memory,
            overrides,
            common(opts),
        )),
        Command::Tools { spec, json } => with_mcp(tools::tools(&spec, json)),
        Command::Eval(args) => with_mcp(eval::eval(cli.db.clone(), args)),
        Command::Resume {
            run,
            input,
            approve,
            reject,
            attach,
            call,
            raise,
            env_file,
            opts,
        } => {
            let answer = match (input, approve, reject) {
                (Some(text), _, _) if !attach.is_empty() => {
                    crate::ops::Answer::InputWithFiles(text, attach)
                }
                (Some(text), _, _) => crate::ops::Answer::Input(text),
                (_, true, _) => crate::ops::Answer::Approve,
                (_, _, Some(reason)) => {
                    crate::ops::Answer::Reject((!reason.is_empty()).then_some(reason))
                }
                _ => crate::ops::Answer::None,
            };
            drive(runs::resume(
                &run,
                answer,
                call,
                raise,
                env_file.as_deref(),
                common(opts),
            ))
        }
        Command::Wake { run, opts } => drive(runs::wake(&run, common(opts))),
        Command::Fork {
            at,
            edit,
            live: _,
            tape,
            stop_on_divergence,
            opts,
        } => drive(runs::fork(
            &at,
            edit,
            tape,
            stop_on_divergence,
            common(opts),
        )),
        Command::Replay {
            spec,
            cassette,
            goal,
            non_strict,
            allow_unverified,
            attach,
            opts,
        } => drive(replay::replay(
            &spec,
            &cassette,
            goal,
            replay::ReplayFlags {
                strict: !non_strict,
                allow_unverified,
                attach,
            },
            common(opts),
        )),
        Command::Cassette {
            action: CassetteAction::Export { run, out, json },
        } => cassettes::export(&db, &run, &out, json).map(|_| EXIT_OK),
        Command::Cassette {
            action:
                CassetteAction::Diff {
                    a,
                    b,
                    ignore_content,
                    allow_unverified,
                    json,
                },
        } => cassettes::diff(&a, &b, ignore_content, allow_unverified, json)
            .map(|same| if same { EXIT_OK } else { EXIT_FAILED }),
        Command::Statechart { check, file, json } => statechart::run(check, &file, json),
        Command::Completions { shell } => help::completions(shell).map(|_| EXIT_OK),
        Command::Man { dir } => help::man(dir.as_deref()).map(|_| EXIT_OK),
        Command::Serve(args) => serve::serve(cli.db.clone(), args),
        Command::Bench {
            rounds,
            runs,
            reps,
            quick,
            dir,
            json,
            only,
            probe_resume,
        } => {
            let args = bench::Args {
                dir,
                rounds,
                runs,
                reps,
                quick,
                json,
                probe_resume,
                only,
                db,
            };
            runtime()?.block_on(bench::run(args)).map(|_| EXIT_OK)
        }
        Command::Demo if cli.db.as_deref().and_then(common::postgres_url).is_some() => {
            Err(CliError::usage(
                "the demo writes a SQLite file; give --db a file path, or leave it out",
            ))
        }
        Command::Demo => runtime()?.block_on(demo::demo(cli.db.clone())),
        Command::Ls { json, workers, .. } if workers => worker::list(&db, json).map(|_| EXIT_OK),
        Command::Ls {
            json,
            flat,
            all,
            tag,
            ..
        } => inspect::ls(&db, json, flat, &tag)
            .and_then(|_| match all {
                true => retention::ls_pruned(&db, json),
                false => Ok(()),
            })
            .map(|_| EXIT_OK),
        Command::Export { run, out, json } => {
            retention::export(&db, &run, out.as_deref(), json).map(|_| EXIT_OK)
        }
        Command::Import { file, json } => retention::import(&db, &file, json).map(|_| EXIT_OK),
        Command::Prune {
            older_than,
            status,
            dry_run,
            json,
        } => retention::prune(&db, &older_than, &status, dry_run, json).map(|_| EXIT_OK),
        Command::Migrate { json } => migrate::migrate(&db, json).map(|_| EXIT_OK),
        Command::Worker {
            spec_dir,
            concurrency,
            grace_ms,
            receipt_key,
            metrics_addr,
            stepped_clock,
        } => {
            let args = worker::Args {
                db: db.clone(),
                spec_dir,
                concurrency,
                grace_ms,
                receipt_key,
                metrics_addr,
                stepped_clock,
            };
            with_mcp(worker::worker(args))
        }
        Command::Log {
            session: Some(name),
            json,
            ..
        } => sessions::log(&db, &name, json).map(|_| EXIT_OK),
        Command::Log {
            run, json, tail, ..
        } => inspect::log(&db, run.as_deref().unwrap_or_default(), json, tail).map(|_| EXIT_OK),
        Command::Sessions { json } => sessions::list(&db, json).map(|_| EXIT_OK),
        Command::Show { run, json } => inspect::show(&db, &run, json).map(|_| EXIT_OK),
        Command::Diff {
            a,
            b,
            recursive,
            json,
        } => inspect::diff(&db, &a, &b, recursive, json).map(|_| EXIT_OK),
        Command::Verify {
            run,
            pubkey,
            json,
            recursive,
        } => inspect::verify(&db, &run, pubkey.as_deref(), json, recursive).map(|_| EXIT_OK),
        Command::Keygen { out, json } => receipts::keygen(&out, json).map(|_| EXIT_OK),
        Command::Receipts {
            action:
                ReceiptsAction::Export {
                    run,
                    out,
                    recursive,
                    json,
                },
        } => receipts::export(&db, &run, &out, recursive, json).map(|_| EXIT_OK),
        Command::Receipts {
            action:
                ReceiptsAction::Verify {
                    file,
                    pubkey,
                    allow_headless,
                    json,
                },
        } => receipts::verify(&file, pubkey.as_deref(), allow_headless, json).map(|_| EXIT_OK),
        Command::Memory { action } => memory::memory(&db, action).map(|_| EXIT_OK),
        Command::Schedule { action } => schedule::schedule(&db, action).map(|_| EXIT_OK),
        Command::Pause { run, json } => runtime()?
            .block_on(control::pause(&db, &run, json))
            .map(|_| EXIT_OK),
        Command::Cancel { run, reason, json } => runtime()?
            .block_on(control::cancel(&db, &run, reason, json))
            .map(|_| EXIT_OK),
    }
}

/// A run-driving command: [`with_mcp`], with its runs exported over OTLP when
/// `$OTEL_EXPORTER_OTLP_ENDPOINT` is set (see [`otel`]).
fn drive(work: impl Future<Output = Result<u8, CliError>>) -> Result<u8, CliError> {
    otel::start_for_command().map_err(CliError::usage)?;
    let out = with_mcp(async {
        let out = work.await;
        otel::finish_for_command().await;
        out
    });
    otel::shutdown_for_command();
    out
}

/// Runs `work`, then stops every MCP server it started (stdin closed, then SIGTERM, then
/// SIGKILL; see `tool::mcp::connection`), whatever its outcome.
fn with_mcp(work: impl Future<Output = Result<u8, CliError>>) -> Result<u8, CliError> {
    runtime()?.block_on(async {
        let out = work.await;
        crate::tool::mcp::McpHub::global().shutdown().await;
        out
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))
}
