//! A command's failure: one line for stderr and the exit status it maps to.

use std::fmt;

use super::{EXIT_FAILED, EXIT_INTERNAL, EXIT_PRUNED, EXIT_USAGE};
use crate::config::ConfigError;
use crate::exec::EngineError;
use crate::history::HistoryError;
use crate::ops::{ErrorKind, OpsError};
use crate::store::StoreError;

/// A command's failure: one line for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl CliError {
    /// Bad usage or input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// Internal or storage trouble (exit 3).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_INTERNAL,
            message: message.into(),
        }
    }

    /// A check that failed (exit 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<OpsError> for CliError {
    fn from(e: OpsError) -> Self {
        let message = e.to_string();
        match e.kind() {
            ErrorKind::Input | ErrorKind::NotFound | ErrorKind::Conflict => {
                CliError::usage(message)
            }
            ErrorKind::CheckFailed => CliError::failed(message),
            ErrorKind::Pruned => CliError {
                code: EXIT_PRUNED,
                message,
            },
            _ => CliError::internal(message),
        }
    }
}

/// The lower layers' errors as the operations report them ([`OpsError::code`] decides).
macro_rules! via_ops {
    ($($t:ty),*) => {$(
        impl From<$t> for CliError {
            fn from(e: $t) -> Self {
                OpsError::from(e).into()
            }
        }
    )*};
}
via_ops!(StoreError, HistoryError, EngineError, ConfigError);
