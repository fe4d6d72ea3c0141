//! Long conversations: an agent's context window and what happens when the next request would
//! not fit it.
//!
//! An agent with a [`ContextSpec`] (a window in tokens and an [`OnOverflow`] policy) has its
//! next request measured before every new turn, by the same honest bound the budget cap uses
//! ([`estimate_input_tokens`]): one token per byte of every message as sent plus
//! [`FRAMING_TOKENS_PER_MESSAGE`](super::allowance::FRAMING_TOKENS_PER_MESSAGE) per message,
//! plus the tool definitions and injected memory the request carries, plus the output tokens
//! the agent asks for. One token per byte holds for every byte-level tokenizer, so no
//! tokenizer is needed; once a reply reports its input tokens, the bytes of that request
//! count at the reported figure and only the bytes added since at one token per byte, so a
//! growing conversation is not measured at four times its size.
//!
//! When the request would not fit, the policy decides — in this pure transition, from sizes
//! the state keeps ([`ContextLedger`]), never from message bodies:
//!
//! - `fail` (the default): the run ends failed with class `context_exhausted`.
//! - `drop_oldest_tool_results`: the oldest tool results are replaced by a one-line
//!   placeholder, oldest first, until the request fits.
//! - `shorten_tool_results`: the oldest tool results are cut to their first
//!   [`SHORTENED_KEEP_BYTES`] bytes and a line saying so, oldest first, until it fits.
//!
//! When even every tool result dropped or shortened would not make it fit, nothing is
//! compacted and the run fails `context_exhausted`. A compaction is recorded in the state
//! ([`ContextLedger::compacted`]) and in every later `CallModel` request
//! ([`ModelRequest::compacted`](super::ModelRequest::compacted)) within the same committed
//! transition, so it is durable before the call is made; the conversation itself stays
//! append-only, and whoever turns a request into messages applies the compaction with
//! [`compact_messages`]. Re-folding the events reproduces it, so `verify`, forks and replays
//! see the same request.

use serde::{Deserialize, Serialize};

use super::allowance::estimate_input_tokens;
use super::context_summary::{ContextJob, ContextSummary, SummarizeSpec, TurnSize};
use super::effect::ModelRequest;
use super::error::{ErrorClass, Failure};
use super::message::{Appended, Message, Role};
use super::spec::AgentSpec;
use super::state::{AgentRun, RunData};
use super::step::{Cx, Note};

/// How many bytes of a tool result `shorten_tool_results` keeps (cut back to a character
/// boundary).
pub const SHORTENED_KEEP_BYTES: usize = 2048;

/// The bytes a tool the machine defines itself (delegate, transfer, memory and timer tools)
/// is counted at in a request's size: more than any of their definitions takes.
pub const MACHINE_TOOL_BYTES: u64 = 1024;

/// What an agent does when its next request would not fit its context window
/// (`[agents.context] on_overflow`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOverflow {
    /// End the run failed with class `context_exhausted`.
    #[default]
    Fail,
    /// Replace the oldest tool results by a placeholder until the request fits.
    DropOldestToolResults,
    /// Cut the oldest tool results to their first [`SHORTENED_KEEP_BYTES`] until it fits.
    ShortenToolResults,
    /// Have a named agent summarise the oldest part of the conversation (see
    /// [`context_summary`](super::context_summary)).
    Summarize(SummarizeSpec),
}

impl OnOverflow {
    /// The word in a spec file.
    pub fn as_str(&self) -> &'static str {
        match self {
            OnOverflow::Fail => "fail",
            OnOverflow::DropOldestToolResults => "drop_oldest_tool_results",
            OnOverflow::ShortenToolResults => "shorten_tool_results",
            OnOverflow::Summarize(_) => "summarize",
        }
    }

    /// True for the default (`fail`), which a stored spec leaves out.
    pub fn is_default(&self) -> bool {
        *self == OnOverflow::default()
    }
}

/// An agent's context window and overflow policy, as the stored spec holds it: the window is
/// resolved when the spec is loaded (the spec's `window`, else the built-in table's for the
/// agent's models), so a replay uses the window the run started with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// The most tokens one request (input and the output asked for) may hold.
    pub window: u64,
    /// What happens when the next request would not fit.
    #[serde(default, skip_serializing_if = "OnOverflow::is_default")]
    pub on_overflow: OnOverflow,
}

