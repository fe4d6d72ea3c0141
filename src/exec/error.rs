//! What can go wrong driving a run, each as one line saying what to do.

use crate::ledger::HistoryError;
use crate::machine::MachineError;
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
    /// A run of a session cannot start (revision 5): the name, or the session's latest run.
    #[error("{0}")]
    Session(String),
    /// The spec stored with a run could not be used.
    #[error("{0}")]
    Spec(String),
    /// The run's receipts cannot be continued with this engine's signer.
    #[error("{0}")]
    Receipts(String),
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
    /// The run's task stopped unexpectedly.
    #[error("the run's driver stopped unexpectedly: {0}")]
    Driver(String),
}

/// A store refusal because the run has ended, as the engine reports it.
pub(crate) fn finished(e: StoreError) -> EngineError {
    match e {
        StoreError::Finished { run, status } => EngineError::Finished { run, status },
        e => EngineError::Store(e),
    }
}
