//! One live connection to an MCP server: starting it (a child process on stdio, or a
//! Streamable HTTP session), the `initialize` handshake with its version check, listing its
//! tools, and stopping it cleanly.
//!
//! # Versions
//!
//! The client asks for the newest version that still has an `initialize` handshake
//! ([`REQUESTED_VERSION`]) and accepts whatever the server answers if it is one of
//! [`SUPPORTED_VERSIONS`]; any other answer is refused with a clear error and the connection
//! is closed (the reference servers answer an unknown request with their own latest).
//!
//! # Stopping a stdio server
//!
//! Its stdin is closed; if it has not exited after [`SHUTDOWN_GRACE`], its process group is
//! sent `SIGTERM`; after another grace period, `SIGKILL`. The process is always waited for, so
//! no zombie is left. Each server runs in its own process group (a Ctrl-C at the terminal
//! does not kill it mid-call, and a launcher such as `npx` is stopped with the server it
//! started).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};

use super::McpError;
use super::config::{McpServerConfig, McpTransport};
use super::stdio::{ChildProcess, Diagnostics, one_line, spawn};
use super::tap::{MAX_MESSAGE_BYTES, Tap};

/// The version the client asks for.
pub const REQUESTED_VERSION: ProtocolVersion = ProtocolVersion::LATEST_WITH_INITIALIZE;

/// Versions the client accepts in the server's answer.
pub const SUPPORTED_VERSIONS: &[ProtocolVersion] = ProtocolVersion::KNOWN_VERSIONS;

/// How long a stopping server gets after its stdin closes, and again after `SIGTERM`.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A progress notification, routed to the call that asked for it.
pub(crate) type ProgressSink = Arc<dyn Fn(&ProgressNotificationParam) + Send + Sync>;

/// What the server tells the client outside of answers: shared by the handler (which
/// receives) and the calls (which listen).
#[derive(Default)]
pub(crate) struct Events {
    /// Progress sinks by progress token (its JSON text).
    progress: Mutex<BTreeMap<String, ProgressSink>>,
    /// How many `notifications/tools/list_changed` arrived.
    pub(crate) list_changed: Arc<AtomicU64>,
    /// `notifications/cancelled` sent for calls given up by dropping them (see
    /// [`Events::farewell`]); [`Connection::close`] waits for them before it closes the session.
    farewells: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Events {
    /// Sends `notice` on the current runtime (if there is one) and keeps its task, so that a
    /// connection closing right after a call was dropped still tells the server first.
    pub(crate) fn farewell(&self, notice: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let task = rt.spawn(notice);
            if let Ok(mut tasks) = self.farewells.lock() {
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
            }
        }
    }

    /// Waits, up to `limit`, for every notice [`farewell`](Self::farewell) sent.
    async fn farewells_sent(&self, limit: Duration) {
        let tasks = self
            .farewells
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let _ = crate::clock::timeout(limit, futures_util::future::join_all(tasks)).await;
    }

    /// Routes progress for `token` to `sink` until [`unroute`](Self::unroute).
    pub(crate) fn route(&self, token: &impl serde::Serialize, sink: ProgressSink) {
        if let (Ok(key), Ok(mut map)) = (serde_json::to_string(token), self.progress.lock()) {
            map.insert(key, sink);
        }
    }

    /// Stops routing progress for `token`.
    pub(crate) fn unroute(&self, token: &impl serde::Serialize) {
        if let (Ok(key), Ok(mut map)) = (serde_json::to_string(token), self.progress.lock()) {
            map.remove(&key);
        }
    }

    fn progress(&self, params: &ProgressNotificationParam) {
        let Ok(key) = serde_json::to_string(&params.progress_token) else {
            return;
        };
        let sink = self.progress.lock().ok().and_then(|m| m.get(&key).cloned());
        if let Some(sink) = sink {
            sink(params);
        }
    }
}

