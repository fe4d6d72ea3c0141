//! Which request field carries each setting runtape exposes, per vendor API: one table per
//! wire format, read by the encoders' tests and by [`refused_setting`], which names the
//! setting a vendor's 400 refused. The rows were checked against the vendors' current API
//! references (the `source` column) and each is exercised by a recorded or documented request
//! in `tests/fixtures/providers` (`tests/it/provider/fields.rs`).
//!
//! # OpenAI chat completions (and Azure OpenAI)
//!
//! | setting | field | source |
//! |---|---|---|
//! | `max_output_tokens` | `max_completion_tokens` (`max_tokens` on hosts that want the older name) | openai-python `types/chat/completion_create_params.py` |
//! | `temperature`, `top_p`, `seed`, `stop` | the same names | same |
//! | `reasoning.effort` | `reasoning_effort` (`none` … `xhigh`, `max`, as written) | openai-python `types/shared/reasoning_effort.py` |
//! | `parallel_tool_calls` | `parallel_tool_calls` | `completion_create_params.py` |
//! | `strict_tools` | `tools[].function.strict` | `types/shared_params/function_definition.py` |
//! | `prompt_cache` | — (OpenAI caches long prefixes itself; `usage.prompt_tokens_details.cached_tokens` is read) | `types/completion_usage.py` |
//!
//! # OpenAI-compatible hosts
//!
//! The chat-completions table. Hosts that accept `reasoning_effort` (recorded: Mistral, Groq)
//! get it; a host that refuses a field answers 400 or 422, reported as below. Reasoning text
//! comes back in `reasoning_content` (DeepSeek) or `reasoning` (Groq, Ollama's `/v1`).
//!
//! # OpenAI Responses
//!
//! | setting | field | source |
//! |---|---|---|
//! | `max_output_tokens` | `max_output_tokens` | openai-python `types/responses/response_create_params.py` |
//! | `temperature`, `top_p` | the same names | same |
//! | `reasoning.effort` | `reasoning.effort` (with `reasoning.summary = auto`) | `types/shared/reasoning.py` |
//! | `parallel_tool_calls` | `parallel_tool_calls` | `response_create_params.py` |
//! | `strict_tools` | `tools[].strict` | `types/responses/function_tool_param.py` |
//! | `prompt_cache` | — (automatic; `usage.input_tokens_details.cached_tokens` is read) | `types/responses/response_usage.py` |
//!
//! # Anthropic Messages
//!
//! | setting | field | source |
//! |---|---|---|
//! | `max_output_tokens` | `max_tokens` (plus the thinking budget when one is sent) | anthropic-sdk-python `types/message_create_params.py` |
//! | `temperature`, `top_p` | the same names | same |
//! | `stop` | `stop_sequences` | same |
//! | `reasoning.effort` on Claude 4.6 and later | `thinking = {type: adaptive}` and `output_config.effort` (`minimal` is sent as `low`) | `types/thinking_config_adaptive_param.py`, `types/output_config_param.py`; which models: pydantic-ai `profiles/anthropic.py` |
//! | `reasoning.effort` on Claude Opus 4.5 | `thinking = {type: enabled, budget_tokens}` (the effort's budget) and `output_config.effort` | same |
//! | `reasoning.effort` on earlier models | `thinking = {type: enabled, budget_tokens}` (the effort's budget) | `types/thinking_config_enabled_param.py` |
//! | `reasoning.budget_tokens` | `thinking = {type: enabled, budget_tokens}` on every model (Claude Opus 4.7 and later refuse it with a 400) | same |
//! | `parallel_tool_calls = false` | `tool_choice.disable_parallel_tool_use` | `types/tool_choice_auto_param.py` |
//! | `strict_tools` | `tools[].strict` | `types/tool_param.py` |
//! | `prompt_cache` (on unless `false`) | `cache_control = {type: ephemeral}` on the last tool, the last system block and the last block of the turn before the newest | `types/cache_control_ephemeral_param.py` |
//!
//! # Ollama `/api/chat`
//!
//! | setting | field | source |
//! |---|---|---|
//! | `max_output_tokens` | `options.num_predict` | ollama `docs/api.md` |
//! | `temperature`, `top_p`, `seed`, `stop` | `options.*` | same |
//! | `reasoning.effort` | `think` (`false` for `none`) | same |
//!
//! # A refused value
//!
//! A vendor that refuses a value answers 400 (or 422): the error is a non-retryable
//! `bad_request` whatever the setting, and [`refused_setting`] names the setting when the
//! vendor's `param` or message points at a field of the table, so the run's failure line reads
//! "the provider refused setting `reasoning.effort` (sent as `output_config.effort`)".

use super::config::ProviderKind;
use crate::machine::{ModelSettings, ReasoningEffort};

