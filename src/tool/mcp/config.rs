//! An MCP server as the setup stores it: how to reach it and how to treat its tools. It holds
//! the NAMES of environment variables, never their values, so it can be stored with a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tool::env::{EnvPolicy, EnvValue};

/// How long a server may take to start and answer `initialize` (and `tools/list`) unless its
/// entry says otherwise.
pub const DEFAULT_INIT_TIMEOUT_MS: u64 = 30_000;

/// One `[[mcp]]` entry, ready to connect. Built by the spec file loader (`config`), or by hand
/// to embed a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name: its tools are offered as `NAME__TOOL`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// How long starting it, `initialize` and `tools/list` may take together; default
    /// [`DEFAULT_INIT_TIMEOUT_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_timeout_ms: Option<u64>,
    /// Default limit of a call to any of its tools; `None` leaves it to the engine's tool
    /// timeout. A tool's own override wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Per-tool overrides, by the server's own name for the tool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, McpToolOverride>,
    /// The label every result of its tools carries (`trust`, `confidentiality` in `[[mcp]]`;
    /// see [`crate::machine::label`]). Left out when trusted and public.
    #[serde(
        default,
        skip_serializing_if = "crate::machine::Label::is_trusted_public"
    )]
    pub results: crate::machine::Label,
}

impl McpServerConfig {
    /// The startup limit in force.
    pub fn init_timeout(&self) -> Duration {
        Duration::from_millis(self.init_timeout_ms.unwrap_or(DEFAULT_INIT_TIMEOUT_MS))
    }

    /// What the transport is, for messages: the command line or the URL.
    pub fn describe(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { program, args, .. } => std::iter::once(program.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            McpTransport::Http { url, .. } => url.clone(),
        }
    }

    /// The environment policy its program starts with (a stdio server), keeping `withheld`
    /// out under `env_all` (the setup's provider key variables); `None` for an HTTP server,
    /// which starts no program.
    pub fn env_policy(&self, withheld: &[String]) -> Option<EnvPolicy> {
        match &self.transport {
            McpTransport::Stdio {
                env,
                env_set,
                env_all,
                ..
            } => Some(EnvPolicy {
                pass: env.clone(),
                set: env_set.clone(),
                all: *env_all,
                withheld: withheld.to_vec(),
            }),
            McpTransport::Http { .. } => None,
        }
    }

    /// The confinement of its program, for a stdio server declared with one.
    pub fn confine(&self) -> Option<&crate::tool::confine::Confine> {
        match &self.transport {
            McpTransport::Stdio { confine, .. } => confine.as_ref(),
            McpTransport::Http { .. } => None,
        }
    }

    /// Identifies the server process-wide: two entries with the same key share one
    /// connection.
    pub(crate) fn key(&self) -> String {
        // Serialising plain strings, maps and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| self.name.clone())
    }
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum McpTransport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        /// The program: a bare name looked up on `PATH` when it starts, or an absolute path.
        program: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Its working directory (the spec file's directory).
        dir: PathBuf,
        /// Names of the engine's variables it gets besides the minimal environment (see
        /// [`crate::tool::env`]); their values are read when it starts, never stored.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        /// Variables the spec sets for it (`env = { NAME = "…" }`).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env_set: BTreeMap<String, EnvValue>,
        /// Pass the engine's whole environment minus credentials (see [`crate::tool::env`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        env_all: bool,
        /// What the server's program may reach (`confine = { … }`, see
        /// [`crate::tool::confine`]); `None` runs it unconfined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confine: Option<crate::tool::confine::Confine>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint: `https://`, or `http://` for a loopback host.
        url: String,
        /// Header name → NAME of the environment variable holding its value, read at connect
        /// time and never stored.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers_env: BTreeMap<String, String>,
    },
}

/// What the spec says about one tool, overriding what the server's annotations say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolOverride {
    /// Instead of `readOnlyHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Instead of `idempotentHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// Instead of what `destructiveHint` implies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_approval: Option<bool>,
    /// Limit of one call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Its policy (`consequential`, `on_untrusted`, `arguments`; see
    /// [`crate::machine::flow_policy`]); its results' label is the server's. Left out when it
    /// sets none.
    #[serde(default, skip_serializing_if = "McpToolPolicy::is_open")]
    pub policy: McpToolPolicy,
}

/// The guarded-tool rules of one MCP tool, from its `[mcp.tools.NAME]` table: what
/// [`ToolGuard`](crate::machine::ToolGuard) holds besides the label of its results.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolPolicy {
    /// It runs only when decided from trusted context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub consequential: bool,
    /// What a blocked call does.
    #[serde(default, skip_serializing_if = "is_deny")]
    pub on_untrusted: crate::machine::OnUntrusted,
    /// Rules on its arguments, by top-level argument name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub arguments: BTreeMap<String, crate::machine::ArgumentRule>,
    /// Its results are kept from the model as hidden values.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hide: bool,
    /// Its successful answers never quote its arguments (`echoes_arguments = false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_echo: bool,
}

fn is_deny(policy: &crate::machine::OnUntrusted) -> bool {
    *policy == crate::machine::OnUntrusted::Deny
}

impl McpToolPolicy {
    /// True when it checks nothing (every MCP tool before guarded tools).
    pub fn is_open(&self) -> bool {
        *self == McpToolPolicy::default()
    }

    /// The tool's guard: these rules, with `results` as the label of its results.
    pub fn guard(&self, results: crate::machine::Label) -> crate::machine::ToolGuard {
        crate::machine::ToolGuard {
            results,
            consequential: self.consequential,
            on_untrusted: self.on_untrusted,
            arguments: self.arguments.clone(),
            hide: self.hide,
            no_echo: self.no_echo,
        }
    }
}
