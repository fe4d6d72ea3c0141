//! Delegates given as other spec files (`delegates = [{ spec = "review.toml", as = "review" }]`):
//! each file is loaded and validated with the file that names it (its path relative to that
//! file's directory), its compiled spec is embedded in the parent's spec as a
//! [`SpecDelegate`] — so a run never needs the file again — and its providers and command
//! tools join the parent's [`Setup`], so any process resuming the tree can build them.

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::file::{RawAgent, RawDelegate};
use super::setup::Setup;
use crate::machine::{AgentId, Spec, SpecDelegate};

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
/// one of them is a cycle. Errors name the entry's field (`….spec` or `….as`).
pub(crate) fn attach(
    spec: &mut Spec,
    setup: &mut Setup,
    refs: &[SpecFileRef],
    spec_dir: &Path,
    chain: &[PathBuf],
) -> Result<(), ConfigError> {
    let mut loaded: Vec<(AgentId, PathBuf)> = Vec::new();
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
        if child.mcp_pending() {
            return Err(ConfigError::invalid(
                spec_field,
                format!(
                    "`{}` declares [[mcp]] servers, which a delegate's spec file cannot have yet – delegate to an agent of this file instead",
                    r.path
                ),
            ));
        }
        merge_setup(setup, &child.setup, &spec_field, &r.path)?;
        spec.spec_delegates.push(SpecDelegate {
            name: name.clone(),
            spec: Box::new(child.spec.spec().clone()),
        });
        loaded.push((name, file));
    }
    Ok(())
}

/// Adds `child`'s providers and command tools to `setup`; one that shares a name with one of
/// `setup`'s must be the same, or the file is refused.
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
    Ok(())
}

/// A file's name for a cycle message.
fn short(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
