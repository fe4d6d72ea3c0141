//! `[agents.context]`: an agent's context window and what happens when the next request
//! would not fit it (see [`machine::context`](crate::machine::context)).
//!
//! ```toml
//! [agents.context]
//! window = 200000                          # tokens; default: the built-in table's
//! on_overflow = "drop_oldest_tool_results" # or "shorten_tool_results", or "fail" (default)
//! # or: on_overflow = { summarize = { agent = "summariser", keep_last = 4 } }
//! ```
//!
//! Without `window`, the agent's window is the smallest the built-in table
//! ([`context_window`]) knows for its routes' models on OpenAI, Azure and Anthropic
//! providers; an agent none of whose models it knows (echo, scripted, Ollama, an unlisted
//! model) has no window and its requests are not measured, unless `window` is set.

use serde::Deserialize;

use super::error::ConfigError;
use super::file::{RawProvider, RawProviderKind};
use crate::machine::Route;
use crate::machine::context::{ContextSpec, OnOverflow};
use crate::provider::http::context_window;

/// `[agents.context]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawContext {
    pub(crate) window: Option<u64>,
    pub(crate) on_overflow: Option<OnOverflow>,
}

/// The agent's context setting: the spec's, else the built-in window of its routes' models
/// with the default policy; `None` when no window is known. `path` is the agent's (`agents[i]`).
pub(crate) fn resolve(
    raw: Option<&RawContext>,
    routes: &[Route],
    providers: &[RawProvider],
    path: &str,
) -> Result<Option<ContextSpec>, ConfigError> {
    let path = format!("{path}.context");
    let on_overflow = raw.and_then(|r| r.on_overflow.clone()).unwrap_or_default();
    if let OnOverflow::Summarize(s) = &on_overflow
        && s.keep_last == 0
    {
        return Err(ConfigError::invalid(
            format!("{path}.on_overflow.summarize.keep_last"),
            "keep_last must be at least 1 – the latest messages are never summarised",
        ));
    }
    let window = match raw.and_then(|r| r.window) {
        Some(0) => {
            return Err(ConfigError::invalid(
                format!("{path}.window"),
                "window must be at least 1 token – e.g. window = 200000",
            ));
        }
        Some(n) => Some(n),
        None => builtin_window(routes, providers),
    };
    match (window, raw) {
        (Some(window), _) => Ok(Some(ContextSpec {
            window,
            on_overflow,
        })),
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::invalid(
            format!("{path}.window"),
            format!(
                "no context window is known for model `{}` – set window = TOKENS",
                routes.first().map_or("", |r| r.model.as_str())
            ),
        )),
    }
}

/// The smallest window the built-in table gives the routes' models on a hosted provider.
fn builtin_window(routes: &[Route], providers: &[RawProvider]) -> Option<u64> {
    routes
        .iter()
        .filter(|r| {
            providers.iter().any(|p| {
                p.name == r.provider
                    && matches!(
                        p.kind,
                        RawProviderKind::Openai
                            | RawProviderKind::OpenaiResponses
                            | RawProviderKind::Azure
                            | RawProviderKind::Anthropic
                    )
            })
        })
        .filter_map(|r| context_window(&r.model))
        .min()
}