/// One row of a vendor's table: the setting, the wire field it is sent in, and the words in a
/// vendor's error (`param` or message) that point at that field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRow {
    /// The setting as written in `[agents.model_settings]` (`reasoning.effort`).
    pub setting: &'static str,
    /// The request field it is sent in (`output_config.effort`).
    pub field: &'static str,
    /// Words of a vendor error that name this field, most specific first.
    pub clues: &'static [&'static str],
}

const fn row(
    setting: &'static str,
    field: &'static str,
    clues: &'static [&'static str],
) -> FieldRow {
    FieldRow {
        setting,
        field,
        clues,
    }
}

/// OpenAI chat completions, Azure OpenAI and OpenAI-compatible hosts.
pub const OPENAI_CHAT: &[FieldRow] = &[
    row(
        "reasoning.effort",
        "reasoning_effort",
        &["reasoning_effort", "reasoning effort", "effort"],
    ),
    row(
        "max_output_tokens",
        "max_completion_tokens",
        &["max_completion_tokens", "max_tokens"],
    ),
    row("temperature", "temperature", &["temperature"]),
    row("top_p", "top_p", &["top_p"]),
    row("seed", "seed", &["seed"]),
    row("stop", "stop", &["stop"]),
    row(
        "parallel_tool_calls",
        "parallel_tool_calls",
        &["parallel_tool_calls"],
    ),
    row("strict_tools", "tools[].function.strict", &["strict"]),
];

/// OpenAI Responses.
pub const OPENAI_RESPONSES: &[FieldRow] = &[
    row(
        "reasoning.effort",
        "reasoning.effort",
        &["reasoning.effort", "effort", "reasoning"],
    ),
    row(
        "max_output_tokens",
        "max_output_tokens",
        &["max_output_tokens"],
    ),
    row("temperature", "temperature", &["temperature"]),
    row("top_p", "top_p", &["top_p"]),
    row(
        "parallel_tool_calls",
        "parallel_tool_calls",
        &["parallel_tool_calls"],
    ),
    row("strict_tools", "tools[].strict", &["strict"]),
];

/// Anthropic Messages.
pub const ANTHROPIC: &[FieldRow] = &[
    row(
        "reasoning.budget_tokens",
        "thinking.budget_tokens",
        &["budget_tokens", "thinking.type.enabled"],
    ),
    row(
        "reasoning.effort",
        "output_config.effort",
        &["effort", "thinking"],
    ),
    row("max_output_tokens", "max_tokens", &["max_tokens"]),
    row("temperature", "temperature", &["temperature"]),
    row("top_p", "top_p", &["top_p"]),
    row("stop", "stop_sequences", &["stop_sequences"]),
    row(
        "parallel_tool_calls",
        "tool_choice.disable_parallel_tool_use",
        &["disable_parallel_tool_use"],
    ),
    row("strict_tools", "tools[].strict", &["strict"]),
    row("prompt_cache", "cache_control", &["cache_control"]),
];

/// Ollama `/api/chat`.
pub const OLLAMA: &[FieldRow] = &[
    row("reasoning.effort", "think", &["think"]),
    row("max_output_tokens", "options.num_predict", &["num_predict"]),
    row("temperature", "options.temperature", &["temperature"]),
    row("top_p", "options.top_p", &["top_p"]),
    row("seed", "options.seed", &["seed"]),
    row("stop", "options.stop", &["stop"]),
];

/// The table of `kind`'s wire format.
pub fn table(kind: ProviderKind) -> &'static [FieldRow] {
    match kind {
        ProviderKind::OpenAi | ProviderKind::AzureOpenAi => OPENAI_CHAT,
        ProviderKind::OpenAiResponses => OPENAI_RESPONSES,
        ProviderKind::Anthropic => ANTHROPIC,
        ProviderKind::Ollama => OLLAMA,
    }
}

/// Whether `settings` sets the setting a row names (so a refusal can be pinned on it).
fn is_set(settings: &ModelSettings, setting: &str) -> bool {
    match setting {
        "reasoning.effort" => settings.reasoning.is_some(),
        "reasoning.budget_tokens" => settings
            .reasoning
            .is_some_and(|r| r.budget_tokens.is_some()),
        "max_output_tokens" => settings.max_output_tokens.is_some(),
        "temperature" => settings.temperature.is_some(),
        "top_p" => settings.top_p.is_some(),
        "seed" => settings.seed.is_some(),
        "stop" => !settings.stop.is_empty(),
        "parallel_tool_calls" => settings.parallel_tool_calls.is_some(),
        "strict_tools" => settings.strict_tools == Some(true),
        "prompt_cache" => settings.prompt_cache != Some(false),
        _ => false,
    }
}

