//! Watching a run the CLI drives: a spinner with the agent, step, tokens and the running cost
//! while it waits (or one JSON trace event per line with `--json`, each `model.reply` carrying
//! the run's cost so far), then a summary and the exit status. A model without a price gets
//! one warning on stderr, and its cost is shown as unknown, never as `$0.0000`.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::common::{CliError, cost_text, json_u64, outln, print_json};
use super::{EXIT_FAILED, EXIT_OK};
use crate::exec::{RunEnd, RunHandle, Trace, TraceEvent};
use crate::machine::{Outcome, RunState, Slot, SlotStatus};
use crate::store::RunStatus;

/// Prints the run id first (the line a script needs), in the chosen format.
pub(crate) fn announce(run: &str, verb: &str, json: bool) -> Result<(), CliError> {
    if json {
        print_json(&json!({"type": "run", "id": run, "action": verb}))
    } else {
        outln!("{verb} run {run}");
        Ok(())
    }
}

/// The `resume` options that answer a call in this state, or `None` if it waits for no one.
fn answers(status: &SlotStatus) -> Option<&'static str> {
    match status {
        SlotStatus::Approval { .. } => Some("--approve | --reject [REASON] | --input TEXT"),
        SlotStatus::Question { .. } => Some("--input TEXT | --reject [REASON]"),
        SlotStatus::InDoubt { .. } => {
            Some("--approve (perform it again) | --reject [REASON] | --input RESULT")
        }
        _ => None,
    }
}

/// Prints a fork's new run id first: `forked PARENT@SEQ as run ID`, or with `--json`
/// `{"type":"run","id":ID,"action":"forked","parent":PARENT,"at":SEQ}`.
pub(crate) fn announce_fork(run: &str, parent: &str, at: u64, json: bool) -> Result<(), CliError> {
    if json {
        print_json(
            &json!({"type": "run", "id": run, "action": "forked", "parent": parent, "at": at}),
        )
    } else {
        outln!("forked {parent}@{at} as run {run}");
        Ok(())
    }
}

/// Follows `handle` to the end; Ctrl-C asks the run to pause at its next step boundary (a
/// second Ctrl-C leaves at once; the run stays resumable either way). Returns the exit status.
pub(crate) async fn follow(
    engine: &crate::exec::Engine,
    handle: RunHandle,
    json: bool,
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
    let mut status = Status::default();
    let pauser = engine.clone();
    let paused_run = run.clone();
    let interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = pauser.pause(&paused_run).await;
            eprintln!(
                "\npausing {paused_run} at its next step boundary (Ctrl-C again to leave now; `runtape resume {paused_run}` continues)"
            );
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(i32::from(super::EXIT_FAILED));
            }
        }
    });
    let mut out_err = None;
    let end = handle
        .wait_with(|e| {
            if let Some(warning) = status.see(e) {
                bar.suspend(|| eprintln!("{warning}"));
            }
            if json {
                if let Err(e) = print_json(e) {
                    out_err = Some(e);
                }
            } else {
                bar.set_message(status.line());
            }
        })
        .await;
    interrupt.abort();
    bar.finish_and_clear();
    if let Some(e) = out_err {
        return Err(e);
    }
    let end = end?;
    summarise(&end, &status, json)
}

/// What the spinner shows.
#[derive(Default)]
struct Status {
    agent: String,
    seq: u64,
    tokens: u64,
    cost: u64,
    unpriced: u64,
    doing: String,
    /// `provider/model` pairs already warned about as unpriced.
    warned: std::collections::BTreeSet<String>,
}

impl Status {
    /// Takes in a trace event; returns a warning to print when a model turns out to have no
    /// price (once per provider and model).
    fn see(&mut self, e: &TraceEvent) -> Option<String> {
        if let Some(s) = e.seq {
            self.seq = self.seq.max(s);
        }
        match &e.kind {
            Trace::ModelRequest {
                agent,
                provider,
                model,
                attempt,
                ..
            } => {
                self.agent = agent.to_string();
                let retry = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                self.doing = format!("waiting on {provider}/{model}{retry}");
            }
            Trace::ModelToken { .. } => self.doing = "receiving tokens".into(),
            Trace::ModelReply {
                provider,
                model,
                usage,
                cost_nanos,
                run_cost_nanos,
                run_unpriced_turns,
                ..
            } => {
                if let Some(u) = usage {
                    self.tokens += u.input_tokens + u.output_tokens;
                }
                self.cost = *run_cost_nanos;
                self.unpriced = *run_unpriced_turns;
                self.doing = "thinking".into();
                let key = format!("{provider}/{model}");
                if cost_nanos.is_none() && self.warned.insert(key.clone()) {
                    return Some(format!(
                        "warning: no price for {key}: its cost is unknown and cost caps cannot trigger for it – add a `pricing` entry to the provider (0 for a free model)"
                    ));
                }
            }
            Trace::ToolCall { tool, .. } => self.doing = format!("running tool {tool}"),
            Trace::ToolProgress {
                tool,
                progress,
                total,
                message,
                ..
            } => {
                let of = total.map(|t| format!("/{t}")).unwrap_or_default();
                let what = message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                self.doing = format!("running tool {tool} ({progress}{of}{what})");
            }
            Trace::Handoff { from, to } => self.doing = format!("handoff {from} → {to}"),
            Trace::InputRequested { tool, .. } => {
                self.doing = format!("waiting for a person ({tool})")
            }
            _ => {}
        }
        None
    }

