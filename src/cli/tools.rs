//! `runtape tools SPEC`: every tool each agent of a spec file would be offered at a run's
//! first turn, after starting the file's MCP servers — name, where it comes from (`command`,
//! `human`, `mcp:SERVER`, `delegate`, `handoff`, `memory`), its flags and a summary of its
//! arguments. Exits 2 naming the server that failed to start or initialise.

use std::path::Path;

use serde_json::json;

use super::EXIT_OK;
use super::common::{CliError, outln, print_json};
use crate::config::{self, RunFile};
use crate::machine::{OfferedKind, RunSpec, ToolSpec};
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
    list_agents(&file, &file.spec, &[], json)?;
    Ok(EXIT_OK)
}

/// Lists what each agent of `spec` is offered; then, for each delegate given as a spec of its
/// own (`delegates = [{ spec = "…", as = NAME }]`), its agents under `within` + NAME.
fn list_agents(
    file: &RunFile,
    spec: &RunSpec,
    within: &[&str],
    json: bool,
) -> Result<(), CliError> {
    let path = within.join("/");
    for agent in &spec.spec().agents {
        let offered = spec.offered_at_start(&agent.id);
        if !json {
            outln!("");
            if within.is_empty() {
                outln!("agent {} ({} tools):", agent.id, offered.len());
            } else {
                outln!(
                    "agent {} of delegate {path} ({} tools):",
                    agent.id,
                    offered.len()
                );
            }
        }
        let width = offered.iter().map(|(_, t)| t.name.len()).max().unwrap_or(0);
        for (kind, tool) in &offered {
            let source = match kind {
                OfferedKind::Declared => source_of(file, tool),
                OfferedKind::Delegate => "delegate".into(),
                OfferedKind::Handoff => "handoff".into(),
                OfferedKind::Memory => "memory".into(),
                OfferedKind::Timer => "timer".into(),
            };
            let confine = file
                .setup
                .tools
                .iter()
                .find(|c| c.name == tool.name)
                .and_then(|c| c.confine.as_ref())
                .or_else(|| {
                    let server = file
                        .setup
                        .mcp
                        .iter()
                        .find(|m| m.tools.iter().any(|t| t.name == tool.name))?;
                    server.server.confine()
                });
            if json {
                let mut line = json!({
                    "type": "tool",
                    "agent": agent.id,
                    "name": tool.name,
                    "source": source,
                    "read_only": tool.read_only,
                    "idempotent": tool.idempotent,
                    "requires_approval": tool.requires_approval,
                    "description": tool.description,
                    "schema": tool.schema,
                });
                if !within.is_empty() {
                    line["delegate"] = json!(path);
                }
                if let Some(confine) = confine {
                    line["confine"] = json!(confine);
                }
                if !tool.guard.is_open() {
                    line["guard"] = json!(tool.guard);
                }
                print_json(&line)?;
            } else {
                outln!(
                    "  {:width$}  {:<12}  {:<32}  {}",
                    tool.name,
                    source,
                    flags(tool),
                    schema_summary(&tool.schema),
                );
                if let Some(confine) = confine {
                    outln!("  {:width$}  {}", "", confine.summary());
                }
            }
        }
    }
    for d in &spec.spec().spec_delegates {
        // Validated with the parent when the file was loaded; a failure here is a bug, said
        // as one line rather than a panic.
        let child = RunSpec::build((*d.spec).clone())
            .map_err(|e| CliError::usage(format!("delegate {}: {e}", d.name)))?;
        let mut inner = within.to_vec();
        inner.push(d.name.as_str());
        list_agents(file, &child, &inner, json)?;
    }
    Ok(())
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
    // The guard (guarded tools): what its results are labelled and what is checked.
    let guard = &tool.guard;
    if guard.results.is_untrusted() {
        out.push("untrusted");
    }
    if guard.results.confidentiality == crate::machine::Confidentiality::Private {
        out.push("private");
    }
    if guard.consequential {
        out.push("consequential");
    }
    if !guard.arguments.is_empty() {
        out.push("argument-rules");
    }
    if guard.hide {
        out.push("hidden");
    }
    if guard.no_echo {
        out.push("no-echo");
    }
    if out.is_empty() {
        "-".into()
    } else {
        out.join(",")
    }
}