/// How a message was compacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// Replaced by a placeholder.
    Dropped,
    /// Cut to its first [`SHORTENED_KEEP_BYTES`].
    Shortened,
}

/// One tool result compacted to fit the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compacted {
    /// Its position in the agent's conversation.
    pub index: u32,
    /// What was done to it.
    pub how: Compaction,
    /// Its size as sent before (canonical bytes).
    pub before: u64,
    /// Its size as sent now.
    pub after: u64,
    /// The transition that compacted it.
    pub seq: u64,
}

/// The least a compaction must save for a tool result to be kept as compactable: smaller
/// results are not worth a placeholder, and leaving them out keeps the state from growing
/// with every message.
pub const MIN_COMPACTION_GAIN: u64 = 256;

/// A tool result that may still be compacted: its position, its size, and its size after
/// each compaction, measured when it was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compactable {
    /// Its position in the agent's conversation.
    pub index: u32,
    /// Its size as sent (canonical bytes).
    pub size: u64,
    /// Its size once dropped.
    pub dropped: u64,
    /// Its size once shortened.
    pub shortened: u64,
}

/// What the machine keeps of an agent's conversation to measure its requests, for an agent
/// with a [`ContextSpec`] (empty otherwise, and left out of the state): totals, and only the
/// tool results big enough to compact — so the state grows with what the window holds, not
/// with every message of the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextLedger {
    /// The bytes of the conversation as sent (compactions applied). After a fork edit that
    /// kept only a prefix it may count more than the prefix holds (never less).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes: u64,
    /// The messages counted in `bytes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub messages: u64,
    /// The tool results not compacted yet that a compaction would shrink by at least
    /// [`MIN_COMPACTION_GAIN`], oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactable: Vec<Compactable>,
    /// Every compaction so far, in order: what each later request applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compacted: Vec<Compacted>,
    /// The bytes the last request counted (messages, tool definitions, memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    /// `(input tokens reported, bytes counted)` of the last reply, while the conversation
    /// only grew since: the estimate's exact prefix. Cleared by a compaction or a rewind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<(u64, u64)>,
    /// For `summarize`: the turns not summarised yet, oldest first — where the conversation
    /// may be cut, and how big each is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnSize>,
    /// For `summarize`: the summary later requests send in place of the oldest messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<ContextSummary>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ContextLedger {
    /// True when nothing is kept (an agent without a context window).
    pub fn is_empty(&self) -> bool {
        *self == ContextLedger::default()
    }

    /// Records `message` of `bytes`, appended at `index` (a lower index than the ledger
    /// counts rewinds it first: a fork edit or a transfer restarted the conversation);
    /// `turns` keeps the turn sizes `summarize` cuts at.
    pub(crate) fn record(&mut self, index: u32, message: &Message, bytes: u64, turns: bool) {
        self.rewind(index);
        self.messages = u64::from(index) + 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if turns {
            self.record_turn(index, message, bytes);
        }
        if message.role == Role::Tool && !turns {
            let size = |how| compacted_message(message, how).canonical_bytes().len() as u64;
            let (dropped, shortened) = (size(Compaction::Dropped), size(Compaction::Shortened));
            if bytes >= dropped.saturating_add(MIN_COMPACTION_GAIN) {
                self.compactable.push(Compactable {
                    index,
                    size: bytes,
                    dropped,
                    shortened,
                });
            }
        }
    }

    /// Forgets every message from `len` on. The bytes of the tool results it knows of are
    /// taken off exactly; the others' are not known, so the total stays an over-count.
    pub(crate) fn rewind(&mut self, len: u32) {
        if self.messages <= u64::from(len) {
            return;
        }
        if len == 0 {
            *self = ContextLedger::default();
            return;
        }
        self.rewind_summary(len);
        let gone = self
            .compactable
            .iter()
            .filter(|c| c.index >= len)
            .map(|c| c.size)
            .chain(
                self.compacted
                    .iter()
                    .filter(|c| c.index >= len)
                    .map(|c| c.after),
            )
            .fold(0u64, u64::saturating_add);
        self.bytes = self.bytes.saturating_sub(gone);
        self.messages = u64::from(len);
        self.compactable.retain(|c| c.index < len);
        self.compacted.retain(|c| c.index < len);
        self.reported = None;
        self.sent = None;
    }

    /// Applies `done` (a [`decide`] result): the total shrinks, those results leave
    /// `compactable`, and the reported prefix no longer holds.
    pub(crate) fn apply(&mut self, done: &[Compacted]) {
        for c in done {
            self.bytes = self.bytes.saturating_sub(c.before.saturating_sub(c.after));
            self.compactable.retain(|r| r.index != c.index);
            self.compacted.push(*c);
        }
        self.reported = None;
    }
}

