//! Serving HTTP/1 on a TCP listener with every connection bounded, for the processes that
//! answer HTTP: `runtape serve` (its API and page) and `runtape worker` (its health and
//! metrics, [`crate::worker::endpoint`]).
//!
//! - **Connections**: at most [`ConnectionLimits::max_connections`] are served at once. The
//!   next one is accepted when one closes; until then it waits in the system's listen queue,
//!   costing the process nothing.
//! - **Headers**: a connection whose request line and headers have not all arrived within
//!   [`ConnectionLimits::header_timeout`] is closed (hyper's header-read timeout). This also
//!   closes a kept-alive connection that sends no next request, so a client that opens
//!   connections and trickles a header (slow loris) holds none for longer than that.
//!
//! `axum::serve` sets no read timeout and takes connections without limit, so [`serve`] runs
//! hyper's HTTP/1 connections itself, as `axum::serve` does (graceful shutdown included).
//! What a request's body may take is the router's business (`runtape serve` bounds it).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What bounds every connection [`serve`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request's line and headers may take to arrive in full (and how long a
    /// kept-alive connection may wait for its next request).
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Serves `router` on `listener` under `limits` until `stop` resolves; then accepts no more
/// connections, lets each finish the request it is serving, and returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                // Never closed: this function holds the semaphore.
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a little rather than spin; the permit goes back.
                    if !is_connection_error(&e) {
                        crate::clock::system().sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection that ends in an error (a timeout, a reset) is simply closed.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// An accept error that concerns one connection only (it was reset before it was taken).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
}
