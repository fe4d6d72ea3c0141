//! A server's tool list as a run records it (revision 3): the catalog blob, its digest, the
//! offered names, and the tools to call.
//!
//! The catalog blob is the JSON of the offered [`McpToolInfo`] list in the server's order
//! (fields in declaration order, object keys of schemas sorted), so the same list always
//! gives the same bytes and digest. The executor lists a run's servers at a step boundary —
//! before its first model request, after a server sent `notifications/tools/list_changed`
//! ([`McpServer::list_changes`]), and at the first boundary after a resume — and records a
//! `ToolsListed` event when the digest differs from the one recorded.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::McpError;
use super::catalog::{self, McpToolInfo};
use super::server::McpServer;
use super::tool::McpTool;
use crate::machine::Digest;
use crate::tool::Tool;

/// Where a run's step boundaries get one MCP server's tool list from: the live server
/// ([`McpServer`]), or a recording (a cassette's catalog). Register one per server with
/// [`Engine::register_tool_lister`](crate::exec::Engine::register_tool_lister).
pub trait ToolLister: Send + Sync {
    /// The server's name (`[[mcp]]` name).
    fn server(&self) -> &str;

    /// How many times the list is known to have changed for the run at `path` (its place in
    /// its delegation tree, `""` for a run nobody delegated): that run lists again at its next
    /// step boundary when this moved. A live server answers every run alike; a recording
    /// answers each run of a replayed tree by its own recorded lists.
    fn list_changes(&self, path: &str) -> u64;

    /// The list now for the run at `path` (as for [`list_changes`](Self::list_changes)), with
    /// the tools to register.
    fn listing(&self, path: &str) -> BoxFuture<'_, Result<ToolListing, McpError>>;

    /// The tool that calls `info` (one of this server's, as a recorded catalog describes
    /// it): what a resumed run registers for a tool the server added after the run started,
    /// before any listing.
    fn tool(&self, info: McpToolInfo) -> Arc<dyn Tool>;
}

impl ToolLister for Arc<McpServer> {
    fn server(&self) -> &str {
        &self.config().name
    }

    fn list_changes(&self, _path: &str) -> u64 {
        McpServer::list_changes(self)
    }

    fn listing(&self, _path: &str) -> BoxFuture<'_, Result<ToolListing, McpError>> {
        Box::pin(McpServer::listing(self))
    }

    fn tool(&self, info: McpToolInfo) -> Arc<dyn Tool> {
        Arc::new(McpTool::new(info, self.clone()))
    }
}

/// A listing of `tools` of `server` whose calls `tool` makes.
pub fn listing_of(
    server: &str,
    tools: &[McpToolInfo],
    tool: impl Fn(McpToolInfo) -> Arc<dyn Tool>,
) -> ToolListing {
    let blob = catalog_blob(tools);
    ToolListing {
        server: server.to_owned(),
        catalog: Digest::of(&blob),
        names: tools.iter().map(|t| t.name.clone()).collect(),
        tools: tools.iter().cloned().map(tool).collect(),
        infos: tools.to_vec(),
        blob,
    }
}

/// One listing of one server.
pub struct ToolListing {
    /// The server's name.
    pub server: String,
    /// BLAKE3 of [`blob`](Self::blob).
    pub catalog: Digest,
    /// The catalog's bytes (see the module docs).
    pub blob: Vec<u8>,
    /// The offered names, in the server's order.
    pub names: Vec<String>,
    /// The tools, ready to register with the engine.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The tools as the catalog describes them, in the server's order.
    pub infos: Vec<McpToolInfo>,
}

impl McpToolInfo {
    /// This tool as a tool of a run's spec: the definition the model is offered and the
    /// flags the machine uses (overrides applied; never interactive).
    pub fn to_tool_spec(&self) -> crate::machine::ToolSpec {
        crate::machine::ToolSpec {
            schema: self.schema.clone(),
            read_only: self.read_only,
            idempotent: self.idempotent,
            requires_approval: self.requires_approval,
            guard: self.policy.guard(self.results),
            ..crate::machine::ToolSpec::new(&self.name, &self.description)
        }
    }
}

/// The catalog blob of `tools` (see the module docs).
pub fn catalog_blob(tools: &[McpToolInfo]) -> Vec<u8> {
    // McpToolInfo is strings, bools, an optional integer and a JSON value: serialising it
    // cannot fail.
    serde_json::to_vec(tools).expect("a tool list always serialises")
}

/// The tools a catalog blob lists; `None` for bytes that are not one.
pub fn decode_catalog(blob: &[u8]) -> Option<Vec<McpToolInfo>> {
    serde_json::from_slice(blob).ok()
}

impl McpServer {
    /// Asks the server for its tools now (starting it if needed) and builds the listing a run
    /// records. Errors are one line naming the server.
    pub async fn listing(self: &Arc<Self>) -> Result<ToolListing, McpError> {
        let conn = self.start().await?;
        let config = self.config();
        let listed = crate::clock::timeout(config.init_timeout(), conn.peer.list_all_tools())
            .await
            .map_err(|_| {
                McpError::new(
                    &config.name,
                    format!(
                        "did not answer `tools/list` within {} ms",
                        config.init_timeout().as_millis()
                    ),
                )
            })?
            .map_err(|e| McpError::new(&config.name, format!("could not list its tools: {e}")))?;
        let built = catalog::build(config, &listed);
        Ok(listing_of(&config.name, &built.tools, |info| {
            Arc::new(McpTool::new(info, self.clone())) as Arc<dyn Tool>
        }))
    }
}
