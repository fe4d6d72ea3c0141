//! [`Setup`]: how to rebuild a run's providers and tools in any process. The engine stores it
//! with the run (as JSON), so `resume` in another process, from another directory, installs
//! the same providers and command tools. It holds names of key variables, never keys.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::{At, ConfigError};
use super::mcp::McpSetup;
use super::script::ScriptSetup;
use crate::exec::Engine;
use crate::provider::http::{
    DEFAULT_IDLE_TIMEOUT, HttpProviderConfig, OpenAiCompat, PriceEntry, ProviderBuildError,
    ProviderKind,
};
use crate::provider::{EchoProvider, ModelProvider};
use crate::tool::command::{CommandConfig, CommandTool};

/// The setup format version [`Setup::to_json`] writes and [`Setup::from_json`] reads.
pub const SETUP_VERSION: u32 = 1;

/// Everything needed to build a run's providers and command tools, in any process.
/// Produced by [`load`](super::load); store it with the run through
/// [`StartRun::with_setup`](crate::exec::StartRun::with_setup) and rebuild from it with [`Setup::from_json`] +
/// [`Setup::install`] before resuming.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    /// [`SETUP_VERSION`] when written.
    pub version: u32,
    /// The spec file's directory, absolute: command tools run there.
    pub spec_dir: PathBuf,
    /// Providers, in file order (so index `i` is `providers[i]` in the file).
    pub providers: Vec<ProviderSetup>,
    /// Command tools (human tools need no implementation and are not listed).
    pub tools: Vec<CommandConfig>,
    /// MCP servers and the tools of theirs the run was offered (absent before MCP existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpSetup>,
    /// The `[retriever]` program, when the file has one (revision 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retriever: Option<crate::tool::retriever::RetrieverConfig>,
    /// The names (never the values) of the variables an env file gave the run
    /// (`runtape run --env-file`, [`crate::secrets::env_file`]), in file order; `None` when
    /// none was given. Sealed with the setup, so replay and `verify` see that the run's
    /// references were read from one; a resume needs the file again (`resume --env-file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<Vec<String>>,
    /// The schedule that started the run and the instant it was due, when a schedule did
    /// (`runtape schedule`). Sealed with the setup, so `verify` holds the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduledBy>,
}

impl ScheduledBy {
    /// The schedule a stored setup records, if any: for listings, which read this and not the
    /// whole setup (a setup that names no schedule is not parsed at all).
    pub fn of_setup(setup: &str) -> Option<ScheduledBy> {
        #[derive(Deserialize)]
        struct Only {
            schedule: Option<ScheduledBy>,
        }
        if !setup.contains("\"schedule\"") {
            return None;
        }
        serde_json::from_str::<Only>(setup).ok()?.schedule
    }
}

/// What started a scheduled run ([`Setup::schedule`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledBy {
    /// The schedule's name.
    pub name: String,
    /// The instant it was due, Unix ms (the moment of `runtape schedule trigger` when
    /// `manual`).
    pub instant_ms: u64,
    /// Started by `runtape schedule trigger`, not by the timetable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
}

/// One provider entry, ready to build. Stored with its `type` first, and read tag first
/// (without buffering the whole entry).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderSetup {
    /// OpenAI-compatible, Anthropic or Ollama over HTTP.
    Http(HttpSetup),
    /// The echo provider.
    Echo {
        /// The name agents use.
        name: String,
    },
    /// Deterministic replies.
    Scripted(ScriptSetup),
}

impl ProviderSetup {
    /// The name agents' routes use.
    pub fn name(&self) -> &str {
        match self {
            ProviderSetup::Http(h) => &h.name,
            ProviderSetup::Echo { name } => name,
            ProviderSetup::Scripted(s) => &s.name,
        }
    }
}

