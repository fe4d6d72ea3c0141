//! The timeline of a run (`runtape log`): one entry per transition with its time, event, the
//! state before and after, the agent involved, and the tokens and cost it added. Read straight
//! from the stored rows (no replay), so it is fast on long runs.

use serde::Serialize;

use crate::ledger::{HistoryError, pairs, row, transitions};
use crate::machine::{AgentId, EdgeId, Effect, EventBody, EventKind, Hlc, RunId, StateKind};
use crate::store::{Store, TransitionRecord};

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    /// Seq.
    pub seq: u64,
    /// Event time (HLC).
    pub at: Hlc,
    /// Event time, wall-clock milliseconds.
    pub at_ms: u64,
    /// Event kind.
    pub event: EventKind,
    /// State before.
    pub from: StateKind,
    /// State after.
    pub to: StateKind,
    /// The edge taken.
    pub edge: EdgeId,
    /// The agent this transition concerns, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    /// Input + output tokens a model reply added.
    pub tokens: u64,
    /// Cost a model reply added, nanodollars (`None` when unpriced or not a reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
    /// Prompt tokens a model reply read from the provider's cache (OpenAI `cached_tokens`,
    /// Anthropic `cache_read_input_tokens`).
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens a model reply wrote to the cache (Anthropic
    /// `cache_creation_input_tokens`).
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// How a model reply ended when it was not a plain answer: `truncated` (the output-token
    /// limit cut it) or `refused` (the model declined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_end: Option<&'static str>,
    /// For an event that answers an effect (a model reply or failure, a tool result, a
    /// person's answer, a child's end, a retrieval): the milliseconds from the transition that
    /// issued the effect to this one, on the engine's clock — the call's time, plus any wait
    /// for its backoff or for the run to be resumed. `None` for other events, and where the
    /// issuing step is not among the rows read (early in a [`timeline_tail`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
    /// A few words on what happened.
    pub summary: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Cache tokens a reply's usage reports: (read, written).
pub fn cache_tokens(usage: Option<&crate::machine::TokenUsage>) -> (u64, u64) {
    usage.map_or((0, 0), |u| {
        let read = u
            .cached_input_tokens
            .unwrap_or(0)
            .saturating_add(u.cache_read_input_tokens.unwrap_or(0));
        (read, u.cache_creation_input_tokens.unwrap_or(0))
    })
}

/// `refused` for a reply the model declined (as the machine takes it:
/// [`refusal_of`](crate::machine::refusal_of)), `truncated` for one the output-token limit
/// cut; `None` for any other. Call it to label a `ModelReplied` step.
pub fn reply_end(reply: &crate::machine::ModelReply) -> Option<&'static str> {
    if crate::machine::refusal_of(reply).is_some() {
        Some("refused")
    } else if reply.finish_reason.normalized == Some(crate::machine::Finish::Length) {
        Some("truncated")
    } else {
        None
    }
}

/// The whole timeline of `run` (across fork ancestry).
pub fn timeline(store: &dyn Store, run: &RunId) -> Result<Vec<TimelineEntry>, HistoryError> {
    let rec = row(store, run)?;
    entries(run, &transitions(store, run, 1, rec.seq)?)
}

/// Steps read before a [`timeline_tail`] for what its entries refer back to.
pub const TAIL_LEAD_IN: u64 = 64;

/// The last `count` entries of [`timeline`] (`runtape log RUN --tail K`), reading only the
/// rows they need: those `count` rows and the [`TAIL_LEAD_IN`] steps before them, in one
/// read, so it costs the same on a run of any length. The lead-in gives the first entries
/// the state they leave and the agent last active; an entry answering a call made more
/// than the lead-in before the tail (a person's answer after a long stretch of parallel
/// calls) names the agent last active instead of the call's.
pub fn timeline_tail(
    store: &dyn Store,
    run: &RunId,
    count: u64,
) -> Result<Vec<TimelineEntry>, HistoryError> {
    let rec = row(store, run)?;
    let first = rec
        .seq
        .saturating_sub(count.saturating_add(TAIL_LEAD_IN))
        .max(1);
    let mut all = entries(run, &transitions(store, run, first, rec.seq)?)?;
    let keep = all
        .len()
        .saturating_sub(usize::try_from(count).unwrap_or(usize::MAX));
    Ok(all.split_off(keep))
}

