//! `runtape demo`: a guided tour on embedded defaults, fully offline. A two-agent run with
//! parallel tool calls and a handoff is started in a child process and killed with SIGKILL
//! mid-run, resumed here, listed, inspected at an earlier step, forked there, and verified.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::common::{CliError, outln};
use super::inspect;
use crate::config::{self, Setup};
use crate::exec::{Engine, ForkEdit, ForkMode, TapeEnd};
use crate::history;
use crate::machine::{EventKind, Outcome, RunId};

const SPEC: &str = include_str!("../../examples/demo.toml");

fn say(step: &str, text: &str) {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        outln!("\n\x1b[1m{step}\x1b[0m {text}");
    } else {
        outln!("\n{step} {text}");
    }
}

/// Runs the tour on `db` (default: a new temporary database); keeps the database for the user
/// to explore. `$RUNTAPE_DB` is deliberately ignored: the tour should not write into a database
/// the user keeps for real runs unless they name it.
pub(crate) async fn demo(db: Option<std::path::PathBuf>) -> Result<u8, CliError> {
    let started = crate::clock::stopwatch();
    let dir = std::env::temp_dir().join(format!("runtape-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::internal(format!("cannot create {}: {e}", dir.display())))?;
    let spec = dir.join("demo.toml");
    std::fs::write(&spec, SPEC)
        .map_err(|e| CliError::internal(format!("cannot write {}: {e}", spec.display())))?;
    let db = db.unwrap_or_else(|| dir.join("demo.db"));
    outln!(
        "runtape demo — durable agent runs, offline: scripted models, shell tools, a SQLite file"
    );
    outln!("database: {}", db.display());

    // 1. Start in a child process and kill it mid-run.
    say(
        "1. start and crash.",
        "A researcher agent calls two tools in parallel, then hands over to a writer. We start the run in a child process and kill -9 it while the tools run.",
    );
    let (run, killed_at) = run_and_kill(&spec, &db)?;
    outln!(
        "   run {run}: killed at step {killed_at} (the tools were in flight; nothing after the last commit was kept)"
    );
    let store = crate::store::SqliteStore::open_existing(&db, crate::store::Durability::Full)?;
    let rec = history::record(&store, &run)?;
    outln!(
        "   the database says: status `{}`, {} steps committed",
        rec.status,
        rec.seq
    );
    drop(store);

    // 2. Resume here.
    say(
        "2. resume.",
        "A new process takes the run up from its last committed step. Tool calls whose results were committed are not repeated; the ones in flight run again (they are idempotent, with the same idempotency key).",
    );
    let engine = Engine::open(&db)?;
    let setup = Setup::from_json(&rec.setup.clone().unwrap_or_default())?;
    setup.install(&engine)?;
    let end = engine.resume(&run).await?.wait().await?;
    let answer = match end.state.outcome() {
        Some(Outcome::Completed { answer, .. }) => answer.clone().unwrap_or_default(),
        other => format!("{other:?}"),
    };
    outln!("   {} at step {}: {answer}", end.status, end.state.seq());

    // 3. List.
    say("3. list.", "`runtape ls` shows every run in the database:");
    inspect::ls(&db, false, false, &[])?;

    // 4. Show an earlier step: the writer's first model request.
    let timeline = history::timeline(engine.store().as_ref(), &run)?;
    let at = timeline
        .iter()
        .find(|e| {
            e.event == EventKind::Proceed
                && e.agent.as_ref().is_some_and(|a| a.as_str() == "writer")
        })
        .map_or(2, |e| e.seq);
    say(
        "4. go back.",
        &format!(
            "`runtape show {run}@{at}`: the exact state and the exact request the writer's model received:"
        ),
    );
    inspect::show(&db, &format!("{run}@{at}"), false)?;

    // 5. Fork there with an edit, from the tape.
    say(
        "5. fork.",
        &format!(
            "Branch off at step {}, just before that request, with a different instruction for the writer. --tape serves the parent's recording while the requests match and goes live at the first difference.",
            at - 1
        ),
    );
    let edit = ForkEdit::ReplaceLastUserMessage {
        agent: None,
        text: "Which city is it, and what should a traveller pack?".into(),
    };
    let fork = engine
        .fork(&run, at - 1, vec![edit], ForkMode::Tape(TapeEnd::GoLive))
        .await?
        .wait()
        .await?;
    outln!(
        "   fork {}: {} at step {}",
        fork.run_id,
        fork.status,
        fork.state.seq()
    );
    inspect::diff(&db, run.as_str(), fork.run_id.as_str(), false, false)?;

    // 6. Verify both.
    say(
        "6. verify.",
        "Replay every recorded event through the current machine and check each state hash, effect list, chain link and receipt:",
    );
    for id in [&run, &fork.run_id] {
        inspect::verify(&db, id.as_str(), None, false, false)?;
    }

    outln!(
        "\ndone in {:.1} s. Explore it yourself:",
        started.elapsed().as_secs_f64()
    );
    let me = invocation();
    let d = shell_word(&db.display().to_string());
    outln!("   {me} --db {d} log {run}");
    outln!("   {me} --db {d} show {run}@{at} --json");
    outln!(
        "   {me} --db {d} fork {run}@{} --edit 'user=Say it in one line.'",
        at - 1
    );
    outln!(
        "   rm -r {}   # when you are done",
        shell_word(&dir.display().to_string())
    );
    Ok(super::EXIT_OK)
}

/// How to call this program again from a shell: `runtape` when that name on `PATH` is this
/// very program (it was installed), else the absolute path of the running executable (after
/// `cargo run`, `target/…/runtape`, which is on no `PATH`).
fn invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "runtape".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            dir.join("runtape")
                .canonicalize()
                .is_ok_and(|found| found == me)
        })
    });
    if on_path {
        "runtape".to_owned()
    } else {
        shell_word(&me.display().to_string())
    }
}

/// `text` as one shell word: as it is when it holds nothing a shell would read, else in
/// single quotes.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Starts `runtape run` on the spec in a child process and SIGKILLs it once the researcher's
/// tools are running; returns the run id and the last step it reported.
fn run_and_kill(spec: &Path, db: &Path) -> Result<(RunId, u64), CliError> {
    let exe: PathBuf = std::env::current_exe()
        .map_err(|e| CliError::internal(format!("cannot find this program: {e}")))?;
    // Check the spec loads before starting the child (it is embedded, so this is a bug check).
    config::load(spec)?;
    let mut child = Command::new(exe)
        .arg("--db")
        .arg(db)
        .args(["run", "--json"])
        .arg(spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| CliError::internal(format!("cannot start the child process: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| CliError::internal("the child has no stdout"))?;
    let (mut run, mut seq, mut tools_running) = (None, 0u64, 0);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["type"] == "run" {
            run = v["id"].as_str().map(RunId::new);
        }
        if let Some(s) = v["seq"].as_u64() {
            seq = seq.max(s);
        }
        if v["type"] == "tool.call" {
            tools_running += 1;
            if tools_running == 2 {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let run = run.ok_or_else(|| CliError::internal("the child did not report a run id"))?;
    Ok((run, seq))
}
