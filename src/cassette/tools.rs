//! Replaying MCP tools from a cassette: [`RecordedCatalog`] gives a replay's step boundaries
//! the server's recorded tool list, and [`RecordedTool`] answers each call from the
//! cassette's recorded results instead of calling the server, so a replay starts no server.
//! A replay lists each server's first recorded catalog, then each later one the cassette
//! carries ([`Cassette::catalog_changes`]) at the step boundary it was recorded at: once the
//! replay has served as many model calls as the run had made when it recorded the list. A
//! cassette written before later lists were kept replays a run whose list changed mid-run up
//! to that point, then stops at the first request that differs.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::format::{Cassette, ToolEntry};
use crate::machine::ToolOutcome;
use crate::tool::mcp::listing::listing_of;
use crate::tool::mcp::{McpError, McpToolInfo, ToolLister, ToolListing};
use crate::tool::{Tool, ToolContext, ToolError};

/// The recorded MCP results of one cassette, shared by its [`RecordedTool`]s: each result
/// answers one call.
pub struct RecordedToolResults {
    results: Mutex<Vec<(ToolEntry, bool)>>,
}

impl RecordedToolResults {
    /// The results `cassette` recorded, none used yet.
    pub fn of(cassette: &Cassette) -> Arc<Self> {
        Arc::new(RecordedToolResults {
            results: Mutex::new(
                cassette
                    .tool_results()
                    .iter()
                    .map(|e| (e.clone(), false))
                    .collect(),
            ),
        })
    }

    /// The first unused result of `tool` called with `args`, now used.
    fn take(&self, tool: &str, args: &Value) -> Option<ToolOutcome> {
        // A poisoned lock only means another call panicked while holding it; the list
        // inside is intact (each update flips one flag).
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let (entry, used) = results
            .iter_mut()
            .find(|(e, used)| !*used && e.tool == tool && e.args == *args)?;
        *used = true;
        Some(entry.outcome.clone())
    }
}

/// An MCP tool (as its catalog describes it) whose calls are answered from a cassette.
pub struct RecordedTool {
    info: McpToolInfo,
    results: Arc<RecordedToolResults>,
}

impl RecordedTool {
    /// `info`'s tool, answered from `results`.
    pub fn new(info: McpToolInfo, results: Arc<RecordedToolResults>) -> Self {
        RecordedTool { info, results }
    }
}

impl Tool for RecordedTool {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn schema(&self) -> Value {
        self.info.schema.clone()
    }

    fn read_only(&self) -> bool {
        self.info.read_only
    }

    fn idempotent(&self) -> bool {
        self.info.idempotent
    }

    fn invoke<'a>(
        &'a self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let answer = match self.results.take(&self.info.name, &args) {
            Some(ToolOutcome::Ok { value }) => Ok(value),
            Some(ToolOutcome::Error { message }) => Err(ToolError::new(message)),
            None => Err(ToolError::new(format!(
                "MCP tool `{}`: the cassette has no recorded result for a call with these arguments (the replay asked something the recording did not)",
                self.info.name
            ))),
        };
        Box::pin(std::future::ready(answer))
    }
}

/// How many model calls a replay has served so far (the replaying provider's position).
pub type ReplayPosition = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A server's tool lists as a cassette recorded them: what a replay's step boundaries list
/// instead of asking the server (its tools answer from the cassette too).
pub struct RecordedCatalog {
    server: String,
    tools: Vec<McpToolInfo>,
    results: Arc<RecordedToolResults>,
    /// Later lists, in order: `(model calls made before it, the list)`.
    changes: Vec<(u64, Vec<McpToolInfo>)>,
    position: Option<ReplayPosition>,
}

impl RecordedCatalog {
    /// `server`'s recorded `tools`, their calls answered from `results`.
    pub fn new(server: &str, tools: Vec<McpToolInfo>, results: Arc<RecordedToolResults>) -> Self {
        RecordedCatalog {
            server: server.to_owned(),
            tools,
            results,
            changes: Vec::new(),
            position: None,
        }
    }

    /// The same, changing to each of `changes` (`(model calls made before it, the list)`, in
    /// order) once `position` reaches its count.
    pub fn with_changes(
        mut self,
        changes: Vec<(u64, Vec<McpToolInfo>)>,
        position: ReplayPosition,
    ) -> Self {
        self.changes = changes;
        self.position = Some(position);
        self
    }

    /// How many of the later lists are due at the replay's position.
    fn due(&self) -> usize {
        let Some(position) = &self.position else {
            return 0;
        };
        let at = position();
        self.changes.iter().take_while(|(n, _)| *n <= at).count()
    }
}

impl ToolLister for RecordedCatalog {
    fn server(&self) -> &str {
        &self.server
    }

    fn list_changes(&self) -> u64 {
        self.due() as u64
    }

    fn listing(&self) -> BoxFuture<'_, Result<ToolListing, McpError>> {
        let tools = match self.due() {
            0 => &self.tools,
            n => &self.changes[n - 1].1,
        };
        let listing = listing_of(&self.server, tools, |info| {
            Arc::new(RecordedTool::new(info, self.results.clone())) as Arc<dyn Tool>
        });
        Box::pin(std::future::ready(Ok(listing)))
    }

    fn tool(&self, info: McpToolInfo) -> Arc<dyn Tool> {
        Arc::new(RecordedTool::new(info, self.results.clone()))
    }
}
