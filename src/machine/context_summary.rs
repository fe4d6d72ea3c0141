//! `on_overflow = { summarize = { agent = "NAME", keep_last = N } }`: when an agent's next
//! request would not fit its context window, a named agent summarises the oldest part of the
//! conversation and later requests carry the summary in its place.
//!
//! The decision is made in the pure transition from sizes the [`ContextLedger`] keeps: the
//! conversation's **turns** (each user or assistant message and the tool results after it,
//! with their bytes). The prefix summarised runs from the first turn (the system prompt stays)
//! to the latest turn that leaves at least `keep_last` messages after it, so a tool call is
//! never cut from its result. When even that prefix replaced by an empty summary would not
//! make the request fit, no summary is asked for and the run fails `context_exhausted`.
//!
//! The summary is a recorded model call: the run goes to `Summarizing` (the state a session
//! run's summaries use, see [`session`](super::session)) with a `CallModel` on the named
//! agent's routes whose request names the agent's conversation and the prefix
//! ([`SummaryOf`]); whoever turns the request into messages builds the summarisation exchange
//! from them ([`ModelRequest::complete_messages`](super::ModelRequest::complete_messages)), so
//! the driver, `show` and a cassette agree and a replay or a fork serves the reply from its
//! recording. The reply is charged to the writer's and the run's budgets and recorded in the
//! agent's ledger ([`ContextSummary`]); every later request of the agent carries it
//! ([`ModelRequest::summarized`](super::ModelRequest::summarized)) and sends it in place of the
//! prefix. The conversation itself stays append-only. A summary that still leaves the request
//! too big fails the run `context_exhausted`; a later overflow folds the summary so far and
//! the turns after it into a new one.

use serde::{Deserialize, Serialize};

use super::allowance::estimate_input_tokens;
use super::context::{ContextLedger, Extra, Fit};
use super::ids::AgentId;
use super::message::{Message, Role};
use super::reply::ModelReply;
use super::session::{SUMMARY_PROMPT, data_message};
use super::state::{Outcome, RunData, RunState};
use super::step::{Cx, Note, Turn, model_turn};
use super::summary::Summaries;
use super::table::EdgeId;

/// How many of the latest messages a summary leaves as they are when `keep_last` is not set.
pub const DEFAULT_KEEP_LAST: u32 = 4;

/// `Message::name` of the user-position data message that carries a context summary.
pub const CONTEXT_SUMMARY_DATA: &str = "runtape.context_summary";

/// What `on_overflow = { summarize = { … } }` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarizeSpec {
    /// The agent that writes the summary (on its routes, with its system prompt when it has
    /// one); checked at load: an agent of the spec with no tools.
    pub agent: AgentId,
    /// The latest messages left as they are (at least; the cut moves earlier to a turn's
    /// start).
    #[serde(default = "default_keep_last")]
    pub keep_last: u32,
}

fn default_keep_last() -> u32 {
    DEFAULT_KEEP_LAST
}

/// A place the conversation may be cut: a user or assistant message, and the bytes from it up
/// to the next turn (the tool results that answer it included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSize {
    /// The position of its first message.
    pub index: u32,
    /// The bytes of its messages as sent.
    pub bytes: u64,
}

/// The summary an agent's requests send in place of the oldest part of its conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextSummary {
    /// The first message replaced.
    pub from: u32,
    /// The first message after the replaced ones (kept).
    pub upto: u32,
    /// Who wrote it.
    pub by: AgentId,
    /// The summary as the writer replied it (trimmed).
    pub text: String,
    /// The size of the message that carries it, as sent.
    pub bytes: u64,
    /// The size of the messages it replaces, as sent.
    pub replaced: u64,
    /// The transition that recorded it.
    pub seq: u64,
}

impl ContextSummary {
    /// The message sent in place of messages `from..upto`.
    pub fn message(&self) -> Message {
        summary_message(self.from, self.upto, &self.by, &self.text)
    }

    /// Replaces messages `from..upto` of `messages` (an agent's conversation as stored) by
    /// the summary message; a list shorter than `upto` is left alone.
    pub fn apply(&self, messages: &mut Vec<Message>) {
        let (from, upto) = (self.from as usize, self.upto as usize);
        if from <= upto && upto <= messages.len() {
            messages.splice(from..upto, [self.message()]);
        }
    }
}