/// What the next request of an agent comes to, besides its conversation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Bytes of the tool definitions, output schema and injected memory it carries.
    pub bytes: u64,
    /// Messages it adds (injected memory is one).
    pub messages: u64,
    /// Output tokens it asks for (the agent's limit; 0 when it sets none).
    pub output_tokens: u64,
}

/// Whether the next request fits, and what to do when it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// It fits as it is.
    Fits,
    /// It fits once these tool results are compacted (oldest first).
    Compact(Vec<Compacted>),
    /// It may fit once messages `from..upto` are summarised (`summarize`).
    Summarize {
        /// The first message summarised.
        from: u32,
        /// The first message kept after them.
        upto: u32,
    },
    /// It does not fit, and the policy cannot make it: the tokens it would need at least.
    Exhausted {
        /// The estimate (after every compaction the policy allows).
        needed: u64,
    },
}

/// Decides whether an agent's next request fits `spec.window`, given the `ledger` of its
/// conversation and the request's `extra`; `seq` is the transition deciding (recorded in a
/// compaction). Pure: the same ledger and spec give the same answer, which is what lets
/// `verify` and replays reproduce a compaction.
pub fn decide(spec: &ContextSpec, ledger: &ContextLedger, extra: Extra, seq: u64) -> Fit {
    let messages = ledger.messages_sent().saturating_add(extra.messages);
    let bytes = ledger.bytes.saturating_add(extra.bytes);
    let fits = |input: u64| input.saturating_add(extra.output_tokens) <= spec.window;
    let estimate = estimate_input_tokens(bytes, messages, ledger.reported);
    if fits(estimate) {
        return Fit::Fits;
    }
    let how = match &spec.on_overflow {
        OnOverflow::Summarize(s) => {
            return super::context_summary::plan(s, spec.window, ledger, extra, estimate);
        }
        OnOverflow::Fail => {
            return Fit::Exhausted {
                needed: estimate.saturating_add(extra.output_tokens),
            };
        }
        OnOverflow::DropOldestToolResults => Compaction::Dropped,
        OnOverflow::ShortenToolResults => Compaction::Shortened,
    };
    // A compaction changes the prefix the reported figure was for: the plain bound only.
    let mut bytes = bytes;
    let mut done = Vec::new();
    for c in &ledger.compactable {
        if fits(estimate_input_tokens(bytes, messages, None)) {
            break;
        }
        let before = c.size;
        let after = match how {
            Compaction::Dropped => c.dropped,
            Compaction::Shortened => c.shortened,
        };
        if after >= before {
            continue;
        }
        bytes -= before - after;
        done.push(Compacted {
            index: c.index,
            how,
            before,
            after,
            seq,
        });
    }
    let plain = estimate_input_tokens(bytes, messages, None);
    if fits(plain) {
        Fit::Compact(done)
    } else {
        Fit::Exhausted {
            needed: plain.saturating_add(extra.output_tokens),
        }
    }
}

/// `message` as a request sends it once compacted `how`. Deterministic: the machine measures
/// it when the message is appended, and [`compact_messages`] builds the same bytes.
pub fn compacted_message(message: &Message, how: Compaction) -> Message {
    let text = message.content.as_deref().unwrap_or_default();
    let content = match how {
        Compaction::Dropped => format!(
            "[tool result dropped to fit the context window: {} bytes]",
            text.len()
        ),
        Compaction::Shortened => {
            let mut end = SHORTENED_KEEP_BYTES.min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!(
                "{}\n[tool result shortened to fit the context window: {end} of {} bytes kept]",
                &text[..end],
                text.len()
            )
        }
    };
    Message {
        content: Some(content),
        ..message.clone()
    }
}

/// Applies a request's compactions to its conversation's messages. Call it wherever a
/// recorded request is turned into what a provider receives (the driver, `show`, cassette
/// export), so all three agree.
pub fn compact_messages(messages: &mut [Message], compacted: &[Compacted]) {
    for c in compacted {
        if let Some(m) = messages.get_mut(c.index as usize) {
            *m = compacted_message(m, c.how);
        }
    }
}

