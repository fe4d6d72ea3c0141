//! MCP tools: any Model Context Protocol server's tools, offered to agents like every other
//! tool — granted per agent, schema-checked, approved where needed, recorded and resumable.
//!
//! # Using it
//!
//! A spec file names its servers (see [`crate::config`] for the format):
//!
//! ```toml
//! [[mcp]]
//! name = "fs"
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "./sandbox"]
//! [[mcp]]
//! name = "web"
//! url = "https://tools.example.com/mcp"
//! headers_env = { Authorization = "WEB_MCP_TOKEN" }
//! [[agents]]
//! tools = ["fs__read_text_file", "web__*"]
//! ```
//!
//! Each tool of server `fs` is offered as `fs__TOOL` ([`naming`] says how odd or long names
//! are made to fit the providers' `^[a-zA-Z0-9_-]{1,64}$`). Its flags come from the server's
//! annotations and the spec's per-tool overrides ([`catalog`]). A call passes the run's
//! idempotency key in the request's `_meta` under [`IDEMPOTENCY_KEY_META`], so a server can
//! make a repeated call a no-op. Results are turned into what the model reads by
//! [`result`]; `isError: true` becomes a tool error fed back to the model.
//!
//! # Servers
//!
//! [`McpHub`] holds the process's servers: each starts on first use (or eagerly when a spec
//! is loaded for a run or for `runtape tools`), is shared by every run in the process, is
//! restarted once if it dies, and is stopped by [`McpHub::shutdown`] (`runtape` calls it
//! before exiting). [`connection`] covers the transports (stdio child process, Streamable
//! HTTP), version negotiation and the stop sequence (close stdin, `SIGTERM`, `SIGKILL`).
//! Bad servers — not on `PATH`, exiting at once, printing garbage, never answering, speaking
//! an unsupported version, sending invalid schemas or oversized answers, hanging in a call —
//! each give one clear line (at load) or an error result (in a call); see [`tap`] and
//! [`connection`].
//!
//! # What is recorded
//!
//! When a run starts from a spec file, its servers are started and asked for their tools;
//! every granted MCP tool becomes an ordinary entry of the run's spec (name, description,
//! schema, flags), and wildcard grants (`fs__*`) are expanded to the names found. The spec is
//! stored with the run: it is the set of MCP tools the run may ever offer, with the
//! definitions the model is shown and the flags the machine's approval and in-doubt rules use.
//!
//! Which of them each model request offers is an input recorded in the history (machine
//! revision 3, see [`crate::machine::EventBody::ToolsListed`]):
//!
//! - **Catalogs.** A server's listing is a catalog: the JSON of its offered [`McpToolInfo`]
//!   list ([`listing::catalog_blob`]), stored as a content-addressed blob under its BLAKE3
//!   digest with the transition that records it.
//! - **`ToolsListed { server, catalog, tools }`** is committed at a step boundary
//!   (`Preparing`, before a model request): before the first request of a run granted MCP
//!   tools; after the server sent `notifications/tools/list_changed` (counted in stream order
//!   by [`tap`] for stdio, so a notification sent before a call's answer is seen at the
//!   boundary right after that call); and at the first boundary after a resume or a fork
//!   continuing live, when the live listing differs from the recorded one. The state keeps
//!   the latest list per server.
//! - **Grants.** The machine offers each granted tool of a listed server only while that
//!   server's latest list has it, and each `CallModel` names the catalog digests it used — so
//!   `runtape show RUN@SEQ` prints exactly what that request offered and from which catalog.
//!   A model that calls a tool its server no longer lists is told it is unavailable, and
//!   nothing is sent to the server. A tool a server adds after the run started is offered
//!   from revision 4 on to the agents granted all of the server's tools (`SERVER__*`, kept in
//!   the stored spec) and, read-only ones, to agents without a grant list: the `ToolsListed`
//!   event carries its catalog definition (`added`), and a resumed run registers it from the
//!   recorded catalog blob before judging calls in flight. Revision 3 runs do not offer it.
//! - **Verify** re-folds the events (no server needed) and checks each catalog blob: found
//!   under its digest, hashing to it, listing the event's tools.
//! - **Replay.** Tool results are recorded as `ToolReturned` events; `fork --tape` feeds the
//!   recorded `ToolsListed` and results back without starting any server (servers start
//!   lazily, on the first live call or listing).
//!
//! Runs recorded before revision 3 (their spec carries the tools; no `ToolsListed` events)
//! keep their rules: every granted tool is offered, as when they were recorded.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::machine::RunId;

pub mod catalog;
pub mod config;
pub mod connection;
pub mod listing;
pub mod naming;
pub mod result;
mod server;
mod stdio;
pub mod tap;
mod tool;
mod trace_context;

pub use catalog::{Catalog, McpToolInfo};
pub use config::{McpServerConfig, McpToolOverride, McpToolPolicy, McpTransport};
pub use listing::{ToolLister, ToolListing};
pub use naming::{SEPARATOR, combined_name};
pub use server::{McpHub, McpServer};
pub use tool::{McpTool, progress_events};
pub use trace_context::propagate_trace_context;

/// The key of the idempotency key in a `tools/call` request's `_meta`: stable for a call
/// across retries and restarts of the same run, distinct between runs and forks. A server
/// that changes the world can use it to make a repeated call a no-op.
pub const IDEMPOTENCY_KEY_META: &str = "runtape/idempotencyKey";

/// An MCP server could not be used. Displays as one line: `MCP server `NAME`: what – what
/// to do`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP server `{server}`: {message}")]
pub struct McpError {
    /// The server's name.
    pub server: String,
    /// What went wrong and what to do.
    pub message: String,
}

impl McpError {
    pub(crate) fn new(server: &str, message: impl Into<String>) -> Self {
        McpError {
            server: server.to_owned(),
            message: message.into(),
        }
    }
}

/// A progress notification of an MCP call in flight (see [`progress_events`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpProgress {
    /// The run.
    pub run: RunId,
    /// The model's call id.
    pub call_id: String,
    /// The tool (`SERVER__TOOL`).
    pub tool: String,
    /// Progress so far.
    pub progress: f64,
    /// The total, if the server knows it.
    pub total: Option<f64>,
    /// What the server says it is doing.
    pub message: Option<String>,
}

/// A started server and what it offers.
#[derive(Clone)]
pub struct Listed {
    /// The server.
    pub server: Arc<McpServer>,
    /// `name version` of the server, as it says.
    pub server_info: String,
    /// The protocol version agreed on.
    pub protocol: String,
    /// Its tools.
    pub catalog: Catalog,
}

/// Starts every server in `configs` on `hub` (at once) and lists their tools, in `configs`
/// order. The first server that fails to start or initialise is the error.
pub async fn list_all(
    hub: &McpHub,
    configs: &[McpServerConfig],
    hidden_env: &[String],
) -> Result<Vec<Listed>, McpError> {
    let started = futures_util::future::join_all(configs.iter().map(|config| async move {
        let server = hub.server(config, hidden_env);
        let conn = server.start().await?;
        let catalog = catalog::build(config, &conn.tools);
        Ok::<_, McpError>(Listed {
            server_info: conn.server_info.clone(),
            protocol: conn.protocol.clone(),
            server,
            catalog,
        })
    }))
    .await;
    started.into_iter().collect()
}
