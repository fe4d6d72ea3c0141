//! How runs fail (the classes recorded in `Done { Failed }`) and how `step` refuses an event.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::ids::{EffectId, Hlc};
use super::table::{EventKind, StateKind};

/// Why a run failed. When several apply at once the most severe wins; severity follows the
/// declaration order (see [`ErrorClass::precedence`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The correction budget ran out and at least one of the bad calls asked for a tool
    /// outside the agent's grant.
    ToolDenied,
    /// The correction budget ran out on unknown tools or invalid arguments.
    ToolFailed,
    /// The correction budget ran out on answers that did not match the agent's output schema.
    OutputInvalid,
    /// A non-idempotent tool call was interrupted mid-flight and the agent's policy is `fail`.
    EffectInDoubt,
    /// The provider rejected the credentials.
    ProviderAuth,
    /// The provider kept rate-limiting.
    ProviderRateLimit,
    /// The provider was unavailable (5xx, 529, timeouts, broken streams).
    ProviderUnavailable,
    /// The provider refused the content.
    ContentFilter,
    /// The model refused to answer (a refusal message, or the `refusal` stop reason).
    Refused,
    /// The provider said the request was malformed.
    BadRequest,
    /// Any other provider failure.
    Unknown,
    /// An agent was activated more than `max_agent_visits` times.
    HandoffCycle,
    /// An agent that is not an exit finished and no plan edge matched.
    NoRoute,
    /// A turn budget ran out with nothing left to continue.
    TurnLimit,
    /// A tool-call budget ran out with nothing left to continue.
    ToolCallLimit,
    /// A token budget ran out with nothing left to continue.
    TokenLimit,
    /// A cost budget ran out with nothing left to continue.
    CostLimit,
    /// A wall-time budget ran out with nothing left to continue.
    WallTimeLimit,
    /// The run reached its transition cap.
    TransitionCap,
    /// A reply was cut by the output-token limit and the agent's `on_truncated` policy is
    /// `fail`, or its retries and continuations spent the correction budget (revision 7).
    Truncated,
    /// The next request would not fit the agent's context window and its `on_overflow`
    /// policy is `fail`, or dropping or shortening every tool result would not make it fit
    /// (see [`context`](super::context)).
    ContextExhausted,
}

impl ErrorClass {
    /// Severity rank: lower is more severe. `cancelled` (not a failure class; a run's
    /// `Cancelled` outcome) outranks all of these.
    pub fn precedence(self) -> u8 {
        self as u8
    }

    /// The more severe of two classes.
    pub fn most_severe(self, other: ErrorClass) -> ErrorClass {
        if other.precedence() < self.precedence() {
            other
        } else {
            self
        }
    }

    /// The class for a run-ending budget of this kind.
    pub fn for_budget(key: super::BudgetKey) -> ErrorClass {
        match key {
            super::BudgetKey::Turns => ErrorClass::TurnLimit,
            super::BudgetKey::ToolCalls => ErrorClass::ToolCallLimit,
            super::BudgetKey::Tokens => ErrorClass::TokenLimit,
            super::BudgetKey::Cost => ErrorClass::CostLimit,
            super::BudgetKey::WallTime => ErrorClass::WallTimeLimit,
        }
    }

    /// The snake_case name used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ToolDenied => "tool_denied",
            ErrorClass::ToolFailed => "tool_failed",
            ErrorClass::OutputInvalid => "output_invalid",
            ErrorClass::EffectInDoubt => "effect_in_doubt",
            ErrorClass::ProviderAuth => "provider_auth",
            ErrorClass::ProviderRateLimit => "provider_rate_limit",
            ErrorClass::ProviderUnavailable => "provider_unavailable",
            ErrorClass::ContentFilter => "content_filter",
            ErrorClass::Refused => "refused",
            ErrorClass::BadRequest => "bad_request",
            ErrorClass::Unknown => "unknown",
            ErrorClass::HandoffCycle => "handoff_cycle",
            ErrorClass::NoRoute => "no_route",
            ErrorClass::TurnLimit => "turn_limit",
            ErrorClass::ToolCallLimit => "tool_call_limit",
            ErrorClass::TokenLimit => "token_limit",
            ErrorClass::CostLimit => "cost_limit",
            ErrorClass::WallTimeLimit => "wall_time_limit",
            ErrorClass::TransitionCap => "transition_cap",
            ErrorClass::Truncated => "truncated",
            ErrorClass::ContextExhausted => "context_exhausted",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class a provider assigns to a failed model call. Decided by the adapter from the HTTP
/// status and the provider's error type, never from message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorClass {
    /// 401/403, bad key.
    ProviderAuth,
    /// 429.
    ProviderRateLimit,
    /// 5xx, 529, timeouts, connection and stream failures.
    ProviderUnavailable,
    /// Refused for content.
    ContentFilter,
    /// 400/404/422: the request itself is wrong.
    BadRequest,
    /// Anything else.
    Unknown,
}

