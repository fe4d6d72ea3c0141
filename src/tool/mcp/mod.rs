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
//! # What is recorded today (phase A)
//!
//! When a run starts from a spec file, its servers are started and asked for their tools;
//! every granted MCP tool becomes an ordinary entry of the run's spec (name, description,
//! schema, flags), and wildcard grants (`fs__*`) are expanded to the names found. The spec is
//! stored with the run, so `show`, `verify`, `resume` and `fork` see exactly the tools the
//! model was offered when the run started. A resume in another process reconnects lazily
//! (the server is started only when a call needs it) and calls tools by the recorded names;
//! a tool the server no longer has fails its call with an error result the model sees.
//! `notifications/tools/list_changed` is counted but does not change a running run's tools.
//!
//! # Phase B: the offered tool list as recorded input (design)
//!
//! The goal: the tool list an agent is offered is an *input* recorded in the history at the
//! step it was offered, like time — so `show RUN@SEQ` shows exactly what the model saw,
//! `verify` reproduces it, a list that changed between runs (or mid-run, after
//! `list_changed`) is visible, and replays need no server.
//!
//! - **Catalog blobs.** A catalog is the canonical JSON (RFC 8785) of the sorted
//!   [`McpToolInfo`] list of one server; its BLAKE3 digest is its id. Catalogs are stored as
//!   content-addressed blobs (the store already has blobs), never inside the hashed state: the
//!   state holds only `BTreeMap<server, Digest>` (a few dozen bytes per server), so state
//!   hashes stay small and flat however large a catalog is.
//! - **Event.** A new input event `ToolsListed { server, catalog: Digest, at }` is committed
//!   by the executor (a) before the first `Proceed` of a run that grants MCP tools, after
//!   starting the servers, and (b) at the next step boundary (`Preparing`, before building
//!   the model request) after a `notifications/tools/list_changed` or after a resume whose
//!   live listing differs from the recorded digest. The machine's edge is a self-edge of
//!   `Preparing` (and `Start` carries the initial catalogs): it replaces the server's digest in
//!   the state and emits nothing. It goes in `table.rs` with a snapshot, and `statechart.md` is
//!   regenerated.
//! - **Grants.** The spec keeps grants as written (`fs__*`, `fs__read_text_file`). The pure
//!   machine resolves them against the catalogs in the state when it builds a
//!   `ModelRequest`: a wildcard expands to the catalog's tools in catalog order, an exact name
//!   must be in the catalog (else it is left out and a `tool.unavailable` note is emitted), and
//!   `ModelRequest.tools` lists the resolved names plus the catalog digests it used — so the
//!   request recorded at each seq names exactly what was offered. Flags (`read_only`,
//!   `idempotent`, `requires_approval`) come from the catalog entry with the spec's overrides
//!   already applied at listing time, and the machine's grant and approval checks read them
//!   from there instead of from `RunSpec::tool`.
//! - **Executor.** `tool_defs_for` resolves names to definitions from the catalog blobs the
//!   request names (not from the live server), so a resumed run offers exactly what was
//!   recorded until a `ToolsListed` event says otherwise. A call to a tool missing from the
//!   live server is an error result, as today.
//! - **Verify.** Re-folding events needs no server: `ToolsListed` carries the digest and the
//!   blob is in the store; `verify` checks each referenced blob's digest.
//! - **Replay, `fork --tape`, cassettes.** Tool results are already recorded as
//!   `ToolReturned` events; a tape or cassette serves them by effect id, and the catalogs by
//!   digest, so `McpTool` is never invoked and no server is started (servers start lazily, on
//!   the first live call). Cassettes gain an optional `catalogs` map (digest → JSON) so a
//!   cassette replays in a database that never saw the run.
//! - **Crashes.** An MCP call is a `CallTool` effect like any other: committed before it is
//!   sent, marked `started` first when not idempotent; a SIGKILL mid-call resumes to the same
//!   result (idempotent tools are called again with the same key in `_meta`; others follow the
//!   agent's `on_in_doubt`).
//!
//! The files to change are `machine/{state,event,table,route}.rs` (the digests, the event,
//! the edge, grant resolution), `exec/driver.rs` (listing at boundaries, `tool_defs_for`), and
//! `cassette/format.rs`; this module already produces the catalogs
//! ([`catalog::build`]) and counts `list_changed` per connection.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::machine::RunId;

pub mod catalog;
pub mod config;
pub mod connection;
pub mod naming;
pub mod result;
mod server;
mod stdio;
pub mod tap;
mod tool;

pub use catalog::{Catalog, McpToolInfo};
pub use config::{McpServerConfig, McpToolOverride, McpTransport};
pub use naming::{SEPARATOR, combined_name};
pub use server::{McpHub, McpServer};
pub use tool::{McpTool, forward_progress, progress_events};

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
