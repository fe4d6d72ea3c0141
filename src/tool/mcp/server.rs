//! Servers as process-wide resources: [`McpHub`] keeps one [`McpServer`] per distinct
//! configuration, started on first use, shared by every run of the process, restarted once
//! when it dies, and stopped by [`McpHub::shutdown`].
//!
//! # Restarts
//!
//! A server found dead when a call needs it (its process exited, its session closed) is
//! started again, once. A server that dies again — or fails to start — before any call to it
//! has succeeded is given up on: every later call in this process fails at once with an error
//! result naming the server and why, so the model can carry on without it and the run is not
//! failed by a broken tool.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, MetaObject,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::McpError;
use super::config::McpServerConfig;
use super::connection::{Connection, ProgressSink};
use super::tap::OVERSIZED_CODE;

/// Every server this process has been asked for.
#[derive(Default)]
pub struct McpHub {
    servers: Mutex<BTreeMap<String, Arc<McpServer>>>,
}

impl McpHub {
    /// An empty hub (tests and embeddings that want their own; the engine uses
    /// [`McpHub::global`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The process's hub: what [`Setup::install`](crate::config::Setup::install) and
    /// `runtape` use. Call [`shutdown`](Self::shutdown) on it before the process exits.
    pub fn global() -> &'static McpHub {
        static HUB: OnceLock<McpHub> = OnceLock::new();
        HUB.get_or_init(McpHub::new)
    }

    /// The server for `config` (the same one for the same configuration), not started yet if
    /// it is new. `hidden_env` names variables a stdio server never gets under `env_all`
    /// (see [`crate::tool::env`]).
    pub fn server(&self, config: &McpServerConfig, hidden_env: &[String]) -> Arc<McpServer> {
        let key = config.key();
        let mut servers = lock(&self.servers);
        servers
            .entry(key)
            .or_insert_with(|| {
                Arc::new(McpServer {
                    config: config.clone(),
                    hidden_env: hidden_env.to_vec(),
                    state: tokio::sync::Mutex::new(State::default()),
                    list_changes: Arc::default(),
                })
            })
            .clone()
    }

    /// Stops every started server (see `Connection`'s shutdown order) and forgets them all;
    /// the next use starts them anew.
    pub async fn shutdown(&self) {
        let servers: Vec<Arc<McpServer>> = std::mem::take(&mut *lock(&self.servers))
            .into_values()
            .collect();
        futures_util::future::join_all(servers.iter().map(|s| s.stop())).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One server: its configuration and its connection, if started.
pub struct McpServer {
    config: McpServerConfig,
    hidden_env: Vec<String>,
    state: tokio::sync::Mutex<State>,
    /// `notifications/tools/list_changed` received, over all its connections.
    list_changes: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Default)]
struct State {
    live: Option<Arc<Connection>>,
    /// Deaths and failed starts since the last successful call.
    failures: u32,
    /// Set once the server is given up on: why.
    broken: Option<String>,
}

/// How a call failed, before it is worded for the model.
pub(crate) enum CallFailure {
    /// The server could not be started or was given up on.
    Unavailable(McpError),
    /// The server went away while the call was in flight.
    Died(String),
    /// The server answered with a JSON-RPC error.
    Refused(String),
    /// The answer was larger than the wire limit.
    Oversized(String),
    /// The call's time ran out (`notifications/cancelled` was sent).
    TimedOut(Duration),
    /// The run was cancelled (`notifications/cancelled` was sent).
    Cancelled,
}

impl McpServer {
    /// Its configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// How many times the server said its tool list changed (over restarts too): a run lists
    /// it again at its next step boundary when this moved.
    pub fn list_changes(&self) -> u64 {
        self.list_changes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts it if it is not running (or restarts it once if it died; see the module docs).
    pub(crate) async fn start(&self) -> Result<Arc<Connection>, McpError> {
        let mut state = self.state.lock().await;
        if let Some(why) = &state.broken {
            return Err(McpError::new(&self.config.name, why.clone()));
        }
        if let Some(live) = &state.live {
            if !live.is_closed() {
                return Ok(live.clone());
            }
            let note = live.death_note().await;
            live.close().await;
            state.live = None;
            state.failures += 1;
            // The note quotes the server's stderr: no known secret goes to the log.
            tracing::warn!(
                server = %self.config.name,
                "MCP server stopped{}",
                crate::secrets::scrub_text(&note)
            );
            if state.failures >= 2 {
                let why = format!(
                    "stopped again after a restart{note} – it is not restarted again in this process; fix the server"
                );
                state.broken = Some(why.clone());
                return Err(McpError::new(&self.config.name, why));
            }
        }
        match Connection::open(&self.config, &self.hidden_env, self.list_changes.clone()).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                state.live = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                state.failures += 1;
                if state.failures >= 2 {
                    state.broken = Some(format!(
                        "{} (it is not started again in this process)",
                        e.message
                    ));
                }
                Err(e)
            }
        }
    }

    /// Performs `call` (see [`Call`]). `cancel` firing sends `notifications/cancelled`; so
    /// does dropping the future. An idempotent call whose server died in flight is sent once
    /// more to the restarted server.
    pub(crate) async fn call(&self, call: Call<'_>) -> Result<Value, CallFailure> {
        let mut attempts = if call.idempotent { 2 } else { 1 };
        loop {
            attempts -= 1;
            let conn = self.start().await.map_err(CallFailure::Unavailable)?;
            let outcome = call_on(&conn, &call).await;
            match outcome {
                Err(CallFailure::Died(_)) if attempts > 0 => continue,
                Err(CallFailure::Died(_)) => {
                    let note = conn.death_note().await;
                    return Err(CallFailure::Died(note));
                }
                Ok(_) => {
                    self.state.lock().await.failures = 0;
                    return outcome;
                }
                other => return other,
            }
        }
    }

    /// Stops it if it was started.
    async fn stop(&self) {
        let live = self.state.lock().await.live.take();
        if let Some(conn) = live {
            conn.close().await;
        }
    }
}

