//! What an HTTP provider is built from, and the checks made when it is built.
//!
//! Construction fails early, with one line that says what to fix: a missing model, an API key
//! variable that is unset or empty, a base URL that is not a URL, or plain `http://` to a host
//! that is not loopback. The key itself is never stored here: the config holds the *name* of
//! the environment variable, and the provider reads its value at call time.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::pricing::PriceEntry;

/// The wire protocol an HTTP provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI chat completions (`POST {base}/chat/completions`), also for OpenAI-compatible
    /// servers (vLLM, llama.cpp, OpenRouter, Ollama's `/v1`, ...).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
    /// Ollama's native chat API (`POST {base}/api/chat`, NDJSON when streaming).
    Ollama,
    /// Azure OpenAI chat completions: `POST {deployment URL}/chat/completions?api-version=V`
    /// with the key in an `api-key` header; the body is OpenAI's.
    #[serde(rename = "azure")]
    AzureOpenAi,
    /// The OpenAI Responses API (`POST {base}/responses`).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl ProviderKind {
    /// The short name used in logs and errors (`openai`, `anthropic`, `ollama`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Ollama => "ollama",
            ProviderKind::AzureOpenAi => "azure",
            ProviderKind::OpenAiResponses => "openai-responses",
        }
    }

    /// The base URL used when the config leaves `base_url` empty (Azure has none: the
    /// deployment URL must be given).
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Ollama => "http://127.0.0.1:11434",
            ProviderKind::AzureOpenAi => "",
        }
    }

    /// The variable [`HttpProviderConfig::new`] names for the key (`None` for Ollama, which
    /// needs no key).
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => Some("OPENAI_API_KEY"),
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::Ollama => None,
            ProviderKind::AzureOpenAi => Some("AZURE_OPENAI_API_KEY"),
        }
    }

    /// The path appended to the base URL for a chat call.
    pub fn endpoint_path(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::AzureOpenAi => "/chat/completions",
            ProviderKind::OpenAiResponses => "/responses",
            ProviderKind::Anthropic => "/v1/messages",
            ProviderKind::Ollama => "/api/chat",
        }
    }

    /// Whether this protocol's bodies and errors are OpenAI's chat completions.
    pub fn is_openai_chat(self) -> bool {
        matches!(self, ProviderKind::OpenAi | ProviderKind::AzureOpenAi)
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The default bound on a whole request: from sending it to the last byte of the reply
/// (ten minutes). However the server behaves — a stream that never ends, keep-alive comments
/// forever — the call fails with a retryable `provider_unavailable` error by then.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The default bound on silence inside a reply: the longest wait for the next chunk once the
/// response has started (five minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The Azure OpenAI `api-version` used when the config names none.
pub const DEFAULT_AZURE_API_VERSION: &str = "2024-10-21";

/// The `max_tokens` Anthropic calls ask for when the config sets none.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u64 = 4096;

/// Everything needed to build one HTTP provider. Build it with [`HttpProviderConfig::new`]
/// and adjust fields, then pass it to [`build`](super::build).
///
/// `Debug` is written by hand and prints the key variable's name, never a key (the config
/// holds no key; the provider reads it from the environment at call time).
#[derive(Clone, PartialEq)]
pub struct HttpProviderConfig {
    /// The provider's name as the run spec knows it; used in errors, logs and `describe`.
    pub name: String,
    /// The wire protocol.
    pub kind: ProviderKind,
    /// Where to send requests; empty means [`ProviderKind::default_base_url`]. `http://` is
    /// accepted only for loopback hosts (127.0.0.0/8, ::1, localhost).
    pub base_url: String,
    /// The model to call when a request names none (requests normally carry the route's model).
    pub model: String,
    /// The name of the environment variable holding the API key, or `None` for servers that
    /// need no key (Ollama, local OpenAI-compatible servers). Anthropic always needs one.
    pub api_key_env: Option<String>,
    /// Bound on the whole request, from sending it to the reply's last byte (also lowered to
    /// the agent's remaining wall-time budget). A call that hits it fails with a retryable
    /// `provider_unavailable` error.
    pub timeout: Duration,
    /// Bound on silence once the response has started: the longest wait for the next chunk
    /// (never more than `timeout`).
    pub idle_timeout: Duration,
    /// Azure only: the `api-version` query parameter (default
    /// [`DEFAULT_AZURE_API_VERSION`]).
    pub api_version: Option<String>,
    /// Stream replies (SSE / NDJSON), reporting text deltas as they arrive.
    pub stream: bool,
    /// Output token cap to ask for. Anthropic requires one (default
    /// [`DEFAULT_ANTHROPIC_MAX_TOKENS`]); OpenAI and Ollama send one only when this or the
    /// request's remaining token budget is set. Always lowered to the remaining budget.
    pub max_tokens: Option<u64>,
    /// Your own prices (USD per million tokens); they take precedence over the built-in table.
    pub pricing: Vec<PriceEntry>,
    /// OpenAI-compatible servers: the differences from OpenAI's own API to honour.
    pub compat: super::codec::OpenAiCompat,
    /// The kinds of attachment (images, PDFs) the models of this provider are sent (the
    /// spec's `attachments = ["image", "pdf"]`); `None`: the built-in table
    /// ([`built_in_accepts`](super::attachments::built_in_accepts)). Files of other kinds go
    /// as a text placeholder.
    pub attachments: Option<Vec<crate::machine::AttachmentKind>>,
}

impl HttpProviderConfig {
    /// A config for `kind` calling `model`, with that kind's default base URL and key
    /// variable, streaming on, the default timeout and the built-in prices.
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> Self {
        HttpProviderConfig {
            name: kind.as_str().to_owned(),
            kind,
            base_url: kind.default_base_url().to_owned(),
            model: model.into(),
            api_key_env: kind.default_key_env().map(str::to_owned),
            timeout: DEFAULT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            api_version: None,
            stream: true,
            max_tokens: None,
            pricing: Vec::new(),
            compat: super::codec::OpenAiCompat::default(),
            attachments: None,
        }
    }
}

impl fmt::Debug for HttpProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProviderConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("api_version", &self.api_version)
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field("pricing_entries", &self.pricing.len())
            .field("compat", &self.compat)
            .finish()
    }
}

