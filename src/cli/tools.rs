//! `runtape tools SPEC`: every tool each agent of a spec file would be offered, after
//! starting the file's MCP servers — name, where it comes from, its flags and a summary of its
//! arguments. Exits 2 naming the server that failed to start or initialise.

use std::path::Path;

use serde_json::json;

use super::EXIT_OK;
use super::common::{CliError, outln, print_json};
use crate::config::{self, RunFile};
use crate::machine::ToolSpec;
use crate::tool::mcp::McpHub;
use crate::tool::mcp::catalog::schema_summary;

/// `runtape tools SPEC [--json]`.
pub(crate) async fn tools(spec: &Path, json: bool) -> Result<u8, CliError> {
    let mut file = config::load(spec)?;
    let listing = file.connect_mcp(McpHub::global()).await?;
    for warning in &listing.warnings {
        eprintln!("warning: {warning}");
    }
    for listed in &listing.servers {
        let config = listed.server.config();
        if json {
            print_json(&json!({
                "type": "server",
                "name": config.name,
                "server": listed.server_info,
                "protocol": listed.protocol,
                "transport": config.describe(),
                "tools": listed.catalog.tools.len(),
            }))?;
        } else {
            outln!(
                "MCP server {}: {} (protocol {}), {} tools — {}",
                config.name,
                listed.server_info,
                listed.protocol,
                listed.catalog.tools.len(),
                config.describe()
            );
        }
    }
    for agent in &file.spec.spec().agents {
        let granted: Vec<&ToolSpec> = file.spec.granted(&agent.id).collect();
        if !json {
            outln!("");
            outln!("agent {} ({} tools):", agent.id, granted.len());
        }
        let width = granted.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for tool in granted {
            let source = source_of(&file, tool);
            if json {
                print_json(&json!({
                    "type": "tool",
                    "agent": agent.id,
                    "name": tool.name,
                    "source": source,
                    "read_only": tool.read_only,
                    "idempotent": tool.idempotent,
                    "requires_approval": tool.requires_approval,
                    "description": tool.description,
                    "schema": tool.schema,
                }))?;
            } else {
                outln!(
                    "  {:width$}  {:<12}  {:<32}  {}",
                    tool.name,
                    source,
                    flags(tool),
                    schema_summary(&tool.schema),
                );
            }
        }
    }
    Ok(EXIT_OK)
}

/// `mcp:SERVER`, `command` or `human`.
fn source_of(file: &RunFile, tool: &ToolSpec) -> String {
    if let Some(m) = file
        .setup
        .mcp
        .iter()
        .find(|m| m.tools.iter().any(|t| t.name == tool.name))
    {
        return format!("mcp:{}", m.server.name);
    }
    if tool.interactive {
        "human".into()
    } else {
        "command".into()
    }
}

fn flags(tool: &ToolSpec) -> String {
    let mut out = Vec::new();
    if tool.read_only {
        out.push("read-only");
    }
    if tool.idempotent {
        out.push("idempotent");
    }
    if tool.requires_approval {
        out.push("needs-approval");
    }
    if out.is_empty() {
        "-".into()
    } else {
        out.join(",")
    }
}