/// One `tools/call`.
pub(crate) struct Call<'a> {
    /// The server's name for the tool.
    pub(crate) remote: &'a str,
    /// Its arguments.
    pub(crate) args: Map<String, Value>,
    /// The request's `_meta` (the idempotency key).
    pub(crate) meta: Map<String, Value>,
    /// How long to wait for the answer.
    pub(crate) limit: Option<Duration>,
    /// Fires when the run is cancelled.
    pub(crate) cancel: &'a CancellationToken,
    /// Whether sending it again after the server died is safe.
    pub(crate) idempotent: bool,
    /// Where its progress notifications go.
    pub(crate) progress: ProgressSink,
}

/// One `tools/call` on a live connection.
async fn call_on(conn: &Connection, call: &Call<'_>) -> Result<Value, CallFailure> {
    let params =
        CallToolRequestParams::new(call.remote.to_owned()).with_arguments(call.args.clone());
    let (limit, cancel) = (call.limit, call.cancel);
    let options = PeerRequestOptions::no_options()
        .with_meta(RequestMetaObject(MetaObject(call.meta.clone())));
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = conn
        .peer
        .send_cancellable_request(request, options)
        .await
        .map_err(|_| CallFailure::Died(String::new()))?;
    conn.events
        .route(&handle.progress_token, call.progress.clone());
    let mut guard = InFlight {
        peer: conn.peer.clone(),
        id: Some(handle.id.clone()),
        token: handle.progress_token.clone(),
        events: conn.events.clone(),
    };
    let deadline = async {
        match limit {
            // The engine's clock, inside a call it performs.
            Some(limit) => crate::clock::current().sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let answer = tokio::select! {
        answer = handle.await_response() => answer,
        () = cancel.cancelled() => {
            guard.cancel("the run was cancelled").await;
            return Err(CallFailure::Cancelled);
        }
        () = deadline => {
            guard.cancel("timed out").await;
            return Err(CallFailure::TimedOut(limit.unwrap_or_default()));
        }
    };
    guard.id = None;
    match answer {
        Ok(ServerResult::CallToolResult(result)) => serde_json::to_value(&result)
            .map_err(|e| CallFailure::Refused(format!("its answer could not be read: {e}"))),
        Ok(_) => Err(CallFailure::Refused(
            "it answered `tools/call` with something other than a tool result".into(),
        )),
        Err(ServiceError::McpError(e)) if e.code.0 == OVERSIZED_CODE => {
            let bytes = e
                .data
                .as_ref()
                .and_then(|d| d.get("bytes"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Err(CallFailure::Oversized(format!(
                "it answered with {bytes} bytes, more than the {} a message may have",
                super::tap::MAX_MESSAGE_BYTES
            )))
        }
        Err(ServiceError::McpError(e)) => Err(CallFailure::Refused(format!(
            "error {}: {}",
            e.code.0, e.message
        ))),
        Err(ServiceError::TransportClosed) | Err(ServiceError::TransportSend(_)) => {
            Err(CallFailure::Died(String::new()))
        }
        Err(e) => Err(CallFailure::Refused(e.to_string())),
    }
}

/// A request in flight: tells the server `notifications/cancelled` if the call is given up
/// (explicitly, or by dropping its future), and stops routing its progress.
struct InFlight {
    peer: Peer<RoleClient>,
    id: Option<rmcp::model::RequestId>,
    token: rmcp::model::ProgressToken,
    events: Arc<super::connection::Events>,
}

impl InFlight {
    async fn cancel(&mut self, reason: &str) {
        if let Some(id) = self.id.take() {
            let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let _ = self.peer.notify_cancelled(params).await;
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.events.unroute(&self.token);
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        self.events.farewell(async move {
            let params = CancelledNotificationParam::new(
                Some(id),
                Some("the caller stopped waiting".to_owned()),
            );
            let _ = peer.notify_cancelled(params).await;
        });
    }
}