/// Looks up an environment variable by name. [`build`](super::build) uses the process
/// environment; tests and embedders can pass their own to
/// [`HttpProvider::with_env`](super::HttpProvider::with_env).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment as an [`EnvLookup`], with the variables of an env file installed
/// in this process (`--env-file`, [`crate::secrets::env_file`]) taking precedence.
pub fn process_env() -> EnvLookup {
    Arc::new(crate::secrets::env_file::var)
}

/// Why a provider could not be built. The message is one line: what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderBuildError {
    /// No model configured.
    #[error("provider `{provider}`: no model configured – set `model` to the model to call")]
    MissingModel {
        /// The provider's name.
        provider: String,
    },
    /// The protocol needs a key but no variable was named.
    #[error(
        "provider `{provider}` ({kind}) needs an API key – set `api_key_env` to the name of the environment variable that holds it"
    )]
    KeyRequired {
        /// The provider's name.
        provider: String,
        /// Its protocol.
        kind: ProviderKind,
    },
    /// The key variable is not set.
    #[error(
        "provider `{provider}`: environment variable `{var}` is unset – export it with the API key"
    )]
    KeyUnset {
        /// The provider's name.
        provider: String,
        /// The variable's name.
        var: String,
    },
    /// The key variable is set but empty (or only whitespace).
    #[error("provider `{provider}`: environment variable `{var}` is empty – put the API key in it")]
    KeyEmpty {
        /// The provider's name.
        provider: String,
        /// The variable's name.
        var: String,
    },
    /// The key holds characters that cannot travel in an HTTP header (a newline inside, ...).
    #[error(
        "provider `{provider}`: the value of `{var}` cannot be sent as an HTTP header – check it holds only the key"
    )]
    KeyInvalid {
        /// The provider's name.
        provider: String,
        /// The variable's name.
        var: String,
    },
    /// The base URL does not parse, has no host, or uses a scheme other than http/https.
    #[error(
        "provider `{provider}`: base URL `{url}` is not usable ({reason}) – give an https:// URL"
    )]
    InvalidBaseUrl {
        /// The provider's name.
        provider: String,
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Plain `http://` to a host that is not loopback.
    #[error(
        "provider `{provider}`: `{url}` uses http:// for a non-loopback host – use https:// (plain http is allowed only for 127.0.0.0/8, ::1 and localhost)"
    )]
    InsecureBaseUrl {
        /// The provider's name.
        provider: String,
        /// The URL as configured.
        url: String,
    },
    /// The base URL carries a user name or password.
    #[error(
        "provider `{provider}`: the base URL carries credentials – remove them and put the key in the variable named by `api_key_env`"
    )]
    CredentialsInUrl {
        /// The provider's name.
        provider: String,
    },
    /// Azure without a deployment URL, or with an `api-version` that cannot travel in a URL.
    #[error(
        "provider `{provider}`: {reason} – give base_url = \"https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT\" and api_version = \"{DEFAULT_AZURE_API_VERSION}\" (or another version)"
    )]
    Azure {
        /// The provider's name.
        provider: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// A zero timeout.
    #[error("provider `{provider}`: timeout must be greater than zero")]
    ZeroTimeout {
        /// The provider's name.
        provider: String,
    },
    /// A pricing entry that is negative, not finite, or unreasonably large.
    #[error("provider `{provider}`: pricing entry for `{model}` is invalid ({reason})")]
    InvalidPricing {
        /// The provider's name.
        provider: String,
        /// The entry's model.
        model: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be created (TLS setup).
    #[error("provider `{provider}`: could not create the HTTP client ({reason})")]
    Client {
        /// The provider's name.
        provider: String,
        /// What failed.
        reason: String,
    },
}

/// Checks the base URL: parses it, rejects credentials, and allows `http://` only for
/// loopback hosts. Returns it without a trailing slash.
pub(crate) fn check_base_url(provider: &str, raw: &str) -> Result<Url, ProviderBuildError> {
    let invalid = |reason: &str| ProviderBuildError::InvalidBaseUrl {
        provider: provider.to_owned(),
        url: raw.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = raw.trim().trim_end_matches('/');
    let url = Url::parse(trimmed).map_err(|e| invalid(&e.to_string()))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ProviderBuildError::CredentialsInUrl {
            provider: provider.to_owned(),
        });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it has a query or fragment"));
    }
    match url.scheme() {
        "https" => {}
        "http" => {
            if !is_loopback(&url) {
                return Err(ProviderBuildError::InsecureBaseUrl {
                    provider: provider.to_owned(),
                    url: raw.to_owned(),
                });
            }
        }
        other => return Err(invalid(&format!("scheme `{other}` is not http or https"))),
    }
    if url.host().is_none() {
        return Err(invalid("it has no host"));
    }
    Ok(url)
}

/// Whether the URL's host is 127.0.0.0/8, ::1 (or its IPv4-mapped form) or `localhost`.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// Reads the key named by `var`: `Ok(None)` when no variable is configured, an error naming
/// the variable (never its value) when it is unset, empty or not sendable as a header.
pub(crate) fn read_key(
    provider: &str,
    var: Option<&str>,
    env: &EnvLookup,
) -> Result<Option<String>, ProviderBuildError> {
    let Some(var) = var else { return Ok(None) };
    let value = env(var).ok_or_else(|| ProviderBuildError::KeyUnset {
        provider: provider.to_owned(),
        var: var.to_owned(),
    })?;
    let key = value.trim();
    if key.is_empty() {
        return Err(ProviderBuildError::KeyEmpty {
            provider: provider.to_owned(),
            var: var.to_owned(),
        });
    }
    if key.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(ProviderBuildError::KeyInvalid {
            provider: provider.to_owned(),
            var: var.to_owned(),
        });
    }
    Ok(Some(key.to_owned()))
}
