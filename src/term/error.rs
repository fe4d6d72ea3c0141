//! A command's failure: one line for stderr and the exit status it maps to.

use std::fmt;

use super::{EXIT_FAILED, EXIT_INTERNAL, EXIT_USAGE};
use crate::config::ConfigError;
use crate::exec::EngineError;
use crate::history::HistoryError;
use crate::machine::MachineError;
use crate::store::StoreError;

/// A command's failure: one line for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
    /// What kind of bad input it was, for `runtape serve` to pick an HTTP status; the exit
    /// status does not depend on it.
    pub(crate) fault: Fault,
}

/// What a refused input did wrong (only [`Fault::Input`] for errors that are not bad input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Malformed, invalid or not applicable input.
    Input,
    /// It names a run or step that does not exist.
    Missing,
    /// The run is in a state that refuses it (driven elsewhere, already ended).
    Conflict,
}

impl CliError {
    /// Bad usage or input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
            fault: Fault::Input,
        }
    }

    /// Internal or storage trouble (exit 3).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_INTERNAL,
            message: message.into(),
            fault: Fault::Input,
        }
    }

    /// A check that failed (exit 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_FAILED,
            message: message.into(),
            fault: Fault::Input,
        }
    }

    /// The same error, marked as being about `fault`.
    pub(crate) fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UnknownRun(_) | StoreError::NoMemoryKey { .. } => {
                CliError::usage(e.to_string()).with_fault(Fault::Missing)
            }
            StoreError::LeaseHeld { .. } | StoreError::Finished { .. } => {
                CliError::usage(e.to_string()).with_fault(Fault::Conflict)
            }
            StoreError::DuplicateRun(_) => CliError::usage(e.to_string()),
            StoreError::SessionTaken { .. } => {
                CliError::usage(e.to_string()).with_fault(Fault::Conflict)
            }
            _ => CliError::internal(e.to_string()),
        }
    }
}

impl From<HistoryError> for CliError {
    fn from(e: HistoryError) -> Self {
        match e {
            HistoryError::Store(s) => s.into(),
            HistoryError::UnknownRun(_) | HistoryError::SeqOutOfRange { .. } => {
                CliError::usage(e.to_string()).with_fault(Fault::Missing)
            }
            HistoryError::WrongKey(_) => CliError::usage(e.to_string()),
            HistoryError::Tampered { .. } => CliError::failed(e.to_string()),
            _ => CliError::internal(e.to_string()),
        }
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Store(s) => s.into(),
            EngineError::History(h) => h.into(),
            EngineError::Machine(
                MachineError::EditDoesNotApply(_)
                | MachineError::NotARaise { .. }
                | MachineError::UnknownAgent(_)
                | MachineError::InputMismatch { .. }
                | MachineError::InvalidTransition { .. }
                | MachineError::UnknownEffect { .. },
            )
            | EngineError::MissingProvider { .. }
            | EngineError::MissingTool(_)
            | EngineError::AmbiguousInput { .. }
            | EngineError::Spec(_) => CliError::usage(e.to_string()),
            EngineError::Finished { .. }
            | EngineError::NoInputExpected(_)
            | EngineError::Session(_) => CliError::usage(e.to_string()).with_fault(Fault::Conflict),
            _ => CliError::internal(e.to_string()),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        if e.is_internal() {
            CliError::internal(e.to_string())
        } else {
            CliError::usage(e.to_string())
        }
    }
}
