//! Watching a run the CLI drives: a spinner with the agent, step, tokens and cost while it
//! waits (or one JSON trace event per line with `--json`), then a summary and the exit status.
//!
//! # Stopping
//!
//! The first SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the run gracefully
//! ([`Engine::begin_shutdown`]): no new model or tool call starts, calls in flight may finish within
//! the grace period (`--grace-ms`, `$RUNTAPE_STOP_GRACE_MS`, default
//! [`DEFAULT_GRACE_MS`](super::DEFAULT_GRACE_MS)) and their results are committed, then the run rests `paused` and
//! the command exits [`EXIT_PAUSED`](super::EXIT_PAUSED). A call still running when the grace period is over is
//! cancelled (command tools are killed); a non-idempotent one is then in doubt on resume. A
//! second signal leaves at once with [`EXIT_INTERRUPTED`] (the run is left as a crash leaves
//! it; `resume` continues it).
//!
//! # A closed stdout
//!
//! With `--json`, a line that cannot be written (the reader went away: `runtape run … --json
//! | head -3`) stops the run the same graceful way: it is paused, one line on stderr says so,
//! and the command exits [`EXIT_PAUSED`](super::EXIT_PAUSED), never 0 (unless the run had
//! already completed). Nothing more is written to stdout.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::common::CliError;
use super::summary::{Status, summarise};
use crate::exec::{Engine, RunHandle};
use crate::store::RunStatus;
use crate::term::{EXIT_INTERRUPTED, StopSignals, note, say_json, say_line, stdout_closed};

/// The error that stopped the driver of `run`, saying how to continue where that helps.
fn stopped_by(run: &crate::machine::RunId, e: crate::exec::EngineError) -> CliError {
    use crate::exec::EngineError;
    use crate::store::StoreError;
    let resumable = matches!(
        &e,
        EngineError::Store(StoreError::Full { .. } | StoreError::Io(_))
    );
    let mut err = CliError::from(e);
    if resumable {
        err.message = format!("run {run}: {}: `runtape resume {run}`", err.message);
    }
    err
}

/// Prints the run id first (the line a script needs), in the chosen format. False when
/// stdout is already closed.
pub(crate) fn announce(run: &str, verb: &str, json: bool) -> Result<bool, CliError> {
    if json {
        say_json(&json!({"type": "run", "id": run, "action": verb}))
    } else {
        Ok(say_line(&format!("{verb} run {run}")))
    }
}

/// Prints a fork's new run id first: `forked PARENT@SEQ as run ID`, or with `--json`
/// `{"type":"run","id":ID,"action":"forked","parent":PARENT,"at":SEQ}`.
pub(crate) fn announce_fork(
    run: &str,
    parent: &str,
    at: u64,
    json: bool,
) -> Result<bool, CliError> {
    if json {
        say_json(&json!({"type": "run", "id": run, "action": "forked", "parent": parent, "at": at}))
    } else {
        Ok(say_line(&format!("forked {parent}@{at} as run {run}")))
    }
}

/// Follows `handle` to the end and returns the exit status. Stop signals and a closed stdout
/// stop the run gracefully within `grace` (see the module docs).
pub(crate) async fn follow(
    engine: &Engine,
    handle: RunHandle,
    json: bool,
    grace: Duration,
    mut signals: StopSignals,
) -> Result<u8, CliError> {
    let run = handle.run_id().clone();
    let bar = if json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    };
    let stopper = engine.clone();
    let stopped_run = run.clone();
    let watcher = tokio::spawn(async move {
        let first = signals.next().await;
        stopper.begin_shutdown(grace);
        note(&format!(
            "\n{first}: stopping run {stopped_run}: calls in flight get up to {} ms, then it pauses (a second signal leaves at once)",
            grace.as_millis()
        ));
        let second = signals.next().await;
        note(&format!(
            "{second}: leaving now; `runtape resume {stopped_run}` continues the run"
        ));
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    });
    if stdout_closed() {
        engine.begin_shutdown(grace);
    }
    let mut status = Status::default();
    let mut encode_err = None;
    let end = handle
        .wait_with(|e| {
            if let Some(warning) = status.see(e) {
                bar.suspend(|| note(&warning));
            }
            if json {
                match say_json(e) {
                    Ok(true) => {}
                    Ok(false) => engine.begin_shutdown(grace),
                    Err(e) => encode_err = Some(e),
                }
            } else {
                bar.set_message(status.line());
            }
        })
        .await;
    watcher.abort();
    bar.finish_and_clear();
    if let Some(e) = encode_err {
        return Err(e);
    }
    let end = end.map_err(|e| stopped_by(&run, e))?;
    let waiting = if end.status == RunStatus::Paused {
        crate::ops::waiting_below(engine.store().as_ref(), &run).unwrap_or_default()
    } else {
        Vec::new()
    };
    let code = summarise(&end, json, &waiting)?;
    if stdout_closed() {
        let how = match end.status {
            RunStatus::Paused => format!(
                "paused at step {}; `runtape resume {run}` continues it",
                end.state.seq()
            ),
            s => format!("ended {s} at step {}", end.state.seq()),
        };
        note(&format!("stdout was closed: run {run} {how}"));
    }
    Ok(code)
}
