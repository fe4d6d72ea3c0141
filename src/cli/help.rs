//! The reference the command line carries with it: every command's examples (printed after
//! its help: `runtape COMMAND --help`, `runtape help COMMAND`), shell completions
//! (`runtape completions SHELL`) and man pages (`runtape man`), all from the one command
//! definition [`command`] returns, so none can drift from what the parser accepts.
//!
//! The guide's command-line chapter (`src/guide/cli.md`) gives each command a section with the
//! same description and the same examples; `tests/it/cli/help_reference.rs` fails when they
//! differ, and the guide's examples are run by the `readme` tests.

use std::io::Write as _;
use std::path::Path;

use clap::CommandFactory;

use super::Cli;
use super::common::CliError;

/// Each command's examples, by its path below `runtape` (`"cassette export"`): shell lines,
/// each with a comment saying what it does. Every command has at least one; the guide's
/// section of the command shows the same lines.
const EXAMPLES: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "runtape run examples/quickstart.toml                 # prints the run id first, then progress and a summary",
            "runtape run examples/quickstart.toml --max-steps 1   # a cap of one model turn: the run ends turn_limit (exit 1)",
            "runtape run examples/approval.toml --json            # one JSON event per line; it stops awaiting approval",
        ],
    ),
    (
        "resume",
        &[
            "runtape resume RUN --approve          # approve the call waiting for a person; the run goes on",
            "runtape resume RUN --reject \"not today\"   # decline it instead; the model is told why",
        ],
    ),
    (
        "show",
        &[
            "runtape show RUN@2                    # step 2 in full: state, event, effects, the exact model request",
            "runtape show RUN --json               # its latest step as one JSON object",
        ],
    ),
    (
        "log",
        &[
            "runtape log RUN                       # one line per committed transition",
            "runtape log RUN --json                # one JSON object per step",
        ],
    ),
    (
        "ls",
        &[
            "runtape ls                            # every run, newest first, child runs under their parent",
            "runtape ls --flat --json              # one JSON object per run",
        ],
    ),
    (
        "verify",
        &[
            "runtape verify RUN                    # replay every step through the machine; check the hashes and receipts",
            "runtape verify RUN --recursive --json # the run and every child run, one JSON object each",
        ],
    ),
    (
        "fork",
        &[
            "runtape fork RUN@1 --edit \"user=Deploy to staging instead.\"   # branch at step 1 with another request",
            "runtape fork RUN@1 --tape             # replay the parent's recording; go live at the first difference",
        ],
    ),
    (
        "diff",
        &["runtape diff RUN FORK                 # the first step the two runs did not take alike"],
    ),
    (
        "cassette",
        &[
            "runtape cassette export RUN -o run.cassette.json   # the run's exact model requests and replies",
            "runtape cassette diff run.cassette.json replay.cassette.json   # where two cassettes' tool calls differ",
        ],
    ),
    (
        "cassette export",
        &[
            "runtape cassette export RUN -o run.cassette.json   # the run's exact model requests and replies",
        ],
    ),
    (
        "replay",
        &[
            "runtape replay examples/handoff.toml --cassette run.cassette.json   # the run again, every reply from the cassette",
        ],
    ),
    (
        "eval",
        &[
            "runtape eval examples/eval/paris.toml --dataset examples/eval/goals.jsonl --variant echo=examples/eval/echo.toml -o report.json   # two variants side by side, scored by exact",
            "runtape eval examples/eval/echo.toml --dataset examples/eval/goals.jsonl --baseline report.json -o echo.json   # base scores lower than in report.json (exit 1)",
        ],
    ),
    (
        "eval rescore",
        &[
            "runtape eval rescore report.json --scorers examples/eval/scorers.toml   # the recorded answers scored again; no run is driven again",
        ],
    ),
    (
        "cassette diff",
        &[
            "runtape cassette diff run.cassette.json replay.cassette.json   # where two cassettes' tool calls differ",
        ],
    ),
    (
        "keygen",
        &["runtape keygen -o signing.key          # signing.key (mode 0600) and signing.key.pub"],
    ),
    (
        "receipts",
        &[
            "runtape receipts export RUN -o run.receipts.jsonl   # the run's receipts, then its sealed head",
            "runtape receipts verify run.receipts.jsonl --pubkey signing.key.pub   # checked offline",
        ],
    ),
    (
        "receipts export",
        &[
            "runtape receipts export RUN -o run.receipts.jsonl   # the run's receipts, then its sealed head",
        ],
    ),
    (
        "receipts verify",
        &[
            "runtape receipts verify run.receipts.jsonl --pubkey signing.key.pub   # checked offline",
        ],
    ),
    (
        "memory",
        &[
            "runtape memory ls                     # every global memory: keys, bytes, versions",
            "runtape memory show last_offsite --name demo-team --history   # every version of a key, and who wrote it",
        ],
    ),
    (
        "memory ls",
        &[
            "runtape memory ls                     # every global memory: keys, bytes, versions",
            "runtape memory ls --name demo-team    # its keys, versions and the run that wrote each",
            "runtape memory ls --run RUN --json    # a run's memory at its latest step (RUN@SEQ: at step SEQ)",
        ],
    ),
    (
        "memory show",
        &[
            "runtape memory show last_offsite --name demo-team --history   # every version of a key, and who wrote it",
        ],
    ),
    (
        "memory rm",
        &["runtape memory rm last_offsite --name demo-team --yes   # forget it, recorded"],
    ),
    (
        "schedule",
        &[
            "runtape schedule ls                   # every schedule: timetable, status, next fire time, last run",
        ],
    ),
    (
        "schedule add",
        &[
            "runtape schedule add mornings examples/quickstart.toml --cron \"0 9 * * 1-5\" --tz Europe/Paris   # prints its next fire time",
        ],
    ),
    (
        "schedule ls",
        &[
            "runtape schedule ls                   # every schedule: timetable, status, next fire time, last run",
            "runtape schedule ls --json            # one JSON array",
        ],
    ),
    (
        "schedule pause",
        &["runtape schedule pause mornings       # it fires nothing until resumed"],
    ),
    (
        "schedule resume",
        &[
            "runtape schedule resume mornings      # instants missed meanwhile follow its --catch-up",
        ],
    ),
    (
        "schedule rm",
        &["runtape schedule rm mornings          # removed; its runs stay"],
    ),
    (
        "schedule trigger",
        &[
            "runtape schedule trigger mornings     # fired now: the next worker or serve turn starts the run",
        ],
    ),
    (
        "sessions",
        &[
            "runtape sessions                      # every session: runs, latest run, its status",
            "runtape sessions --json               # one JSON array",
        ],
    ),
    (
        "cancel",
        &[
            "runtape cancel RUN --reason \"not today\"   # abort what is in flight; the run ends cancelled",
        ],
    ),
    (
        "wake",
        &[
            "runtape wake RUN                      # fire RUN's sleep (or deadline) now; the run goes on",
        ],
    ),
    (
        "pause",
        &[
            "runtape pause RUN                     # the process driving RUN pauses it at its next step; it exits 4",
        ],
    ),
    (
        "tools",
        &[
            "runtape tools examples/quickstart.toml          # the tools each agent is offered at its first turn",
            "runtape tools examples/quickstart.toml --json   # one JSON object per server and per (agent, tool)",
        ],
    ),
    (
        "prune",
        &[
            "runtape prune --older-than 30d --dry-run         # what would go; nothing changes",
            "runtape prune --older-than 30d --status failed,cancelled",
        ],
    ),
    (
        "export",
        &["runtape export RUN --out run.json                # the verified run tree in one file"],
    ),
    (
        "import",
        &[
            "runtape --db copy.db import run.json             # into another database; verified on the way in",
        ],
    ),
    (
        "migrate",
        &["runtape migrate                       # create or upgrade ./runtape.db's schema"],
    ),
    (
        "worker",
        &[
            "runtape --db postgres://runtape@db.internal/runtape worker --spec-dir /srv/specs --concurrency 16",
            "runtape worker                        # on ./runtape.db: wake the runs whose timers are due",
        ],
    ),
    (
        "serve",
        &["runtape serve                         # prints http://127.0.0.1:7777/; Ctrl-C stops it"],
    ),
    (
        "statechart",
        &[
            "runtape statechart                    # the statechart, generated from the transition table",
            "runtape statechart --check            # compare statechart.md with it",
        ],
    ),
    (
        "demo",
        &[
            "runtape demo --db demo.db             # the tour's runs go to ./demo.db, to explore afterwards",
        ],
    ),
    (
        "bench",
        &[
            "runtape bench --quick                 # every workload at small sizes: checks the command works",
            "runtape bench --only w1 --json        # one workload, the report as one JSON object",
        ],
    ),
    (
        "completions",
        &[
            "runtape completions bash > ~/.local/share/bash-completion/completions/runtape",
            "runtape completions zsh > ~/.zfunc/_runtape",
            "runtape completions fish > ~/.config/fish/completions/runtape.fish",
        ],
    ),
    (
        "man",
        &[
            "runtape man > runtape.1                # the manual page of runtape and its commands",
            "runtape man --dir man                  # man/runtape.1 and a page per command (man/runtape-run.1, …)",
        ],
    ),
];

