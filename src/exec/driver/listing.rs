//! MCP tool lists at step boundaries (revision 3): before the first model request of a run
//! that is granted MCP tools, after a server sent `notifications/tools/list_changed`, and at
//! the first boundary after a resume or a fork, each server the run uses is listed; a list
//! other than the one recorded becomes a `ToolsListed` event, committed (with its catalog
//! blob) before the next model request, so the history says what the model was offered.

use std::sync::Arc;

use super::Driver;
use crate::exec::read_lock;
use crate::machine::{EventBody, RunState};
use crate::tool::mcp::ToolLister;

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
                self.spec
                    .spec()
                    .tools
                    .iter()
                    .any(|t| t.name.starts_with(&prefix))
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
        let mut queued = false;
        for server in self.listed_servers() {
            let name = server.server().to_owned();
            let changes = server.list_changes();
            if self.list_changes_seen.get(&name) == Some(&changes) {
                continue;
            }
            self.list_changes_seen.insert(name.clone(), changes);
            let listing = match server.listing().await {
                Ok(listing) => listing,
                Err(e) => {
                    tracing::warn!(run = %self.run, error = %e, "MCP tool list not refreshed");
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
            self.catalog_blobs.insert(listing.catalog, listing.blob);
            self.queue.push_back(EventBody::ToolsListed {
                server: name,
                catalog: listing.catalog,
                tools: listing.names,
            });
            queued = true;
        }
        queued
    }
}
