//! What each provider kind can honour of an agent's `[agents.model_settings]` and
//! `output_schema`, checked at load for every route of the agent (primary and fallbacks),
//! so a setting a provider would ignore or reject is one clear line before anything runs.
//!
//! | setting | openai, azure | openai-responses | anthropic | ollama |
//! |---|---|---|---|---|
//! | `temperature` | 0–2 | 0–2 | 0–1, not with `reasoning` | yes |
//! | `top_p` | yes | yes | yes (≥ 0.95 with `reasoning`) | yes |
//! | `seed` | yes | no | no | yes |
//! | `stop` | yes | no | yes (`stop_sequences`) | yes |
//! | `max_output_tokens` | yes | yes | yes | yes (`num_predict`) |
//! | `reasoning.effort` | `reasoning_effort` | `reasoning.effort` | adaptive thinking + `output_config.effort` (Claude 4.6+), else a thinking budget | `think` |
//! | `prompt_cache` | automatic (no switch) | automatic (no switch) | `cache_control` marks, on unless `false` | — |
//! | `parallel_tool_calls` | yes | yes | yes (`false` is `disable_parallel_tool_use`) | `true` only |
//! | `strict_tools` | yes | yes | yes | no |
//! | `output_schema` | `response_format` | `text.format` | `output_config.format` | `format` |
//!
//! Which request field carries each setting, with the vendor's reference for it:
//! [`provider::http::fields`](crate::provider::http::fields).
//!
//! `echo` and `scripted` providers take every setting and ignore it (they are offline
//! stand-ins); the settings still appear in the request `show` prints.

use super::error::ConfigError;
use super::file::{RawProvider, RawProviderKind};
use crate::machine::{ModelSettings, ReasoningEffort};

/// Checks `settings` against the provider of every route of agent `path`
/// (`routes` = provider names, primary first).
pub(crate) fn check(
    path: &str,
    settings: &ModelSettings,
    routes: &[&str],
    providers: &[RawProvider],
) -> Result<(), ConfigError> {
    for name in routes {
        let Some(p) = providers.iter().find(|p| p.name == *name) else {
            continue;
        };
        if let Some((field, why)) = refusal(p.kind, settings) {
            return Err(ConfigError::invalid(
                format!("{path}.model_settings.{field}"),
                format!(
                    "provider `{}` ({}) cannot honour `{field}`: {why} – remove it, or route this agent to a provider that supports it",
                    p.name,
                    kind_name(p.kind)
                ),
            ));
        }
    }
    Ok(())
}

fn kind_name(kind: RawProviderKind) -> &'static str {
    match kind {
        RawProviderKind::Openai => "openai",
        RawProviderKind::OpenaiResponses => "openai-responses",
        RawProviderKind::Azure => "azure",
        RawProviderKind::Anthropic => "anthropic",
        RawProviderKind::Ollama => "ollama",
        RawProviderKind::Echo => "echo",
        RawProviderKind::Scripted => "scripted",
    }
}

/// The first setting `kind` cannot honour, with why.
fn refusal(kind: RawProviderKind, s: &ModelSettings) -> Option<(&'static str, &'static str)> {
    let thinking = s.effort().is_some_and(|e| e != ReasoningEffort::None);
    match kind {
        RawProviderKind::OpenaiResponses => {
            if s.seed.is_some() {
                return Some(("seed", "the Responses API has no seed"));
            }
            if !s.stop.is_empty() {
                return Some(("stop", "the Responses API has no stop sequences"));
            }
        }
        RawProviderKind::Anthropic => {
            if s.seed.is_some() {
                return Some(("seed", "the Messages API has no seed"));
            }
            if s.temperature.is_some_and(|t| t > 1.0) {
                return Some(("temperature", "Anthropic accepts a temperature from 0 to 1"));
            }
            if thinking && s.temperature.is_some() {
                return Some((
                    "temperature",
                    "extended thinking (reasoning) cannot be combined with a temperature",
                ));
            }
            if thinking && s.top_p.is_some_and(|p| p < 0.95) {
                return Some((
                    "top_p",
                    "with extended thinking (reasoning) top_p must be between 0.95 and 1",
                ));
            }
        }
        RawProviderKind::Ollama => {
            if s.parallel_tool_calls == Some(false) {
                return Some((
                    "parallel_tool_calls",
                    "Ollama cannot turn parallel tool calls off",
                ));
            }
            if s.strict_tools == Some(true) {
                return Some(("strict_tools", "Ollama does not enforce tool schemas"));
            }
        }
        RawProviderKind::Openai
        | RawProviderKind::Azure
        | RawProviderKind::Echo
        | RawProviderKind::Scripted => {}
    }
    None
}
