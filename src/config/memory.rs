//! `[memory]` in the spec file (revision 5): the global memory's name, the scopes injected
//! into model requests, and the caps, as written; and `runtape run --memory NAME`, which
//! names another global memory for one run.
//!
//! ```toml
//! [memory]
//! global = "support-team"      # a memory that outlives runs (leave out: agent and shared only)
//! inject = ["shared", "global"] # put these scopes in every model request, as data
//! max_keys = 64                # per scope (per agent for `agent`)
//! max_value_bytes = 4096
//! max_bytes_agent = 16384
//! max_bytes_shared = 65536
//! max_bytes_global = 65536
//! ```

use serde::Deserialize;

use super::RunFile;
use super::error::ConfigError;
use crate::machine::{MemoryLimits, MemoryScope, MemorySpec, RunSpec};

/// `[memory]`, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    pub(crate) global: Option<String>,
    #[serde(default)]
    pub(crate) inject: Vec<String>,
    pub(crate) max_keys: Option<u32>,
    pub(crate) max_value_bytes: Option<u32>,
    pub(crate) max_bytes_agent: Option<u32>,
    pub(crate) max_bytes_shared: Option<u32>,
    pub(crate) max_bytes_global: Option<u32>,
}

/// The machine's [`MemorySpec`] for `[memory]` (the machine checks ranges and names).
pub(crate) fn compile(raw: Option<&RawMemory>) -> Result<Option<MemorySpec>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let inject = raw
        .inject
        .iter()
        .enumerate()
        .map(|(i, name)| {
            MemoryScope::parse(name).ok_or_else(|| {
                ConfigError::invalid(
                    format!("memory.inject[{i}]"),
                    format!(
                        "`{name}` is not a memory scope – give \"agent\", \"shared\" or \"global\""
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let d = MemoryLimits::default();
    Ok(Some(MemorySpec {
        global: raw.global.clone(),
        inject,
        limits: MemoryLimits {
            max_keys: raw.max_keys.unwrap_or(d.max_keys),
            max_value_bytes: raw.max_value_bytes.unwrap_or(d.max_value_bytes),
            max_bytes_agent: raw.max_bytes_agent.unwrap_or(d.max_bytes_agent),
            max_bytes_shared: raw.max_bytes_shared.unwrap_or(d.max_bytes_shared),
            max_bytes_global: raw.max_bytes_global.unwrap_or(d.max_bytes_global),
        },
    }))
}

impl RunFile {
    /// Points this file's runs at global memory `name` instead of the one `[memory] global`
    /// names (`runtape run --memory NAME`: one memory per user or per project from one spec).
    /// Refused for a file without `[memory]` and for a name that is not valid; nothing
    /// changes then.
    pub fn use_global_memory(&mut self, name: &str) -> Result<(), ConfigError> {
        let mut spec = self.spec.spec().clone();
        let Some(memory) = spec.memory.as_mut() else {
            return Err(ConfigError::invalid(
                "memory",
                format!(
                    "--memory {name} names a global memory, but {} has no [memory] table – add one",
                    self.path.display()
                ),
            ));
        };
        memory.global = Some(name.to_owned());
        self.spec = RunSpec::build(spec).map_err(|e| self.locate(ConfigError::from_spec(e)))?;
        Ok(())
    }
}
