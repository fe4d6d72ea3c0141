//! MCP tool lists at step boundaries (revision 3): before the first model request of a run
//! that is granted MCP tools, after a server sent `notifications/tools/list_changed`, and at
//! the first boundary after a resume or a fork, each server the run uses is listed; a list
//! other than the one recorded becomes a `ToolsListed` event, committed (with its catalog
//! blob) before the next model request, so the history says what the model was offered.
//!
//! Revision 4: a listed tool the run's spec does not have (the server added it after the run
//! started) goes into the event with its catalog definition (`added`), so the machine can
//! offer it to the agents whose grants cover it; it is registered for calls here.

use std::sync::Arc;

use super::Driver;
use crate::exec::read_lock;
use crate::exec::reads::off_thread;
use crate::machine::{ADDED_TOOLS_SEMANTICS, EventBody, RunState, server_pattern};
use crate::tool::mcp::{McpToolInfo, ToolLister};

/// The first machine revision whose runs record MCP tool lists.
const LISTING_SEMANTICS: u32 = 3;

impl Driver {
    /// The MCP servers this run's granted tools come from (registered with the engine), by
    /// name.
    fn listed_servers(&self) -> Vec<Arc<dyn ToolLister>> {
        if self.spec.spec().semantics < LISTING_SEMANTICS {
            return Vec::new();
        }
        let servers = read_lock(&self.shared.mcp);
        servers
            .iter()
            .filter(|(name, _)| {
                let prefix = format!("{name}{}", crate::tool::mcp::SEPARATOR);
                let spec = self.spec.spec();
                // A server the run's spec has tools of, or (revision 4) one an agent is granted
                // all tools of: never another run's server sharing this engine.
                spec.tools.iter().any(|t| t.name.starts_with(&prefix))
                    || (spec.semantics >= ADDED_TOOLS_SEMANTICS
                        && spec.agents.iter().any(|a| {
                            a.tools
                                .iter()
                                .flatten()
                                .any(|g| server_pattern(g) == Some(name.as_str()))
                        }))
            })
            .map(|(_, server)| server.clone())
            .collect()
    }

    /// At a step boundary (`Preparing`, no tape playing): lists the servers that need it and
    /// queues a `ToolsListed` event for each list that differs from the recorded one. Returns
    /// whether it queued any. A server that cannot be listed keeps its recorded list (its
    /// calls fail with an error result the model sees); the failure is logged.
    pub(super) async fn refresh_tool_lists(&mut self) -> bool {
        let RunState::Preparing { run } = &self.state else {
            return false;
        };
        let recorded = run.catalogs.clone();
        let servers = self.listed_servers();
        if servers.is_empty() {
            return false;
        }
        // A replayed tree serves each run its own recorded lists, found by its place.
        let path = match self.tree_path().await {
            Ok(path) => path,
            Err(e) => {
                // The model request that follows reads the same place and fails the run.
                tracing::warn!(run = %self.run, error = %e, "MCP tool lists not refreshed");
                return false;
            }
        };
        let mut queued = false;
        for server in servers {
            let name = server.server().to_owned();
            let changes = server.list_changes(&path);
            if self.list_changes_seen.get(&name) == Some(&changes) {
                continue;
            }
            self.list_changes_seen.insert(name.clone(), changes);
            let listing = match server.listing(&path).await {
                Ok(listing) => listing,
                Err(e) => {
                    // The error may quote the server's stderr: no known secret goes to the log.
                    let error = crate::secrets::scrub_text(&e.to_string()).into_owned();
                    tracing::warn!(run = %self.run, %error, "MCP tool list not refreshed");
                    continue;
                }
            };
            {
                let mut tools = crate::exec::write_lock(&self.shared.tools);
                for tool in listing.tools {
                    tools.register(tool);
                }
            }
            if recorded.get(&name).map(|l| l.catalog) == Some(listing.catalog) {
                continue;
            }
            let added = if self.spec.spec().semantics >= ADDED_TOOLS_SEMANTICS {
                listing
                    .infos
                    .iter()
                    .filter(|info| self.spec.tool(&info.name).is_none())
                    .map(McpToolInfo::to_tool_spec)
                    .collect()
            } else {
                Vec::new()
            };
            if !added.is_empty() {
                self.tool_defs.clear();
            }
            self.catalog_blobs.insert(listing.catalog, listing.blob);
            self.queue.push_back(EventBody::ToolsListed {
                server: name,
                catalog: listing.catalog,
                tools: listing.names,
                added,
            });
            queued = true;
        }
        queued
    }

    /// On take-up, before any outstanding call is judged or performed: registers the tools
    /// servers added after the run started (revision 4) that this engine does not have yet,
    /// as the recorded catalogs describe them, so a call of one in flight when the run
    /// stopped is known — its idempotency decides whether it is retried or in doubt — and can
    /// be performed without listing the server first. A catalog that cannot be read is
    /// logged; the call then fails with an error result, as for any unknown tool.
    pub(in crate::exec) async fn register_added_tools(&mut self) {
        let Some(run) = self.state.data() else {
            return;
        };
        let wanted: Vec<(String, crate::machine::Digest, Vec<String>)> = run
            .catalogs
            .iter()
            .filter(|(_, listed)| !listed.added.is_empty())
            .map(|(server, listed)| {
                let names = listed.added.iter().map(|t| t.name.clone()).collect();
                (server.clone(), listed.catalog, names)
            })
            .collect();
        for (server, catalog, names) in wanted {
            let missing: Vec<String> = {
                let tools = read_lock(&self.shared.tools);
                names
                    .into_iter()
                    .filter(|n| tools.get(n).is_none())
                    .collect()
            };
            let lister = read_lock(&self.shared.mcp).get(&server).cloned();
            let (Some(lister), false) = (lister, missing.is_empty()) else {
                continue;
            };
            let blob = off_thread(&self.shared.store, move |s| s.blob(&catalog)).await;
            let Some(infos) = blob
                .ok()
                .flatten()
                .and_then(|b| crate::tool::mcp::listing::decode_catalog(&b))
            else {
                tracing::warn!(run = %self.run, %server, "recorded MCP catalog not readable");
                continue;
            };
            let mut tools = crate::exec::write_lock(&self.shared.tools);
            for info in infos.into_iter().filter(|i| missing.contains(&i.name)) {
                tools.register(lister.tool(info));
            }
        }
    }
}
