//! What can go wrong driving a run, each as one line saying what to do.

use crate::ledger::{HistoryError, RecordError};
use crate::machine::{MachineError, SpecError};
use crate::store::{RunStatus, StoreError};

/// An engine call failed. The Display is one line saying what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored history could not be read back.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The machine refused an event.
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// An agent's route names a provider that is not registered.
    #[error(
        "agent `{agent}` uses provider `{provider}`, which is not registered; define it in the spec or register it"
    )]
    MissingProvider {
        /// The agent.
        agent: String,
        /// The provider name.
        provider: String,
    },
    /// A tool in the spec has no implementation registered.
    #[error(
        "tool `{0}` is in the spec but no implementation is registered; register it or remove it"
    )]
    MissingTool(String),
    /// The run has ended.
    #[error("run {run} has already ended ({status}); fork it to continue from an earlier step")]
    Finished {
        /// The run.
        run: String,
        /// How it ended.
        status: RunStatus,
    },
    /// No call of the run waits for a person.
    #[error("run {0} is not waiting for input")]
    NoInputExpected(String),
    /// Several calls wait for a person; name one.
    #[error("run {run} waits for input on several calls ({calls}); name one of them")]
    AmbiguousInput {
        /// The run.
        run: String,
        /// Their call ids.
        calls: String,
    },
    /// A run named as a run of a session is not one (revision 5).
    #[error("`{name}` #{index} is not a run of a session")]
    NotASessionRun {
        /// The session name given, shortened to one line.
        name: String,
        /// The index given.
        index: u64,
    },
    /// The spec follows a revision of the machine's rules from before sessions.
    #[error(
        "this spec follows revision {semantics} of the machine's rules; sessions need revision {needs}"
    )]
    SessionRevision {
        /// The spec's revision.
        semantics: u32,
        /// The first revision with sessions.
        needs: u32,
    },
    /// A delegated child run was asked to be a run of a session.
    #[error("a delegated child run cannot be a run of a session")]
    ChildInSession,
    /// A session name outside the allowed characters or length.
    #[error("`{name}` is not a session name: use 1 to {max} letters, digits, `.`, `_` or `-`")]
    BadSessionName {
        /// The name given, shortened to one line.
        name: String,
        /// The longest name allowed.
        max: usize,
    },
    /// The session's latest run has not ended, so the next cannot start.
    #[error(
        "session {name}'s latest run, {latest} (run {index}), has not ended ({status}): `runtape resume {latest}` to finish it, or `runtape cancel {latest}`, then start the next"
    )]
    SessionBusy {
        /// The session.
        name: String,
        /// Its latest run's id.
        latest: String,
        /// That run's index in the session.
        index: u64,
        /// How that run stands.
        status: RunStatus,
    },
    /// A session run replayed from a cassette that never began cannot be continued.
    #[error(
        "this run replays a session run from a cassette and never began: the history it begins with is in the cassette only; replay the cassette again"
    )]
    SessionReplayNeverBegan,
    /// The spec is refused.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The spec has a `[retriever]` and the engine has no retriever to run it.
    #[error(
        "the spec has a [retriever] but no retriever is registered; give [retriever] a command, or register one"
    )]
    NoRetriever,
    /// A transition could not be recorded: a value JSON cannot carry, or a receipt that could
    /// not be sealed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A value could not be encoded as JSON (a spec or setup with a value JSON cannot carry).
    #[error("cannot encode the {what}: {reason}")]
    Unencodable {
        /// What was being encoded.
        what: &'static str,
        /// What the encoder said.
        reason: String,
    },
    /// The run's receipts are sealed with another key than this engine's signer.
    #[error(
        "run {run}'s receipts are sealed with {sealed_with}; continue it with the same receipt key (RUNTAPE_RECEIPT_KEY or --receipt-key)"
    )]
    ReceiptKeyMismatch {
        /// The run.
        run: String,
        /// What sealed them (a key id, or "no key").
        sealed_with: String,
    },
    /// This process could not be sure its lease was still valid when it was about to start a
    /// non-idempotent call (it was frozen or starved for most of the lease): the call was not
    /// started, and this process stopped driving the run.
    #[error(
        "run {run}: this process was too slow to be sure it still held the run's lease, so it did not start call {call_id} and stopped; `runtape resume {run}` continues (the call is in doubt there)"
    )]
    LeaseExpired {
        /// The run.
        run: String,
        /// The call not started.
        call_id: String,
    },
    /// The engine is shutting down and takes no new work.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The run's task ended without reporting how the run ended (it panicked or was dropped).
    #[error("the run's driver stopped unexpectedly: the task was dropped")]
    TaskDropped,
    /// A blocking store read did not finish (its thread panicked or was cancelled).
    #[error("the run's driver stopped unexpectedly: a store read stopped: {reason}")]
    ReadStopped {
        /// What the runtime said.
        reason: String,
    },
    /// A replay's recording has no answer for a global memory load or publish of this run.
    #[error("the recording holds no {what} global memory `{name}` for this run")]
    NotRecorded {
        /// `load of` or `outcome for the publish to`.
        what: &'static str,
        /// The global memory.
        name: String,
    },
    /// The run's stored conversation does not match its state: its history was changed.
    #[error(
        "run {run}: the stored conversation does not match the run's state ({reason}); `runtape verify {run}` reports what changed"
    )]
    ConversationMismatch {
        /// The run.
        run: String,
        /// What the machine refused.
        reason: MachineError,
    },
    /// The run's state waits for nothing and has nothing in flight: it cannot go on.
    #[error("run {run} is in state {state} with nothing in flight")]
    Stalled {
        /// The run.
        run: String,
        /// Its state's kind.
        state: String,
    },
}

/// A store refusal because the run has ended, as the engine reports it.
pub(crate) fn finished(e: StoreError) -> EngineError {
    match e {
        StoreError::Finished { run, status } => EngineError::Finished { run, status },
        e => EngineError::Store(e),
    }
}