/// The row of the setting a vendor's 400/422 refused: the first row whose setting the request
/// set and whose clue is the error's `param` or a word of its message (case-insensitive).
/// `None` when the error points at nothing runtape lets a spec set (a bad message, an
/// unknown model): the error is reported as it came.
pub fn refused_setting(
    kind: ProviderKind,
    settings: &ModelSettings,
    param: Option<&str>,
    message: &str,
) -> Option<&'static FieldRow> {
    let message = message.to_ascii_lowercase();
    let param = param.map(str::to_ascii_lowercase);
    let rows = table(kind).iter().filter(|r| is_set(settings, r.setting));
    let by_param = rows.clone().find(|r| {
        param
            .as_deref()
            .is_some_and(|p| r.clues.iter().any(|c| p == *c || p.ends_with(c)))
    });
    by_param.or_else(|| {
        rows.into_iter().find(|r| {
            r.clues
                .iter()
                .any(|c| mentions(&message, &c.to_ascii_lowercase()))
        })
    })
}

/// Whether `word` stands in `text` as a word of its own (not inside a longer identifier).
fn mentions(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// How a Claude model takes reasoning, by its family and version (Anthropic's model pages;
/// pydantic-ai's `profiles/anthropic.py` keeps the same list): 4.6 and later think adaptively
/// and take `output_config.effort`, Opus 4.5 takes the effort with a thinking budget, earlier
/// models (and names that are not Claude's) take only the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaudeReasoning {
    /// `thinking = {type: adaptive}` and `output_config.effort`.
    Adaptive,
    /// `thinking = {type: enabled, budget_tokens}` and `output_config.effort`.
    BudgetAndEffort,
    /// `thinking = {type: enabled, budget_tokens}` only.
    Budget,
}

/// The reasoning form of Claude model `model` (`claude-opus-4-6`, `claude-sonnet-5-…`).
pub(crate) fn claude_reasoning(model: &str) -> ClaudeReasoning {
    let Some(rest) = model.strip_prefix("claude-") else {
        return ClaudeReasoning::Budget;
    };
    let mut parts = rest.split('-');
    let family = parts.next().unwrap_or_default();
    let major: u32 = match parts.next().and_then(|p| p.parse().ok()) {
        Some(m) => m,
        // `claude-3-5-sonnet` and older put the version first: budget only.
        None => return ClaudeReasoning::Budget,
    };
    // A minor version is one or two digits; a date (`20250514`) is not one.
    let minor: u32 = parts
        .next()
        .filter(|p| p.len() <= 2)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let version = (major, minor);
    if !matches!(family, "opus" | "sonnet" | "haiku" | "fable" | "mythos") {
        return ClaudeReasoning::Budget;
    }
    if version >= (4, 6) && family != "haiku" {
        ClaudeReasoning::Adaptive
    } else if family == "opus" && version == (4, 5) {
        ClaudeReasoning::BudgetAndEffort
    } else {
        ClaudeReasoning::Budget
    }
}

/// The word Anthropic takes at `output_config.effort` for `effort` (`minimal` → `low`, its
/// least); `None` for [`ReasoningEffort::None`].
pub(crate) fn claude_effort(effort: ReasoningEffort) -> Option<&'static str> {
    match effort {
        ReasoningEffort::None => None,
        ReasoningEffort::Minimal => Some("low"),
        other => Some(other.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::ReasoningSettings;

    #[test]
    fn claude_models_are_sorted_by_family_and_version() {
        use ClaudeReasoning::*;
        for (model, want) in [
            ("claude-opus-4-6", Adaptive),
            ("claude-opus-4-8-20260101", Adaptive),
            ("claude-sonnet-4-6", Adaptive),
            ("claude-sonnet-5", Adaptive),
            ("claude-opus-5-20260601", Adaptive),
            ("claude-opus-4-5-20251101", BudgetAndEffort),
            ("claude-sonnet-4-5-20250929", Budget),
            ("claude-sonnet-4-20250514", Budget),
            ("claude-haiku-4-5", Budget),
            ("claude-3-7-sonnet-latest", Budget),
            ("my-proxy-model", Budget),
        ] {
            assert_eq!(claude_reasoning(model), want, "{model}");
        }
    }

    #[test]
    fn a_refusal_is_pinned_on_a_setting_the_request_set() {
        let effort = ModelSettings {
            reasoning: Some(ReasoningSettings {
                effort: ReasoningEffort::XHigh,
                budget_tokens: None,
            }),
            ..ModelSettings::default()
        };
        let msg = "This model does not support effort level 'xhigh'. Supported levels: high, low, max, medium.";
        let r = refused_setting(ProviderKind::Anthropic, &effort, None, msg).map(|r| r.setting);
        assert_eq!(r, Some("reasoning.effort"));
        let openai = refused_setting(ProviderKind::OpenAi, &effort, Some("reasoning_effort"), "x");
        assert_eq!(openai.map(|r| r.field), Some("reasoning_effort"));
        // Not set, not named; a word inside another is not a mention.
        assert_eq!(
            refused_setting(
                ProviderKind::Anthropic,
                &ModelSettings::default(),
                None,
                msg
            ),
            None
        );
        assert!(!mentions("the efforts field", "effort"));
        assert!(mentions("'effort' is bad", "effort"));
    }
}
