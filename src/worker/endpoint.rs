//! `runtape worker --metrics-addr HOST:PORT`: the worker's health and metrics over HTTP, for
//! an orchestrator's probes and a Prometheus scraper. Off unless asked for.
//!
//! - `GET /healthz`: `200` when the worker's database answers and its loop turns, `503`
//!   otherwise (connecting, draining, the database unreachable, the loop stalled), with one
//!   line of JSON saying which ([`super::health`]).
//! - `GET /metrics`: the Prometheus text format ([`super::metrics`]).
//!
//! Nothing else: no run data, no control. The endpoint says nothing secret (error lines are
//! scrubbed of every secret the process knows), so it may listen beyond loopback for a
//! scraper on another host. Connections are bounded as `runtape serve`'s are
//! ([`crate::http_server`]): at most [`MAX_CONNECTIONS`] at once, headers within
//! [`HEADER_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::health::{Health, verdict};
use super::metrics::{CONTENT_TYPE, Metrics};
use crate::http_server::{ConnectionLimits, serve};

/// Connections served at once: probes and a scraper or two.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a request's headers may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Listens on `addr` (port 0: any free port; the listener says which).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/healthz` and `/metrics` on `listener` until the process ends.
pub async fn run(listener: TcpListener, metrics: Arc<Metrics>, health: Arc<Health>) {
    let limits = ConnectionLimits {
        header_timeout: HEADER_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
    };
    serve(
        listener,
        router(metrics, health),
        limits,
        std::future::pending(),
    )
    .await;
}

/// The routes.
fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(prometheus))
        .with_state(Shared { metrics, health })
}

async fn healthz(State(s): State<Shared>) -> Response {
    let (snapshot, now) = s.health.snapshot();
    let (ok, body) = verdict(&snapshot, now, s.metrics.in_flight());
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let line = format!("{}\n", crate::secrets::scrub_text(&body.to_string()));
    (status, [(header::CONTENT_TYPE, "application/json")], line).into_response()
}

async fn prometheus(State(s): State<Shared>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], s.metrics.render()).into_response()
}

/// `HOST:PORT` as `--metrics-addr` takes it (`localhost` is 127.0.0.1), or the one line that
/// says how to write it.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.replacen("localhost:", "127.0.0.1:", 1)
        .parse()
        .map_err(|_| {
            format!(
                "--metrics-addr `{}` is not HOST:PORT; write e.g. 127.0.0.1:9464, [::1]:9464 or 0.0.0.0:9464",
                text.escape_debug()
            )
        })
}