impl From<ProviderErrorClass> for ErrorClass {
    fn from(c: ProviderErrorClass) -> Self {
        match c {
            ProviderErrorClass::ProviderAuth => ErrorClass::ProviderAuth,
            ProviderErrorClass::ProviderRateLimit => ErrorClass::ProviderRateLimit,
            ProviderErrorClass::ProviderUnavailable => ErrorClass::ProviderUnavailable,
            ProviderErrorClass::ContentFilter => ErrorClass::ContentFilter,
            ProviderErrorClass::BadRequest => ErrorClass::BadRequest,
            ProviderErrorClass::Unknown => ErrorClass::Unknown,
        }
    }
}

/// A run's failure: its class and a one-line explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The class.
    pub class: ErrorClass,
    /// What happened, for a person.
    pub message: String,
}

impl Failure {
    /// A failure of `class` explained by `message`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Failure {
            class,
            message: message.into(),
        }
    }
}

/// Why `step` refused an event. The state is unchanged; nothing is emitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MachineError {
    /// The event does not apply in this state (and `Done` refuses everything).
    #[error("event `{event}` does not apply in state `{state}`")]
    InvalidTransition {
        /// The current state.
        state: StateKind,
        /// The event.
        event: EventKind,
    },
    /// The event answers an effect that is not outstanding (stale, duplicate or foreign).
    #[error("effect {effect} is not outstanding in state `{state}`")]
    UnknownEffect {
        /// The current state.
        state: StateKind,
        /// The effect named by the event.
        effect: EffectId,
    },
    /// A timer fired before its due instant, or named another instant than the one recorded.
    #[error("timer {effect} is due at {due:?} and cannot fire at {at:?}")]
    TimerEarly {
        /// The `StartTimer` effect.
        effect: EffectId,
        /// The due instant recorded for it.
        due: Hlc,
        /// The firing's time.
        at: Hlc,
    },
    /// A person's input does not fit the request it answers (e.g. `approve` for a question).
    #[error("input for {effect} does not fit: {reason}")]
    InputMismatch {
        /// The request answered.
        effect: EffectId,
        /// What was expected.
        reason: String,
    },
    /// A `BudgetRaised` that would not raise anything.
    #[error("budget {key} is already {current:?}; give a larger value than that")]
    NotARaise {
        /// Which budget.
        key: super::BudgetKey,
        /// Its current cap.
        current: Option<u64>,
        /// The value given.
        requested: u64,
    },
    /// A `BudgetRaised` or edit names an agent the spec does not define.
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    /// A fork edit does not apply to the state at the fork point.
    #[error("edit does not apply: {0}")]
    EditDoesNotApply(String),
    /// A `ToolsListed` event that cannot be recorded (a tool of another server, a bad name).
    #[error("tool list refused: {0}")]
    BadListing(String),
    /// A `ConversationSupplied` whose messages are not the conversation the state waits for
    /// (revision 5): nothing is copied.
    #[error(
        "the messages supplied for agent {agent}'s conversation do not match it: expected {expected_len} messages with head {expected_head}, got {got_len} with head {got_head}"
    )]
    ConversationMismatch {
        /// Whose conversation was waited for.
        agent: String,
        /// Its length in the state.
        expected_len: u32,
        /// Its head in the state (hex).
        expected_head: String,
        /// How many messages were supplied.
        got_len: usize,
        /// The head they make (hex).
        got_head: String,
    },
    /// A `SessionStart` whose history does not fit the run (revision 5).
    #[error("session history refused: {0}")]
    BadSessionSeed(String),
    /// A `MemoryLoaded` or `MemoryPublished` event that does not fit the run (another global
    /// memory, loaded twice, versions that do not follow the staged writes).
    #[error("memory event refused: {0}")]
    BadMemory(String),
    /// The code took a path its transition table does not declare: a bug in runtape.
    #[error("internal: transition {edge} declares {declared} but produced {actual}")]
    EdgeMismatch {
        /// The edge.
        edge: super::table::EdgeId,
        /// What the table says.
        declared: String,
        /// What happened.
        actual: String,
    },
}