/// The command line as the parser, `--help`, the completions and the man pages see it: the
/// derived [`Cli`] with each command's examples ([`EXAMPLES`]) after its help.
pub(crate) fn command() -> clap::Command {
    EXAMPLES.iter().fold(Cli::command(), |cmd, (path, lines)| {
        let path: Vec<&str> = path.split(' ').collect();
        with_examples(cmd, &path, lines)
    })
}

/// `cmd` with `lines` after the help of its subcommand at `path`.
fn with_examples(cmd: clap::Command, path: &[&str], lines: &[&str]) -> clap::Command {
    match path {
        [] => {
            let mut text = String::from("Examples:");
            for line in lines {
                text.push_str("\n  ");
                text.push_str(line);
            }
            cmd.after_help(text)
        }
        [first, rest @ ..] => cmd.mut_subcommand(*first, |sub| with_examples(sub, rest, lines)),
    }
}

/// `runtape completions SHELL`: the completion script for `shell` on stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "runtape", &mut script);
    write_stdout(&script)
}

/// `runtape man [--dir DIR]`: runtape(1) on stdout, or with `dir` one page per command
/// written there (runtape.1, runtape-run.1, runtape-cassette-export.1, …).
pub(crate) fn man(dir: Option<&Path>) -> Result<(), CliError> {
    let cmd = command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| CliError::internal(format!("cannot render the man page: {e}")))?;
        return write_stdout(&page);
    };
    let cannot =
        |e: std::io::Error| CliError::usage(format!("cannot write {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(cannot)?;
    clap_mangen::generate_to(cmd, dir).map_err(cannot)?;
    let pages = std::fs::read_dir(dir)
        .map_err(cannot)?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("runtape"))
        })
        .count();
    super::common::outln!("wrote {pages} man pages to {}", dir.display());
    Ok(())
}

/// Writes generated text to stdout; a reader that went away (`runtape man | head`) ends the
/// command quietly, as [`super::common::outln`] does.
fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::internal(format!("cannot write to stdout: {e}"))),
    }
}
