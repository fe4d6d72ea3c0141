//! Model settings an agent asks for (`[agents.model_settings]`): sampling, stop sequences,
//! output length, reasoning effort and tool-call behaviour. The machine only carries and checks
//! them; each provider adapter encodes them in its own wire form, and the spec loader refuses a
//! setting that an agent's provider cannot honour.

use serde::{Deserialize, Serialize};

/// Most stop sequences an agent may give (OpenAI's limit, the smallest of the providers').
pub const MAX_STOP_SEQUENCES: usize = 4;

/// What an agent asks of the model on every call. Every field is optional; a field left out
/// is not sent, so the provider's default applies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Sampling temperature (0 to 2; Anthropic accepts 0 to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling (greater than 0, at most 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Sampling seed, for providers that support best-effort determinism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences (at most [`MAX_STOP_SEQUENCES`], none empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Cap on the visible reply's tokens; replaces the provider's `max_tokens` for this agent
    /// (still lowered to the remaining token budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Reasoning ("thinking") effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningSettings>,
    /// Whether the model may ask for several tool calls in one reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Ask the provider to enforce tool argument schemas exactly (OpenAI `strict`), for the
    /// tools whose schema allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_tools: Option<bool>,
    /// Prompt caching. Anthropic caches only what a request marks (`cache_control`): left out
    /// or `true`, the stable prefix of every request is marked (tools, system prompt, the
    /// conversation up to the previous turn); `false` sends no marks. OpenAI and compatible
    /// servers cache long prefixes by themselves and have no switch: the setting changes
    /// nothing there (their cached-token counts are read and priced either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<bool>,
}

/// `reasoning = { effort = "medium" }`, optionally with an explicit Anthropic thinking
/// budget (`budget_tokens = 3000`, at least 1,024).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningSettings {
    /// How hard to think.
    pub effort: ReasoningEffort,
    /// Anthropic only: the thinking budget in tokens, instead of the effort's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
}

/// Reasoning effort, mapped per provider: OpenAI `reasoning_effort` / Responses
/// `reasoning.effort` as is; Anthropic extended thinking with
/// [`budget_tokens`](ReasoningEffort::anthropic_budget_tokens); Ollama `think`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// Do not reason (where the model allows it).
    None,
    /// The least reasoning.
    Minimal,
    /// Little.
    Low,
    /// Some.
    Medium,
    /// Much.
    High,
    /// More than `high` (OpenAI `xhigh`, Anthropic `xhigh`; newer models only).
    #[serde(rename = "xhigh")]
    XHigh,
    /// The most the model offers (OpenAI and Anthropic `max`; newer models only).
    Max,
}

impl ReasoningEffort {
    /// The wire word (`none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`): OpenAI's
    /// words, which Anthropic shares from `low` up.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::XHigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }

    /// The Anthropic thinking budget for this effort (`None` for [`ReasoningEffort::None`]:
    /// thinking stays off). 1,024 is Anthropic's minimum.
    pub fn anthropic_budget_tokens(self) -> Option<u64> {
        match self {
            ReasoningEffort::None => None,
            ReasoningEffort::Minimal => Some(1024),
            ReasoningEffort::Low => Some(4096),
            ReasoningEffort::Medium => Some(10_000),
            ReasoningEffort::High => Some(32_000),
            ReasoningEffort::XHigh => Some(48_000),
            ReasoningEffort::Max => Some(64_000),
        }
    }
}

impl ModelSettings {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self == &ModelSettings::default()
    }

    /// The reasoning effort asked for, if any.
    pub fn effort(&self) -> Option<ReasoningEffort> {
        self.reasoning.map(|r| r.effort)
    }

    /// The Anthropic thinking budget: the explicit `budget_tokens`, else the effort's
    /// default; `None` when reasoning is not asked for or its effort is `none`.
    pub fn thinking_budget(&self) -> Option<u64> {
        let r = self.reasoning?;
        r.effort.anthropic_budget_tokens()?;
        r.budget_tokens.or(r.effort.anthropic_budget_tokens())
    }

    /// Why these settings cannot be sent to any provider, as `(field, reason)`: numbers out of
    /// range, empty or too many stop sequences, a zero output cap.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Some((
                "temperature",
                format!("temperature must be between 0 and 2 (got {t})"),
            ));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Some((
                "top_p",
                format!("top_p must be greater than 0 and at most 1 (got {p})"),
            ));
        }
        if self.stop.len() > MAX_STOP_SEQUENCES {
            return Some((
                "stop",
                format!(
                    "at most {MAX_STOP_SEQUENCES} stop sequences are accepted (got {})",
                    self.stop.len()
                ),
            ));
        }
        if self.stop.iter().any(String::is_empty) {
            return Some(("stop", "a stop sequence is empty".into()));
        }
        if self
            .reasoning
            .and_then(|r| r.budget_tokens)
            .is_some_and(|b| b < 1024)
        {
            return Some((
                "reasoning.budget_tokens",
                "budget_tokens must be at least 1024 (Anthropic's minimum)".into(),
            ));
        }
        if self.max_output_tokens == Some(0) {
            return Some((
                "max_output_tokens",
                "max_output_tokens must be at least 1".into(),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_settings_name_their_field() {
        let bad = |s: ModelSettings| s.problem().map(|(f, _)| f);
        assert_eq!(bad(ModelSettings::default()), None);
        let t = ModelSettings {
            temperature: Some(2.5),
            ..ModelSettings::default()
        };
        assert_eq!(bad(t), Some("temperature"));
        let p = ModelSettings {
            top_p: Some(0.0),
            ..ModelSettings::default()
        };
        assert_eq!(bad(p), Some("top_p"));
        let stop = ModelSettings {
            stop: vec!["a".into(); 5],
            ..ModelSettings::default()
        };
        assert_eq!(bad(stop), Some("stop"));
        let zero = ModelSettings {
            max_output_tokens: Some(0),
            ..ModelSettings::default()
        };
        assert_eq!(bad(zero), Some("max_output_tokens"));
    }
}