/// The prompt tokens a reply reports: the input tokens plus, where the provider counts them
/// apart (Anthropic), the tokens read from and written to the prompt cache.
pub(crate) fn reported_prompt_tokens(usage: &super::TokenUsage) -> u64 {
    usage
        .input_tokens
        .saturating_add(usage.cache_read_input_tokens.unwrap_or(0))
        .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0))
}

/// Records a message `append` put in `agent`'s conversation, when the agent has a context
/// window (nothing is kept otherwise).
pub(crate) fn on_append(cx: &Cx<'_>, a: &mut AgentRun, rec: &Appended) {
    if let Some(c) = cx.spec.agent(&rec.agent).and_then(|s| s.context.as_ref()) {
        let turns = matches!(c.on_overflow, OnOverflow::Summarize(_));
        a.context
            .record(rec.index, &rec.message, rec.bytes.len() as u64, turns);
    }
}

/// Keeps what the active agent's reply reported of its request's input, as the exact prefix
/// of the next estimate.
pub(crate) fn on_reply(a: &mut AgentRun, usage: Option<&super::TokenUsage>) {
    if let (Some(sent), Some(usage)) = (a.context.sent, usage) {
        a.context.reported = Some((reported_prompt_tokens(usage), sent));
    }
}

/// What making room for the active agent's next turn came to.
pub(crate) enum Room {
    /// The request fits (or the agent has no window): call the model.
    Fits,
    /// Tool results were compacted; the request now fits.
    Compacted,
    /// The oldest messages must be summarised first (`summarize`).
    Summarize(ContextJob),
    /// It cannot be made to fit: the run fails with this.
    Exhausted(Failure),
}

/// Before a new turn's `CallModel`: measures `request` (built for the active agent) against
/// the agent's window and applies its policy to `run` — recording a compaction in the
/// agent's ledger and a trace note — or says why the run must fail.
pub(crate) fn make_room(cx: &mut Cx<'_>, run: &mut RunData, request: &ModelRequest) -> Room {
    let agent = run.active.clone();
    let Some(spec_agent) = cx.spec.agent(&agent) else {
        return Room::Fits;
    };
    let Some(window) = spec_agent.context.clone() else {
        return Room::Fits;
    };
    let extra = extra_of(cx, run, spec_agent, request);
    let Some(a) = run.agents.get_mut(&agent) else {
        return Room::Fits;
    };
    a.context.rewind(a.conversation.len);
    let room = match decide(&window, &a.context, extra, cx.seq) {
        Fit::Fits => Room::Fits,
        Fit::Compact(done) => {
            a.context.apply(&done);
            cx.notes.push(Note::Compacted {
                agent: agent.clone(),
                policy: window.on_overflow.clone(),
                messages: done.iter().map(|c| c.index).collect(),
                bytes_before: done.iter().map(|c| c.before).sum(),
                bytes_after: done.iter().map(|c| c.after).sum(),
            });
            Room::Compacted
        }
        Fit::Summarize { from, upto } => {
            let OnOverflow::Summarize(how) = &window.on_overflow else {
                // `decide` asks for a summary only under the summarize policy.
                return Room::Fits;
            };
            if super::summary::summary_exhausted(cx, run, &how.agent) {
                return Room::Exhausted(Failure::new(
                    ErrorClass::ContextExhausted,
                    format!(
                        "agent {agent}: the next request would not fit its context window of {} tokens, and {} may not write its summary: a cap of its budget is reached",
                        window.window, how.agent
                    ),
                ));
            }
            return Room::Summarize(ContextJob {
                agent,
                by: how.agent.clone(),
                from,
                upto,
            });
        }
        Fit::Exhausted { needed } => {
            let tried = match &window.on_overflow {
                OnOverflow::Fail => "on_overflow is fail".to_owned(),
                OnOverflow::Summarize(_) => match &a.context.summary {
                    Some(s) if s.seq == cx.seq => format!(
                        "it would not fit even with the summary of messages {} to {} just written",
                        s.from,
                        s.upto.saturating_sub(1)
                    ),
                    _ => "on_overflow = \"summarize\" cannot make it fit (what is left after the latest messages it must keep is too big)".to_owned(),
                },
                other => format!(
                    "on_overflow = \"{}\" cannot make it fit (what is left is not tool results)",
                    other.as_str()
                ),
            };
            return Room::Exhausted(Failure::new(
                ErrorClass::ContextExhausted,
                format!(
                    "agent {agent}: the next request (at least {needed} tokens, counted at one per byte) would not fit its context window of {} tokens; {tried}",
                    window.window
                ),
            ));
        }
    };
    a.context.sent = Some(a.context.bytes.saturating_add(extra.bytes));
    room
}

