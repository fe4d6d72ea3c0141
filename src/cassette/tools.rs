//! Replaying MCP tools from a cassette: [`RecordedCatalog`] gives a replay's step boundaries
//! the server's recorded tool list, and [`RecordedTool`] answers each call from the
//! cassette's recorded results instead of calling the server, so a replay starts no server.
//! A replay lists each server's first recorded catalog, then each later one the cassette
//! carries ([`Cassette::catalog_changes`]) at the step boundary it was recorded at: once the
//! replay has served as many model calls as the run had made when it recorded the list. A
//! delegated child whose lists changed during its run has them in its own section
//! ([`Cassette::catalog_changes_in`]): the replayed child at that place is served those, at
//! the boundaries its own model calls reach. A cassette written before later lists were kept
//! replays a run whose list changed mid-run up to that point, then stops at the first request
//! that differs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::format::{Cassette, ToolEntry};
use crate::machine::ToolOutcome;
use crate::tool::mcp::listing::listing_of;
use crate::tool::mcp::{McpError, McpToolInfo, ToolLister, ToolListing};
use crate::tool::{Tool, ToolAnswer, ToolContext, ToolError, ToolFile};

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
    fn take(&self, tool: &str, args: &Value) -> Option<ToolEntry> {
        // A poisoned lock only means another call panicked while holding it; the list
        // inside is intact (each update flips one flag).
        let mut results = self.results.lock().unwrap_or_else(|p| p.into_inner());
        let (entry, used) = results
            .iter_mut()
            .find(|(e, used)| !*used && e.tool == tool && e.args == *args)?;
        *used = true;
        Some(entry.clone())
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
    crate::tool::described_by!(info);

    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let answer = self.answer(args, ctx);
        Box::pin(async move { answer.await.map(|a| a.value) })
    }

    fn answer<'a>(
        &'a self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<ToolAnswer, ToolError>> {
        let answer = match self.results.take(&self.info.name, &args) {
            Some(entry) => recorded_answer(&self.info.name, entry),
            None => Err(ToolError::new(format!(
                "MCP tool `{}`: the cassette has no recorded result for a call with these arguments (the replay asked something the recording did not)",
                self.info.name
            ))),
        };
        Box::pin(std::future::ready(answer))
    }
}

/// The answer `entry` recorded: its value and the files its outcome names, with their
/// recorded bytes (a file whose bytes the cassette lacks, or that do not hash to its digest,
/// fails the call: the replay could not store what the recorded run stored).
fn recorded_answer(tool: &str, entry: ToolEntry) -> Result<ToolAnswer, ToolError> {
    use base64::Engine as _;
    let (value, files) = match entry.outcome {
        ToolOutcome::Ok { value, files } => (value, files),
        ToolOutcome::Error { message } => return Err(ToolError::new(message)),
    };
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.into_iter().enumerate() {
        let bytes = entry
            .files
            .get(i)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .filter(|b| crate::machine::Digest::of(b) == f.digest)
            .ok_or_else(|| {
                ToolError::new(format!(
                    "MCP tool `{tool}`: the cassette lacks the bytes of file {} of the recorded result ({})",
                    i + 1,
                    f.media_type
                ))
            })?;
        out.push(ToolFile {
            media_type: f.media_type,
            bytes,
            name: f.name,
        });
    }
    Ok(ToolAnswer { value, files: out })
}

/// How many model calls a replay has served so far to the run at a path of the replayed tree
/// (`""`: the top run; else a child's place, as in [`ChildSection::path`]): the replaying
/// provider's position in that run's section.
///
/// [`ChildSection::path`]: super::ChildSection::path
pub type ReplayPosition = Arc<dyn Fn(&str) -> u64 + Send + Sync>;

/// Later lists, in order: `(model calls made before it, the list)`.
type Changes = Vec<(u64, Vec<McpToolInfo>)>;

