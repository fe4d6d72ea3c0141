//! How the API says no: an HTTP status and one JSON object `{"type": "error", "error": LINE}`
//! whose line is what the command line would print for the same input (the same wording,
//! scrubbed of secrets, on one line, cut at 2,000 characters).
//!
//! | status | when |
//! |---|---|
//! | 400 | malformed or invalid input: a bad run id, body, spec, edit or raise (CLI exit 2) |
//! | 401 | a token is required and the request has none, or the wrong one |
//! | 403 | a state-changing request from another origin, or a `Host` this server is not |
//! | 404 | no such run, step or route |
//! | 409 | the run refuses it now: driven by another process, already ended, not waiting; a check that failed (CLI exit 1) |
//! | 413 | the body is larger than the cap |
//! | 415 | a body that is not `application/json` |
//! | 500 | an internal or storage error (CLI exit 3) |

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ops::{ErrorKind, OpsError};
use crate::term::one_line;

/// A refused or failed request.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ApiError {
    /// `status` with `message` (made one line when answered).
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// Bad input (400).
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// An internal error (500).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<OpsError> for ApiError {
    fn from(e: OpsError) -> Self {
        let status = match e.kind() {
            ErrorKind::Input => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict | ErrorKind::CheckFailed => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

/// The lower layers' errors as the operations report them ([`OpsError::kind`] decides).
macro_rules! via_ops {
    ($($t:ty),*) => {$(
        impl From<$t> for ApiError {
            fn from(e: $t) -> Self {
                OpsError::from(e).into()
            }
        }
    )*};
}
via_ops!(
    crate::store::StoreError,
    crate::history::HistoryError,
    crate::exec::EngineError,
    crate::config::ConfigError
);

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        // A body that parses but does not fit (axum says 422) is bad input like any: 400.
        let status = match r.status() {
            StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
            s => s,
        };
        let what = match status {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                "the body must be JSON: send `Content-Type: application/json`".to_owned()
            }
            StatusCode::PAYLOAD_TOO_LARGE => format!(
                "the body is larger than {} KiB; send less",
                super::security::MAX_BODY_BYTES >> 10
            ),
            _ => format!(
                "the body is not what this endpoint takes: {}",
                r.body_text()
            ),
        };
        ApiError::new(status, what)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"type": "error", "error": one_line(&self.message)});
        (self.status, Json(body)).into_response()
    }
}

/// A task that was to answer a request stopped (it panicked or was cancelled).
pub(crate) fn join_error(e: tokio::task::JoinError) -> ApiError {
    ApiError::internal(format!("the request's worker stopped: {e}"))
}