/// What `request` carries besides the conversation: tool definitions (the spec's, or
/// [`MACHINE_TOOL_BYTES`] for a tool the machine defines), the output schema, injected
/// memory, and the output tokens it asks for.
fn extra_of(cx: &Cx<'_>, run: &RunData, spec_agent: &AgentSpec, request: &ModelRequest) -> Extra {
    let tools = request.tools.iter().fold(0u64, |sum, name| {
        let bytes = super::offer::tool(cx.spec, run, name).map_or(MACHINE_TOOL_BYTES, json_len);
        sum.saturating_add(bytes)
    });
    let schema = spec_agent.output_schema.as_ref().map_or(0, json_len);
    let memory = request.memory.as_ref().map_or(0, |m| {
        super::memory::injected_message(m).canonical_bytes().len() as u64
    });
    let output_tokens = request
        .settings(Some(spec_agent))
        .max_output_tokens
        .unwrap_or(0);
    Extra {
        bytes: tools.saturating_add(schema).saturating_add(memory),
        messages: u64::from(request.memory.is_some()),
        output_tokens,
    }
}

/// The size of a value's compact JSON, which bounds the text a provider sends of it.
fn json_len<T: Serialize>(value: &T) -> u64 {
    let mut out = Vec::new();
    // A tool definition or a schema is strings, bools and JSON values, which always
    // serialise; were one not to, it is counted as a machine tool rather than as nothing.
    match crate::compact_json::write(&mut out, value) {
        Ok(()) => out.len() as u64,
        Err(_) => MACHINE_TOOL_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_result(text: &str) -> Message {
        Message {
            tool_call_id: Some("c1".into()),
            name: Some("fetch".into()),
            ..Message::text(Role::Tool, text)
        }
    }

    /// A ledger of a system prompt, a user message, then `results` tool results of
    /// `size` bytes of text each.
    fn ledger(results: usize, size: usize) -> (ContextLedger, Vec<Message>) {
        let mut messages = vec![
            Message::text(Role::System, "be brief"),
            Message::text(Role::User, "summarise the pages"),
        ];
        messages.extend((0..results).map(|i| tool_result(&format!("{i}{}", "x".repeat(size)))));
        let mut l = ContextLedger::default();
        for (i, m) in messages.iter().enumerate() {
            l.record(i as u32, m, m.canonical_bytes().len() as u64, false);
        }
        (l, messages)
    }

    fn spec(window: u64, on_overflow: OnOverflow) -> ContextSpec {
        ContextSpec {
            window,
            on_overflow,
        }
    }

    fn plain(l: &ContextLedger) -> u64 {
        estimate_input_tokens(l.bytes, l.messages, None)
    }

    #[test]
    fn a_request_within_the_window_fits_and_one_past_it_fails_by_default() {
        let (l, _) = ledger(2, 1_000);
        let need = plain(&l);
        let extra = Extra::default();
        assert_eq!(
            decide(&spec(need, OnOverflow::Fail), &l, extra, 9),
            Fit::Fits
        );
        assert_eq!(
            decide(&spec(need - 1, OnOverflow::Fail), &l, extra, 9),
            Fit::Exhausted { needed: need }
        );
        // The output tokens asked for count against the window too.
        let asks = Extra {
            output_tokens: 1,
            ..Extra::default()
        };
        assert_eq!(
            decide(&spec(need, OnOverflow::Fail), &l, asks, 9),
            Fit::Exhausted { needed: need + 1 }
        );
    }

    #[test]
    fn the_oldest_tool_results_are_dropped_until_the_request_fits() {
        let (l, messages) = ledger(3, 1_000);
        // Room for about two of the three results.
        let window = plain(&l) - 500;
        let Fit::Compact(done) = decide(
            &spec(window, OnOverflow::DropOldestToolResults),
            &l,
            Extra::default(),
            9,
        ) else {
            panic!("expected a compaction");
        };
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(
            (done[0].index, done[0].how, done[0].seq),
            (2, Compaction::Dropped, 9)
        );
        // The size the machine counts is the size of the message a request sends.
        let sent = compacted_message(&messages[2], Compaction::Dropped);
        assert_eq!(done[0].after, sent.canonical_bytes().len() as u64);
        assert_eq!(
            sent.content.as_deref(),
            Some("[tool result dropped to fit the context window: 1001 bytes]")
        );
        assert_eq!(sent.tool_call_id.as_deref(), Some("c1"));
        // Applied, the ledger fits and the next decision is `Fits`.
        let mut l = l;
        l.apply(&done);
        assert!(plain(&l) <= window);
        assert_eq!(
            decide(
                &spec(window, OnOverflow::DropOldestToolResults),
                &l,
                Extra::default(),
                10
            ),
            Fit::Fits
        );
        assert_eq!(l.compactable.len(), 2);
    }

    #[test]
    fn shortening_keeps_the_head_of_each_result() {
        let (l, messages) = ledger(3, 10_000);
        let window = plain(&l) - 12_000;
        let Fit::Compact(done) = decide(
            &spec(window, OnOverflow::ShortenToolResults),
            &l,
            Extra::default(),
            4,
        ) else {
            panic!("expected a compaction");
        };
        assert_eq!(done.iter().map(|c| c.index).collect::<Vec<_>>(), [2, 3]);
        let mut sent = messages.clone();
        compact_messages(&mut sent, &done);
        let text = sent[2].content.as_deref().unwrap_or_default();
        assert!(
            text.starts_with(&format!("0{}", "x".repeat(2_000))),
            "{text}"
        );
        assert!(
            text.ends_with(
                "[tool result shortened to fit the context window: 2048 of 10001 bytes kept]"
            ),
            "{text}"
        );
        // Untouched messages are sent as they were.
        assert_eq!(sent[4], messages[4]);
    }

    #[test]
    fn nothing_is_compacted_when_even_every_result_would_not_make_it_fit() {
        let (l, _) = ledger(2, 1_000);
        // The system prompt and user message alone are over this window.
        let got = decide(
            &spec(50, OnOverflow::DropOldestToolResults),
            &l,
            Extra::default(),
            3,
        );
        assert!(
            matches!(got, Fit::Exhausted { needed } if needed > 50),
            "{got:?}"
        );
    }

    #[test]
    fn a_reported_prefix_is_believed_until_a_compaction_or_rewind() {
        let (mut l, _) = ledger(2, 4_000);
        let bytes = l.bytes;
        // The provider counted 2,100 tokens for all of it: English at ~4 bytes a token.
        l.reported = Some((2_100, bytes));
        let framing = 4 * super::super::allowance::FRAMING_TOKENS_PER_MESSAGE;
        let window = 2_100 + framing;
        assert_eq!(
            decide(&spec(window, OnOverflow::Fail), &l, Extra::default(), 5),
            Fit::Fits
        );
        // A new message counts at one token per byte on top.
        l.record(4, &Message::text(Role::User, "more"), 100, false);
        assert!(matches!(
            decide(&spec(window, OnOverflow::Fail), &l, Extra::default(), 6),
            Fit::Exhausted { .. }
        ));
        // Rewinding (a fork edit) forgets the report: the prefix changed.
        let page = l.compactable[1].size;
        l.rewind(3);
        assert_eq!(l.reported, None);
        assert_eq!(l.messages, 3);
        assert_eq!(l.compactable.len(), 1);
        // The page at 3 left the total exactly; the short message at 4 is over-counted.
        assert_eq!(l.bytes, bytes + 100 - page);
        // Back to nothing (a transfer) is exact.
        l.rewind(0);
        assert!(l.is_empty());
    }

    #[test]
    fn small_results_are_counted_but_not_kept_so_the_state_stays_small() {
        let (l, _) = ledger(500, 20);
        assert_eq!(l.messages, 502);
        assert!(l.compactable.is_empty(), "{:?}", &l.compactable[..1]);
        let kept = serde_json::to_vec(&l).expect("serialises").len();
        assert!(kept < 64, "{kept} bytes for 502 messages");
    }

    #[test]
    fn reported_prompt_tokens_count_anthropic_cache_reads_and_writes() {
        let usage = super::super::TokenUsage {
            cache_read_input_tokens: Some(1_000),
            cache_creation_input_tokens: Some(200),
            ..super::super::TokenUsage::new(30, 5)
        };
        assert_eq!(reported_prompt_tokens(&usage), 1_230);
    }
}