    fn line(&self) -> String {
        format!(
            "{} · step {} · {} tokens · {} · {}",
            if self.agent.is_empty() {
                "starting"
            } else {
                &self.agent
            },
            self.seq,
            self.tokens,
            cost_text(self.cost, self.unpriced),
            self.doing
        )
    }
}

/// The final summary and the exit status: 0 completed (or resting: paused, waiting for a
/// person), 1 failed, cancelled or out of budget.
fn summarise(end: &RunEnd, status: &Status, json: bool) -> Result<u8, CliError> {
    let run = &end.run_id;
    let usage = end.state.data().map(|d| d.usage).unwrap_or_default();
    let code = match end.status {
        RunStatus::Completed
        | RunStatus::Paused
        | RunStatus::AwaitingInput
        | RunStatus::Running => EXIT_OK,
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::BudgetExhausted => EXIT_FAILED,
    };
    if json {
        print_json(&json!({
            "type": "run.end",
            "id": run,
            "status": end.status,
            "steps": end.state.seq(),
            "turns": usage.turns,
            "tool_calls": usage.tool_calls,
            "tokens": usage.input_tokens + usage.output_tokens,
            "cost_nanos": json_u64(usage.cost_nanos),
            "cost_known": usage.unpriced_turns == 0,
            "unpriced_turns": usage.unpriced_turns,
            "outcome": end.state.outcome(),
        }))?;
        return Ok(code);
    }
    let _ = status;
    let totals = format!(
        "{} steps, {} model turns, {} tool calls, {} tokens, {}",
        end.state.seq(),
        usage.turns,
        usage.tool_calls,
        usage.input_tokens + usage.output_tokens,
        cost_text(usage.cost_nanos, usage.unpriced_turns)
    );
    match (&end.state, end.status) {
        (
            RunState::Done {
                outcome: Outcome::Completed { answer, .. },
                ..
            },
            _,
        ) => {
            outln!("completed: {totals}");
            outln!("answer: {}", answer.as_deref().unwrap_or("(none)"));
        }
        (
            RunState::Done {
                outcome: Outcome::Failed { error },
                ..
            },
            _,
        ) => {
            outln!("failed ({}): {totals}", error.class);
            outln!("why: {}", error.message);
        }
        (
            RunState::Done {
                outcome: Outcome::Cancelled { reason },
                ..
            },
            _,
        ) => {
            outln!(
                "cancelled{}: {totals}",
                reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
        (RunState::AwaitingInput { batch, .. }, _) => {
            outln!("waiting for a person: {totals}");
            let waiting: Vec<&Slot> = batch
                .slots
                .iter()
                .filter(|s| answers(&s.status).is_some())
                .collect();
            for slot in &waiting {
                let call = if waiting.len() > 1 {
                    format!(" --call {}", slot.call_id)
                } else {
                    String::new()
                };
                outln!(
                    "answer {} with: runtape resume {run}{call} {}  (see `runtape show {run}`)",
                    slot.tool,
                    answers(&slot.status).unwrap_or_default()
                );
            }
        }
        (RunState::BudgetExhausted { key, .. }, _) => {
            outln!("out of budget ({key}): {totals}");
            outln!(
                "raise it with: runtape resume {run} --raise budget.{}=VALUE",
                key_field(*key)
            );
        }
        (_, RunStatus::Paused) => {
            outln!("paused at step {}: {totals}", end.state.seq());
            outln!("continue with: runtape resume {run}");
        }
        _ => outln!("stopped ({}): {totals}", end.status),
    }
    Ok(code)
}

fn key_field(key: crate::machine::BudgetKey) -> &'static str {
    key.field()
}
