//! `[memory]` in the spec (revision 5): which global memory a run uses, which scopes are
//! injected into model requests, and the caps — with their validation.

use serde::{Deserialize, Serialize};

use super::{MEMORY_SEMANTICS, MemoryScope, TOOL_NAMES};
use crate::machine::spec::{Spec, SpecError};

/// Default cap on keys per scope (per agent for the `agent` scope).
pub const DEFAULT_MAX_KEYS: u32 = 64;
/// Default cap on one value's bytes.
pub const DEFAULT_MAX_VALUE_BYTES: u32 = 4 * 1024;
/// Default cap on the bytes (keys plus values) of one agent's notes.
pub const DEFAULT_MAX_BYTES_AGENT: u32 = 16 * 1024;
/// Default cap on the bytes of the shared scope.
pub const DEFAULT_MAX_BYTES_SHARED: u32 = 64 * 1024;
/// Default cap on the bytes of the global scope as a run sees it.
pub const DEFAULT_MAX_BYTES_GLOBAL: u32 = 64 * 1024;
/// No scope may be allowed more than this: memory lives in the run state, which is hashed at
/// every step (documents belong in a retriever, not in memory).
pub const HARD_MAX_SCOPE_BYTES: u32 = 1024 * 1024;
/// No scope may hold more keys than this.
pub const HARD_MAX_KEYS: u32 = 4096;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 128;
/// The longest global memory name.
pub const MAX_NAME_BYTES: usize = 64;

/// A spec's `[memory]`: the run's agents get the memory tools (`remember`, `recall`,
/// `forget`), per-agent (`agent`) and per-run (`shared`) scopes, and — when `global` names
/// one — a global memory that outlives runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// The global memory this run reads when it starts and writes when it completes
    /// (`None`: no `global` scope). Letters, digits, `_`, `-` and `.`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<String>,
    /// Scopes placed in every model request, after the conversation, as one user-position
    /// message marked as data (empty: none; the tools still work).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<MemoryScope>,
    /// The caps.
    #[serde(default, skip_serializing_if = "MemoryLimits::is_default")]
    pub limits: MemoryLimits,
}

/// Caps on memory, checked when a key is written: a write past one is answered with a tool
/// error naming the cap, and nothing changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryLimits {
    /// Keys per scope (per agent for `agent`).
    #[serde(default = "default_max_keys")]
    pub max_keys: u32,
    /// Bytes of one value.
    #[serde(default = "default_max_value_bytes")]
    pub max_value_bytes: u32,
    /// Bytes (keys plus values) of one agent's notes.
    #[serde(default = "default_max_bytes_agent")]
    pub max_bytes_agent: u32,
    /// Bytes of the shared scope.
    #[serde(default = "default_max_bytes_shared")]
    pub max_bytes_shared: u32,
    /// Bytes of the global scope as the run sees it (what it loaded, with its own writes).
    #[serde(default = "default_max_bytes_global")]
    pub max_bytes_global: u32,
}

fn default_max_keys() -> u32 {
    DEFAULT_MAX_KEYS
}
fn default_max_value_bytes() -> u32 {
    DEFAULT_MAX_VALUE_BYTES
}
fn default_max_bytes_agent() -> u32 {
    DEFAULT_MAX_BYTES_AGENT
}
fn default_max_bytes_shared() -> u32 {
    DEFAULT_MAX_BYTES_SHARED
}
fn default_max_bytes_global() -> u32 {
    DEFAULT_MAX_BYTES_GLOBAL
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            max_keys: DEFAULT_MAX_KEYS,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_bytes_agent: DEFAULT_MAX_BYTES_AGENT,
            max_bytes_shared: DEFAULT_MAX_BYTES_SHARED,
            max_bytes_global: DEFAULT_MAX_BYTES_GLOBAL,
        }
    }
}

impl MemoryLimits {
    /// True for the defaults (left out of a stored spec).
    pub fn is_default(&self) -> bool {
        *self == MemoryLimits::default()
    }

    /// The byte cap of `scope`.
    pub fn max_bytes(&self, scope: MemoryScope) -> u32 {
        match scope {
            MemoryScope::Agent => self.max_bytes_agent,
            MemoryScope::Shared => self.max_bytes_shared,
            MemoryScope::Global => self.max_bytes_global,
        }
    }
}

impl MemorySpec {
    /// The scopes the tools accept, in order: `agent`, `shared`, then `global` when named.
    pub fn scopes(&self) -> Vec<MemoryScope> {
        let mut scopes = vec![MemoryScope::Agent, MemoryScope::Shared];
        if self.global.is_some() {
            scopes.push(MemoryScope::Global);
        }
        scopes
    }
}

/// Whether `name` may name a global memory: 1 to 64 of letters, digits, `_`, `-`, `.`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks `spec.memory`: revision 5 or later, a valid global name, injected scopes that exist
/// (once each), caps in range, and no declared tool named like a memory tool.
pub(crate) fn validate(spec: &Spec) -> Result<(), SpecError> {
    let Some(m) = &spec.memory else {
        return Ok(());
    };
    let bad = |path: &str, reason: String| SpecError::BadMemory {
        path: format!("memory{path}"),
        reason,
    };
    if spec.semantics < MEMORY_SEMANTICS {
        return Err(bad(
            "",
            format!(
                "memory needs revision {MEMORY_SEMANTICS} of the machine's rules (this spec follows {})",
                spec.semantics
            ),
        ));
    }
    if let Some(name) = &m.global
        && !is_valid_name(name)
    {
        return Err(bad(
            ".global",
            format!(
                "`{name}` is not a global memory name: use 1 to {MAX_NAME_BYTES} letters, digits, `_`, `-` and `.`"
            ),
        ));
    }
    for (i, scope) in m.inject.iter().enumerate() {
        if *scope == MemoryScope::Global && m.global.is_none() {
            return Err(bad(
                &format!(".inject[{i}]"),
                "the global scope is injected but no global memory is named: set `global`".into(),
            ));
        }
        if m.inject[..i].contains(scope) {
            return Err(bad(
                &format!(".inject[{i}]"),
                format!("scope `{scope}` is listed twice"),
            ));
        }
    }
    let l = &m.limits;
    for (field, value, max) in [
        ("max_keys", l.max_keys, HARD_MAX_KEYS),
        ("max_value_bytes", l.max_value_bytes, HARD_MAX_SCOPE_BYTES),
        ("max_bytes_agent", l.max_bytes_agent, HARD_MAX_SCOPE_BYTES),
        ("max_bytes_shared", l.max_bytes_shared, HARD_MAX_SCOPE_BYTES),
        ("max_bytes_global", l.max_bytes_global, HARD_MAX_SCOPE_BYTES),
    ] {
        if !(1..=max).contains(&value) {
            return Err(bad(
                &format!(".{field}"),
                format!("{field} must be between 1 and {max} (got {value})"),
            ));
        }
    }
    for (i, tool) in spec.tools.iter().enumerate() {
        if TOOL_NAMES.contains(&tool.name.as_str()) {
            return Err(SpecError::BadMemory {
                path: format!("tools[{i}].name"),
                reason: format!(
                    "`{}` is the name of a memory tool this spec's agents get from [memory]: rename the tool",
                    tool.name
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        assert!(is_valid_name("team-notes.v2"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name(&"x".repeat(65)));
    }

    #[test]
    fn scopes_follow_the_global_name() {
        let mut m = MemorySpec::default();
        assert_eq!(m.scopes(), [MemoryScope::Agent, MemoryScope::Shared]);
        m.global = Some("g".into());
        assert_eq!(m.scopes().len(), 3);
    }
}