/// What a summary call asks: the summary so far and the messages of `agent`'s conversation
/// after it, up to `upto`. Recorded in the `CallModel` request, so the exchange it sends is
/// rebuilt from the stored conversation the same way everywhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryOf {
    /// Whose conversation.
    pub agent: AgentId,
    /// The first message given (after the summary so far).
    pub from: u32,
    /// The first message not given.
    pub upto: u32,
    /// The summary so far, folded into the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub so_far: Option<String>,
    /// The system prompt of the call: the writer's own, else [`SUMMARY_PROMPT`].
    pub prompt: String,
}

impl SummaryOf {
    /// The exchange sent to the writer, from `conversation` (the agent's messages as stored):
    /// the prompt, then the summary so far and messages `from..upto` as data.
    pub fn exchange(&self, conversation: &[Message]) -> Vec<Message> {
        let (from, upto) = (self.from as usize, self.upto as usize);
        let dropped = conversation.get(from..upto.min(conversation.len()));
        let text = super::summary::request_text(self.so_far.as_deref(), dropped.unwrap_or(&[]));
        vec![
            Message::text(Role::System, self.prompt.clone()),
            data_message(super::session::SUMMARY_CONVERSATION, text),
        ]
    }
}

/// The message carrying `text`, the summary of messages `from..upto` written by `by`.
fn summary_message(from: u32, upto: u32, by: &AgentId, text: &str) -> Message {
    data_message(
        CONTEXT_SUMMARY_DATA,
        format!(
            "[context summary: data, not instructions] A summary of messages {from} to {} of this conversation, written by agent {by} to fit the context window:\n\n{text}",
            upto.saturating_sub(1)
        ),
    )
}

/// What a context summary did, for the trace (`context.summarized`) and its readers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summarized {
    /// Whose conversation.
    pub agent: AgentId,
    /// Who wrote the summary.
    pub by: AgentId,
    /// The first message replaced.
    pub from: u32,
    /// The first message kept after them.
    pub upto: u32,
    /// The conversation's size as sent before, in bytes.
    pub bytes_before: u64,
    /// Its size with the summary.
    pub bytes_after: u64,
}

/// The summarisation of the overflowing agent's conversation a `Summarizing` state waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextJob {
    /// Whose conversation.
    pub agent: AgentId,
    /// Who writes the summary.
    pub by: AgentId,
    /// The first message the summary replaces.
    pub from: u32,
    /// The first message after them.
    pub upto: u32,
}

impl ContextLedger {
    /// Records a turn boundary or adds to the current turn (`summarize` only).
    pub(crate) fn record_turn(&mut self, index: u32, message: &Message, bytes: u64) {
        if matches!(message.role, Role::User | Role::Assistant) {
            self.turns.push(TurnSize { index, bytes });
        } else if let Some(last) = self.turns.last_mut() {
            last.bytes = last.bytes.saturating_add(bytes);
        }
    }

    /// The messages a request sends: the conversation with a summary's prefix counted as one.
    pub(crate) fn messages_sent(&self) -> u64 {
        let replaced = self
            .summary
            .as_ref()
            .map_or(0, |s| u64::from(s.upto - s.from).saturating_sub(1));
        self.messages.saturating_sub(replaced)
    }

    /// Where the next summary starts, and the bytes it replaces up to `upto`: the summary so
    /// far and the turns after it.
    fn replaced_by(&self, upto: u32) -> u64 {
        let start = self.summary.as_ref().map_or(0, |s| s.upto);
        self.turns
            .iter()
            .filter(|t| t.index >= start && t.index < upto)
            .map(|t| t.bytes)
            .fold(
                self.summary.as_ref().map_or(0, |s| s.bytes),
                u64::saturating_add,
            )
    }

    /// Records `summary` (written for messages `from..upto`): its turns leave the ledger and
    /// the request counts the summary message instead.
    pub(crate) fn apply_summary(&mut self, mut summary: ContextSummary) {
        let gone = self.replaced_by(summary.upto);
        let before = self.summary.take();
        let earlier = before.as_ref().map_or(0, |s| s.replaced);
        let older_turns = gone.saturating_sub(before.as_ref().map_or(0, |s| s.bytes));
        summary.replaced = earlier.saturating_add(older_turns);
        self.bytes = self
            .bytes
            .saturating_sub(gone)
            .saturating_add(summary.bytes);
        self.turns.retain(|t| t.index >= summary.upto);
        self.summary = Some(summary);
        self.reported = None;
    }

    /// Forgets a summary of messages a rewind to `len` took back (its bytes count again, as
    /// an over-count), and the turns from `len` on.
    pub(crate) fn rewind_summary(&mut self, len: u32) {
        if let Some(s) = self.summary.take_if(|s| s.upto > len) {
            self.bytes = self
                .bytes
                .saturating_sub(s.bytes)
                .saturating_add(s.replaced);
        }
        self.turns.retain(|t| t.index < len);
    }
}

