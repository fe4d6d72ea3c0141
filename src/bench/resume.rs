//! The resume case (`--only resume`): [`crate::ops::resume`] — the path `runtape resume RUN
//! --raise budget.max_turns=N` takes — on a run parked in `BudgetExhausted` at two history
//! lengths, each timed from opening the database to the run's end (the raise, a model turn
//! that answers, the end committed). Printed with their ratio: resuming should cost the same
//! however long the run is, so a ratio well above 1 means something reads the history (or a
//! conversation) per transition or per message again.
//!
//! In-process: the command's own start-up (the binary loading, argument parsing) is the same
//! at both lengths and left out. With the binary at hand (not under `cargo test`'s harness),
//! the CLI's own path is timed too, as a user meets it: `runtape resume RUN --raise
//! budget.max_turns=R+1` as a whole process, on runs of the same two lengths started from a
//! spec file by `runtape run` (scripted replies, a `cat` tool), so the stored setup, the
//! check before acting and the process's start are all in the figure.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::{BenchError, BenchOptions, fresh, median, ms, workload};
use crate::exec::{Engine, EngineConfig};
use crate::machine::RunId;
use crate::ops::{self, Answer, Raise};
use crate::store::RunStatus;

/// What the resume case measured.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ResumeGrowth {
    /// Transitions in the shorter parked run.
    pub(crate) short_transitions: u64,
    /// Resuming it to its end, ms (median).
    pub(crate) short_ms: f64,
    /// Transitions in the longer parked run.
    pub(crate) long_transitions: u64,
    /// Resuming it to its end, ms (median).
    pub(crate) long_ms: f64,
    /// `long_ms / short_ms`.
    pub(crate) ratio: f64,
    /// `runtape resume` of the shorter run as a whole process, ms (median; `None` without
    /// the binary).
    pub(crate) cli_short_ms: Option<f64>,
    /// The same of the longer run.
    pub(crate) cli_long_ms: Option<f64>,
    /// `cli_long_ms / cli_short_ms`.
    pub(crate) cli_ratio: Option<f64>,
}

/// Parks a run at each of `opts.resume_rounds` and times [`resume_once`] on a fresh copy of
/// it `reps` times.
pub(super) async fn resume_growth(
    opts: &BenchOptions,
    reps: usize,
) -> Result<ResumeGrowth, BenchError> {
    let mut measured = Vec::new();
    for rounds in opts.resume_rounds {
        let db = fresh(&opts.dir, &format!("resume-{rounds}.db"));
        let run = workload::parked_run(&db, rounds).await?;
        let mut times = Vec::new();
        let mut transitions = 0;
        for i in 0..reps {
            // Each resume ends the run: resume a copy of the parked one.
            let copy = fresh(&opts.dir, &format!("resume-{rounds}-{i}.db"));
            copy_of(&db, &copy)?;
            let (took, seq) = resume_once(&copy, &run, rounds).await?;
            times.push(took);
            transitions = seq;
        }
        measured.push((transitions, median(times)));
    }
    let [(short_transitions, short_ms), (long_transitions, long_ms)] = measured[..] else {
        return Err(BenchError::Process(
            "the resume case measures two runs".into(),
        ));
    };
    let (cli_short_ms, cli_long_ms) = match &opts.exe {
        Some(exe) => {
            let [short, long] = opts.resume_rounds;
            (
                Some(cli_resume(exe, &opts.dir, short, reps)?),
                Some(cli_resume(exe, &opts.dir, long, reps)?),
            )
        }
        None => (None, None),
    };
    Ok(ResumeGrowth {
        short_transitions,
        short_ms,
        long_transitions,
        long_ms,
        ratio: long_ms / short_ms,
        cli_short_ms,
        cli_long_ms,
        cli_ratio: cli_long_ms.zip(cli_short_ms).map(|(l, s)| l / s),
    })
}

/// A spec file whose agent makes `rounds` tool calls (`cat`), runs out of turns and rests
/// until its budget is raised by one turn, which it answers with.
fn rounds_then_rest(rounds: usize) -> String {
    use std::fmt::Write as _;
    let mut replies = String::new();
    for i in 0..rounds {
        // Writing to a String cannot fail.
        let _ = writeln!(
            replies,
            "  {{ text = \"Looking up {i}.\", tool_calls = [{{ name = \"echo\", arguments = {{ n = {i} }} }}] }},"
        );
    }
    format!(
        "goal = \"Look it up {rounds} times.\"\n[run]\nmax_transitions = {cap}\n\
         [[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [\n{replies}  {{ text = \"done\" }},\n]\n\
         [[tools]]\nname = \"echo\"\ndescription = \"Echo\"\ncommand = [\"cat\"]\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"echo\"]\non_exhausted = \"pause\"\n\
         [agents.budget]\nmax_turns = {rounds}\nmax_tool_calls = {calls}\n",
        cap = rounds * 3 + 50,
        calls = rounds + 10,
    )
}

