//! The pure core: typed run states, events in, effects out.
//!
//! [`step`] maps `(state, event, spec)` to a [`Transition`]: the next [`RunState`], the
//! [`Effect`]s to perform, the messages appended to conversations, and trace notes. It has no
//! I/O, no async, no clock and no randomness: time and ids arrive in the [`Event`], and every
//! map it outputs is ordered. The same inputs give byte-identical outputs, which is what makes
//! runs replayable and [`RunState::state_hash`] meaningful.
//!
//! The edges `step` may take are listed as data in [`table::TABLE`]; `step` checks every
//! transition against it and `statechart.md` is rendered from it.
//!
//! # Driving the machine by hand
//!
//! ```
//! use runtape::machine::*;
//!
//! let spec = RunSpec::build(Spec {
//!     agents: vec![AgentSpec::new("solo", "scripted", "demo")],
//!     ..Spec::default()
//! })?;
//! let run = RunId::new("r1");
//! let t = step(&RunState::Created, &Event::new(&run, Hlc::from_ms(0), EventBody::Start { goal: "hi".into() }), &spec)?;
//! let t = step(&t.next, &Event::new(&run, Hlc::from_ms(1), EventBody::Proceed), &spec)?;
//! let Effect::CallModel { id, .. } = &t.effects[0] else { unreachable!() };
//! let reply = EventBody::ModelReplied { effect: id.clone(), reply: ModelReply::text("hello"), chunks: vec![] };
//! let t = step(&t.next, &Event::new(&run, Hlc::from_ms(2), reply), &spec)?;
//! let t = step(&t.next, &Event::new(&run, Hlc::from_ms(3), EventBody::Proceed), &spec)?;
//! assert_eq!(t.next.outcome(), Some(&Outcome::Completed { answer: Some("hello".into()), output: None }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod allowance;
pub mod attachment;
mod batch;
mod budget;
mod child;
pub mod context;
pub mod context_summary;
pub mod deadline;
mod delegation;
mod edit;
mod effect;
mod error;
pub mod escalation;
mod event;
pub mod flow_policy;
mod guard;
pub mod hidden;
mod history_hash;
mod ids;
pub mod label;
pub mod memory;
mod message;
mod offer;
mod output;
mod plan;
pub mod quarantine;
mod reply;
pub mod retrieval;
mod retry;
mod route;
pub mod saga;
pub mod session;
mod settings;
mod spec;
mod spec_error;
mod state;
mod step;
mod summary;
pub mod table;
pub mod timer;
pub mod truncation;
pub mod wake;

pub use attachment::{Attachment, AttachmentKind};
pub use batch::{PERFORMED_WITHOUT_RESULT, TOOL_UNAVAILABLE};
pub use budget::{BudgetKey, Limits, Remaining, Scope, Usage, first_exhausted};
pub use child::{ChildOutcome, ChildProof, ChildReceipt, ChildReport};
pub use deadline::{Deadline, OnDeadline};
pub use delegation::{
    CHILD_RECEIPT_SEMANTICS, ChildBudget, DEFAULT_MAX_DEPTH, DELEGATE_PREFIX, Delegation,
    HARD_MAX_DEPTH, SpecDelegate, TRANSFER_CONVERSATION_SEMANTICS, TRANSFER_PREFIX,
};
pub use edit::Edit;
pub use effect::{Effect, InputKind, InputRequest, ModelRequest};
pub use error::{ErrorClass, Failure, MachineError, ProviderErrorClass};
pub use escalation::{Escalated, Escalation};
pub use event::{Event, EventBody, HumanInput, Reconciliation, ToolOutcome};
pub use flow_policy::{ArgumentRule, OnUntrusted, ToolGuard, Violation};
pub use hidden::HiddenValue;
pub use history_hash::{HistoryHash, SHA256_HISTORY_SEMANTICS};
pub use ids::{AgentId, Digest, EffectId, EffectRef, Hlc, RunId};
pub use label::{Confidentiality, Integrity, Label};
pub use memory::{
    GlobalView, LoadedAt, MEMORY_SEMANTICS, Memory, MemoryLimits, MemoryScope, MemorySpec,
    PUBLISH_CAP_SEMANTICS, PendingCancel, PublishOutcome, Staged, Versioned,
};
pub use message::{
    Appended, ConversationGap, ConversationRef, Conversations, Message, Reasoning, Role, ToolCall,
    check_supplied, head_of,
};
/// The definition of tool `name` in a run: the spec's, else the one recorded for a tool an
/// MCP server added after the run started (revision 4). Call it to show the model a request's
/// offered tools.
pub use offer::{OfferedKind, tool as offered_tool};
pub use output::{OUTPUT_FEEDBACK, refusal_of};
pub use plan::{DEFAULT_MAX_AGENT_VISITS, Plan, PlanEdge, When};
pub use quarantine::{AnswerKind, QuarantineSpec};
pub use reply::{Finish, FinishReason, ModelFailure, ModelReply, TokenUsage, ToolCallRequest};
pub use retrieval::{Passage, RETRIEVAL_SEMANTICS, Retrieval, RetrieverSpec};
pub use saga::{Compensation, OnFailure, SagaEnd, SagaEntry, SagaStatus, saga_end};
pub use session::{
    CarriedConversation, SESSION_SEMANTICS, SessionSeed, SessionSpec, SessionWindow,
};
pub use settings::{MAX_STOP_SEQUENCES, ModelSettings, ReasoningEffort, ReasoningSettings};
pub use spec::{
    ADDED_TOOLS_SEMANTICS, AgentSpec, Backoff, DEFAULT_COOLDOWN_MS, DEFAULT_CORRECTION_BUDGET,
    DEFAULT_MAX_TRANSITIONS, FIRST_SEMANTICS, HARD_MAX_TRANSITIONS, MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_DEPTH, MAX_RETRY_AFTER_MS, MAX_TOOL_NAME, OnExhausted, OnInDoubt, Route,
    RunOnExhausted, RunSpec, SEMANTICS, Spec, SpecError, ToolSpec, did_you_mean,
    is_valid_tool_name, server_pattern, tags,
};
pub use state::{
    AgentRun, Batch, ListedTools, ModelCall, Outcome, RunData, RunState, Slot, SlotStatus,
    ToolResult, Transfer,
};
pub use step::{Note, Transition, step};
pub use summary::{Summaries, SummaryJob};
pub use table::{Edge, EdgeId, EventKind, StateKind};
pub use timer::TimerSpec;
pub use truncation::{CONTINUE_PROMPT, OnTruncated, TRUNCATION_SEMANTICS, is_truncated};
