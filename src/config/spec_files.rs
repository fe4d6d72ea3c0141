//! Delegates given as other spec files (`delegates = [{ spec = "review.toml", as = "review" }]`):
//! each file is loaded and validated with the file that names it (its path relative to that
//! file's directory), its compiled spec is embedded in the parent's spec as a
//! [`SpecDelegate`] — so a run never needs the file again — and its providers, command
//! tools and MCP servers join the parent's [`Setup`], so any process resuming the tree can
//! build them.
//!
//! # MCP servers of a delegate's file
//!
//! Servers are process-wide resources, so a delegate file's `[[mcp]]` servers are started with
//! the parent's (one per name: a server both files name must be configured the same, or the
//! file is refused). Until they are listed, the delegate's MCP grants are held back like the
//! parent's ([`PendingDelegate`]); once listed, its servers' tools join the delegate's
//! embedded spec only — never the parent's — and its `SERVER__*` grants are expanded there
//! ([`apply_mcp`]). A child run of the file then offers, calls and records them like any MCP
//! tool; the parent's agents are not offered them.

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::file::{RawAgent, RawDelegate};
use super::mcp::{McpSetup, PendingGrants};
use super::setup::Setup;
use crate::machine::{AgentId, Spec, SpecDelegate};
use crate::tool::mcp::Listed;

/// A delegate spec file's MCP grants held back until the servers are listed.
#[derive(Clone, Debug)]
pub(crate) struct PendingDelegate {
    /// Where its spec is embedded: indices into `spec_delegates`, outermost first.
    at: Vec<usize>,
    /// Its `delegates` entry's field (`agents[0].delegates[2].spec`) and file, for errors.
    field: String,
    file: String,
    /// Its grants as written.
    grants: PendingGrants,
    /// Its own servers, by name.
    servers: Vec<String>,
}

/// Delegate spec files may name other spec files this deep at most (a chain, not a cycle).
pub(crate) const MAX_SPEC_FILE_DEPTH: usize = 16;

/// A `{ spec, as }` entry of an agent's `delegates`, still to be loaded.
pub(crate) struct SpecFileRef {
    /// Its field (`agents[0].delegates[2]`).
    field: String,
    /// The file as written.
    path: String,
    /// The name it is offered by.
    name: String,
}

/// The `{ spec, as }` entries of `agents`, in file order.
pub(crate) fn refs(agents: &[RawAgent]) -> Vec<SpecFileRef> {
    let mut out = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        for (k, d) in a.delegates.iter().enumerate() {
            if let RawDelegate::SpecFile(f) = d {
                out.push(SpecFileRef {
                    field: format!("agents[{i}].delegates[{k}]"),
                    path: f.spec.clone(),
                    name: f.name.clone(),
                });
            }
        }
    }
    out
}

/// Loads each of `refs` (relative to `spec_dir`) and attaches it to `spec` and `setup`.
/// `chain` holds the files naming this one, outermost first, this one last: a file naming
/// one of them is a cycle. Errors name the entry's field (`….spec` or `….as`). Returns the
/// delegates (theirs included) whose MCP grants wait for their servers to be listed.
pub(crate) fn attach(
    spec: &mut Spec,
    setup: &mut Setup,
    refs: &[SpecFileRef],
    spec_dir: &Path,
    chain: &[PathBuf],
) -> Result<Vec<PendingDelegate>, ConfigError> {
    let mut loaded: Vec<(AgentId, PathBuf)> = Vec::new();
    let mut pending = Vec::new();
    for r in refs {
        let as_field = format!("{}.as", r.field);
        let spec_field = format!("{}.spec", r.field);
        let name = AgentId::new(r.name.clone());
        let offered = format!("{}{}", crate::machine::DELEGATE_PREFIX, r.name);
        if !crate::machine::is_valid_tool_name(&offered) {
            return Err(ConfigError::invalid(
                as_field,
                format!(
                    "`{offered}` is not a valid tool name – use at most {} letters, digits, `_` and `-` in `as`",
                    crate::machine::MAX_TOOL_NAME - crate::machine::DELEGATE_PREFIX.len()
                ),
            ));
        }
        if spec.agents.iter().any(|a| a.id == name) {
            return Err(ConfigError::invalid(
                as_field,
                format!(
                    "`{}` is also an agent of this file – give the spec file another `as` name",
                    r.name
                ),
            ));
        }
        if let Some(t) = spec
            .tools
            .iter()
            .find(|t| t.name == r.name || t.name == offered)
        {
            return Err(ConfigError::invalid(
                as_field,
                format!(
                    "a tool of this file is named `{}` – give the spec file another `as` name",
                    t.name
                ),
            ));
        }
        if r.path.is_empty() {
            return Err(ConfigError::invalid(
                spec_field,
                "the path is empty – name the delegate's spec file, relative to this file",
            ));
        }
        let file = spec_dir.join(&r.path).canonicalize().map_err(|e| {
            ConfigError::invalid(
                spec_field.clone(),
                format!(
                    "`{}` cannot be read ({e}) – give a spec file's path relative to this file's directory",
                    r.path
                ),
            )
        })?;
        if let Some((_, earlier)) = loaded.iter().find(|(n, _)| *n == name) {
            if *earlier == file {
                continue;
            }
            return Err(ConfigError::invalid(
                as_field,
                format!(
                    "`{}` already names another spec file – give each file its own `as` name",
                    r.name
                ),
            ));
        }
        if chain.contains(&file) {
            let names: Vec<String> = chain
                .iter()
                .chain(std::iter::once(&file))
                .map(|p| short(p))
                .collect();
            return Err(ConfigError::invalid(
                spec_field,
                format!(
                    "spec files delegate in a cycle ({}) – a spec file may not (through others) delegate to itself",
                    names.join(" → ")
                ),
            ));
        }
        if chain.len() >= MAX_SPEC_FILE_DEPTH {
            return Err(ConfigError::invalid(
                spec_field,
                format!(
                    "spec files name each other more than {MAX_SPEC_FILE_DEPTH} deep – shorten the chain"
                ),
            ));
        }
        let mut nested = chain.to_vec();
        nested.push(file.clone());
        let child = super::load_in_chain(&file, &nested).map_err(|e| {
            ConfigError::invalid(
                spec_field.clone(),
                format!("the delegate's spec file is invalid: {e}"),
            )
        })?;
        merge_setup(setup, &child.setup, &spec_field, &r.path)?;
        let at = spec.spec_delegates.len();
        if let Some(grants) = &child.mcp_pending {
            pending.push(PendingDelegate {
                at: vec![at],
                field: spec_field.clone(),
                file: r.path.clone(),
                grants: grants.clone(),
                servers: child.own_mcp.clone(),
            });
        }
        pending.extend(child.delegate_mcp.iter().map(|p| PendingDelegate {
            at: std::iter::once(at).chain(p.at.iter().copied()).collect(),
            ..p.clone()
        }));
        spec.spec_delegates.push(SpecDelegate {
            name: name.clone(),
            spec: Box::new(child.spec.spec().clone()),
        });
        loaded.push((name, file));
    }
    // Tools are registered process-wide by name: a command tool named like an MCP server's
    // tools (`SERVER__…`) of either file would be shadowed.
    for m in &setup.mcp {
        let prefix = format!("{}{}", m.server.name, crate::tool::mcp::SEPARATOR);
        if let Some(t) = setup.tools.iter().find(|t| t.name.starts_with(&prefix)) {
            return Err(ConfigError::invalid(
                "delegates",
                format!(
                    "command tool `{}` is named like a tool of MCP server `{}` (`{prefix}…`), which a delegate's spec file or this file declares – rename the tool or the server",
                    t.name, m.server.name
                ),
            ));
        }
    }
    Ok(pending)
}