/// The timeline entries of `rows`, consecutive steps of `run`.
fn entries(run: &RunId, rows: &[TransitionRecord]) -> Result<Vec<TimelineEntry>, HistoryError> {
    let mut out = Vec::with_capacity(rows.len());
    let mut prev = StateKind::Created;
    let mut active: Option<AgentId> = None;
    // When each step was committed, to time the effects it issued.
    let mut issued_at: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for step in pairs(run, rows) {
        let step = step?;
        let (t, event, effects) = (step.row, &step.event, &step.effects);
        if !effects.is_empty() {
            issued_at.insert(t.seq, t.at.ms());
        }
        let took_ms = step
            .answers
            .as_ref()
            .and_then(|a| issued_at.get(&a.effect.id().seq))
            .map(|&from| t.at.ms().saturating_sub(from));
        let to = t.state_kind;
        let from = t.edge.from().unwrap_or(prev);
        // The agent whose effect this transition emitted, else the one whose effect it answers.
        let agent = effects
            .first()
            .or(step.answers.as_ref().map(|a| &a.effect))
            .and_then(|e| agent_of(e).cloned());
        let (mut tokens, mut cost_nanos) = (0, None);
        let (mut cache_read_tokens, mut cache_write_tokens, mut end) = (0, 0, None);
        let summary = match &event.body {
            EventBody::Start { goal } => format!("goal: {}", clip(goal, 60)),
            EventBody::SessionStart { goal, seed } => {
                let messages: usize = seed.agents.values().map(|c| c.messages.len()).sum();
                let summaries = match effects.first() {
                    Some(Effect::CallModel { .. }) => "; a summary is written first",
                    _ => "",
                };
                format!(
                    "goal: {}; goes on from run {} ({messages} messages carried){summaries}",
                    clip(goal, 40),
                    seed.previous
                )
            }
            EventBody::Retrieved { retrieval, .. } => match retrieval {
                crate::machine::Retrieval::Passages { passages } => {
                    format!("retrieved {} passage(s)", passages.len())
                }
                crate::machine::Retrieval::Failed { error } => {
                    format!("retriever failed: {}", clip(error, 60))
                }
            },
            EventBody::Proceed => match effects.first() {
                Some(Effect::Retrieve { turn, .. }) => format!("retrieve (turn {turn})"),
                Some(Effect::CallModel {
                    request, attempt, ..
                }) => {
                    // A compaction this step made to fit the context window.
                    let fresh = request.compacted.iter().filter(|c| c.seq == t.seq).count();
                    let compacted = match fresh {
                        0 => String::new(),
                        n => format!("; {n} tool result(s) compacted to fit the context window"),
                    };
                    match &request.summarize {
                        Some(of) => format!(
                            "call {}/{} to summarise messages {} to {} of {}'s conversation (attempt {attempt})",
                            request.provider,
                            request.model,
                            of.from,
                            of.upto.saturating_sub(1),
                            of.agent
                        ),
                        None => format!(
                            "call {}/{} ({} messages, attempt {attempt}){compacted}",
                            request.provider, request.model, request.conversation.len
                        ),
                    }
                }
                Some(Effect::PublishMemory { name, writes, .. }) => format!(
                    "publish {} staged write(s) to global memory {name}",
                    writes.len()
                ),
                _ => edge_in_words(t.edge, active.as_ref()),
            },
            EventBody::ModelReplied { reply, .. } => {
                if let Some(u) = reply.usage {
                    tokens = u.input_tokens + u.output_tokens;
                }
                cost_nanos = reply.cost_nanos;
                (cache_read_tokens, cache_write_tokens) = cache_tokens(reply.usage.as_ref());
                end = reply_end(reply);
                if let Some(words) = crate::machine::refusal_of(reply) {
                    format!("refused: {}", clip(&words, 60))
                } else if matches!(
                    t.edge,
                    EdgeId::SummarizingRepliedCall | EdgeId::SummarizingRepliedContextExhausted
                ) {
                    // A context summary (on_overflow = summarize), written by another agent.
                    format!(
                        "context summary: {}",
                        clip(reply.text.as_deref().unwrap_or(""), 60)
                    )
                } else if reply.tool_calls.is_empty() {
                    let cut = if end.is_some() { " [truncated]" } else { "" };
                    format!(
                        "answer{cut}: {}",
                        clip(reply.text.as_deref().unwrap_or(""), 60)
                    )
                } else {
                    let names: Vec<&str> =
                        reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
                    format!("tool calls: {}", names.join(", "))
                }
            }
            EventBody::ModelFailed { failure, .. } => {
                format!("model failed: {}", clip(&failure.message, 60))
            }
            EventBody::TimerFired { due, .. } => {
                format!("timer due {} fired", crate::text::utc(due.ms()))
            }
            EventBody::ToolReturned { outcome, .. } => {
                let tool = match step.answers.as_ref().map(|a| &a.effect) {
                    Some(Effect::CallTool { tool, .. }) => format!(" of {tool}"),
                    _ => String::new(),
                };
                match outcome {
                    crate::machine::ToolOutcome::Ok { .. } => format!("tool result{tool}"),
                    crate::machine::ToolOutcome::Error { message } => {
                        format!("tool error{tool}: {}", clip(message, 60))
                    }
                }
            }
            EventBody::InputProvided { input, .. } => {
                format!("person: {}", clip(&format!("{input:?}"), 60))
            }
            EventBody::EffectInDoubt { effect } => {
                format!("in doubt: effect {}/{}", effect.seq, effect.index)
            }
            EventBody::Reconciled { answer, .. } => match answer {
                crate::machine::Reconciliation::Performed { .. } => {
                    "reconciled: performed".to_owned()
                }
                crate::machine::Reconciliation::NotPerformed => {
                    "reconciled: not performed".to_owned()
                }
                crate::machine::Reconciliation::Unknown { reason } => {
                    format!("reconciled: unknown ({})", clip(reason, 50))
                }
            },
            EventBody::BudgetRaised { key, limit, .. } => format!("raised {key} to {limit}"),
            EventBody::CancelRequested { reason } => format!(
                "cancel{}",
                reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            EventBody::Edited { edits } => {
                let said: Vec<String> = edits.iter().map(super::edit_in_words).collect();
                format!("fork edit: {}", clip(&said.join("; "), 80))
            }
            EventBody::ChildFinished { effect, report, .. } => {
                let child = effect.child_run_id();
                match &report.outcome {
                    crate::machine::ChildOutcome::Completed { answer } => format!(
                        "child {child} ended: answer: {}",
                        clip(answer.as_deref().unwrap_or(""), 40)
                    ),
                    crate::machine::ChildOutcome::BudgetExhausted { budget } => {
                        format!("child {child} ended: out of its {budget} budget")
                    }
                    crate::machine::ChildOutcome::Failed { error } => {
                        format!("child {child} ended: failed ({})", error.class)
                    }
                    crate::machine::ChildOutcome::Cancelled { .. } => {
                        format!("child {child} ended: cancelled")
                    }
                }
            }
            EventBody::ConversationSupplied { agent, messages } => format!(
                "{agent}'s conversation ({} messages) handed over",
                messages.len()
            ),
            EventBody::ToolsListed {
                server,
                catalog,
                tools,
                added,
            } => format!(
                "MCP server {server} lists {} tools (catalog {}){}",
                tools.len(),
                &catalog.to_hex()[..12],
                if added.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = added.iter().map(|t| t.name.as_str()).collect();
                    format!(", added since the run started: {}", names.join(", "))
                }
            ),
            EventBody::MemoryLoaded {
                name,
                entries,
                replayed,
                from_ancestor,
            } => format!(
                "global memory {name} loaded: {} keys{}{}",
                entries.values().filter(|v| v.value.is_some()).count(),
                match from_ancestor {
                    Some(at) =>
                        format!(" (as of the fork point: run {}@{}'s view)", at.run, at.seq),
                    None => String::new(),
                },
                if *replayed {
                    " (from the cassette)"
                } else {
                    ""
                }
            ),
            EventBody::MemoryPublished {
                outcome,
                replayed: true,
                ..
            } => format!(
                "global memory {} (from the cassette; nothing written here)",
                match outcome {
                    crate::machine::PublishOutcome::Published { .. } => "published",
                    crate::machine::PublishOutcome::Conflict { .. } => "refused",
                    crate::machine::PublishOutcome::OverCap { .. } => "refused over its cap",
                }
            ),
            EventBody::MemoryPublished { outcome, .. } => match outcome {
                crate::machine::PublishOutcome::Published { versions } => {
                    let keys: Vec<&str> = versions.keys().map(String::as_str).collect();
                    format!("global memory published: {}", clip(&keys.join(", "), 60))
                }
                crate::machine::PublishOutcome::Conflict { keys } => {
                    let keys: Vec<&str> = keys.keys().map(String::as_str).collect();
                    format!(
                        "global memory refused (changed by another run): {}",
                        clip(&keys.join(", "), 50)
                    )
                }
                crate::machine::PublishOutcome::OverCap {
                    cap,
                    holds,
                    would_hold,
                } => format!(
                    "global memory refused (over its cap: it holds {holds} bytes, would hold {would_hold}, cap {cap})"
                ),
            },
        };
        let started: Vec<String> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunChild { id, delegate, .. } => {
                    Some(format!("{} ({delegate})", id.child_run_id()))
                }
                _ => None,
            })
            .collect();
        let summary = if started.is_empty() {
            summary
        } else {
            format!("{summary}; starts child {}", started.join(", "))
        };
        let answered = step.answers.as_ref().map(|a| &a.effect);
        let summary = match super::saga::saga_words(t.edge, answered, effects) {
            Some(words) if !words.is_empty() => format!("{summary}; {words}"),
            _ => summary,
        };
        if agent.is_some() {
            active = agent.clone();
        }
        out.push(TimelineEntry {
            seq: t.seq,
            at: t.at,
            at_ms: t.at.ms(),
            event: event.kind(),
            from,
            to,
            edge: t.edge,
            agent: agent.or_else(|| active.clone()),
            tokens,
            cost_nanos,
            cache_read_tokens,
            cache_write_tokens,
            reply_end: end,
            took_ms,
            summary,
        });
        prev = to;
    }
    Ok(out)
}

