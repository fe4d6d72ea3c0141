//! What bounds every connection `runtape serve` accepts: how many are open at once, how long
//! a request's headers may take to arrive, and how long its body may take.
//!
//! - **Connections**: at most [`Limits::max_connections`] are served at once. The next one is
//!   accepted when one closes; until then it waits in the system's listen queue, costing the
//!   server nothing.
//! - **Headers**: a connection whose request line and headers have not all arrived within
//!   [`Limits::header_timeout`] is closed (hyper's header-read timeout). This also closes a
//!   kept-alive connection that sends no next request, so a client that opens connections and
//!   trickles a header (slow loris) holds none for longer than that.
//! - **Bodies**: a request body not in full within [`Limits::body_timeout`] of its headers is
//!   answered `408` and its connection closed ([`body_deadline`]). A response being streamed
//!   (Server-Sent Events) is not bounded: only what the client sends is.
//!
//! The accept loop is [`crate::http_server::serve`] (shared with `runtape worker`'s health
//! and metrics endpoint): `axum::serve` sets no read timeout and takes connections without
//! limit, so it runs hyper's HTTP/1 connections itself.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio::net::TcpListener;

use super::error::ApiError;
use super::security::MAX_BODY_BYTES;

/// The limits every connection is served under (`runtape serve --header-timeout-ms
/// --body-timeout-ms --max-connections`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// How long a request's line and headers may take to arrive in full (and how long a
    /// kept-alive connection may wait for its next request).
    pub(crate) header_timeout: Duration,
    /// How long a request's body may take to arrive in full, from its headers.
    pub(crate) body_timeout: Duration,
    /// Connections served at once.
    pub(crate) max_connections: usize,
}

impl Limits {
    /// The default header timeout, ms: a browser or a program sends its headers at once.
    pub(crate) const HEADER_TIMEOUT_MS: u64 = 10_000;
    /// The default body timeout, ms: a body is at most 1 MiB ([`MAX_BODY_BYTES`]).
    pub(crate) const BODY_TIMEOUT_MS: u64 = 30_000;
    /// The default connection cap: room for a thousand pages following runs, each holding an
    /// event stream, and their reads.
    pub(crate) const MAX_CONNECTIONS: u64 = 4096;
}

/// Serves `router` on `listener` under `limits` until `stop` resolves; then accepts no more
/// connections, lets each finish the request it is serving, and returns once all are closed
/// ([`crate::http_server::serve`], which `runtape worker`'s endpoint shares).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let connections = crate::http_server::ConnectionLimits {
        header_timeout: limits.header_timeout,
        max_connections: limits.max_connections,
    };
    crate::http_server::serve(listener, router, connections, stop).await;
}

/// The body timeout, as [`body_deadline`]'s state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyTimeout(pub(crate) Duration);

/// Reads a request's body in full within the body timeout of its headers, then hands the
/// request on with it. Reads at most one byte past [`MAX_BODY_BYTES`], so an oversized body
/// still gets the cap's own answer (`413`) from the handler. A body not in by the deadline is
/// answered `408` and its connection closed; a request without a body passes at once.
pub(crate) async fn body_deadline(
    State(BodyTimeout(timeout)): State<BodyTimeout>,
    req: Request,
    next: Next,
) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            bytes.extend_from_slice(&chunk?);
            if bytes.len() > MAX_BODY_BYTES {
                break;
            }
        }
        Ok::<_, axum::Error>(bytes)
    };
    let refused = match crate::clock::timeout(timeout, read).await {
        Ok(Ok(bytes)) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Err(e)) => ApiError::bad(format!("the request body could not be read: {e}")),
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive in full within {} ms; send it at once (runtape serve --body-timeout-ms sets the limit)",
                timeout.as_millis()
            ),
        ),
    };
    closing(refused.into_response())
}

/// `response`, closing its connection after it (what is left of the body is never read).
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
