//! Which tools a model request offers once MCP servers have listed theirs (revision 3).
//!
//! A spec grants MCP tools by name (`fs__read_text_file`, or all of a server's with `fs__*`,
//! expanded when the run was created). The servers' lists can change — between runs, or
//! mid-run after `notifications/tools/list_changed` — so each list is an input: a
//! [`ToolsListed`](super::EventBody::ToolsListed) event records it in the history, the state
//! keeps the latest per server ([`RunData::catalogs`]), and every model request offers the
//! granted tools that the latest list of their server still has. A call to a granted tool the
//! server no longer lists is refused like an unknown tool. Tools of servers that never listed
//! (every run before revision 3) are offered as granted.

use super::error::MachineError;
use super::ids::{AgentId, Digest};
use super::spec::RunSpec;
use super::state::{ListedTools, RunData, RunState};
use super::step::Cx;
use super::table::{EdgeId, EventKind, StateKind};

/// What separates an MCP tool's server from its name in the offered name (`fs__read`).
const SEPARATOR: &str = "__";

/// The first revision whose runs record MCP tool lists.
pub(crate) const LISTING_SEMANTICS: u32 = 3;

/// Whether `tool` may be offered in `run`: true unless it is a tool of a server whose latest
/// recorded list does not have it.
pub(crate) fn available(run: &RunData, tool: &str) -> bool {
    match tool
        .split_once(SEPARATOR)
        .and_then(|(server, _)| run.catalogs.get(server))
    {
        Some(listed) => listed.tools.iter().any(|t| t == tool),
        None => true,
    }
}

/// The names `agent` is offered in `run`, in grant order, and the catalogs that decided it.
pub(crate) fn offered(
    spec: &RunSpec,
    run: &RunData,
    agent: &AgentId,
) -> (Vec<String>, std::collections::BTreeMap<String, Digest>) {
    let tools = spec
        .granted(agent)
        .filter(|t| available(run, &t.name))
        .map(|t| t.name.clone())
        .collect();
    let catalogs = run
        .catalogs
        .iter()
        .map(|(server, listed)| (server.clone(), listed.catalog))
        .collect();
    (tools, catalogs)
}

/// `Preparing --ToolsListed--> Preparing`: records `server`'s list. Refused before revision
/// 3, and for a list naming a tool of another server.
pub(crate) fn on_tools_listed(
    cx: &Cx<'_>,
    mut run: RunData,
    server: &str,
    catalog: Digest,
    tools: &[String],
) -> Result<(EdgeId, RunState), MachineError> {
    if cx.spec.spec().semantics < LISTING_SEMANTICS {
        return Err(MachineError::InvalidTransition {
            state: StateKind::Preparing,
            event: EventKind::ToolsListed,
        });
    }
    let prefix = format!("{server}{SEPARATOR}");
    if server.is_empty() || server.contains(SEPARATOR) {
        return Err(MachineError::BadListing(format!(
            "`{server}` is not an MCP server name"
        )));
    }
    if let Some(stray) = tools.iter().find(|t| !t.starts_with(&prefix)) {
        return Err(MachineError::BadListing(format!(
            "server `{server}` lists `{stray}`, which is not named `{prefix}…`"
        )));
    }
    run.catalogs.insert(
        server.to_owned(),
        ListedTools {
            catalog,
            tools: tools.to_vec(),
        },
    );
    Ok((EdgeId::PreparingToolsListed, RunState::Preparing { run }))
}
