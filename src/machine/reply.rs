//! What a model call returns, in one shape for every provider, and how it can fail.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ProviderErrorClass;
use super::message::Reasoning;

/// A model's reply: the same shape whichever provider produced it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// Visible text; `None` when the model produced none (empty deltas count as none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// Why the model stopped.
    #[serde(default)]
    pub finish_reason: FinishReason,
    /// Token usage; `None` when the provider did not report it (never zeros instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// Cost in nanodollars; `None` when the model is not in the pricing table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
    /// The model the server says answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The server's response id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// A refusal message (OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Reasoning or thinking text, where the provider exposes it (the readable text of
    /// `reasoning`, joined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// The reasoning blocks themselves, with signatures and encrypted content: kept with the
    /// assistant message and sent back in later turns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<Reasoning>,
}

impl ModelReply {
    /// A reply with only text (no tools, finish `stop`, no usage).
    pub fn text(text: impl Into<String>) -> Self {
        ModelReply {
            text: Some(text.into()),
            finish_reason: FinishReason::normalized(Finish::Stop),
            ..ModelReply::default()
        }
    }

    /// A reply with only tool calls.
    pub fn tools(calls: Vec<ToolCallRequest>) -> Self {
        ModelReply {
            tool_calls: calls,
            finish_reason: FinishReason::normalized(Finish::ToolCalls),
            ..ModelReply::default()
        }
    }

    /// The same reply with usage set.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(TokenUsage::new(input_tokens, output_tokens));
        self
    }

    /// The same reply with a cost set.
    pub fn with_cost_nanos(mut self, nanos: u64) -> Self {
        self.cost_nanos = Some(nanos);
        self
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The provider's id (Ollama's native API has none; the machine then derives one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool name as the model wrote it.
    pub name: String,
    /// Parsed arguments (`{}` for an empty argument string); `null` when they did not parse.
    pub arguments: Value,
    /// The argument text as the wire carried it, where it carried a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_raw: Option<String>,
    /// Set when the argument text was not valid JSON: the parser's complaint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
}

impl ToolCallRequest {
    /// A call with parsed arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCallRequest {
            id: Some(id.into()),
            name: name.into(),
            arguments,
            arguments_raw: None,
            parse_error: None,
        }
    }
}

/// Why a model stopped: the provider's word and its normalised form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishReason {
    /// Verbatim (`stop`, `tool_calls`, `end_turn`, `tool_use`, `max_tokens`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Normalised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized: Option<Finish>,
}

impl FinishReason {
    /// A reason with only the normalised form (scripted providers).
    pub fn normalized(finish: Finish) -> Self {
        FinishReason {
            raw: None,
            normalized: Some(finish),
        }
    }
}

/// Normalised finish reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// Natural end.
    Stop,
    /// Stopped to call tools.
    ToolCalls,
    /// Hit the output token limit.
    Length,
    /// Hit a stop sequence.
    StopSequence,
    /// Stopped by a content filter.
    ContentFilter,
}

/// Token counts as the provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Total, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Prompt tokens served from cache (OpenAI), where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Reasoning tokens, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Tokens written to the prompt cache (Anthropic), where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Tokens read from the prompt cache (Anthropic), where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

impl TokenUsage {
    /// Input and output counts only.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        TokenUsage {
            input_tokens,
            output_tokens,
            ..TokenUsage::default()
        }
    }
}

/// A failed model call, classified by the provider adapter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFailure {
    /// The class the machine acts on.
    pub class: ProviderErrorClass,
    /// Whether trying again may help (408/409/429/5xx/529, `x-should-retry: true`, timeouts).
    pub retryable: bool,
    /// The provider's `Retry-After`, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// HTTP status, when there was a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// One line for a person (never contains the API key).
    pub message: String,
    /// The call was not made because its input, or its input and one output token, would
    /// pass this budget's cap ([`allowance`](super::allowance::allowance)): the machine treats
    /// it as that budget spent, not as a provider failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::budget::BudgetKey>,
}

impl ModelFailure {
    /// A failure of `class` (retryable for rate limits and unavailability).
    pub fn new(class: ProviderErrorClass, message: impl Into<String>) -> Self {
        ModelFailure {
            class,
            retryable: matches!(
                class,
                ProviderErrorClass::ProviderRateLimit | ProviderErrorClass::ProviderUnavailable
            ),
            retry_after_ms: None,
            status: None,
            message: message.into(),
            budget: None,
        }
    }
}