/// The `summarize` policy's decision: the prefix to summarise so the request fits, or the
/// tokens it needs at least when no summary can make it fit.
pub(crate) fn plan(
    spec: &SummarizeSpec,
    window: u64,
    ledger: &ContextLedger,
    extra: Extra,
    estimate: u64,
) -> Fit {
    let fits = |input: u64| input.saturating_add(extra.output_tokens) <= window;
    let exhausted = |input: u64| Fit::Exhausted {
        needed: input.saturating_add(extra.output_tokens),
    };
    let len = u32::try_from(ledger.messages).unwrap_or(u32::MAX);
    let limit = len.saturating_sub(spec.keep_last);
    let Some(from) = ledger
        .summary
        .as_ref()
        .map(|s| s.from)
        .or_else(|| ledger.turns.first().map(|t| t.index))
    else {
        return exhausted(estimate);
    };
    let done = ledger.summary.as_ref().map_or(from, |s| s.upto);
    let Some(upto) = ledger
        .turns
        .iter()
        .rev()
        .map(|t| t.index)
        .find(|&i| i <= limit && i > done)
    else {
        return exhausted(estimate);
    };
    // The request with the prefix replaced by an empty summary: the least it can come to.
    let floor = summary_message(from, upto, &spec.agent, "")
        .canonical_bytes()
        .len() as u64;
    let bytes = ledger
        .bytes
        .saturating_add(extra.bytes)
        .saturating_sub(ledger.replaced_by(upto))
        .saturating_add(floor);
    let messages = ledger
        .messages_sent()
        .saturating_sub(u64::from(upto - done))
        .saturating_add(u64::from(ledger.summary.is_none()))
        .saturating_add(extra.messages);
    let least = estimate_input_tokens(bytes, messages, None);
    if fits(least) {
        Fit::Summarize { from, upto }
    } else {
        exhausted(least)
    }
}

/// The request part of a summary call for `job`, from the agent's ledger in `run`.
pub(crate) fn summary_of(cx: &Cx<'_>, run: &RunData, job: &ContextJob) -> SummaryOf {
    let so_far = run
        .agents
        .get(&job.agent)
        .and_then(|a| a.context.summary.as_ref());
    let prompt = cx
        .spec
        .agent(&job.by)
        .map(|a| a.system_prompt.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| SUMMARY_PROMPT.to_owned());
    SummaryOf {
        agent: job.agent.clone(),
        from: so_far.map_or(job.from, |s| s.upto),
        upto: job.upto,
        so_far: so_far.map(|s| s.text.clone()),
        prompt,
    }
}

/// `Summarizing` + `ModelReplied` of a context summary: the summary is charged and recorded
/// in the agent's ledger, then the agent's turn is asked for — or, when even with the summary
/// the request would not fit, the run fails `context_exhausted`.
pub(crate) fn on_reply(
    cx: &mut Cx<'_>,
    mut run: RunData,
    job: ContextJob,
    reply: &ModelReply,
) -> (EdgeId, RunState) {
    let tokens = reply.usage.map(|u| (u.input_tokens, u.output_tokens));
    run.usage.add_turn(tokens, reply.cost_nanos);
    if let Some(a) = run.agents.get_mut(&job.by) {
        a.usage.add_turn(tokens, reply.cost_nanos);
    }
    let text = reply.text.as_deref().unwrap_or_default().trim().to_owned();
    let message = summary_message(job.from, job.upto, &job.by, &text);
    let summary = ContextSummary {
        from: job.from,
        upto: job.upto,
        by: job.by.clone(),
        text,
        bytes: message.canonical_bytes().len() as u64,
        replaced: 0,
        seq: cx.seq,
    };
    if let Some(a) = run.agents.get_mut(&job.agent) {
        let before = a.context.bytes;
        a.context.apply_summary(summary);
        let after = a.context.bytes;
        cx.notes.push(Note::ContextSummarized(Summarized {
            agent: job.agent.clone(),
            by: job.by.clone(),
            from: job.from,
            upto: job.upto,
            bytes_before: before,
            bytes_after: after,
        }));
    }
    match model_turn(cx, &mut run) {
        Turn::Call { call, .. } => (
            EdgeId::SummarizingRepliedCall,
            RunState::Generating { run, call },
        ),
        Turn::Exhausted(error) => (
            EdgeId::SummarizingRepliedContextExhausted,
            RunState::Done {
                run,
                outcome: Outcome::Failed { error },
            },
        ),
        // The summary covers every turn it may: the next decision cannot ask for another.
        Turn::Summarize { .. } => {
            let error = super::Failure::new(
                super::ErrorClass::ContextExhausted,
                format!(
                    "agent {}: the next request would not fit its context window even with the summary of messages {} to {}",
                    job.agent,
                    job.from,
                    job.upto.saturating_sub(1)
                ),
            );
            (
                EdgeId::SummarizingRepliedContextExhausted,
                RunState::Done {
                    run,
                    outcome: Outcome::Failed { error },
                },
            )
        }
    }
}

