//! A final answer (a reply without tool calls): refusals, and structured output checked
//! against the agent's output schema.
//!
//! - A reply carrying a refusal ends the run failed with class `refused` and the model's
//!   words: it is an outcome of its own, never an empty answer.
//! - For an agent with an `output_schema`, the answer text must parse as JSON and validate.
//!   A valid answer becomes the agent's output (its compact JSON is the answer text, so plan
//!   edges and the run's outcome carry the parsed value); an invalid one is fed back to the
//!   model as a user message listing what is wrong, and counts against the correction
//!   budget like a bad tool call. Spending the budget fails the run with `output_invalid`.

use serde_json::Value;

use super::error::{ErrorClass, Failure};
use super::message::{Message, Role};
use super::reply::ModelReply;
use super::state::{Outcome, RunData, RunState};
use super::step::Cx;
use super::table::EdgeId;

/// The start of the message that tells a model its answer did not fit the schema.
pub const OUTPUT_FEEDBACK: &str = "Your answer does not match the required output schema";

/// `Generating` + `ModelReplied` without tool calls. The assistant message is already
/// appended and the turn counted. `continued` is the text of the agent's replies before this
/// one that the output-token limit cut and it continued (revision 7; empty otherwise): the
/// answer is that text followed by this reply's.
pub(crate) fn on_answer(
    cx: &mut Cx<'_>,
    mut run: RunData,
    reply: &ModelReply,
    continued: &str,
) -> (EdgeId, RunState) {
    let agent = run.active.clone();
    if let Some(words) = refusal_of(reply) {
        let error = Failure::new(
            ErrorClass::Refused,
            format!("agent {agent}: the model refused: {words}"),
        );
        return (
            EdgeId::GeneratingRepliedRefused,
            RunState::Done {
                run,
                outcome: Outcome::Failed { error },
            },
        );
    }
    let text = match (continued, reply.text.as_deref()) {
        ("", _) => reply.text.clone(),
        (before, rest) => Some(format!("{before}{}", rest.unwrap_or_default())),
    };
    let checked = match text.as_deref() {
        None => None,
        Some(t) => parse(t).map(|v| (cx.spec.output_errors(&agent, &v), v)),
    };
    if !cx.spec.has_output_schema(&agent) {
        if let Some(a) = run.agents.get_mut(&agent) {
            a.strikes = 0;
        }
        return answer(run, agent, text, None);
    }
    let problem = match checked {
        Some((Some(errors), value)) if errors.is_empty() => {
            if let Some(a) = run.agents.get_mut(&agent) {
                a.strikes = 0;
            }
            let compact = value.to_string();
            return answer(run, agent, Some(compact), Some(value));
        }
        Some((Some(errors), _)) => {
            let shown: Vec<&str> = errors.iter().take(5).map(String::as_str).collect();
            let more = if errors.len() > 5 {
                format!(" (and {} more)", errors.len() - 5)
            } else {
                String::new()
            };
            format!("{}{more}", shown.join("; "))
        }
        _ if text.is_none() => "it is empty; reply with a JSON value".to_owned(),
        _ => "it is not valid JSON; reply with the JSON value only".to_owned(),
    };
    let budget = cx.spec.agent(&agent).map_or(0, |a| a.correction_budget);
    let strikes = match run.agents.get_mut(&agent) {
        Some(a) => {
            a.strikes = a.strikes.saturating_add(1);
            a.strikes
        }
        None => u32::MAX,
    };
    if strikes > budget {
        let error = Failure::new(
            ErrorClass::OutputInvalid,
            format!(
                "agent {agent}: {strikes} answers in a row did not match its output schema (correction budget {budget}); last: {problem}"
            ),
        );
        return (
            EdgeId::GeneratingRepliedOutputFailed,
            RunState::Done {
                run,
                outcome: Outcome::Failed { error },
            },
        );
    }
    let feedback = format!("{OUTPUT_FEEDBACK}: {problem}. Answer again.");
    cx.append(&mut run, &agent, Message::text(Role::User, feedback));
    (
        EdgeId::GeneratingRepliedOutputInvalid,
        RunState::Preparing { run },
    )
}

fn answer(
    run: RunData,
    agent: super::AgentId,
    answer: Option<String>,
    output: Option<Value>,
) -> (EdgeId, RunState) {
    (
        EdgeId::GeneratingRepliedAnswer,
        RunState::Handoff {
            run,
            from: agent,
            answer,
            output,
            exhausted: None,
            transfer: None,
        },
    )
}

/// The model's refusal, if the reply is one: a `refusal` text, or a stop reason of
/// `refusal` (Anthropic) with whatever text came with it (`(no explanation given)` when none).
/// The machine ends the run `refused` on a reply for which this is `Some`; call it to show
/// a reply the way the machine took it.
pub fn refusal_of(reply: &ModelReply) -> Option<String> {
    if let Some(r) = reply.refusal.as_deref().filter(|r| !r.trim().is_empty()) {
        return Some(r.to_owned());
    }
    let refused = reply.finish_reason.raw.as_deref() == Some("refusal");
    refused.then(|| {
        reply
            .text
            .clone()
            .unwrap_or_else(|| "(no explanation given)".to_owned())
    })
}

/// The answer as JSON: the whole text, or the text inside one Markdown code fence.
fn parse(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    let inner = trimmed.strip_prefix("```")?.strip_suffix("```")?;
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    serde_json::from_str(inner.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_whole_or_from_one_fence() {
        assert_eq!(parse(" {\"a\":1} "), Some(serde_json::json!({"a": 1})));
        assert_eq!(
            parse("```json\n{\"a\":1}\n```"),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(parse("the answer is {\"a\":1}"), None);
    }

    #[test]
    fn a_refusal_needs_words_or_the_refusal_stop_reason() {
        let mut r = ModelReply::text("no");
        assert_eq!(refusal_of(&r), None);
        r.refusal = Some("I can't help with that.".into());
        assert_eq!(refusal_of(&r).as_deref(), Some("I can't help with that."));
        let mut s = ModelReply::text("Sorry.");
        s.finish_reason.raw = Some("refusal".into());
        assert_eq!(refusal_of(&s).as_deref(), Some("Sorry."));
    }
}
