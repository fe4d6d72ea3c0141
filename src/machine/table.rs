//! The transition table, as data: one table that generates the state kinds, the event kinds,
//! the edge ids ([`EdgeId`]) with their persisted names, and the rows [`step`](super::step)
//! checks every transition against. `statechart.md` is rendered from it
//! ([`render_statechart`]), so the diagram is the code.
//!
//! # Persisted names
//!
//! The snake_case names of state kinds, event kinds and edges are part of the database format
//! (`runs.state_kind`, `transitions.edge`, the sealed head's `state`) and of `--json` output.
//! A released name never changes and is never reused: a database written by runtape 0.1.0
//! names its edges exactly as [`EdgeId::as_str`] does today (`tests/it/store/db_format_0_1_0.rs`,
//! `tests/it/machine/canned_histories.rs`). An edge the machine stops taking stays in the table, so old
//! histories still read; a new edge gets a new name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Generates a kind enum with its statechart name (CamelCase) and persisted name
/// (snake_case, also its serde form), `ALL` in declaration order, and `parse`.
macro_rules! kinds {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $variant:ident = ($camel:literal, $snake:literal), #[doc = $doc:literal] )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( #[doc = $doc] #[serde(rename = $snake)] $variant, )*
        }

        impl $name {
            /// Every kind, in lifecycle order.
            pub const ALL: [$name; [$($snake),*].len()] = [$($name::$variant),*];

            /// The CamelCase name used in the statechart.
            pub fn name(self) -> &'static str {
                match self { $( $name::$variant => $camel, )* }
            }

            /// The snake_case name: what is stored, logged and printed as JSON.
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $snake, )* }
            }

            /// The kind whose snake_case name is `name`.
            pub fn parse(name: &str) -> Option<$name> {
                match name { $( $snake => Some($name::$variant), )* _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

kinds! {
    /// A state's kind (its variant without data).
    pub enum StateKind {
        Created = ("Created", "created"), #[doc = "See [`RunState::Created`](super::RunState::Created)."]
        Preparing = ("Preparing", "preparing"), #[doc = "See [`RunState::Preparing`](super::RunState::Preparing)."]
        Generating = ("Generating", "generating"), #[doc = "See [`RunState::Generating`](super::RunState::Generating)."]
        Summarizing = ("Summarizing", "summarizing"), #[doc = "See [`RunState::Summarizing`](super::RunState::Summarizing)."]
        Retrieving = ("Retrieving", "retrieving"), #[doc = "See [`RunState::Retrieving`](super::RunState::Retrieving)."]
        CallingTools = ("CallingTools", "calling_tools"), #[doc = "See [`RunState::CallingTools`](super::RunState::CallingTools)."]
        AwaitingInput = ("AwaitingInput", "awaiting_input"), #[doc = "See [`RunState::AwaitingInput`](super::RunState::AwaitingInput)."]
        Handoff = ("Handoff", "handoff"), #[doc = "See [`RunState::Handoff`](super::RunState::Handoff)."]
        BudgetExhausted = ("BudgetExhausted", "budget_exhausted"), #[doc = "See [`RunState::BudgetExhausted`](super::RunState::BudgetExhausted)."]
        Publishing = ("Publishing", "publishing"), #[doc = "See [`RunState::Publishing`](super::RunState::Publishing)."]
        Compensating = ("Compensating", "compensating"), #[doc = "See [`RunState::Compensating`](super::RunState::Compensating)."]
        Done = ("Done", "done"), #[doc = "See [`RunState::Done`](super::RunState::Done)."]
    }
}

kinds! {
    /// An event's kind.
    pub enum EventKind {
        Start = ("Start", "start"), #[doc = "`Start`."]
        Proceed = ("Proceed", "proceed"), #[doc = "`Proceed`."]
        ModelReplied = ("ModelReplied", "model_replied"), #[doc = "`ModelReplied`."]
        ModelFailed = ("ModelFailed", "model_failed"), #[doc = "`ModelFailed`."]
        ToolReturned = ("ToolReturned", "tool_returned"), #[doc = "`ToolReturned`."]
        InputProvided = ("InputProvided", "input_provided"), #[doc = "`InputProvided`."]
        EffectInDoubt = ("EffectInDoubt", "effect_in_doubt"), #[doc = "`EffectInDoubt`."]
        Reconciled = ("Reconciled", "reconciled"), #[doc = "`Reconciled`."]
        BudgetRaised = ("BudgetRaised", "budget_raised"), #[doc = "`BudgetRaised`."]
        CancelRequested = ("CancelRequested", "cancel_requested"), #[doc = "`CancelRequested`."]
        Edited = ("Edited", "edited"), #[doc = "`Edited`."]
        ToolsListed = ("ToolsListed", "tools_listed"), #[doc = "`ToolsListed`."]
        ChildFinished = ("ChildFinished", "child_finished"), #[doc = "`ChildFinished`."]
        ConversationSupplied = ("ConversationSupplied", "conversation_supplied"), #[doc = "`ConversationSupplied`."]
        MemoryLoaded = ("MemoryLoaded", "memory_loaded"), #[doc = "`MemoryLoaded`."]
        MemoryPublished = ("MemoryPublished", "memory_published"), #[doc = "`MemoryPublished`."]
        SessionStart = ("SessionStart", "session_start"), #[doc = "`SessionStart`."]
        Retrieved = ("Retrieved", "retrieved"), #[doc = "`Retrieved`."]
        TimerFired = ("TimerFired", "timer_fired"), #[doc = "`TimerFired`."]
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Edge {
    /// Stable id, e.g. `generating.replied.tools`: the persisted name of [`EdgeId`].
    pub id: &'static str,
    /// Source state; `None` means any state but `Created` and `Done`.
    pub from: Option<StateKind>,
    /// Triggering event; `None` means any event.
    pub on: Option<EventKind>,
    /// Target state.
    pub to: StateKind,
    /// What it means, in one line.
    pub meaning: &'static str,
}

impl Edge {
    /// Whether `(from, on, to)` is an instance of this edge.
    pub fn admits(&self, from: StateKind, on: EventKind, to: StateKind) -> bool {
        let from_ok = match self.from {
            Some(f) => f == from,
            None => from != StateKind::Created && from != StateKind::Done,
        };
        from_ok && self.on.is_none_or(|e| e == on) && self.to == to
    }
}

macro_rules! state_of {
    (any) => {
        None
    };
    ($s:ident) => {
        Some(StateKind::$s)
    };
}

macro_rules! event_of {
    (any) => {
        None
    };
    ($e:ident) => {
        Some(EventKind::$e)
    };
}

/// Generates [`EdgeId`] (one variant per row, its persisted name) and [`TABLE`] (the rows,
/// in the same order) from one list: `Variant = "persisted.name": From --Event--> To,
/// "meaning";`, where `any` stands for any source state or any event.
macro_rules! edges {
    ( $( $variant:ident = $id:literal : $from:ident -- $on:ident --> $to:ident, $meaning:literal; )* ) => {
        /// An edge of the machine: what [`step`](super::step) names each transition by. Stored
        /// (and serialised) as its persisted name, [`EdgeId::as_str`], which is part of the
        /// database format.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum EdgeId {
            $( #[doc = $meaning] $variant, )*
        }

        impl EdgeId {
            /// Every edge, in table order.
            pub const ALL: &'static [EdgeId] = &[$(EdgeId::$variant),*];

            /// The persisted name (`generating.replied.tools`): stored in `transitions.edge`,
            /// printed by `runtape log` and `--json`. Never changes once released.
            pub fn as_str(self) -> &'static str {
                match self { $( EdgeId::$variant => $id, )* }
            }

            /// The edge whose persisted name is `name`; `None` for a name no edge has.
            pub fn parse(name: &str) -> Option<EdgeId> {
                match name { $( $id => Some(EdgeId::$variant), )* _ => None }
            }
        }

        /// Every edge the machine can take, in [`EdgeId`] order.
        pub const TABLE: &[Edge] = &[
            $( Edge { id: $id, from: state_of!($from), on: event_of!($on), to: StateKind::$to, meaning: $meaning }, )*
        ];
    };
}

edges! {
    CreatedStart = "created.start": Created --Start--> Preparing,
        "the run begins: the entry agent is activated with the goal";
    CreatedTransitionCap = "created.transition_cap": Created --Start--> Done,
        "max_transitions = 1: the run fails with transition_cap as it starts";
    CreatedCancel = "created.cancel": Created --CancelRequested--> Done,
        "cancelled before it started";
    PreparingProceedCall = "preparing.proceed.call": Preparing --Proceed--> Generating,
        "budgets allow a turn: CallModel is emitted on the first route not cooling down, with the remaining budget";
    PreparingProceedCompact = "preparing.proceed.compact": Preparing --Proceed--> Generating,
        "the request would not fit the agent's context window: the oldest tool results are dropped or shortened (on_overflow), recorded with the CallModel that sends them";
    PreparingProceedContextExhausted = "preparing.proceed.context_exhausted": Preparing --Proceed--> Done,
        "the request would not fit the agent's context window and on_overflow is fail, or compacting every tool result would not make it fit: fails with context_exhausted";
    PreparingProceedSummarize = "preparing.proceed.summarize": Preparing --Proceed--> Summarizing,
        "the request would not fit the agent's context window: the agent on_overflow names is asked to summarise the oldest messages first (a recorded model call)";
    PreparingProceedExhausted = "preparing.proceed.exhausted": Preparing --Proceed--> BudgetExhausted,
        "a cap is reached: no model call is made";
    PreparingRaise = "preparing.raise": Preparing --BudgetRaised--> Preparing,
        "a cap is raised";
    PreparingEdit = "preparing.edit": Preparing --Edited--> Preparing,
        "fork edits are applied at a step boundary";
    PreparingCancel = "preparing.cancel": Preparing --CancelRequested--> Done,
        "cancelled at a step boundary";
    PreparingToolsListed = "preparing.tools_listed": Preparing --ToolsListed--> Preparing,
        "an MCP server's tool list is recorded (revision 3): later requests offer the granted tools it lists";
    GeneratingRepliedTools = "generating.replied.tools": Generating --ModelReplied--> CallingTools,
        "the reply asks for tools: valid granted calls are dispatched in parallel";
    GeneratingRepliedInput = "generating.replied.input": Generating --ModelReplied--> AwaitingInput,
        "every runnable call needs a person (approval or question)";
    GeneratingRepliedResolved = "generating.replied.resolved": Generating --ModelReplied--> Preparing,
        "every call was answered without running (refused, invalid, over budget); results go back to the model";
    GeneratingRepliedAnswer = "generating.replied.answer": Generating --ModelReplied--> Handoff,
        "a final answer: the agent is finished";
    GeneratingRepliedRefused = "generating.replied.refused": Generating --ModelReplied--> Done,
        "the model refused (a refusal, or stop reason refusal): fails with refused";
    GeneratingRepliedOutputInvalid = "generating.replied.output_invalid": Generating --ModelReplied--> Preparing,
        "the answer does not match the agent's output schema: what is wrong is fed back (correction budget)";
    GeneratingRepliedOutputFailed = "generating.replied.output_failed": Generating --ModelReplied--> Done,
        "the answer does not match the output schema and the correction budget is spent: fails with output_invalid";
    GeneratingRepliedFail = "generating.replied.fail": Generating --ModelReplied--> Done,
        "the correction budget is spent: fails with tool_denied or tool_failed";
    GeneratingRepliedTransfer = "generating.replied.transfer": Generating --ModelReplied--> Preparing,
        "the only call is transfer_to_AGENT (revision 4): that agent is activated with the goal and the note";
    GeneratingRepliedTransferCycle = "generating.replied.transfer_cycle": Generating --ModelReplied--> Done,
        "a transfer to an agent that has used max_agent_visits: fails with handoff_cycle";
    GeneratingRepliedTransferCarry = "generating.replied.transfer_carry": Generating --ModelReplied--> Handoff,
        "the only call is transfer_to_AGENT (revision 5): it is answered in the sender's conversation, and the run waits for that conversation's messages";
    GeneratingRepliedTruncatedRetry = "generating.replied.truncated_retry": Generating --ModelReplied--> Preparing,
        "the output-token limit cut the reply and on_truncated is retry (revision 7): it is dropped and the turn asked again with twice the limit (correction budget)";
    GeneratingRepliedTruncatedContinue = "generating.replied.truncated_continue": Generating --ModelReplied--> Preparing,
        "the output-token limit cut the reply and on_truncated is continue (revision 7): the cut text stays and the model is asked to go on (correction budget)";
    GeneratingRepliedTruncated = "generating.replied.truncated": Generating --ModelReplied--> Done,
        "the output-token limit cut the reply and on_truncated is fail, or the correction budget is spent (revision 7): fails with truncated";
    GeneratingFailedRetry = "generating.failed.retry": Generating --ModelFailed--> Generating,
        "retryable failure: the same call again with attempt + 1 after backoff";
    GeneratingFailedFallback = "generating.failed.fallback": Generating --ModelFailed--> Generating,
        "attempts on this route are spent (or Retry-After is too long): it cools down and the next route not cooling down is called";
    GeneratingFailedExhausted = "generating.failed.exhausted": Generating --ModelFailed--> BudgetExhausted,
        "the call failed and a cap is now reached (e.g. wall time): no retry";
    GeneratingFailedFail = "generating.failed.fail": Generating --ModelFailed--> Done,
        "every route is spent: fails with the provider error class";
    GeneratingRaise = "generating.raise": Generating --BudgetRaised--> Generating,
        "a cap is raised";
    GeneratingEdit = "generating.edit": Generating --Edited--> Generating,
        "fork edits are applied and the model call is re-issued";
    GeneratingEditExhausted = "generating.edit.exhausted": Generating --Edited--> BudgetExhausted,
        "fork edits are applied and a cap is now reached: the call is not re-issued";
    GeneratingCancel = "generating.cancel": Generating --CancelRequested--> Done,
        "cancelled; the in-flight model call is aborted";
    CallingToolsReturnedWait = "calling_tools.returned.wait": CallingTools --ToolReturned--> CallingTools,
        "a result arrived; other calls still run";
    CallingToolsReturnedInput = "calling_tools.returned.input": CallingTools --ToolReturned--> AwaitingInput,
        "a result arrived; what remains waits for a person";
    CallingToolsReturnedDone = "calling_tools.returned.done": CallingTools --ToolReturned--> Preparing,
        "the last result arrived: all results go back to the model in call order";
    CallingToolsChildWait = "calling_tools.child.wait": CallingTools --ChildFinished--> CallingTools,
        "a child run ended (revision 4): its answer or typed failure is the call's result, its spend is charged; other calls still run";
    CallingToolsChildInput = "calling_tools.child.input": CallingTools --ChildFinished--> AwaitingInput,
        "a child run ended; what remains waits for a person";
    CallingToolsChildDone = "calling_tools.child.done": CallingTools --ChildFinished--> Preparing,
        "the last outstanding call was a child run: all results go back to the model in call order";
    CallingToolsInput = "calling_tools.input": CallingTools --InputProvided--> CallingTools,
        "a person answered while other calls still run";
    CallingToolsInDoubtRetry = "calling_tools.in_doubt.retry": CallingTools --EffectInDoubt--> CallingTools,
        "on_in_doubt = retry: the call is performed again with the same idempotency key";
    CallingToolsInDoubtAskWait = "calling_tools.in_doubt.ask_wait": CallingTools --EffectInDoubt--> CallingTools,
        "on_in_doubt = ask while other calls still run";
    CallingToolsInDoubtAsk = "calling_tools.in_doubt.ask": CallingTools --EffectInDoubt--> AwaitingInput,
        "on_in_doubt = ask: a person decides";
    CallingToolsInDoubtReconcile = "calling_tools.in_doubt.reconcile": CallingTools --EffectInDoubt--> CallingTools,
        "on_in_doubt = reconcile: the tool's reconcile command is asked whether the call was performed";
    CallingToolsReconciledRetry = "calling_tools.reconciled.retry": CallingTools --Reconciled--> CallingTools,
        "not performed: the call is performed, with the same idempotency key";
    CallingToolsReconciledWait = "calling_tools.reconciled.wait": CallingTools --Reconciled--> CallingTools,
        "performed (its result is recorded) or unknown (a person decides) while other calls still run";
    CallingToolsReconciledInput = "calling_tools.reconciled.input": CallingTools --Reconciled--> AwaitingInput,
        "unknown: a person decides, as with on_in_doubt = ask";
    CallingToolsReconciledDone = "calling_tools.reconciled.done": CallingTools --Reconciled--> Preparing,
        "performed, and it was the last outstanding call: its result goes back to the model";
    CallingToolsInDoubtFail = "calling_tools.in_doubt.fail": CallingTools --EffectInDoubt--> Done,
        "on_in_doubt = fail: fails with effect_in_doubt";
    CallingToolsRaise = "calling_tools.raise": CallingTools --BudgetRaised--> CallingTools,
        "a cap is raised";
    CallingToolsEdit = "calling_tools.edit": CallingTools --Edited--> CallingTools,
        "fork edits are applied; calls still outstanding remain so";
    CallingToolsEditInput = "calling_tools.edit.input": CallingTools --Edited--> AwaitingInput,
        "fork edits supplied the running calls' results; what remains waits for a person";
    CallingToolsEditDone = "calling_tools.edit.done": CallingTools --Edited--> Preparing,
        "fork edits supplied the last outstanding result";
    CallingToolsCancel = "calling_tools.cancel": CallingTools --CancelRequested--> Done,
        "cancelled; running tools are aborted";
    AwaitingInputInputWait = "awaiting_input.input.wait": AwaitingInput --InputProvided--> AwaitingInput,
        "answered; other calls still wait for a person";
    AwaitingInputInputRun = "awaiting_input.input.run": AwaitingInput --InputProvided--> CallingTools,
        "approved: the call runs";
    AwaitingInputInputDone = "awaiting_input.input.done": AwaitingInput --InputProvided--> Preparing,
        "the last call is settled (rejected or answered): results go back to the model";
    AwaitingInputRaise = "awaiting_input.raise": AwaitingInput --BudgetRaised--> AwaitingInput,
        "a cap is raised";
    AwaitingInputEdit = "awaiting_input.edit": AwaitingInput --Edited--> AwaitingInput,
        "fork edits are applied; calls still wait for a person";
    AwaitingInputEditDone = "awaiting_input.edit.done": AwaitingInput --Edited--> Preparing,
        "fork edits supplied the last outstanding result";
    AwaitingInputCancel = "awaiting_input.cancel": AwaitingInput --CancelRequested--> Done,
        "cancelled while waiting for a person";
    HandoffProceedNext = "handoff.proceed.next": Handoff --Proceed--> Preparing,
        "the first matching plan edge activates the next agent";
    HandoffProceedComplete = "handoff.proceed.complete": Handoff --Proceed--> Done,
        "no edge matches and the agent is an exit: completed with its answer";
    HandoffProceedUnfinished = "handoff.proceed.unfinished": Handoff --Proceed--> Done,
        "an exit ran out of budget without answering: fails with that budget's limit class";
    HandoffProceedNoRoute = "handoff.proceed.no_route": Handoff --Proceed--> Done,
        "no edge matches and the agent is not an exit: fails with no_route";
    HandoffProceedCycle = "handoff.proceed.cycle": Handoff --Proceed--> Done,
        "the next agent has used max_agent_visits: fails with handoff_cycle";
    HandoffRaise = "handoff.raise": Handoff --BudgetRaised--> Handoff,
        "a cap is raised";
    HandoffEdit = "handoff.edit": Handoff --Edited--> Handoff,
        "fork edits are applied at a step boundary";
    HandoffCancel = "handoff.cancel": Handoff --CancelRequested--> Done,
        "cancelled at a step boundary";
    HandoffConversationTransfer = "handoff.conversation.transfer": Handoff --ConversationSupplied--> Preparing,
        "the sender's messages arrived and match its conversation's head (revision 5): the receiver continues them after its own system prompt, then reads the note";
    BudgetExhaustedProceedHandoff = "budget_exhausted.proceed.handoff": BudgetExhausted --Proceed--> Handoff,
        "on_exhausted = handoff: the agent counts as finished";
    BudgetExhaustedProceedFail = "budget_exhausted.proceed.fail": BudgetExhausted --Proceed--> Done,
        "a run-wide cap with on_exhausted = fail: fails with the limit class";
    BudgetExhaustedRaiseResume = "budget_exhausted.raise.resume": BudgetExhausted --BudgetRaised--> Preparing,
        "the cap is raised enough: the agent goes on";
    BudgetExhaustedRaiseStill = "budget_exhausted.raise.still": BudgetExhausted --BudgetRaised--> BudgetExhausted,
        "a cap is raised but one is still reached";
    BudgetExhaustedEdit = "budget_exhausted.edit": BudgetExhausted --Edited--> BudgetExhausted,
        "fork edits are applied; a cap is still reached";
    BudgetExhaustedEditResume = "budget_exhausted.edit.resume": BudgetExhausted --Edited--> Preparing,
        "fork edits lifted the cap: the agent goes on";
    BudgetExhaustedCancel = "budget_exhausted.cancel": BudgetExhausted --CancelRequested--> Done,
        "cancelled while out of budget";
    PreparingMemoryLoaded = "preparing.memory_loaded": Preparing --MemoryLoaded--> Preparing,
        "the run's view of its global memory is recorded (revision 5): what recall, remember and injection see of it";
    HandoffProceedPublish = "handoff.proceed.publish": Handoff --Proceed--> Publishing,
        "an exit answered and the run staged global memory writes (revision 5): PublishMemory is emitted";
    PublishingPublishedComplete = "publishing.published.complete": Publishing --MemoryPublished--> Done,
        "every staged write was published in one transaction: completed with the answer";
    PublishingPublishedConflict = "publishing.published.conflict": Publishing --MemoryPublished--> Preparing,
        "the publish was refused (another run changed a written key): nothing was written; the writer is told, with the current values";
    PublishingPublishedOverCap = "publishing.published.over_cap": Publishing --MemoryPublished--> Preparing,
        "the publish was refused (with the memory as it now stands it would pass the run's max_bytes_global): nothing was written; the writer is told the sizes and its sets are dropped";
    PublishingPublishedCancelled = "publishing.published.cancelled": Publishing --MemoryPublished--> Done,
        "the publish was refused and a cancel waited for it: cancelled, nothing was written";
    PublishingCancel = "publishing.cancel": Publishing --CancelRequested--> Publishing,
        "a cancel while publishing waits for the publish: it wins only if the publish is refused";
    PublishingRaise = "publishing.raise": Publishing --BudgetRaised--> Publishing,
        "a cap is raised";
    AnyTransitionCap = "any.transition_cap": any --any--> Done,
        "the run reached max_transitions: fails with transition_cap (a cancel still wins)";
    CreatedSessionStart = "created.session_start": Created --SessionStart--> Preparing,
        "a session run begins (revision 5): each agent's carried conversation opens its conversation, cut to its window (nothing fell out, or a cap stops summaries); the entry agent gets the goal";
    CreatedSessionStartSummarize = "created.session_start.summarize": Created --SessionStart--> Summarizing,
        "a session run begins and messages fall out of an agent's window: CallModel asks for the summary";
    CreatedSessionStartTransitionCap = "created.session_start.transition_cap": Created --SessionStart--> Done,
        "max_transitions = 1: the session run fails with transition_cap as it starts";
    SummarizingRepliedNext = "summarizing.replied.next": Summarizing --ModelReplied--> Summarizing,
        "the summary opens the agent's conversation before its window; the next agent's summary is asked for";
    SummarizingRepliedDone = "summarizing.replied.done": Summarizing --ModelReplied--> Preparing,
        "the last summary is placed; the entry agent gets the goal";
    SummarizingRepliedCall = "summarizing.replied.call": Summarizing --ModelReplied--> Generating,
        "an agent's context summary is written: it is recorded and the agent's turn is asked for with the summary in place of the messages it replaces";
    SummarizingRepliedContextExhausted = "summarizing.replied.context_exhausted": Summarizing --ModelReplied--> Done,
        "even with the summary just written the agent's next request would not fit its context window: fails with context_exhausted";
    SummarizingFailedRetry = "summarizing.failed.retry": Summarizing --ModelFailed--> Summarizing,
        "the summary call is retried after its backoff, or made on the writer's next route";
    SummarizingFailedExhausted = "summarizing.failed.exhausted": Summarizing --ModelFailed--> Preparing,
        "a cap is reached before the summary could be retried: a session run's windows are placed without new summaries and the entry agent gets the goal; a context summary goes back to the step boundary, which finds the cap";
    SummarizingFailedFail = "summarizing.failed.fail": Summarizing --ModelFailed--> Done,
        "every route of the summary's writer gave up: fails with the provider error class";
    SummarizingRaise = "summarizing.raise": Summarizing --BudgetRaised--> Summarizing,
        "a cap is raised";
    SummarizingCancel = "summarizing.cancel": Summarizing --CancelRequested--> Done,
        "cancelled while a summary is written";
    PreparingProceedRetrieve = "preparing.proceed.retrieve": Preparing --Proceed--> Retrieving,
        "budgets allow a turn of an agent with a retriever (revision 5): Retrieve is emitted first";
    RetrievingRetrievedCall = "retrieving.retrieved.call": Retrieving --Retrieved--> Generating,
        "the passages (if any) are appended as a user-position data message; CallModel is emitted";
    RetrievingRetrievedCompact = "retrieving.retrieved.compact": Retrieving --Retrieved--> Generating,
        "the passages are appended and the request would not fit the agent's context window: the oldest tool results are dropped or shortened; CallModel is emitted";
    RetrievingRetrievedSummarize = "retrieving.retrieved.summarize": Retrieving --Retrieved--> Summarizing,
        "the passages are appended and the request would not fit the agent's context window: the agent on_overflow names is asked to summarise the oldest messages first";
    RetrievingRetrievedContextExhausted = "retrieving.retrieved.context_exhausted": Retrieving --Retrieved--> Done,
        "the passages are appended and the request cannot be made to fit the agent's context window: fails with context_exhausted";
    RetrievingRetrievedExhausted = "retrieving.retrieved.exhausted": Retrieving --Retrieved--> BudgetExhausted,
        "the passages are appended, but a cap was reached meanwhile: no model call is made";
    RetrievingRaise = "retrieving.raise": Retrieving --BudgetRaised--> Retrieving,
        "a cap is raised";
    RetrievingCancel = "retrieving.cancel": Retrieving --CancelRequested--> Done,
        "cancelled while the retriever runs";
    CallingToolsTimerWait = "calling_tools.timer.wait": CallingTools --TimerFired--> CallingTools,
        "a sleep_for/sleep_until call came due (its due instant was recorded when it started): it wakes; other calls still run";
    CallingToolsTimerInput = "calling_tools.timer.input": CallingTools --TimerFired--> AwaitingInput,
        "a sleeping call woke; what remains waits for a person";
    CallingToolsTimerDone = "calling_tools.timer.done": CallingTools --TimerFired--> Preparing,
        "the last outstanding call was a sleep: it woke and all results go back to the model in call order";
    CallingToolsDeadline = "calling_tools.deadline": CallingTools --TimerFired--> CallingTools,
        "a call's deadline for a person passed while other calls run: [timers.deadlines] answers it (reject, approve or input)";
    CallingToolsDeadlineFail = "calling_tools.deadline.fail": CallingTools --TimerFired--> Done,
        "a call's deadline for a person passed and its policy is fail: fails with tool_denied";
    CallingToolsDeadlineEscalate = "calling_tools.deadline.escalate": CallingTools --TimerFired--> CallingTools,
        "a call's deadline for a person passed while other calls run and its policy is escalate: the call waits for the named person under a new deadline";
    AwaitingInputDeadlineEscalate = "awaiting_input.deadline.escalate": AwaitingInput --TimerFired--> AwaitingInput,
        "a call's deadline for a person passed and its policy is escalate: the call waits for the named person under a new deadline";
    AwaitingInputDeadlineWait = "awaiting_input.deadline.wait": AwaitingInput --TimerFired--> AwaitingInput,
        "a call's deadline passed (reject or input answer it); another call still waits for a person";
    AwaitingInputDeadlineRun = "awaiting_input.deadline.run": AwaitingInput --TimerFired--> CallingTools,
        "a call's deadline passed and its policy is approve: the call runs";
    AwaitingInputDeadlineDone = "awaiting_input.deadline.done": AwaitingInput --TimerFired--> Preparing,
        "a call's deadline passed (reject, approve without running, or input): all results go back to the model";
    AwaitingInputDeadlineFail = "awaiting_input.deadline.fail": AwaitingInput --TimerFired--> Done,
        "a call's deadline for a person passed and its policy is fail: fails with tool_denied";
    AnyCompensate = "any.compensate": any --any--> Compensating,
        "the run was about to end failed or cancelled under on_failure = compensate, and completed calls declared an undo: the latest one's undo is emitted (CallTool)";
    AnyCompensateStopped = "any.compensate.stopped": any --any--> Done,
        "the run was about to end failed or cancelled under on_failure = compensate, and the latest completed call's undo arguments could not be filled: the run ends, the saga stopped";
    CompensatingReturnedNext = "compensating.returned.next": Compensating --ToolReturned--> Compensating,
        "an undo returned: the next latest completed call's undo is emitted";
    CompensatingReturnedDone = "compensating.returned.done": Compensating --ToolReturned--> Done,
        "the last undo returned: the run ends as it was going to (failed or cancelled), compensated";
    CompensatingReturnedStopped = "compensating.returned.stopped": Compensating --ToolReturned--> Done,
        "an undo failed (or the next one's arguments could not be filled): the saga stops, the run ends compensation_failed for a person";
    CompensatingInDoubtRetry = "compensating.in_doubt.retry": Compensating --EffectInDoubt--> Compensating,
        "an undo was interrupted and the agent's on_in_doubt is retry: performed again with the same idempotency key";
    CompensatingInDoubtStopped = "compensating.in_doubt.stopped": Compensating --EffectInDoubt--> Done,
        "an undo was interrupted and its outcome is unknown: the saga stops, the run ends compensation_failed for a person";
    CompensatingCancel = "compensating.cancel": Compensating --CancelRequested--> Compensating,
        "a cancel while compensating is recorded; the saga goes on (undoing is what a cancel asks for)";
}

impl EdgeId {
    /// The table row of this edge.
    pub fn row(self) -> &'static Edge {
        // `TABLE` is generated in `EdgeId` declaration order, one row per variant.
        &TABLE[self as usize]
    }

    /// The state it leaves; `None` for an edge from any started state.
    pub fn from(self) -> Option<StateKind> {
        self.row().from
    }

    /// The event it takes; `None` for any event.
    pub fn on(self) -> Option<EventKind> {
        self.row().on
    }

    /// The state it reaches.
    pub fn to(self) -> StateKind {
        self.row().to
    }

    /// The persisted name as an owned string (what a text record of the edge holds).
    // Named like `ToOwned::to_owned`, which an `EdgeId` also has (it is `Copy`), so that code
    // written when edges were strings (`t.edge.to_owned()` into a `String`) keeps compiling.
    #[allow(clippy::wrong_self_convention)]
    pub fn to_owned(self) -> String {
        self.as_str().to_owned()
    }
}

impl fmt::Display for EdgeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for EdgeId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for EdgeId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl Serialize for EdgeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EdgeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        EdgeId::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("`{name}` is not an edge of the machine"))
        })
    }
}

