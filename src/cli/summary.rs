//! The end of a run the CLI drove: the final summary (or the `run.end` JSON line) and the
//! exit status it maps to; and the spinner's status line while it runs.

use serde_json::json;

use super::common::{CliError, cost_text, json_u64};
use super::{EXIT_FAILED, EXIT_OK, EXIT_PAUSED};
use crate::exec::{RunEnd, Trace, TraceEvent};
use crate::machine::{Outcome, RunState, Slot};
use crate::ops::answers;
use crate::store::RunStatus;
use crate::term::{say, say_json};

/// The exit status a run that stopped with `status` gives: 0 completed or waiting for a
/// person, 1 failed, cancelled or out of budget, 4 paused.
pub(crate) fn exit_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Completed | RunStatus::AwaitingInput | RunStatus::Running => EXIT_OK,
        RunStatus::Paused => EXIT_PAUSED,
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::BudgetExhausted => EXIT_FAILED,
    }
}

/// What the spinner shows.
#[derive(Default)]
pub(crate) struct Status {
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
    /// Takes in one trace event of the run; returns a warning to print when a model turns out
    /// to have no price (once per provider and model).
    pub(crate) fn see(&mut self, e: &TraceEvent) -> Option<String> {
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
            Trace::TimerStarted { due_ms, .. } => {
                self.doing = format!("sleeping until {}", crate::text::utc(*due_ms))
            }
            Trace::AttachmentsNotSent { model, files, .. } => {
                let key = format!("files:{model}:{}", files.join(","));
                if self.warned.insert(key) {
                    return Some(format!(
                        "warning: {model} does not take {}: each was sent as a text placeholder – set the provider's `attachments` if the model takes them",
                        files.join(", ")
                    ));
                }
            }
            _ => {}
        }
        None
    }

    /// The spinner's message.
    pub(crate) fn line(&self) -> String {
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

/// Prints the final summary (with `--json`, the `run.end` line) and returns the exit status
/// (see [`exit_code`]). `waiting`: the child runs a paused run rests on because they wait for
/// a person; such a run exits as one waiting for a person does (0).
pub(crate) fn summarise(
    end: &RunEnd,
    json: bool,
    waiting: &[crate::ops::Waiting],
) -> Result<u8, CliError> {
    let run = &end.run_id;
    let usage = end.state.data().map(|d| d.usage).unwrap_or_default();
    let on_children = end.status == RunStatus::Paused && !waiting.is_empty();
    let code = if on_children {
        exit_code(RunStatus::AwaitingInput)
    } else {
        exit_code(end.status)
    };
    if json {
        let mut line = json!({
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
            "waiting_children": waiting.iter().map(|w| &w.run).collect::<Vec<_>>(),
        });
        // Only for runs that attempted undos, so every other run's line is as it was.
        if let Some(saga) = crate::machine::saga_end(&end.state) {
            line["saga"] = json!(saga.as_str());
        }
        say_json(&line)?;
        return Ok(code);
    }
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
            say!("completed: {totals}");
            say!("answer: {}", answer.as_deref().unwrap_or("(none)"));
        }
        (
            RunState::Done {
                outcome: Outcome::Failed { error },
                ..
            },
            _,
        ) => {
            say!("failed ({}): {totals}", error.class);
            say!("why: {}", error.message);
            super::saga::summarise(&end.state);
        }
        (
            RunState::Done {
                outcome: Outcome::Cancelled { reason },
                ..
            },
            _,
        ) => {
            say!(
                "cancelled{}: {totals}",
                reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
            super::saga::summarise(&end.state);
        }
        (RunState::AwaitingInput { batch, .. }, _) => {
            say!("waiting for a person: {totals}");
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
                say!(
                    "answer {}{} with: runtape resume {run}{call} {}  (see `runtape show {run}`)",
                    slot.tool,
                    super::inspect::escalated_text(slot),
                    answers(&slot.status).unwrap_or_default()
                );
            }
        }
        (RunState::BudgetExhausted { key, .. }, _) => {
            say!("out of budget ({key}): {totals}");
            say!(
                "raise it with: runtape resume {run} --raise budget.{}=VALUE",
                key_field(*key)
            );
        }
        (_, RunStatus::Paused) if on_children => {
            let names: Vec<&str> = waiting.iter().map(|w| w.run.as_str()).collect();
            say!(
                "waiting for a person in child run {}: {totals}",
                names.join(", ")
            );
            match waiting {
                [one] => {
                    for (call_id, tool, how) in &one.asks {
                        let call = if one.asks.len() > 1 {
                            format!(" --call {call_id}")
                        } else {
                            String::new()
                        };
                        say!(
                            "answer {tool} with: runtape resume {run}{call} {how}  (it reaches {}; see `runtape show {}`)",
                            one.run,
                            one.run
                        );
                    }
                }
                _ => say!(
                    "answer each with: runtape resume CHILD --approve | --reject [REASON] | --input TEXT, then runtape resume {run}"
                ),
            }
        }
        (_, RunStatus::Paused) => {
            say!("paused at step {}: {totals}", end.state.seq());
            say!("continue with: runtape resume {run}");
        }
        _ => say!("stopped ({}): {totals}", end.status),
    }
    Ok(code)
}

fn key_field(key: crate::machine::BudgetKey) -> &'static str {
    key.field()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Hlc, RunId};

    fn event(kind: Trace) -> TraceEvent {
        TraceEvent {
            run: RunId::new("r"),
            at: Hlc::default(),
            seq: Some(4),
            kind,
        }
    }

    #[test]
    fn an_mcp_progress_notification_shows_on_the_progress_line() {
        let mut status = Status::default();
        status.see(&event(Trace::ToolCall {
            agent: crate::machine::AgentId::new("a"),
            call_id: "c1".into(),
            tool: "ev__trigger-long-running-operation".into(),
            args: serde_json::json!({}),
        }));
        status.see(&event(Trace::ToolProgress {
            call_id: "c1".into(),
            tool: "ev__trigger-long-running-operation".into(),
            progress: 2.0,
            total: Some(3.0),
            message: Some("step 2".into()),
        }));
        assert!(
            status
                .line()
                .ends_with("running tool ev__trigger-long-running-operation (2/3: step 2)"),
            "{}",
            status.line()
        );
    }
}