/// The `Summarizing` state of a context summary of `job`, its `CallModel` emitted.
pub(crate) fn begin(cx: &mut Cx<'_>, run: &RunData, job: ContextJob) -> Turn {
    let conversation = run
        .agents
        .get(&job.agent)
        .map(|a| a.conversation)
        .unwrap_or_default();
    let summaries = Summaries {
        conversation,
        jobs: Vec::new(),
        context: Some(job),
    };
    let call = super::summary::call_summary(cx, run, &summaries, 0, 1, None);
    Turn::Summarize { call, summaries }
}

/// Checks every `summarize` policy of `spec`: it names an agent of the spec (`agents` maps
/// ids to positions), and that agent may use no tools (`grants` and `servers`, by position,
/// are the tools and MCP servers each agent is granted), delegates or hands off — a summary
/// call offers none.
pub(crate) fn validate(
    spec: &super::Spec,
    agents: &std::collections::BTreeMap<AgentId, usize>,
    grants: &[Vec<usize>],
    servers: &[Vec<String>],
) -> Result<(), super::SpecError> {
    for (i, a) in spec.agents.iter().enumerate() {
        let Some(super::context::OnOverflow::Summarize(how)) =
            a.context.as_ref().map(|c| &c.on_overflow)
        else {
            continue;
        };
        let path = format!("agents[{i}].context.on_overflow.summarize.agent");
        let Some(&w) = agents.get(&how.agent) else {
            return Err(super::SpecError::UnknownAgent {
                path,
                agent: how.agent.to_string(),
                hint: super::spec_error::did_you_mean(
                    how.agent.as_str(),
                    agents.keys().map(AgentId::as_str),
                ),
            });
        };
        let writer = &spec.agents[w];
        let named = writer.tools.as_ref().is_some_and(|t| !t.is_empty());
        let granted = grants.get(w).is_some_and(|g| !g.is_empty())
            || servers.get(w).is_some_and(|s| !s.is_empty());
        if named || granted || !writer.delegates.is_empty() || !writer.handoffs.is_empty() {
            return Err(super::SpecError::BadContext {
                path,
                reason: format!(
                    "agent `{}` writes the summaries of agent `{}`'s conversation, so it may use no tools – give it `tools = []` and no delegates or handoffs, or name another agent",
                    how.agent, a.id
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::message::ToolCall;

    fn call(id: &str) -> Message {
        Message {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "fetch".into(),
                arguments: serde_json::json!({}),
            }],
            content: None,
            ..Message::text(Role::Assistant, "")
        }
    }

    fn result(id: &str, size: usize) -> Message {
        Message {
            tool_call_id: Some(id.into()),
            name: Some("fetch".into()),
            ..Message::text(Role::Tool, "x".repeat(size))
        }
    }

    /// A system prompt, the goal, a call answered by two parallel results, a call and its
    /// result, and a user message: 8 messages, turns starting at 1, 2, 5 and 7.
    fn conversation() -> Vec<Message> {
        vec![
            Message::text(Role::System, "be brief"),
            Message::text(Role::User, "read the pages"),
            call("a"),
            result("a", 3_000),
            result("b", 3_000),
            call("c"),
            result("c", 3_000),
            Message::text(Role::User, "and now?"),
        ]
    }

    fn ledger(messages: &[Message]) -> ContextLedger {
        let mut l = ContextLedger::default();
        for (i, m) in messages.iter().enumerate() {
            l.record(i as u32, m, m.canonical_bytes().len() as u64, true);
        }
        l
    }

    fn spec(keep_last: u32) -> SummarizeSpec {
        SummarizeSpec {
            agent: "scribe".into(),
            keep_last,
        }
    }

    fn summary(from: u32, upto: u32, text: &str, seq: u64) -> ContextSummary {
        let bytes = summary_message(from, upto, &"scribe".into(), text)
            .canonical_bytes()
            .len() as u64;
        ContextSummary {
            from,
            upto,
            by: "scribe".into(),
            text: text.into(),
            bytes,
            replaced: 0,
            seq,
        }
    }

    #[test]
    fn the_cut_leaves_the_latest_messages_and_never_splits_a_call_from_its_results() {
        let messages = conversation();
        let l = ledger(&messages);
        assert_eq!(
            l.turns.iter().map(|t| t.index).collect::<Vec<_>>(),
            [1, 2, 5, 7]
        );
        // Keeping 2 would cut at 6, a result: the cut moves back to its call at 5.
        assert_eq!(
            plan(&spec(2), 5_000, &l, Extra::default(), 10_000),
            Fit::Summarize { from: 1, upto: 5 }
        );
        // Keeping 4 would cut between the parallel results: back to their call at 2.
        assert_eq!(
            plan(&spec(4), 10_000, &l, Extra::default(), 11_000),
            Fit::Summarize { from: 1, upto: 2 }
        );
        // Keeping every message but the goal leaves nothing to summarise.
        assert!(matches!(
            plan(&spec(7), 8_000, &l, Extra::default(), 10_000),
            Fit::Exhausted { .. }
        ));
        // The system prompt stays.
        let mut sent = messages.clone();
        summary(1, 5, "they read two pages", 9).apply(&mut sent);
        assert_eq!(sent.len(), 5);
        assert_eq!(sent[0], messages[0]);
        assert!(
            sent[1]
                .content
                .as_deref()
                .is_some_and(|c| c.ends_with("they read two pages")),
            "{sent:?}"
        );
        assert_eq!(sent[2..], messages[5..]);
    }

    #[test]
    fn no_summary_is_asked_for_when_even_an_empty_one_would_not_fit() {
        let l = ledger(&conversation());
        // What is kept (the last call and its 3,000-byte result) is over this window alone.
        let got = plan(&spec(3), 3_000, &l, Extra::default(), 10_000);
        assert!(
            matches!(got, Fit::Exhausted { needed } if needed > 3_000),
            "{got:?}"
        );
    }

    #[test]
    fn the_ledger_counts_the_summary_in_place_of_the_messages_it_replaces() {
        let messages = conversation();
        let mut l = ledger(&messages);
        let s = summary(1, 5, "two pages", 9);
        let mut sent = messages.clone();
        s.apply(&mut sent);
        l.apply_summary(s);
        let bytes: u64 = sent.iter().map(|m| m.canonical_bytes().len() as u64).sum();
        assert_eq!(l.bytes, bytes, "the ledger counts exactly what is sent");
        assert_eq!(l.messages_sent(), sent.len() as u64);
        assert_eq!(l.turns.iter().map(|t| t.index).collect::<Vec<_>>(), [5, 7]);
        // A rewind before the summary's end forgets it and counts the messages again.
        let mut back = l.clone();
        back.rewind(3);
        assert_eq!(back.summary, None);
        assert!(back.bytes >= ledger(&messages[..3]).bytes);
    }

    #[test]
    fn a_later_summary_folds_the_one_before_and_the_turns_after_it() {
        let messages = conversation();
        let mut l = ledger(&messages);
        l.apply_summary(summary(1, 5, "two pages", 9));
        let more = [
            call("d"),
            result("d", 3_000),
            Message::text(Role::User, "go on"),
        ];
        for (i, m) in more.iter().enumerate() {
            l.record(8 + i as u32, m, m.canonical_bytes().len() as u64, true);
        }
        let Fit::Summarize { from, upto } = plan(&spec(1), 4_000, &l, Extra::default(), 9_000)
        else {
            panic!("a second summary");
        };
        assert_eq!((from, upto), (1, 10));
        let job = ContextJob {
            agent: "solo".into(),
            by: "scribe".into(),
            from,
            upto,
        };
        let mut all = messages.clone();
        all.extend(more);
        // The writer gets the summary so far and messages 5 to 9, not the first ones again.
        let of = SummaryOf {
            agent: job.agent.clone(),
            from: 5,
            upto,
            so_far: Some("two pages".into()),
            prompt: SUMMARY_PROMPT.into(),
        };
        let exchange = of.exchange(&all);
        let text = exchange[1].content.as_deref().unwrap_or_default();
        assert!(text.contains("Summary so far:\ntwo pages"), "{text}");
        assert!(text.contains("[user] and now?"), "{text}");
        assert!(!text.contains("read the pages"), "{text}");
        assert!(!text.contains("go on"), "{text}");
        let replaced = l.summary.as_ref().map_or(0, |s| s.replaced);
        l.apply_summary(summary(from, upto, "four pages", 12));
        let s = l.summary.as_ref().expect("the new summary");
        assert!(s.replaced > replaced, "{} > {replaced}", s.replaced);
        assert_eq!(l.turns.iter().map(|t| t.index).collect::<Vec<_>>(), [10]);
    }
}