/// A server's tool lists as a cassette recorded them: what a replay's step boundaries list
/// instead of asking the server (its tools answer from the cassette too). The top run and a
/// child without lists of its own see the server's first list, then the top run's later
/// lists as the top run reaches them; a child whose section holds lists of its own
/// ([`Cassette::catalog_changes_in`]) sees those, as it reaches them in its own section.
pub struct RecordedCatalog {
    server: String,
    tools: Vec<McpToolInfo>,
    results: Arc<RecordedToolResults>,
    changes: Changes,
    /// Children's own lists, by path.
    child_changes: BTreeMap<String, Changes>,
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
            child_changes: BTreeMap::new(),
            position: None,
        }
    }

    /// The same, changing to each of `changes` (`(model calls made before it, the list)`, in
    /// order) once the top run's `position` reaches its count.
    pub fn with_changes(mut self, changes: Changes, position: ReplayPosition) -> Self {
        self.changes = changes;
        self.position = Some(position);
        self
    }

    /// The same, serving the child at `path` its own recorded lists (`(model calls the child
    /// made before it, the list)`, in order) once its position in its section reaches each
    /// count, instead of the top run's. Needs a position ([`with_changes`](Self::with_changes)).
    pub fn with_child_changes(mut self, path: &str, changes: Changes) -> Self {
        if !path.is_empty() && !changes.is_empty() {
            self.child_changes.insert(path.to_owned(), changes);
        }
        self
    }

    /// The lists that apply to the run at `path`, and how many of them are due at its
    /// position.
    fn due(&self, path: &str) -> (&Changes, usize) {
        // Whose position counts: the child's own when it has lists of its own, else the top
        // run's (the lists it recorded are the ones the tree's other runs see).
        let (changes, whose) = match self.child_changes.get(path) {
            Some(own) => (own, path),
            None => (&self.changes, ""),
        };
        let Some(position) = &self.position else {
            return (changes, 0);
        };
        let at = position(whose);
        (
            changes,
            changes.iter().take_while(|(n, _)| *n <= at).count(),
        )
    }
}

impl ToolLister for RecordedCatalog {
    fn server(&self) -> &str {
        &self.server
    }

    fn list_changes(&self, path: &str) -> u64 {
        self.due(path).1 as u64
    }

    fn listing(&self, path: &str) -> BoxFuture<'_, Result<ToolListing, McpError>> {
        let tools = match self.due(path) {
            (_, 0) => &self.tools,
            (changes, n) => &changes[n - 1].1,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    fn info(name: &str) -> McpToolInfo {
        McpToolInfo {
            name: format!("ops__{name}"),
            server: "ops".into(),
            remote: name.into(),
            description: String::new(),
            schema: serde_json::json!({"type": "object"}),
            read_only: true,
            idempotent: true,
            requires_approval: false,
            timeout_ms: None,
            results: Default::default(),
            policy: Default::default(),
        }
    }

    fn listed(catalog: &RecordedCatalog, path: &str) -> Vec<String> {
        futures_util::FutureExt::now_or_never(catalog.listing(path))
            .expect("ready")
            .expect("listed")
            .names
    }

    #[test]
    fn each_run_is_served_its_own_lists_at_its_own_position() {
        let positions: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let read = positions.clone();
        let position: ReplayPosition = Arc::new(move |path| {
            read.lock()
                .expect("not poisoned")
                .get(path)
                .copied()
                .unwrap_or(0)
        });
        let results = Arc::new(RecordedToolResults {
            results: Mutex::new(Vec::new()),
        });
        let grown = vec![info("status"), info("stamp")];
        // The top run's list grows before its entry 1; child 4.0's before its own entry 1.
        let catalog = RecordedCatalog::new("ops", vec![info("status")], results)
            .with_changes(vec![(1, grown.clone())], position)
            .with_child_changes("4.0", vec![(0, vec![info("status")]), (1, grown)])
            .with_child_changes("4.1", Vec::new());
        let set = |path: &str, n: u64| {
            positions
                .lock()
                .expect("not poisoned")
                .insert(path.to_owned(), n);
        };

        set("", 1);
        assert_eq!(listed(&catalog, ""), ["ops__status", "ops__stamp"]);
        assert_eq!(catalog.list_changes(""), 1);
        // Child 4.0 has lists of its own: the top run's position does not move it.
        assert_eq!(listed(&catalog, "4.0"), ["ops__status"]);
        assert_eq!(catalog.list_changes("4.0"), 1);
        set("4.0", 1);
        assert_eq!(listed(&catalog, "4.0"), ["ops__status", "ops__stamp"]);
        assert_eq!(catalog.list_changes("4.0"), 2);
        // A child without lists of its own sees the tree's, as the top run reached them.
        assert_eq!(listed(&catalog, "4.1"), ["ops__status", "ops__stamp"]);
        set("", 0);
        assert_eq!(listed(&catalog, "4.1"), ["ops__status"]);
        assert_eq!(listed(&catalog, "4.0"), ["ops__status", "ops__stamp"]);
    }
}