/// Starts a run of [`rounds_then_rest`] with `exe run` and times `exe resume RUN --raise
/// budget.max_turns=R+1`, a whole process, on a fresh copy of it `reps` times: the median ms.
fn cli_resume(exe: &Path, dir: &Path, rounds: usize, reps: usize) -> Result<f64, BenchError> {
    let spec = dir.join(format!("resume-cli-{rounds}.toml"));
    std::fs::write(&spec, rounds_then_rest(rounds))
        .map_err(|e| BenchError::Process(format!("cannot write {}: {e}", spec.display())))?;
    let db = fresh(dir, &format!("resume-cli-{rounds}.db"));
    // The run rests out of budget, which `runtape run` exits 1 for: it is told by its id.
    let out = std::process::Command::new(exe)
        .arg("run")
        .arg(&spec)
        .args(["--durability", "normal", "--db"])
        .arg(&db)
        .output()
        .map_err(|e| BenchError::Process(format!("cannot run {}: {e}", exe.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let run = text
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .ok_or_else(|| {
            BenchError::Process(format!(
                "`runtape run` named no run: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?
        .to_owned();
    let raise = format!("budget.max_turns={}", rounds + 1);
    let mut times = Vec::new();
    for i in 0..reps {
        let copy = fresh(dir, &format!("resume-cli-{rounds}-{i}.db"));
        copy_of(&db, &copy)?;
        let started = Instant::now();
        run_exe(
            exe,
            &[
                "resume".as_ref(),
                run.as_ref(),
                "--raise".as_ref(),
                raise.as_ref(),
            ],
            &copy,
        )?;
        times.push(ms(started.elapsed()));
        fresh(dir, &format!("resume-cli-{rounds}-{i}.db"));
    }
    fresh(dir, &format!("resume-cli-{rounds}.db"));
    let _ = std::fs::remove_file(&spec);
    Ok(median(times))
}

/// Runs `exe ARGS --db DB` and returns its stdout; a failure is an error with its stderr.
fn run_exe(exe: &Path, args: &[&std::ffi::OsStr], db: &Path) -> Result<Vec<u8>, BenchError> {
    let out = std::process::Command::new(exe)
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .map_err(|e| BenchError::Process(format!("cannot run {}: {e}", exe.display())))?;
    if !out.status.success() {
        return Err(BenchError::Process(format!(
            "`runtape {}` failed: {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Opens `db`, resumes `run` (parked after `rounds` turns) with its turn budget raised by one
/// through [`ops::resume`], and waits for its end. Returns the milliseconds that took and the
/// transitions the run had when parked.
async fn resume_once(db: &Path, run: &RunId, rounds: usize) -> Result<(f64, u64), BenchError> {
    let started = Instant::now();
    let engine = Engine::open_with(db, EngineConfig::default())?;
    // The script answers on the turn after the parked ones (turn `rounds` of a cap of
    // `rounds + 1`), so the raised run ends.
    workload::equip(&engine, rounds, rounds as u64 + 1);
    let parked = crate::history::record(engine.store().as_ref(), run)
        .map_err(|e| BenchError::Process(e.to_string()))?
        .seq;
    let raise = Raise::parse(&format!("budget.max_turns={}", rounds + 1))
        .map_err(|e| BenchError::Process(e.to_string()))?;
    let end = ops::resume(&engine, run, Answer::None, None, &[raise])
        .await
        .map_err(|e| BenchError::Process(e.to_string()))?
        .wait()
        .await?;
    let took = ms(started.elapsed());
    if end.status != RunStatus::Completed {
        return Err(BenchError::Process(format!(
            "the resumed run ended {}, not completed",
            end.status
        )));
    }
    Ok((took, parked))
}

/// Writes a copy of the database `db` to `copy` as committed now, its WAL included (a plain
/// file copy can miss the latest commits while the parking engine's connections keep the WAL
/// from being checkpointed).
fn copy_of(db: &Path, copy: &Path) -> Result<(), BenchError> {
    let io = |e: rusqlite::Error| BenchError::Process(format!("cannot copy {}: {e}", db.display()));
    let conn = rusqlite::Connection::open(db).map_err(io)?;
    conn.execute("VACUUM INTO ?1", [copy.to_string_lossy()])
        .map_err(io)?;
    Ok(())
}
