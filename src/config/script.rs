//! Scripted provider entries: the replies written in the spec file, stored in the setup, and
//! the deterministic provider built from them. A reply is chosen by the agent's turn (the
//! number of assistant messages so far), so a run resumed in another process gets the same
//! answers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::file::RawReply;
use crate::machine::{ErrorClass, ModelReply, ProviderErrorClass, ToolCallRequest};
use crate::provider::{ProviderError, ProviderRequest, ScriptOutcome, ScriptedProvider};

/// The longest delay a scripted reply may ask for (ten minutes): a longer one is refused when
/// the spec is loaded, and a stored setup holding one is capped there, so no script hangs.
pub const MAX_SCRIPT_LATENCY_MS: u64 = 600_000;

/// The one-line error for a scripted `latency_ms` that is too long.
pub(crate) fn latency_error(path: &str, got: u64) -> ConfigError {
    ConfigError::invalid(
        path,
        format!(
            "latency_ms must be at most {MAX_SCRIPT_LATENCY_MS} (ten minutes; got {got}) – give a shorter delay"
        ),
    )
}

/// A scripted provider entry: step `i` answers an agent's turn `i`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptSetup {
    /// The name agents use.
    pub name: String,
    /// Delay before every answer.
    pub latency_ms: u64,
    /// The script for agents without their own.
    pub replies: Vec<ScriptStep>,
    /// Per-agent scripts, by agent id.
    pub by_agent: BTreeMap<String, Vec<ScriptStep>>,
}

/// One scripted answer. Stored with its `outcome` first, and read tag first (without
/// buffering the whole entry).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ScriptStep {
    /// The model replies.
    Reply {
        /// The reply (boxed: it is much larger than a failure).
        reply: Box<ModelReply>,
        /// Extra delay for this step.
        latency_ms: u64,
    },
    /// The call fails.
    Fail {
        /// Its class (rate limits and unavailability are retryable).
        class: ProviderErrorClass,
        /// What went wrong.
        message: String,
        /// A `Retry-After`, in milliseconds.
        retry_after_ms: Option<u64>,
        /// Extra delay for this step.
        latency_ms: u64,
    },
}

impl ScriptSetup {
    /// The provider this entry describes.
    pub fn provider(&self) -> ScriptedProvider {
        let script = Arc::new(self.clone());
        ScriptedProvider::new(&self.name, move |req| script.answer(req)).with_latency(
            Duration::from_millis(self.latency_ms.min(MAX_SCRIPT_LATENCY_MS)),
        )
    }

    fn answer(&self, req: &ProviderRequest) -> ScriptOutcome {
        let steps = self
            .by_agent
            .get(req.agent.as_str())
            .unwrap_or(&self.replies);
        let Some(step) = steps.get(req.turn()) else {
            return ScriptOutcome::fail(ProviderError::new(
                &self.name,
                ProviderErrorClass::BadRequest,
                format!(
                    "script exhausted: no reply for turn {} of agent {}",
                    req.turn(),
                    req.agent
                ),
            ));
        };
        match step {
            ScriptStep::Reply { reply, latency_ms } => ScriptOutcome {
                latency: Duration::from_millis((*latency_ms).min(MAX_SCRIPT_LATENCY_MS)),
                ..ScriptOutcome::reply(ModelReply::clone(reply))
            },
            ScriptStep::Fail {
                class,
                message,
                retry_after_ms,
                latency_ms,
            } => {
                let mut error = ProviderError::new(&self.name, *class, message.clone());
                error.retry_after_ms = *retry_after_ms;
                ScriptOutcome {
                    latency: Duration::from_millis((*latency_ms).min(MAX_SCRIPT_LATENCY_MS)),
                    ..ScriptOutcome::fail(error)
                }
            }
        }
    }
}

/// The step a reply written in the file describes (`path` is its field, for errors).
pub(crate) fn step(raw: &RawReply, path: &str) -> Result<ScriptStep, ConfigError> {
    let latency_ms = raw.latency_ms.unwrap_or(0);
    if latency_ms > MAX_SCRIPT_LATENCY_MS {
        return Err(latency_error(&format!("{path}.latency_ms"), latency_ms));
    }
    let has_reply = raw.text.is_some() || !raw.tool_calls.is_empty() || raw.refusal.is_some();
    if let Some(error) = &raw.error {
        if has_reply || raw.usage.is_some() || raw.cost_usd.is_some() {
            return Err(ConfigError::invalid(
                format!("{path}.error"),
                "a scripted reply is either a failure (`error`) or an answer (`text`, `tool_calls`, `refusal`, `usage`, `cost_usd`) – split it into two replies",
            ));
        }
        return Ok(ScriptStep::Fail {
            class: error.class,
            message: error
                .message
                .clone()
                .unwrap_or_else(|| format!("scripted {} failure", ErrorClass::from(error.class))),
            retry_after_ms: error.retry_after_ms,
            latency_ms,
        });
    }
    if !has_reply {
        return Err(ConfigError::invalid(
            path,
            "a scripted reply needs `text`, `tool_calls`, `refusal` or `error` – add one",
        ));
    }
    let calls: Vec<ToolCallRequest> = raw
        .tool_calls
        .iter()
        .map(|c| ToolCallRequest {
            id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone().unwrap_or_else(|| serde_json::json!({})),
            arguments_raw: None,
            parse_error: None,
        })
        .collect();
    let mut reply = if calls.is_empty() {
        ModelReply::text(raw.text.clone().unwrap_or_default())
    } else {
        ModelReply {
            text: raw.text.clone(),
            ..ModelReply::tools(calls)
        }
    };
    if let Some(usage) = &raw.usage {
        reply = reply.with_usage(usage.input, usage.output);
    }
    if let Some(words) = &raw.refusal {
        reply.refusal = Some(words.clone());
        if raw.text.is_none() {
            reply.text = None;
        }
    }
    if let Some(thinking) = &raw.thinking {
        reply.thinking = Some(thinking.clone());
        reply.reasoning = vec![crate::machine::Reasoning::Text {
            text: thinking.clone(),
            field: None,
        }];
    }
    // A scripted model costs nothing unless the script says otherwise.
    reply.cost_nanos = Some(0);
    if let Some(usd) = raw.cost_usd {
        if !(usd.is_finite() && (0.0..=1e6).contains(&usd)) {
            return Err(ConfigError::invalid(
                format!("{path}.cost_usd"),
                format!(
                    "cost_usd must be between 0 and 1000000 US dollars (got {usd}) – fix the value"
                ),
            ));
        }
        // In range by the check above: at most 1e15 nanodollars.
        reply = reply.with_cost_nanos((usd * 1e9).round() as u64);
    }
    Ok(ScriptStep::Reply {
        reply: Box::new(reply),
        latency_ms,
    })
}