/// What a step that emitted nothing did, for the edges whose names alone would mislead: an
/// agent's finishing (the `handoff` state) ends a single-agent run too, where nothing was
/// handed over. Any other edge reads as its meaning in the transition table.
fn edge_in_words(edge: EdgeId, agent: Option<&AgentId>) -> String {
    let agent = agent.map_or_else(|| "the agent".to_owned(), |a| a.to_string());
    match edge {
        EdgeId::HandoffProceedComplete => format!("run completed with {agent}'s answer"),
        EdgeId::HandoffProceedNext => format!("{agent} finished; the next agent takes over"),
        EdgeId::HandoffProceedUnfinished => {
            format!("failed: {agent} ran out of budget without answering")
        }
        EdgeId::HandoffProceedNoRoute => {
            format!("failed: no route leads on from {agent} (no_route)")
        }
        EdgeId::HandoffProceedCycle => {
            "failed: the next agent has used max_agent_visits (handoff_cycle)".to_owned()
        }
        other => other.row().meaning.to_owned(),
    }
}

fn agent_of(effect: &Effect) -> Option<&AgentId> {
    match effect {
        Effect::CallModel { agent, .. }
        | Effect::CallTool { agent, .. }
        | Effect::Reconcile { agent, .. }
        | Effect::RequestInput { agent, .. }
        | Effect::Retrieve { agent, .. }
        | Effect::RunChild { agent, .. }
        | Effect::StartTimer { agent, .. } => Some(agent),
        Effect::PublishMemory { .. } => None,
    }
}

fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', " ");
    match one_line.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}
