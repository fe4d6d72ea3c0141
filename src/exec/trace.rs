//! Trace events: what observers see of runs. Each carries its run, an HLC timestamp and,
//! for events tied to a transition, its seq. Serialised with a stable `type` field
//! (`run.started`, `model.reply`, ...), one JSON object per line in `--json` output.

use serde::Serialize;
use serde_json::Value;

use crate::machine::{
    AgentId, BudgetKey, EdgeId, Hlc, Outcome, RunId, Scope, StateKind, TokenUsage,
};
use crate::store::RunStatus;

/// One thing that happened in a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    /// The run.
    pub run: RunId,
    /// When.
    pub at: Hlc,
    /// The transition it belongs to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// What.
    #[serde(flatten)]
    pub kind: Trace,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum Trace {
    /// A new run began.
    #[serde(rename = "run.started")]
    RunStarted {
        /// Its goal.
        goal: String,
    },
    /// A process took the run up again.
    #[serde(rename = "run.resumed")]
    RunResumed {
        /// The state it resumed in.
        state: StateKind,
    },
    /// A transition was committed.
    #[serde(rename = "transition")]
    Transition {
        /// The edge taken.
        edge: EdgeId,
        /// The state after it.
        state: StateKind,
    },
    /// A model call is being made.
    #[serde(rename = "model.request")]
    ModelRequest {
        /// The agent.
        agent: AgentId,
        /// Provider name.
        provider: String,
        /// Model.
        model: String,
        /// Attempt on this route.
        attempt: u32,
        /// Messages sent.
        messages: usize,
        /// The sampling and output settings the spec set for this request.
        #[serde(skip_serializing_if = "RequestParams::is_empty")]
        params: RequestParams,
    },
    /// A streamed text delta.
    #[serde(rename = "model.token")]
    ModelToken {
        /// The agent.
        agent: AgentId,
        /// The delta.
        text: String,
    },
    /// A model call returned.
    #[serde(rename = "model.reply")]
    ModelReply {
        /// The agent.
        agent: AgentId,
        /// The provider that answered (the route's).
        provider: String,
        /// The model asked.
        model: String,
        /// The model the server says answered, where it said.
        #[serde(skip_serializing_if = "Option::is_none")]
        response_model: Option<String>,
        /// The server's id for the reply, where it gave one.
        #[serde(skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
        /// Its text, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Tool calls asked for.
        tool_calls: usize,
        /// Why the model stopped, normalised (`stop`, `tool_calls`, `length`,
        /// `stop_sequence`, `content_filter`), where known.
        #[serde(skip_serializing_if = "Option::is_none")]
        finish: Option<crate::machine::Finish>,
        /// The model's refusal: its words, or `(no explanation given)`; `None` when the
        /// reply is not one.
        #[serde(skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
        /// Usage, if reported.
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
        /// Cost in nanodollars, if known (`None`: the model has no price).
        #[serde(
            skip_serializing_if = "Option::is_none",
            serialize_with = "json_safe_opt"
        )]
        cost_nanos: Option<u64>,
        /// The run's known cost so far, nanodollars (a string past 2^53).
        #[serde(serialize_with = "json_safe")]
        run_cost_nanos: u64,
        /// The run's model turns so far whose cost is unknown; the run's cost is unknown
        /// (at least `run_cost_nanos`) while this is above zero.
        run_unpriced_turns: u64,
    },
    /// A model call failed.
    #[serde(rename = "model.error")]
    ModelError {
        /// The agent.
        agent: AgentId,
        /// The error, one line.
        error: String,
        /// Whether the machine may retry.
        retryable: bool,
    },
    /// A tool call is being made.
    #[serde(rename = "tool.call")]
    ToolCall {
        /// The agent.
        agent: AgentId,
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The arguments.
        args: Value,
    },
    /// A non-idempotent call interrupted mid-flight: its tool is asked whether it was
    /// performed (`on_in_doubt = "reconcile"`).
    #[serde(rename = "tool.reconcile")]
    ToolReconcile {
        /// The agent.
        agent: AgentId,
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
    },
    /// A tool call returned.
    #[serde(rename = "tool.result")]
    ToolResult {
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// False for errors.
        ok: bool,
    },
    /// A tool call in flight reported progress (an MCP server's `notifications/progress`).
    #[serde(rename = "tool.progress")]
    ToolProgress {
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// Progress so far.
        progress: f64,
        /// The total, if known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What the tool says it is doing.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A tool call was refused (outside the grant, unknown, invalid arguments).
    #[serde(rename = "tool.rejected")]
    ToolRejected {
        /// The agent.
        agent: AgentId,
        /// The call id.
        call_id: String,
        /// The tool the model asked for.
        tool: String,
        /// Why.
        reason: String,
    },
    /// A person is asked (approval, a question, an in-doubt call).
    #[serde(rename = "input.requested")]
    InputRequested {
        /// The agent.
        agent: AgentId,
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// `approval`, `question` or `in_doubt`.
        kind: String,
    },
    /// A `sleep_for`/`sleep_until` call sleeps until `due_ms` (Unix ms); the run wakes then
    /// (`TimerFired`).
    #[serde(rename = "timer.started")]
    TimerStarted {
        /// The agent.
        agent: AgentId,
        /// The call id.
        call_id: String,
        /// When it wakes, Unix milliseconds.
        due_ms: u64,
    },
    /// A timer fired: the sleep of a `sleep_for`/`sleep_until` call woke, or the deadline of
    /// a call waiting for a person passed (`TimerFired` committed).
    #[serde(rename = "timer.fired")]
    TimerFired {
        /// The agent.
        agent: AgentId,
        /// The call that slept or waited.
        call_id: String,
        /// `sleep` or `deadline`.
        timer: String,
        /// The seq of the transition that started the timer (its `StartTimer` effect's).
        started_seq: u64,
        /// Its due instant, Unix milliseconds.
        due_ms: u64,
        /// A person fired it before its instant (`runtape wake`).
        early: bool,
    },
    /// The plan moved to another agent.
    #[serde(rename = "handoff")]
    Handoff {
        /// From.
        from: AgentId,
        /// To.
        to: AgentId,
    },
    /// The plan tried to activate an agent past `max_agent_visits`; the run fails.
    #[serde(rename = "handoff.cycle")]
    HandoffCycle {
        /// The agent.
        agent: AgentId,
        /// Its visits so far.
        visits: u32,
    },
    /// A session run's summary of what fell out of an agent's window was written (revision 5).
    #[serde(rename = "session.summary")]
    SessionSummary {
        /// Whose history it summarises.
        agent: AgentId,
        /// Who wrote it.
        by: AgentId,
    },
    /// A cap was reached before a session run's summary could be written; the agent's window
    /// is kept without it.
    #[serde(rename = "session.summary_skipped")]
    SessionSummarySkipped {
        /// Whose history was not summarised.
        agent: AgentId,
    },
    /// The retriever is asked for passages before an agent's turn (revision 5).
    #[serde(rename = "retrieval.call")]
    RetrievalCall {
        /// The agent.
        agent: AgentId,
        /// The agent's turn about to be taken.
        turn: u64,
    },
    /// The retriever answered; its passages (if any) go to the agent as data.
    #[serde(rename = "retrieval.result")]
    RetrievalResult {
        /// The agent.
        agent: AgentId,
        /// How many passages.
        passages: usize,
    },
    /// The retriever failed; the turn goes on without passages.
    #[serde(rename = "retrieval.failed")]
    RetrievalFailed {
        /// The agent.
        agent: AgentId,
        /// What went wrong.
        error: String,
    },
    /// A run was forked from another.
    #[serde(rename = "run.forked")]
    RunForked {
        /// The parent run.
        parent: RunId,
        /// The step it forked at.
        seq: u64,
    },
    /// A fork stopped replaying its parent's recording.
    #[serde(rename = "tape.ended")]
    TapeEnded {
        /// True when it goes on live, false when it stops.
        live: bool,
    },
    /// A budget ran out.
    #[serde(rename = "budget.exhausted")]
    BudgetExhausted {
        /// Whose.
        scope: Scope,
        /// Which.
        key: BudgetKey,
    },
    /// A reply was cut by the output-token limit and is asked again with a larger limit or
    /// continued (the agent's `on_truncated`, revision 7). A cut reply that fails the run is
    /// its `run.finished` with class `truncated`.
    #[serde(rename = "model.truncated")]
    ModelTruncated {
        /// The agent.
        agent: AgentId,
        /// `retry` or `continue`.
        policy: crate::machine::OnTruncated,
        /// Output tokens the cut reply used, where reported.
        #[serde(skip_serializing_if = "Option::is_none")]
        output_tokens: Option<u64>,
        /// The output-token limit the retry asks for.
        #[serde(skip_serializing_if = "Option::is_none")]
        next_limit: Option<u64>,
    },
    /// Tool results of an agent's conversation were dropped or shortened so its next request
    /// fits its context window (`[agents.context] on_overflow`). A request that cannot be
    /// made to fit is the run's `run.finished` with class `context_exhausted`.
    #[serde(rename = "context.compacted")]
    ContextCompacted {
        /// The agent.
        agent: AgentId,
        /// `drop_oldest_tool_results` or `shorten_tool_results`.
        policy: crate::machine::context::OnOverflow,
        /// The positions of the compacted messages in its conversation.
        messages: Vec<u32>,
        /// Their size before, in bytes.
        bytes_before: u64,
        /// Their size after.
        bytes_after: u64,
    },
    /// The oldest messages of an agent's conversation were summarised by another agent so
    /// its next request fits its context window (`on_overflow = { summarize = … }`); the
    /// summary call itself is a `model.reply` of the writer.
    #[serde(rename = "context.summarized")]
    ContextSummarized(crate::machine::context_summary::Summarized),
    /// Files (images, PDFs) a model request carries that the model is not sent: of a kind
    /// its provider says it does not take (or whose stored bytes are missing). Each went as a
    /// text placeholder naming it.
    #[serde(rename = "model.attachments_not_sent")]
    AttachmentsNotSent {
        /// The agent.
        agent: AgentId,
        /// The model asked.
        model: String,
        /// Each file not sent: its name and media type.
        files: Vec<String>,
    },
    /// A model call is retried or moves to a fallback route.
    #[serde(rename = "model.retry")]
    ModelRetry {
        /// The agent.
        agent: AgentId,
        /// What happens.
        detail: String,
    },
    /// The run stopped at a step boundary (paused, or resting until a person or a budget
    /// raise continues it).
    #[serde(rename = "run.paused")]
    RunPaused {
        /// Why it rests.
        status: RunStatus,
    },
    /// The run ended.
    #[serde(rename = "run.finished")]
    RunFinished {
        /// How.
        outcome: Outcome,
    },
    /// This observer fell behind and missed events: the trace channel holds a bounded number
    /// of events, and the oldest were dropped before this observer read them. Everything
    /// committed is in the history regardless (`runtape log`); only these notices were lost.
    #[serde(rename = "trace.lagged")]
    Lagged {
        /// How many events this observer missed.
        missed: u64,
    },
}

