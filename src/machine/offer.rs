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
//!
//! Revision 4 adds the tools a server lists that the run's spec does not have (the server
//! added them after the run started): the `ToolsListed` event carries their definitions, the
//! state keeps them with the server's latest list ([`ListedTools::added`]), and they are
//! offered — after the spec's granted tools, by server name then in the server's order — to
//! each agent granted all of the server's tools (`SERVER__*`), and when read-only to agents
//! without a grant list. An exact-name grant must name a tool found when the run started.
//! A tool of the spec keeps its spec definition whatever a later list says; a later list
//! cannot add a second definition under a spec tool's name.

use super::error::MachineError;
use super::ids::{AgentId, Digest};
use super::spec::{ADDED_TOOLS_SEMANTICS, RunSpec, ToolSpec};
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

/// The definition of tool `name` in `run`: the spec's, else (revision 4) the one its server's
/// latest list recorded for a tool added after the run started.
pub fn tool<'a>(spec: &'a RunSpec, run: &'a RunData, name: &str) -> Option<&'a ToolSpec> {
    spec.tool(name).or_else(|| added_tool(run, name))
}

/// The definition of `name` as a tool its server added after the run started, if it is one.
fn added_tool<'a>(run: &'a RunData, name: &str) -> Option<&'a ToolSpec> {
    let (server, _) = name.split_once(SEPARATOR)?;
    run.catalogs
        .get(server)?
        .added
        .iter()
        .find(|t| t.name == name)
}

/// Whether `agent` is granted `name` in `run`: by the spec, or (revision 4) as a tool its
/// server added that the agent's grants cover (see the module docs).
pub(crate) fn is_granted(spec: &RunSpec, run: &RunData, agent: &AgentId, name: &str) -> bool {
    if super::memory::tools::is_memory_tool(spec, name) {
        return super::memory::tools::is_granted(spec, agent, name);
    }
    if super::timer::is_timer_tool(spec, name) {
        return super::timer::is_granted(spec, agent, name);
    }
    if spec.tool(name).is_some() {
        return spec.is_granted(agent, name);
    }
    added_tool(run, name).is_some_and(|t| covers(spec, agent, t))
}

/// Whether `agent`'s grants cover `added`, a tool its server added after the run started.
fn covers(spec: &RunSpec, agent: &AgentId, added: &ToolSpec) -> bool {
    let Some((server, _)) = added.name.split_once(SEPARATOR) else {
        return false;
    };
    match spec.agent(agent) {
        Some(a) if a.tools.is_none() => added.read_only,
        Some(_) => spec.grants_server(agent, server),
        None => false,
    }
}

/// Schema errors of `args` for `name` (sorted, deduplicated), for a spec tool or a tool a
/// server added; empty when valid or unknown.
pub(crate) fn schema_errors(
    spec: &RunSpec,
    run: &RunData,
    name: &str,
    args: &serde_json::Value,
) -> Vec<String> {
    if spec.tool(name).is_some() {
        return spec.schema_errors(name, args);
    }
    let Some(added) = added_tool(run, name) else {
        return Vec::new();
    };
    let validator = match jsonschema::validator_for(&added.schema) {
        Ok(v) => v,
        // Checked when the list was recorded, so this is not reached; refuse rather than pass.
        Err(e) => return vec![format!("the tool's schema is not valid ({e})")],
    };
    super::spec::schema_errors(&validator, args)
}

/// The names `agent` is offered in `run`, in grant order (then, revision 4, the tools servers
/// added that its grants cover), and the catalogs that decided it.
pub(crate) fn offered(
    spec: &RunSpec,
    run: &RunData,
    agent: &AgentId,
) -> (Vec<String>, std::collections::BTreeMap<String, Digest>) {
    let mut tools: Vec<String> = spec
        .granted(agent)
        .filter(|t| available(run, &t.name))
        .map(|t| t.name.clone())
        .collect();
    tools.extend(
        run.catalogs
            .values()
            .flat_map(|listed| &listed.added)
            .filter(|t| covers(spec, agent, t))
            .map(|t| t.name.clone()),
    );
    let catalogs = run
        .catalogs
        .iter()
        .map(|(server, listed)| (server.clone(), listed.catalog))
        .collect();
    (tools, catalogs)
}