/// The row of the edge whose persisted name is `id`.
pub fn edge_by_id(id: &str) -> Option<&'static Edge> {
    EdgeId::parse(id).map(EdgeId::row)
}

/// `statechart.md`: a Mermaid `stateDiagram-v2` and the full edge table. `runtape statechart`
/// prints this; a test fails when the committed file differs.
pub fn render_statechart() -> String {
    let mut out = String::new();
    out.push_str("# runtape statechart\n\n");
    out.push_str("<!-- Generated by `runtape statechart` from `src/machine/table.rs`. Do not edit by hand:\n");
    out.push_str(
        "     change the table, then run `cargo run -- statechart > statechart.md`. -->\n\n",
    );
    out.push_str("Every state of a run and every edge `step` can take. `step` checks each transition it makes\n");
    out.push_str("against this table, so a path that is not listed here is reported as an internal error.\n\n");
    out.push_str("```mermaid\nstateDiagram-v2\n");
    out.push_str("    [*] --> Created\n");
    let mut pairs: Vec<(StateKind, StateKind, Vec<&'static str>)> = Vec::new();
    for e in TABLE {
        let Some(from) = e.from else { continue };
        let label = e.on.map_or("any", EventKind::name);
        match pairs.iter_mut().find(|(f, t, _)| *f == from && *t == e.to) {
            Some((_, _, labels)) => {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            None => pairs.push((from, e.to, vec![label])),
        }
    }
    for (from, to, labels) in &pairs {
        out.push_str(&format!(
            "    {} --> {}: {}\n",
            from.name(),
            to.name(),
            labels.join(", ")
        ));
    }
    out.push_str("    Done --> [*]\n");
    out.push_str("    note right of Done\n        any non-terminal state also reaches Done\n        when max_transitions is reached\n    end note\n");
    out.push_str("```\n\n");
    out.push_str("## Edges\n\n");
    out.push_str("| edge | from | event | to | meaning |\n|---|---|---|---|---|\n");
    for e in TABLE {
        let from = e.from.map_or("any but Created, Done", StateKind::name);
        let on = e.on.map_or("any", EventKind::name);
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.id,
            from,
            on,
            e.to.name(),
            e.meaning
        ));
    }
    out.push_str("\n`Done` refuses every event (`InvalidTransition`, state unchanged). Any (state, event) pair not\n");
    out.push_str("listed is refused the same way.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_ids_are_unique() {
        let mut ids: Vec<_> = TABLE.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }

    #[test]
    fn each_edge_id_is_its_row_and_its_name_round_trips() {
        assert_eq!(EdgeId::ALL.len(), TABLE.len());
        for (i, e) in EdgeId::ALL.iter().enumerate() {
            assert_eq!(e.row(), &TABLE[i]);
            assert_eq!(e.row().id, e.as_str());
            assert_eq!(EdgeId::parse(e.as_str()), Some(*e));
            let json = serde_json::to_string(e).expect("encodes");
            assert_eq!(serde_json::from_str::<EdgeId>(&json).ok(), Some(*e));
        }
        assert_eq!(EdgeId::parse("created.begin"), None);
        for k in StateKind::ALL {
            assert_eq!(StateKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).ok(),
                Some(serde_json::json!(k.as_str()))
            );
        }
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
    }

    /// Every persisted edge name released so far, which stored databases and canned histories
    /// hold: none may disappear or be renamed (add new ones here when they ship).
    #[test]
    fn released_names_never_change() {
        let released = [
            "created.start",
            "created.transition_cap",
            "created.cancel",
            "preparing.proceed.call",
            "preparing.proceed.exhausted",
            "preparing.raise",
            "preparing.edit",
            "preparing.cancel",
            "generating.replied.tools",
            "generating.replied.input",
            "generating.replied.resolved",
            "generating.replied.answer",
            "generating.replied.refused",
            "generating.replied.output_invalid",
            "generating.replied.output_failed",
            "generating.replied.fail",
            "generating.failed.retry",
            "generating.failed.fallback",
            "generating.failed.exhausted",
            "generating.failed.fail",
            "generating.raise",
            "generating.edit",
            "generating.edit.exhausted",
            "generating.cancel",
            "calling_tools.returned.wait",
            "calling_tools.returned.input",
            "calling_tools.returned.done",
            "calling_tools.input",
            "calling_tools.in_doubt.retry",
            "calling_tools.in_doubt.ask_wait",
            "calling_tools.in_doubt.ask",
            "calling_tools.in_doubt.reconcile",
            "calling_tools.reconciled.retry",
            "calling_tools.reconciled.wait",
            "calling_tools.reconciled.input",
            "calling_tools.reconciled.done",
            "calling_tools.in_doubt.fail",
            "calling_tools.raise",
            "calling_tools.edit",
            "calling_tools.edit.input",
            "calling_tools.edit.done",
            "calling_tools.cancel",
            "awaiting_input.input.wait",
            "awaiting_input.input.run",
            "awaiting_input.input.done",
            "awaiting_input.raise",
            "awaiting_input.edit",
            "awaiting_input.edit.done",
            "awaiting_input.cancel",
            "handoff.proceed.next",
            "handoff.proceed.complete",
            "handoff.proceed.unfinished",
            "handoff.proceed.no_route",
            "handoff.proceed.cycle",
            "handoff.raise",
            "handoff.edit",
            "handoff.cancel",
            "budget_exhausted.proceed.handoff",
            "budget_exhausted.proceed.fail",
            "budget_exhausted.raise.resume",
            "budget_exhausted.raise.still",
            "budget_exhausted.edit",
            "budget_exhausted.edit.resume",
            "budget_exhausted.cancel",
            "any.transition_cap",
            // Revision 3 (MCP tool lists).
            "preparing.tools_listed",
            // Revision 4 (delegation and handoffs).
            "generating.replied.transfer",
            "generating.replied.transfer_cycle",
            "calling_tools.child.wait",
            "calling_tools.child.input",
            "calling_tools.child.done",
            // Revision 5 (a transfer carries the conversation).
            "generating.replied.transfer_carry",
            "handoff.conversation.transfer",
            // Revision 5 (memory).
            "preparing.memory_loaded",
            "handoff.proceed.publish",
            "publishing.published.complete",
            "publishing.published.conflict",
            "publishing.published.cancelled",
            "publishing.cancel",
            "publishing.raise",
            // Revision 5 (sessions and the retriever).
            "created.session_start",
            "created.session_start.summarize",
            "created.session_start.transition_cap",
            "summarizing.replied.next",
            "summarizing.replied.done",
            "summarizing.failed.retry",
            "summarizing.failed.exhausted",
            "summarizing.failed.fail",
            "summarizing.raise",
            "summarizing.cancel",
            "preparing.proceed.retrieve",
            "retrieving.retrieved.call",
            "retrieving.retrieved.exhausted",
            "retrieving.raise",
            "retrieving.cancel",
            "generating.replied.truncated_retry",
            "generating.replied.truncated_continue",
            "generating.replied.truncated",
        ];
        for name in released {
            assert!(EdgeId::parse(name).is_some(), "{name} is gone");
        }
    }

    #[test]
    fn nothing_leaves_done() {
        assert!(TABLE.iter().all(|e| e.from != Some(StateKind::Done)));
    }
}