/// After the servers are listed: folds each pending delegate's servers' tools into its
/// embedded spec and expands its `SERVER__*` grants there (see the module doc), filling in
/// each server's tools in `setups`. Returns warnings; errors name the delegate's field and
/// file.
pub(crate) fn apply_mcp(
    spec: &mut Spec,
    setups: &mut [McpSetup],
    pending: &[PendingDelegate],
    listed: &[Listed],
) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for p in pending {
        let refused = |e: ConfigError| {
            ConfigError::invalid(
                p.field.clone(),
                format!("the delegate's spec file `{}`: {e}", p.file),
            )
        };
        let mut target = &mut *spec;
        for &i in &p.at {
            let Some(d) = target.spec_delegates.get_mut(i) else {
                return Err(refused(ConfigError::invalid(
                    "spec",
                    "its embedded spec is missing",
                )));
            };
            target = &mut d.spec;
        }
        let (mut own, theirs) = subset(setups, listed, &p.servers);
        warnings.extend(super::mcp::apply(target, &mut own, &p.grants, &theirs).map_err(refused)?);
        write_back(setups, own);
    }
    Ok(warnings)
}

/// The setups and listings of the servers named `names`, in `setups` order (which is the
/// order they were listed in).
pub(crate) fn subset(
    setups: &[McpSetup],
    listed: &[Listed],
    names: &[String],
) -> (Vec<McpSetup>, Vec<Listed>) {
    setups
        .iter()
        .zip(listed)
        .filter(|(s, _)| names.contains(&s.server.name))
        .map(|(s, l)| (s.clone(), l.clone()))
        .unzip()
}

/// Copies the tools `applied` found for each server back into `setups`.
pub(crate) fn write_back(setups: &mut [McpSetup], applied: Vec<McpSetup>) {
    for a in applied {
        if let Some(s) = setups.iter_mut().find(|s| s.server.name == a.server.name) {
            s.tools = a.tools;
        }
    }
}

/// Adds `child`'s providers, command tools and MCP servers to `setup`; one that shares a name
/// with one of `setup`'s must be the same, or the file is refused.
fn merge_setup(
    setup: &mut Setup,
    child: &Setup,
    field: &str,
    path: &str,
) -> Result<(), ConfigError> {
    for p in &child.providers {
        match setup.providers.iter().find(|q| q.name() == p.name()) {
            Some(q) if q == p => {}
            Some(_) => {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "provider `{}` of `{path}` differs from this file's provider of that name – rename one of them",
                        p.name()
                    ),
                ));
            }
            None => setup.providers.push(p.clone()),
        }
    }
    for t in &child.tools {
        match setup.tools.iter().find(|u| u.name == t.name) {
            Some(u) if u == t => {}
            Some(_) => {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "tool `{}` of `{path}` differs from this file's tool of that name – rename one of them",
                        t.name
                    ),
                ));
            }
            None => setup.tools.push(t.clone()),
        }
    }
    for m in &child.mcp {
        match setup.mcp.iter().find(|n| n.server.name == m.server.name) {
            Some(n) if n == m => {}
            Some(_) => {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "MCP server `{}` of `{path}` differs from this file's server of that name – servers are shared by every run of the process, so rename one of them",
                        m.server.name
                    ),
                ));
            }
            None => setup.mcp.push(m.clone()),
        }
    }
    Ok(())
}

/// A file's name for a cycle message.
fn short(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