/// The settings of a model request that observers report (OpenTelemetry's
/// `gen_ai.request.*` and `gen_ai.output.type`): those the agent's spec set, nothing a
/// provider fills in by default.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestParams {
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Sampling seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// The agent's cap on output tokens (`max_output_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// True when the request asks for structured output (the agent has an output schema).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub structured: bool,
}

impl RequestParams {
    /// The parameters of a request with these `settings`, structured when it carries an
    /// output schema.
    pub fn of(settings: &crate::machine::ModelSettings, structured: bool) -> RequestParams {
        RequestParams {
            temperature: settings.temperature,
            top_p: settings.top_p,
            seed: settings.seed,
            stop: settings.stop.clone(),
            max_tokens: settings.max_output_tokens,
            structured,
        }
    }

    /// True when the spec set none of them.
    pub fn is_empty(&self) -> bool {
        *self == RequestParams::default()
    }
}

/// Integers above 2^53 lose precision in JSON readers that use doubles: written as strings.
fn json_safe<S: serde::Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *n > (1u64 << 53) {
        s.serialize_str(&n.to_string())
    } else {
        s.serialize_u64(*n)
    }
}

fn json_safe_opt<S: serde::Serializer>(n: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match n {
        Some(n) => json_safe(n, s),
        None => s.serialize_none(),
    }
}
