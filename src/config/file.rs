//! The spec file's shape, exactly as written: every table and key the format knows, with
//! unknown keys refused. Meaning (defaults that depend on other entries, cross references,
//! units) is given in `compile`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::machine::{ModelSettings, OnExhausted, OnInDoubt, ProviderErrorClass, RunOnExhausted};
use crate::provider::http::PriceEntry;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub(crate) database: Option<String>,
    pub(crate) goal: Option<String>,
    #[serde(default)]
    pub(crate) run: RawRun,
    #[serde(default)]
    pub(crate) providers: Vec<RawProvider>,
    #[serde(default)]
    pub(crate) tools: Vec<RawTool>,
    #[serde(default)]
    pub(crate) agents: Vec<RawAgent>,
    pub(crate) plan: Option<RawPlan>,
    #[serde(default)]
    pub(crate) mcp: Vec<super::mcp::RawMcp>,
    pub(crate) session: Option<super::session::RawSession>,
    pub(crate) retriever: Option<super::session::RawRetriever>,
    pub(crate) memory: Option<super::memory::RawMemory>,
    /// `[timers] max_sleep_ms = N`: the agents get `sleep_for`/`sleep_until`, each sleep at
    /// most N ms (see `machine::timer`).
    pub(crate) timers: Option<crate::machine::TimerSpec>,
}

/// `[run]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRun {
    pub(crate) max_transitions: Option<u64>,
    pub(crate) on_exhausted: Option<RunOnExhausted>,
    /// `on_failure = "compensate"`: a failed or cancelled run undoes its completed calls.
    pub(crate) on_failure: Option<crate::machine::OnFailure>,
    pub(crate) durability: Option<String>,
    pub(crate) budget: Option<RawBudget>,
}

/// `[run.budget]` and `[agents.budget]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    pub(crate) max_turns: Option<u64>,
    pub(crate) max_tool_calls: Option<u64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_wall_ms: Option<u64>,
}

/// What a provider entry talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawProviderKind {
    Openai,
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    Azure,
    Anthropic,
    Ollama,
    Echo,
    Scripted,
}

/// `[[providers]]`. HTTP fields apply to `openai`, `anthropic` and `ollama`; `latency_ms`,
/// `replies` and `by_agent` to `scripted`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProvider {
    pub(crate) name: String,
    pub(crate) kind: RawProviderKind,
    pub(crate) model: Option<String>,
    pub(crate) base_url: Option<String>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) idle_timeout_ms: Option<u64>,
    pub(crate) api_version: Option<String>,
    pub(crate) stream: Option<bool>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_tokens_field: Option<RawMaxTokensField>,
    pub(crate) stream_usage: Option<bool>,
    pub(crate) pricing: Option<Vec<PriceEntry>>,
    pub(crate) attachments: Option<Vec<crate::machine::AttachmentKind>>,
    pub(crate) latency_ms: Option<u64>,
    pub(crate) replies: Option<Vec<RawReply>>,
    pub(crate) by_agent: Option<BTreeMap<String, Vec<RawReply>>>,
}

/// Which field an OpenAI-compatible server takes the output cap in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawMaxTokensField {
    MaxCompletionTokens,
    MaxTokens,
}

/// One scripted answer: a reply (text and/or tool calls) or a failure.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReply {
    pub(crate) text: Option<String>,
    pub(crate) thinking: Option<String>,
    pub(crate) refusal: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Vec<RawToolCall>,
    pub(crate) usage: Option<RawUsage>,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) error: Option<RawFailure>,
    pub(crate) latency_ms: Option<u64>,
}

/// A scripted tool call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolCall {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) arguments: Option<Value>,
}

/// Scripted token usage.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUsage {
    pub(crate) input: u64,
    pub(crate) output: u64,
}

/// A scripted failure.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFailure {
    pub(crate) class: ProviderErrorClass,
    pub(crate) message: Option<String>,
    pub(crate) retry_after_ms: Option<u64>,
}

/// How a tool is performed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawToolKind {
    /// A program run per call.
    #[default]
    Command,
    /// A person answers.
    Human,
}

