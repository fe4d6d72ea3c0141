//! Provider entries: from `[[providers]]` as written to a [`ProviderSetup`], with the
//! checks that can be made before the run: unique names, fields that fit the kind, a key
//! variable that is a variable's name (never a key), and everything an HTTP provider checks
//! when it is built (model, base URL and `http://` to loopback only, timeout, pricing) except
//! the key itself, which is read when the setup is installed.

use std::sync::Arc;

use super::error::{At, ConfigError};
use super::file::{RawFile, RawMaxTokensField, RawProvider, RawProviderKind, RawReply};
use super::script::{MAX_SCRIPT_LATENCY_MS, ScriptSetup, latency_error, step};
use super::setup::{HttpSetup, ProviderSetup, provider_error};
use crate::machine::did_you_mean;
use crate::provider::http::{DEFAULT_TIMEOUT, EnvLookup, HttpProvider, OpenAiCompat, ProviderKind};
use crate::secrets::is_variable_name;

/// Provider entry `i` of `raw`, checked and with its kind's defaults applied.
pub(crate) fn provider(
    i: usize,
    p: &RawProvider,
    raw: &RawFile,
) -> Result<ProviderSetup, ConfigError> {
    let path = format!("providers[{i}]");
    if p.name.trim().is_empty() {
        return Err(ConfigError::invalid(
            format!("{path}.name"),
            "the provider name is empty – name it (agents refer to it by this name)",
        ));
    }
    if raw.providers[..i].iter().any(|q| q.name == p.name) {
        return Err(ConfigError::DuplicateProvider {
            at: At::field(format!("{path}.name")),
            name: p.name.clone(),
        });
    }
    let http_kind = match p.kind {
        RawProviderKind::Openai => Some(ProviderKind::OpenAi),
        RawProviderKind::OpenaiResponses => Some(ProviderKind::OpenAiResponses),
        RawProviderKind::Azure => Some(ProviderKind::AzureOpenAi),
        RawProviderKind::Anthropic => Some(ProviderKind::Anthropic),
        RawProviderKind::Ollama => Some(ProviderKind::Ollama),
        RawProviderKind::Echo | RawProviderKind::Scripted => None,
    };
    let http_fields = [
        ("base_url", p.base_url.is_some()),
        ("api_key_env", p.api_key_env.is_some()),
        ("timeout_ms", p.timeout_ms.is_some()),
        ("idle_timeout_ms", p.idle_timeout_ms.is_some()),
        ("api_version", p.api_version.is_some()),
        ("stream", p.stream.is_some()),
        ("max_tokens", p.max_tokens.is_some()),
        ("pricing", p.pricing.is_some()),
        ("attachments", p.attachments.is_some()),
    ];
    let script_fields = [
        ("latency_ms", p.latency_ms.is_some()),
        ("replies", p.replies.is_some()),
        ("by_agent", p.by_agent.is_some()),
    ];
    let misplaced = |fields: &[(&str, bool)], applies: &str| {
        fields.iter().find(|(_, set)| *set).map(|(f, _)| {
            ConfigError::invalid(
                format!("{path}.{f}"),
                format!("`{f}` applies only to {applies} providers – remove it"),
            )
        })
    };
    if http_kind.is_none()
        && let Some(e) = misplaced(
            &http_fields,
            "HTTP (openai, openai-responses, azure, anthropic, ollama)",
        )
    {
        return Err(e);
    }
    if p.kind != RawProviderKind::Scripted
        && let Some(e) = misplaced(&script_fields, "scripted")
    {
        return Err(e);
    }
    let openai_chat = http_kind.is_some_and(ProviderKind::is_openai_chat);
    for (field, set) in [
        ("max_tokens_field", p.max_tokens_field.is_some()),
        ("stream_usage", p.stream_usage.is_some()),
    ] {
        if set && !openai_chat {
            return Err(ConfigError::invalid(
                format!("{path}.{field}"),
                format!("`{field}` applies only to openai and azure providers – remove it"),
            ));
        }
    }
    if http_kind != Some(ProviderKind::AzureOpenAi) && p.api_version.is_some() {
        return Err(ConfigError::invalid(
            format!("{path}.api_version"),
            "`api_version` applies only to azure providers – remove it",
        ));
    }
    match (http_kind, p.kind) {
        (Some(kind), _) => http_provider(i, p, kind, raw).map(ProviderSetup::Http),
        (None, RawProviderKind::Scripted) => scripted(i, p, raw).map(ProviderSetup::Scripted),
        (None, _) => Ok(ProviderSetup::Echo {
            name: p.name.clone(),
        }),
    }
}