/// `Preparing --ToolsListed--> Preparing`: records `server`'s list. Refused before revision
/// 3, for a list naming a tool of another server, and for added definitions that do not fit
/// (before revision 4; not in the list; a spec tool's name; a bad name or schema).
pub(crate) fn on_tools_listed(
    cx: &Cx<'_>,
    mut run: RunData,
    server: &str,
    catalog: Digest,
    tools: &[String],
    added: &[ToolSpec],
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
    if let Some(problem) = added_problem(cx.spec, tools, added) {
        return Err(MachineError::BadListing(format!(
            "server `{server}`'s list: {problem}"
        )));
    }
    run.catalogs.insert(
        server.to_owned(),
        ListedTools {
            catalog,
            tools: tools.to_vec(),
            added: added.to_vec(),
        },
    );
    Ok((EdgeId::PreparingToolsListed, RunState::Preparing { run }))
}

/// Why the `added` definitions of a list naming `tools` cannot be recorded, if they cannot.
fn added_problem(spec: &RunSpec, tools: &[String], added: &[ToolSpec]) -> Option<String> {
    if added.is_empty() {
        return None;
    }
    if spec.spec().semantics < ADDED_TOOLS_SEMANTICS {
        return Some(format!(
            "it defines added tools, which revision {} runs do not offer",
            spec.spec().semantics
        ));
    }
    for (i, t) in added.iter().enumerate() {
        if added[..i].iter().any(|earlier| earlier.name == t.name) {
            return Some(format!("`{}` is defined twice", t.name));
        }
        if !tools.contains(&t.name) {
            return Some(format!("`{}` is defined but not listed", t.name));
        }
        if spec.tool(&t.name).is_some() {
            return Some(format!("`{}` is already a tool of the spec", t.name));
        }
        if !super::spec::is_valid_tool_name(&t.name) || t.interactive {
            return Some(format!("`{}` cannot be offered as an added tool", t.name));
        }
        if let Err(e) = jsonschema::validator_for(&t.schema) {
            return Some(format!("`{}` has a schema that is not valid ({e})", t.name));
        }
    }
    None
}

/// Where a tool an agent is offered comes from, for people reading the list
/// ([`RunSpec::offered_at_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferedKind {
    /// A tool of the spec (a command, an MCP server's, or a person).
    Declared,
    /// `delegate_<agent>(task)`: a child run (revision 4).
    Delegate,
    /// `transfer_to_<agent>(note)`: a handoff (revision 4).
    Handoff,
    /// `remember`, `recall` or `forget`, answered by the machine (revision 5).
    Memory,
    /// `sleep_for` or `sleep_until`, a durable timer (`[timers]`).
    Timer,
}

impl RunSpec {
    /// The tools `agent` is offered at a run's first model turn, in the order a request lists
    /// them: its granted tools, its delegates' and handoffs' tools, then the memory tools —
    /// each with the definition the model is shown. Call it to show a spec's tools before any
    /// run (`runtape tools`); tools an MCP server adds or drops later, which a run learns from
    /// its recorded lists, are not known here.
    pub fn offered_at_start(
        &self,
        agent: &AgentId,
    ) -> Vec<(OfferedKind, std::borrow::Cow<'_, ToolSpec>)> {
        let mut out: Vec<(OfferedKind, std::borrow::Cow<'_, ToolSpec>)> = self
            .granted(agent)
            .map(|t| (OfferedKind::Declared, std::borrow::Cow::Borrowed(t)))
            .collect();
        let Some(spec_agent) = self.agent(agent) else {
            return out;
        };
        let mut named: Vec<(OfferedKind, String)> = super::delegation::offered_names(spec_agent)
            .map(|n| {
                let kind = match super::delegation::classify(spec_agent, &n) {
                    Some(super::delegation::Offered::Transfer(_)) => OfferedKind::Handoff,
                    _ => OfferedKind::Delegate,
                };
                (kind, n)
            })
            .collect();
        named.extend(
            super::memory::tools::offered_names(self, agent)
                .into_iter()
                .map(|n| (OfferedKind::Memory, n)),
        );
        named.extend(
            super::timer::offered_names(self, agent)
                .into_iter()
                .map(|n| (OfferedKind::Timer, n)),
        );
        out.extend(
            named
                .into_iter()
                .filter_map(|(kind, n)| self.offered_tool(&n).map(|t| (kind, t))),
        );
        out
    }
}
