//! A reply cut by the output-token limit (revision 7): `finish_reason = "length"` (OpenAI chat
//! and compatible), `stop_reason = "max_tokens"` (Anthropic), `status = "incomplete"` with
//! reason `max_output_tokens` (Responses), `done_reason = "length"` (Ollama). Every adapter
//! normalises these to [`Finish::Length`]; this module decides what the run does with one.
//!
//! A cut reply is not an answer, and the tool calls in it may be cut mid-argument, so none of
//! them is run. The agent's [`OnTruncated`] policy decides:
//!
//! - `retry` (the default): the reply is dropped from the conversation and the same turn is
//!   asked again with twice the output-token limit: twice the larger of the tokens the cut
//!   reply used and the limit the agent had (its `max_output_tokens`, or a limit an earlier
//!   retry set). The new limit stays with the agent for the rest of the run, and the provider
//!   still lowers it to the remaining token budget.
//! - `continue`: the cut text stays in the conversation and the model is asked to go on from
//!   where it stopped ([`CONTINUE_PROMPT`]); the agent's answer is the pieces joined. A reply
//!   cut before any text (all of it spent on reasoning) is retried as with `retry`.
//! - `fail`: the run ends failed with class `truncated`.
//!
//! Retries and continuations count against the agent's correction budget like bad tool calls
//! (reset by a reply that is not cut), so a model that always runs out ends `truncated`
//! rather than looping. Runs of revision 6 and earlier take a cut reply as a whole one.

use serde::{Deserialize, Serialize};

use super::error::{ErrorClass, Failure};
use super::message::{Message, Role};
use super::reply::{Finish, ModelReply};
use super::state::{Outcome, RunData, RunState};
use super::step::{Cx, Note};
use super::table::EdgeId;

/// The first revision whose runs handle a reply cut by the output-token limit by the agent's
/// [`OnTruncated`] policy (before, it was taken as a whole reply).
pub const TRUNCATION_SEMANTICS: u32 = 7;

/// The user message that asks a model to go on with a reply the output-token limit cut
/// (`on_truncated = "continue"`).
pub const CONTINUE_PROMPT: &str = "Your reply was cut off by the output-token limit. Continue exactly where it stopped, without repeating anything.";

/// What a reply cut by the output-token limit does (`on_truncated` of an agent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTruncated {
    /// Ask again with twice the output-token limit.
    #[default]
    Retry,
    /// Keep the cut text and ask the model to continue it.
    Continue,
    /// End the run failed with class `truncated`.
    Fail,
}

impl OnTruncated {
    /// The word in a spec file: `retry`, `continue`, `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnTruncated::Retry => "retry",
            OnTruncated::Continue => "continue",
            OnTruncated::Fail => "fail",
        }
    }

    /// True for the default (`retry`), which a stored spec leaves out.
    pub fn is_default(&self) -> bool {
        *self == OnTruncated::default()
    }
}

/// Whether `reply` was cut by the output-token limit (and is not a refusal, which is an
/// outcome of its own).
pub fn is_truncated(reply: &ModelReply) -> bool {
    reply.finish_reason.normalized == Some(Finish::Length)
        && reply.refusal.is_none()
        && reply.finish_reason.raw.as_deref() != Some("refusal")
}

/// `Generating` + a cut `ModelReplied` in a run of revision 7 or later. Usage is already
/// counted; nothing of the reply is in the conversation yet.
pub(crate) fn on_truncated(
    cx: &mut Cx<'_>,
    mut run: RunData,
    reply: &ModelReply,
) -> (EdgeId, RunState) {
    let agent = run.active.clone();
    let spec_agent = cx.spec.agent(&agent);
    let policy = spec_agent.map(|a| a.on_truncated).unwrap_or_default();
    let budget = spec_agent.map_or(0, |a| a.correction_budget);
    let used = reply.usage.map(|u| u.output_tokens).filter(|n| *n > 0);
    let configured = spec_agent.and_then(|a| a.model_settings.max_output_tokens);
    let Some(a) = run.agents.get_mut(&agent) else {
        return fail(run, &agent, "the agent is not in the run".into());
    };
    a.strikes = a.strikes.saturating_add(1);
    let strikes = a.strikes;
    let limit = a.output_limit.or(configured);
    let text = reply.text.clone().filter(|t| !t.trim().is_empty());
    let spent = || format!("{strikes} replies in a row were cut (correction budget {budget})");
    match policy {
        OnTruncated::Fail => fail(run, &agent, "on_truncated is fail".into()),
        _ if strikes > budget => fail(run, &agent, spent()),
        OnTruncated::Continue if text.is_some() => {
            let piece = text.unwrap_or_default();
            a.continued.push_str(&piece);
            cx.notes.push(Note::Truncated {
                agent: agent.clone(),
                policy: OnTruncated::Continue,
                output_tokens: used,
                next_limit: None,
            });
            cx.append(&mut run, &agent, Message::text(Role::Assistant, piece));
            cx.append(&mut run, &agent, Message::text(Role::User, CONTINUE_PROMPT));
            (
                EdgeId::GeneratingRepliedTruncatedContinue,
                RunState::Preparing { run },
            )
        }
        _ => {
            let Some(base) = used.max(limit) else {
                return fail(
                    run,
                    &agent,
                    "the provider reported no output tokens and the agent sets no max_output_tokens, so there is no limit to double".into(),
                );
            };
            let next = base.saturating_mul(2);
            a.output_limit = Some(next);
            cx.notes.push(Note::Truncated {
                agent: agent.clone(),
                policy: OnTruncated::Retry,
                output_tokens: used,
                next_limit: Some(next),
            });
            (
                EdgeId::GeneratingRepliedTruncatedRetry,
                RunState::Preparing { run },
            )
        }
    }
}

fn fail(run: RunData, agent: &super::AgentId, why: String) -> (EdgeId, RunState) {
    let error = Failure::new(
        ErrorClass::Truncated,
        format!("agent {agent}: the reply was cut by the output-token limit: {why}"),
    );
    (
        EdgeId::GeneratingRepliedTruncated,
        RunState::Done {
            run,
            outcome: Outcome::Failed { error },
        },
    )
}