fn http_provider(
    i: usize,
    p: &RawProvider,
    kind: ProviderKind,
    raw: &RawFile,
) -> Result<HttpSetup, ConfigError> {
    let api_key_env = match p.api_key_env.as_deref() {
        None => kind.default_key_env().map(str::to_owned),
        Some("") => None,
        Some(name) if is_variable_name(name) => Some(name.to_owned()),
        // The value is not echoed: it may be a key pasted where its variable's name belongs.
        Some(_) => {
            return Err(ConfigError::invalid(
                format!("providers[{i}].api_key_env"),
                "this must be the NAME of an environment variable (letters, digits and `_`), never a key – put the key in a variable and write its name here",
            ));
        }
    };
    // Agents may name the model; the provider's own is only the default.
    let model = p
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .or_else(|| first_model_using(&p.name, raw))
        .unwrap_or_default();
    let timeout_ms = p.timeout_ms.unwrap_or(DEFAULT_TIMEOUT.as_millis() as u64);
    let setup = HttpSetup {
        name: p.name.clone(),
        kind,
        model,
        base_url: p
            .base_url
            .clone()
            .unwrap_or_else(|| kind.default_base_url().to_owned()),
        api_key_env,
        timeout_ms,
        idle_timeout_ms: p.idle_timeout_ms,
        api_version: p.api_version.clone(),
        stream: p.stream.unwrap_or(true),
        max_tokens: p.max_tokens,
        pricing: p.pricing.clone().unwrap_or_default(),
        compat: OpenAiCompat {
            legacy_max_tokens: p.max_tokens_field == Some(RawMaxTokensField::MaxTokens),
            stream_usage: p.stream_usage.unwrap_or(true),
        },
        attachments: p.attachments.clone(),
    };
    // Everything but the key is checked now, with a stand-in for the key: the real one is
    // read when the setup is installed, in the process that runs.
    let stand_in: EnvLookup = Arc::new(|_| Some("load-check".to_owned()));
    HttpProvider::with_env(setup.config(), stand_in).map_err(|e| provider_error(i, e))?;
    Ok(setup)
}

fn first_model_using(provider: &str, raw: &RawFile) -> Option<String> {
    raw.agents.iter().find_map(|a| {
        let primary = (a.provider == provider).then(|| a.model.clone()).flatten();
        primary.or_else(|| {
            a.fallbacks
                .iter()
                .find(|f| f.provider == provider)
                .and_then(|f| f.model.clone())
        })
    })
}

fn scripted(i: usize, p: &RawProvider, raw: &RawFile) -> Result<ScriptSetup, ConfigError> {
    let path = format!("providers[{i}]");
    let steps = |list: &[RawReply], at: &str| -> Result<_, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(j, r)| step(r, &format!("{at}[{j}]")))
            .collect::<Result<Vec<_>, _>>()
    };
    let replies = steps(
        p.replies.as_deref().unwrap_or_default(),
        &format!("{path}.replies"),
    )?;
    let mut by_agent = std::collections::BTreeMap::new();
    for (agent, list) in p.by_agent.iter().flatten() {
        let at = format!("{path}.by_agent.{agent}");
        if !raw.agents.iter().any(|a| &a.id == agent) {
            let hint = did_you_mean(agent, raw.agents.iter().map(|a| a.id.as_str()));
            return Err(ConfigError::invalid(
                at,
                format!("no agent has id `{agent}`{hint} – use the id of an [[agents]] entry"),
            ));
        }
        by_agent.insert(agent.clone(), steps(list, &at)?);
    }
    let latency_ms = p.latency_ms.unwrap_or(0);
    if latency_ms > MAX_SCRIPT_LATENCY_MS {
        return Err(latency_error(&format!("{path}.latency_ms"), latency_ms));
    }
    Ok(ScriptSetup {
        name: p.name.clone(),
        latency_ms,
        replies,
        by_agent,
    })
}