/// The client side of the session: answers the server's requests with the SDK's defaults
/// and passes notifications on to [`Events`].
#[derive(Clone)]
pub(crate) struct Handler {
    events: Arc<Events>,
    /// Whether `notifications/tools/list_changed` is counted here (not for stdio, whose tap
    /// counts it).
    counts_list_changed: bool,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("runtape", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(REQUESTED_VERSION)
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.events.progress(&params);
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if self.counts_list_changed {
            self.events.list_changed.fetch_add(1, Ordering::Relaxed);
        }
        std::future::ready(())
    }
}

/// A started, initialised server.
pub(crate) struct Connection {
    server: String,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    pub(crate) peer: Peer<RoleClient>,
    child: Option<ChildProcess>,
    /// The version agreed on.
    pub(crate) protocol: String,
    /// `name version` of the server, as it says.
    pub(crate) server_info: String,
    /// Its tools, as listed right after `initialize`.
    pub(crate) tools: Vec<rmcp::model::Tool>,
    pub(crate) events: Arc<Events>,
    diagnostics: Diagnostics,
}

impl Connection {
    /// Starts the server `config` describes, initialises it and lists its tools, all within
    /// its `init_timeout`. A stdio server starts with its own environment policy (see
    /// [`crate::tool::env`]); `hidden_env` names variables it never gets under `env_all`.
    pub(crate) async fn open(
        config: &McpServerConfig,
        hidden_env: &[String],
        list_changed: Arc<AtomicU64>,
    ) -> Result<Connection, McpError> {
        let events = Arc::new(Events {
            progress: Mutex::default(),
            list_changed: list_changed.clone(),
            farewells: Mutex::default(),
        });
        let handler = Handler {
            events: events.clone(),
            // A stdio server's stdout passes the tap, which counts the notification in order.
            counts_list_changed: matches!(config.transport, McpTransport::Http { .. }),
        };
        let fail = |message: String| McpError::new(&config.name, message);
        let diagnostics = Diagnostics::default();
        let (mut child, service) = match &config.transport {
            McpTransport::Stdio {
                program,
                args,
                dir,
                confine,
                ..
            } => {
                let policy = config.env_policy(hidden_env).unwrap_or_default();
                let mut child =
                    spawn(program, args, dir, &policy, confine.as_ref()).map_err(fail)?;
                diagnostics.watch_stderr(child.stderr.take());
                let stdout = child.stdout.take();
                let stdin = child.stdin.take();
                let (Some(stdout), Some(stdin)) = (stdout, stdin) else {
                    return Err(fail("started without its stdin/stdout pipes".into()));
                };
                let tap =
                    Tap::new(stdout, diagnostics.seen.clone()).counting_list_changed(list_changed);
                let transport = AsyncRwTransport::new_client(tap, stdin);
                let pgid = child.id().and_then(|id| i32::try_from(id).ok());
                let mut process = ChildProcess {
                    child: tokio::sync::Mutex::new(child),
                    pgid,
                };
                let started = handshake(handler, transport, config).await;
                match started {
                    Ok(service) => (Some(process), service),
                    Err(why) => {
                        let status = process.exit_status_soon().await;
                        process.stop_now().await;
                        diagnostics.settle().await;
                        return Err(fail(diagnostics.explain(why, status, config)));
                    }
                }
            }
            McpTransport::Http { url, headers_env } => {
                let transport = http_transport(url, headers_env).map_err(fail)?;
                let service = handshake(handler, transport, config)
                    .await
                    .map_err(|why| fail(diagnostics.explain(why, None, config)))?;
                (None, service)
            }
        };
        let peer = service.peer().clone();
        let info = peer.peer_info();
        let protocol = info
            .as_ref()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        let server_info = info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|s| format!("{} {}", s.name, s.version))
            .unwrap_or_else(|| "(unnamed)".into());
        let mut conn = Connection {
            server: config.name.clone(),
            service: tokio::sync::Mutex::new(Some(service)),
            peer,
            child: child.take(),
            protocol,
            server_info,
            tools: Vec::new(),
            events,
            diagnostics,
        };
        if !SUPPORTED_VERSIONS
            .iter()
            .any(|v| v.as_str() == conn.protocol)
        {
            let answered = conn.protocol.clone();
            conn.close().await;
            return Err(fail(format!(
                "answered `initialize` with protocol version `{answered}`, which runtape does not support (it speaks {}) – use a server that speaks one of these",
                SUPPORTED_VERSIONS
                    .iter()
                    .map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let listed = crate::clock::timeout(config.init_timeout(), conn.peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => conn.tools = tools,
            Ok(Err(e)) => {
                conn.close().await;
                return Err(fail(format!("could not list its tools: {e}")));
            }
            Err(_) => {
                conn.close().await;
                return Err(fail(format!(
                    "did not answer `tools/list` within {} ms – raise `init_timeout_ms` or fix the server",
                    config.init_timeout().as_millis()
                )));
            }
        }
        Ok(conn)
    }

    /// True when the server can no longer answer (its process exited, its session ended).
    pub(crate) fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    /// Why the connection ended, as far as can be told (exit status, stderr, garbage seen).
    pub(crate) async fn death_note(&self) -> String {
        let status = match &self.child {
            Some(c) => c.exit_status_soon().await,
            None => None,
        };
        if status.is_some() {
            self.diagnostics.settle().await;
        }
        self.diagnostics.note(status)
    }

    /// Stops the server: closes the session (a stdio server's stdin), then signals its process
    /// group as the module docs say, and waits for it. Idempotent.
    pub(crate) async fn close(&self) {
        // A call given up by dropping it (a run cancelled from another process) tells the
        // server from a task of its own; let those notices go out before the session closes.
        self.events.farewells_sent(SHUTDOWN_GRACE).await;
        let service = self.service.lock().await.take();
        if let Some(mut service) = service {
            let _ = crate::clock::timeout(SHUTDOWN_GRACE, service.close()).await;
        }
        if let Some(child) = &self.child {
            child.stop().await;
        }
        tracing::debug!(server = %self.server, "MCP server stopped");
    }
}

/// Runs `initialize` within the server's startup limit. `Err` says what happened, to be
/// completed by [`Diagnostics::explain`].
async fn handshake<T, E, A>(
    handler: Handler,
    transport: T,
    config: &McpServerConfig,
) -> Result<RunningService<RoleClient, Handler>, Failure>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match crate::clock::timeout(config.init_timeout(), handler.serve(transport)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(e)) => Err(Failure::Refused(one_line(&e.to_string()))),
        Err(_) => Err(Failure::TimedOut(config.init_timeout())),
    }
}

/// How a startup failed, before the diagnostics are added.
pub(crate) enum Failure {
    /// The handshake failed (closed connection, error answer).
    Refused(String),
    /// No answer in time.
    TimedOut(Duration),
}

/// The Streamable HTTP transport for `url`, with the headers read from the environment now.
fn http_transport(
    url: &str,
    headers_env: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let mut headers = HashMap::new();
    for (header, var) in headers_env {
        let value = crate::secrets::env_file::var(var).ok_or_else(|| {
            format!("header `{header}` is read from ${var}, which is not set – export it")
        })?;
        let name = reqwest::header::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
            format!("`{header}` is not a valid HTTP header name – fix `headers_env`")
        })?;
        let mut value_h = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
            format!("${var} holds a value that cannot be sent in an HTTP header – fix it")
        })?;
        value_h.set_sensitive(true);
        headers.insert(name, value_h);
        // Scrubbed from everything stored or printed from now on, like provider keys.
        crate::secrets::register(var, &value);
    }
    // Installing fails only when a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("runtape/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        .max_json_response_size(MAX_MESSAGE_BYTES)
        .max_sse_event_size(MAX_MESSAGE_BYTES);
    Ok(StreamableHttpClientTransport::with_client(client, config))
}