/// An HTTP provider entry with every default applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSetup {
    /// The name agents use.
    pub name: String,
    /// The wire protocol.
    pub kind: ProviderKind,
    /// Default model (requests carry their route's model).
    pub model: String,
    /// Base URL.
    pub base_url: String,
    /// The NAME of the variable holding the key, or `None` for servers that need none.
    pub api_key_env: Option<String>,
    /// Bound on a whole request, in milliseconds.
    pub timeout_ms: u64,
    /// Bound on silence between chunks, in milliseconds (default: the provider layer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// Azure's `api-version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Stream replies.
    pub stream: bool,
    /// Output token cap to ask for.
    pub max_tokens: Option<u64>,
    /// Your prices, USD per million tokens.
    pub pricing: Vec<PriceEntry>,
    /// OpenAI-compatible differences (Mistral: the older `max_tokens`, no `stream_options`).
    #[serde(default, skip_serializing_if = "is_default_compat")]
    pub compat: OpenAiCompat,
    /// `attachments = ["image", "pdf"]`: the kinds of file the models are sent, instead of
    /// the built-in table's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<crate::machine::AttachmentKind>>,
}

fn is_default_compat(c: &OpenAiCompat) -> bool {
    *c == OpenAiCompat::default()
}

impl HttpSetup {
    /// The provider layer's config for this entry.
    pub fn config(&self) -> HttpProviderConfig {
        HttpProviderConfig {
            name: self.name.clone(),
            kind: self.kind,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            timeout: Duration::from_millis(self.timeout_ms),
            idle_timeout: self
                .idle_timeout_ms
                .map_or(DEFAULT_IDLE_TIMEOUT, Duration::from_millis),
            api_version: self.api_version.clone(),
            stream: self.stream,
            max_tokens: self.max_tokens,
            pricing: self.pricing.clone(),
            compat: self.compat,
            attachments: self.attachments.clone(),
        }
    }
}

impl Setup {
    /// The setup as JSON, for [`StartRun::with_setup`](crate::exec::StartRun::with_setup). Contains variable names, never
    /// their values. Fails only for a hand-built setup holding a path that is not UTF-8 (the
    /// loader refuses those).
    pub fn to_json(&self) -> Result<String, ConfigError> {
        serde_json::to_string(self).map_err(|e| ConfigError::Setup {
            reason: format!("cannot be written as JSON ({e}) – use UTF-8 paths"),
        })
    }

    /// Reads a setup written by [`to_json`](Self::to_json) (by this or an older runtape).
    pub fn from_json(json: &str) -> Result<Setup, ConfigError> {
        let setup: Setup = serde_json::from_str(json).map_err(|e| ConfigError::Setup {
            reason: format!(
                "the stored setup is unreadable ({e}) – resume the run with the runtape version that started it"
            ),
        })?;
        if setup.version != SETUP_VERSION {
            return Err(ConfigError::Setup {
                reason: format!(
                    "the stored setup has version {}, this runtape reads version {SETUP_VERSION} – resume the run with the runtape version that started it",
                    setup.version
                ),
            });
        }
        Ok(setup)
    }

    /// Builds every provider (HTTP providers check their key variable now: unset or empty is
    /// an error naming the variable) and command tool, then registers them all with
    /// `engine`. On error nothing is registered. The keys' values are registered with
    /// [`crate::secrets`], so that a provider or tool echoing one never gets it stored or
    /// printed.
    pub fn install(&self, engine: &Engine) -> Result<(), ConfigError> {
        self.register_secrets();
        let providers = self.build_providers()?;
        for (name, provider) in providers {
            engine.register_provider(&name, provider);
        }
        for tool in self.command_tools() {
            engine.register_tool(Arc::new(tool));
        }
        let hub = crate::tool::mcp::McpHub::global();
        for tool in self.mcp_tools(hub) {
            engine.register_tool(Arc::new(tool));
        }
        for server in self.mcp_servers(hub) {
            engine.register_tool_lister(Arc::new(server));
        }
        if let Some(config) = &self.retriever {
            let keys: Vec<&str> = self.key_variables().collect();
            engine.register_retriever(crate::tool::retriever::Retriever::command(
                config,
                keys.iter().copied(),
            ));
        }
        Ok(())
    }

    /// Registers with [`crate::secrets`] the values this setup's programs and providers hold:
    /// every HTTP provider's `api_key_env`, every variable a command tool, the retriever or a
    /// stdio MCP server is passed by name (see [`crate::tool::env`]), and runtape's own
    /// ([`register_engine_env`](crate::secrets::register_engine_env)). Their values are then
    /// scrubbed from everything stored or printed. [`install`](Self::install) calls it; call
    /// it yourself when you register [`command_tools`](Self::command_tools) without
    /// installing.
    pub fn register_secrets(&self) {
        crate::secrets::register_engine_env();
        for name in self.key_variables() {
            crate::secrets::register_env(name);
        }
        for tool in self
            .tools
            .iter()
            .chain(self.retriever.as_ref().map(|r| &r.command))
        {
            tool.env_policy().register_secrets();
        }
        for m in &self.mcp {
            if let Some(policy) = m.server.env_policy(&[]) {
                policy.register_secrets();
            }
        }
    }