/// `[[tools]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTool {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) kind: RawToolKind,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) reconcile: Option<Vec<String>>,
    pub(crate) schema: Option<Value>,
    pub(crate) timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) idempotent: bool,
    #[serde(default)]
    pub(crate) read_only: bool,
    #[serde(default)]
    pub(crate) requires_approval: bool,
    /// Guarded tools (see [`super::guard`]): the label of its results and its call policy.
    pub(crate) trust: Option<crate::machine::Integrity>,
    pub(crate) confidentiality: Option<crate::machine::Confidentiality>,
    #[serde(default)]
    pub(crate) consequential: bool,
    pub(crate) on_untrusted: Option<crate::machine::OnUntrusted>,
    pub(crate) arguments: Option<std::collections::BTreeMap<String, super::guard::RawRule>>,
    /// Keep its results from the model as hidden values (see [`crate::machine::hidden`]).
    #[serde(default)]
    pub(crate) hide: bool,
    /// `false`: its answers never quote its arguments (see [`crate::machine::ToolGuard::no_echo`]).
    pub(crate) echoes_arguments: Option<bool>,
    /// Variables passed to the program besides the minimal environment.
    pub(crate) env: Option<super::program_env::RawEnv>,
    /// Pass the engine's whole environment (credential-looking variables still withheld).
    pub(crate) env_all: Option<bool>,
    /// What its program may reach (see [`crate::tool::confine`]); paths relative to the spec.
    pub(crate) confine: Option<crate::tool::confine::Confine>,
    /// Its undo (see [`super::compensate`]).
    pub(crate) compensate: Option<super::compensate::RawCompensate>,
}

/// `backoff = { initial_ms, max_ms }`; either may be left out.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBackoff {
    pub(crate) initial_ms: Option<u64>,
    pub(crate) max_ms: Option<u64>,
}

/// `[[agents]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) system_prompt: String,
    pub(crate) provider: String,
    pub(crate) model: Option<String>,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) on_exhausted: Option<OnExhausted>,
    pub(crate) on_in_doubt: Option<OnInDoubt>,
    pub(crate) on_truncated: Option<crate::machine::OnTruncated>,
    pub(crate) correction_budget: Option<u32>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<RawBackoff>,
    pub(crate) cooldown_ms: Option<u64>,
    pub(crate) budget: Option<RawBudget>,
    #[serde(default)]
    pub(crate) fallbacks: Vec<RawFallback>,
    pub(crate) output_schema: Option<Value>,
    pub(crate) output_schema_file: Option<String>,
    pub(crate) model_settings: Option<ModelSettings>,
    #[serde(default)]
    pub(crate) delegates: Vec<RawDelegate>,
    #[serde(default)]
    pub(crate) handoffs: Vec<String>,
    pub(crate) delegation: Option<RawDelegation>,
    pub(crate) context: Option<super::context::RawContext>,
    /// A quarantined reader (see [`crate::machine::quarantine`]).
    pub(crate) quarantine: Option<crate::machine::QuarantineSpec>,
}

/// One entry of an agent's `delegates`: an agent of this file, or another spec file.
#[derive(Debug)]
pub(crate) enum RawDelegate {
    /// `"researcher"`: an agent of this file.
    Agent(String),
    /// `{ spec = "review.toml", as = "review" }`: another spec file, offered as `delegate_review`.
    SpecFile(RawSpecFileDelegate),
}

impl<'de> Deserialize<'de> for RawDelegate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawDelegate;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "an agent id (\"researcher\") or another spec file ({ spec = \"review.toml\", as = \"review\" })",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawDelegate, E> {
                Ok(RawDelegate::Agent(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawDelegate, A::Error> {
                RawSpecFileDelegate::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawDelegate::SpecFile)
            }
        }
        d.deserialize_any(Entry)
    }
}

/// `{ spec = "review.toml", as = "review" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSpecFileDelegate {
    /// The file, relative to this file's directory.
    pub(crate) spec: String,
    /// The name it is offered by (`delegate_<as>`).
    #[serde(rename = "as")]
    pub(crate) name: String,
}

/// `[agents.delegation]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDelegation {
    pub(crate) max_depth: Option<u32>,
    pub(crate) budget: Option<RawChildBudget>,
}

/// `[agents.delegation] budget = { share = 0.5, max_turns = 10, ... }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChildBudget {
    pub(crate) share: Option<f64>,
    pub(crate) max_turns: Option<u64>,
    pub(crate) max_tool_calls: Option<u64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_wall_ms: Option<u64>,
}

/// `[[agents.fallbacks]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFallback {
    pub(crate) provider: String,
    pub(crate) model: Option<String>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<RawBackoff>,
    pub(crate) cooldown_ms: Option<u64>,
}

/// `[plan]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlan {
    pub(crate) entry: String,
    #[serde(default)]
    pub(crate) exits: Vec<String>,
    pub(crate) max_agent_visits: Option<u32>,
    #[serde(default)]
    pub(crate) edges: Vec<RawEdge>,
}

/// `[[plan.edges]]`. `when` is read as data and checked in `compile`, so its errors can say
/// which forms exist.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEdge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) when: Option<Value>,
}