    /// Every MCP tool the run was offered, on `hub`'s servers (not started: each starts on
    /// its first call); a stdio server never gets the providers' key variables under
    /// `env_all`.
    pub fn mcp_tools(&self, hub: &crate::tool::mcp::McpHub) -> Vec<crate::tool::mcp::McpTool> {
        let keys: Vec<String> = self.key_variables().map(str::to_owned).collect();
        self.mcp
            .iter()
            .flat_map(|m| {
                let server = hub.server(&m.server, &keys);
                m.tools
                    .iter()
                    .map(move |info| crate::tool::mcp::McpTool::new(info.clone(), server.clone()))
            })
            .collect()
    }

    /// The MCP servers of this setup on `hub` (not started), for
    /// [`Engine::register_tool_lister`]: runs list their tools at step boundaries.
    pub fn mcp_servers(
        &self,
        hub: &crate::tool::mcp::McpHub,
    ) -> Vec<Arc<crate::tool::mcp::McpServer>> {
        let keys: Vec<String> = self.key_variables().map(str::to_owned).collect();
        self.mcp
            .iter()
            .map(|m| hub.server(&m.server, &keys))
            .collect()
    }

    /// Every provider, by name, built but not registered.
    fn build_providers(&self) -> Result<Vec<Named>, ConfigError> {
        let mut out = Vec::with_capacity(self.providers.len());
        for (i, entry) in self.providers.iter().enumerate() {
            let provider: Arc<dyn ModelProvider> = match entry {
                ProviderSetup::Http(http) => crate::provider::http::build(http.config())
                    .map_err(|error| provider_error(i, error))?,
                ProviderSetup::Echo { .. } => Arc::new(EchoProvider),
                ProviderSetup::Scripted(script) => Arc::new(script.provider()),
            };
            out.push((entry.name().to_owned(), provider));
        }
        Ok(out)
    }

    /// Every command tool. Each starts its program with the minimal environment plus what its
    /// `env` names; under `env_all`, the providers' key variables are withheld too.
    pub fn command_tools(&self) -> Vec<CommandTool> {
        let keys: Vec<&str> = self.key_variables().collect();
        self.tools
            .iter()
            .map(|config| CommandTool::new(config.clone()).without_env(keys.iter().copied()))
            .collect()
    }

    /// Names of the environment variables the HTTP providers read their keys from.
    pub fn key_variables(&self) -> impl Iterator<Item = &str> {
        self.providers.iter().filter_map(|p| match p {
            ProviderSetup::Http(h) => h.api_key_env.as_deref(),
            _ => None,
        })
    }
}

/// A provider and the name agents use for it.
type Named = (String, Arc<dyn ModelProvider>);

/// A provider build error at provider `index`, pointing at the field to fix.
pub(crate) fn provider_error(index: usize, error: ProviderBuildError) -> ConfigError {
    let field = match &error {
        ProviderBuildError::MissingModel { .. } => "model",
        ProviderBuildError::KeyRequired { .. }
        | ProviderBuildError::KeyUnset { .. }
        | ProviderBuildError::KeyEmpty { .. }
        | ProviderBuildError::KeyInvalid { .. } => "api_key_env",
        ProviderBuildError::InvalidBaseUrl { .. }
        | ProviderBuildError::InsecureBaseUrl { .. }
        | ProviderBuildError::CredentialsInUrl { .. } => "base_url",
        ProviderBuildError::ZeroTimeout { .. } => "timeout_ms",
        ProviderBuildError::Azure { .. } => "base_url",
        ProviderBuildError::InvalidPricing { .. } => "pricing",
        _ => "",
    };
    let path = if field.is_empty() {
        format!("providers[{index}]")
    } else {
        format!("providers[{index}].{field}")
    };
    ConfigError::Provider {
        at: At::field(path),
        error,
    }
}
