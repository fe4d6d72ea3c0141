//! Each vendor's table of setting → request field (`runtape::provider::http::fields`): every
//! row is where the encoder writes the setting, Anthropic's reasoning follows the model's
//! generation, its prompt-cache marks sit on the stable prefix, and a vendor's 400 refusing a
//! value (recorded: `anthropic-effort-refused-error-400`) names the setting. The rows are
//! also checked against recorded requests by `provider::conformance` (OpenAI `reasoning_effort`
//! on chat completions and Groq, Responses `reasoning.effort`, Anthropic adaptive thinking
//! with `output_config.effort` and a thinking budget, stop sequences, sampling).

use crate::support::provider as provider_support;

use provider_support::*;
use runtape::machine::*;
use runtape::provider::http::fields::{self, FieldRow};
use runtape::provider::http::{EncodeOptions, ProviderKind, encode_request};
use runtape::provider::{ProviderError, ProviderRequest, ToolDef};
use serde_json::{Value, json};

fn all_settings(kind: ProviderKind) -> ModelSettings {
    let anthropic = kind == ProviderKind::Anthropic;
    ModelSettings {
        temperature: Some(0.5),
        top_p: Some(0.97),
        seed: (!anthropic).then_some(7),
        stop: vec!["END".into()],
        max_output_tokens: Some(1000),
        reasoning: Some(ReasoningSettings {
            effort: ReasoningEffort::High,
            budget_tokens: anthropic.then_some(2048),
        }),
        parallel_tool_calls: Some(false),
        strict_tools: Some(true),
        prompt_cache: None,
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::text(Role::System, "You look things up."),
        Message::text(Role::User, "Find x."),
        Message {
            content: None,
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                arguments: json!({"q": "x"}),
            }],
            ..Message::text(Role::Assistant, "")
        },
        Message {
            tool_call_id: Some("c1".into()),
            name: Some("lookup".into()),
            ..Message::text(Role::Tool, "x is 4")
        },
    ]
}

fn encode(kind: ProviderKind, model: &str, settings: ModelSettings) -> Value {
    let mut req = request(model, conversation());
    req.settings = settings;
    req.tools = vec![
        ToolDef {
            name: "lookup".into(),
            description: "d".into(),
            schema: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false}),
        },
        ToolDef {
            name: "other".into(),
            description: "d".into(),
            schema: json!({"type": "object"}),
        },
    ];
    encode_request(kind, &req, &EncodeOptions::default())
}

/// The values at `path` (`a.b`, `tools[].function.strict`): one per array element for `[]`.
fn at<'v>(v: &'v Value, path: &str) -> Vec<&'v Value> {
    let mut here = vec![v];
    for part in path.split('.') {
        let (key, each) = match part.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (part, false),
        };
        here = here
            .into_iter()
            .filter_map(|v| v.get(key))
            .flat_map(|v| match (each, v.as_array()) {
                (true, Some(items)) => items.iter().collect(),
                _ => vec![v],
            })
            .collect();
    }
    here
}

/// The field a row names, checked in a body encoded with every setting set.
fn check_row(kind: ProviderKind, body: &Value, row: &FieldRow) {
    let found = match row.field {
        // Marks, not a field: the last tool and the system prompt carry one.
        "cache_control" => {
            !at(body, "tools[].cache_control").is_empty()
                && !at(body, "system[].cache_control").is_empty()
        }
        "thinking.budget_tokens" => body["thinking"]["budget_tokens"] == 2048,
        // Azure, compatible hosts and OpenAI: the newer name unless a host wants the older.
        field => !at(body, field).is_empty(),
    };
    assert!(
        found,
        "{kind}: setting {} should be sent as {}; body {body}",
        row.setting, row.field
    );
}

#[test]
fn every_row_of_every_table_is_where_the_encoder_writes_the_setting() {
    for (kind, model) in [
        (ProviderKind::OpenAi, "o3-mini"),
        (ProviderKind::AzureOpenAi, "gpt-5"),
        (ProviderKind::OpenAiResponses, "gpt-5"),
        (ProviderKind::Anthropic, "claude-opus-4-5"),
        (ProviderKind::Ollama, "llama3"),
    ] {
        let body = encode(kind, model, all_settings(kind));
        let rows = fields::table(kind);
        assert!(!rows.is_empty());
        for row in rows {
            check_row(kind, &body, row);
        }
    }
    // The values themselves, for the reasoning rows.
    let chat = encode(
        ProviderKind::OpenAi,
        "o3",
        all_settings(ProviderKind::OpenAi),
    );
    assert_eq!(chat["reasoning_effort"], "high");
    let responses = encode(
        ProviderKind::OpenAiResponses,
        "o3",
        all_settings(ProviderKind::OpenAiResponses),
    );
    assert_eq!(responses["reasoning"]["effort"], "high");
    let ollama = encode(
        ProviderKind::Ollama,
        "qwen3",
        all_settings(ProviderKind::Ollama),
    );
    assert_eq!(ollama["think"], true);
}

fn effort(effort: ReasoningEffort, budget_tokens: Option<u64>) -> ModelSettings {
    ModelSettings {
        reasoning: Some(ReasoningSettings {
            effort,
            budget_tokens,
        }),
        max_output_tokens: Some(1000),
        ..ModelSettings::default()
    }
}

#[test]
fn anthropic_reasoning_follows_the_models_generation() {
    let medium = effort(ReasoningEffort::Medium, None);
    // Claude 4.6 and later: adaptive thinking and the effort; the cap is the visible one.
    let body = encode(ProviderKind::Anthropic, "claude-opus-4-6", medium.clone());
    assert_eq!(body["thinking"], json!({"type": "adaptive"}));
    assert_eq!(body["output_config"]["effort"], "medium");
    assert_eq!(body["max_tokens"], 1000);
    // Opus 4.5: the effort's budget and the effort.
    let body = encode(
        ProviderKind::Anthropic,
        "claude-opus-4-5-20251101",
        medium.clone(),
    );
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 10_000})
    );
    assert_eq!(body["output_config"]["effort"], "medium");
    assert_eq!(body["max_tokens"], 11_000);
    // Earlier models: the budget only (they refuse output_config.effort).
    let body = encode(ProviderKind::Anthropic, "claude-sonnet-4-5", medium);
    assert_eq!(body["thinking"]["budget_tokens"], 10_000);
    assert!(body.get("output_config").is_none(), "{body}");
    // An explicit budget is sent as one on every model; minimal is Anthropic's low.
    let body = encode(
        ProviderKind::Anthropic,
        "claude-sonnet-5",
        effort(ReasoningEffort::Minimal, Some(3000)),
    );
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 3000})
    );
    assert_eq!(body["output_config"]["effort"], "low");
    // none: no thinking, no effort.
    let body = encode(
        ProviderKind::Anthropic,
        "claude-opus-4-6",
        effort(ReasoningEffort::None, None),
    );
    assert!(body.get("thinking").is_none() && body.get("output_config").is_none());
    // xhigh and max reach both vendors as written.
    let body = encode(
        ProviderKind::OpenAi,
        "gpt-5",
        effort(ReasoningEffort::XHigh, None),
    );
    assert_eq!(body["reasoning_effort"], "xhigh");
    let body = encode(
        ProviderKind::Anthropic,
        "claude-opus-4-8",
        effort(ReasoningEffort::Max, None),
    );
    assert_eq!(body["output_config"]["effort"], "max");
}

#[test]
fn anthropic_marks_the_stable_prefix_for_the_prompt_cache() {
    let body = encode(
        ProviderKind::Anthropic,
        "claude-sonnet-4-5",
        ModelSettings::default(),
    );
    let mark = json!({"type": "ephemeral"});
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You look things up.", "cache_control": mark}])
    );
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools[1]["cache_control"], mark, "the last tool");
    assert!(tools[0].get("cache_control").is_none());
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "user, assistant, tool results");
    // The turn before the newest (the assistant's tool call) closes the cached prefix.
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    assert_eq!(messages[1]["content"][0]["cache_control"], mark);
    assert!(!messages[2].to_string().contains("cache_control"));
    assert!(!messages[0].to_string().contains("cache_control"));

    let off = ModelSettings {
        prompt_cache: Some(false),
        ..ModelSettings::default()
    };
    let body = encode(ProviderKind::Anthropic, "claude-sonnet-4-5", off);
    assert!(!body.to_string().contains("cache_control"), "{body}");
    assert_eq!(body["system"], "You look things up.");
    // Other vendors cache by themselves: nothing is marked.
    for kind in [ProviderKind::OpenAi, ProviderKind::OpenAiResponses] {
        let body = encode(kind, "gpt-5", ModelSettings::default());
        assert!(!body.to_string().contains("cache_control"));
    }
}

/// `req` sent (not streamed) to Claude Opus 4.6 on a server answering 400 with `body`: the
/// error and the request body the server received.
async fn refused_with(body: &str, req: &ProviderRequest) -> (ProviderError, serde_json::Value) {
    let server = MockServer::always(Behaviour::json(400, body)).await;
    let mut cfg = config(
        ProviderKind::Anthropic,
        &base_for(ProviderKind::Anthropic, &server.url()),
        "claude-opus-4-6",
    );
    cfg.stream = false;
    let err = provider(cfg, "test-key-fields")
        .complete_decoded(req, &|_| {})
        .await
        .unwrap_err();
    (err, server.requests()[0].json())
}

#[tokio::test]
async fn a_recorded_400_refusing_an_effort_names_the_setting() {
    let dir = own_cases_dir().join("anthropic-effort-refused-error-400");
    let body = std::fs::read_to_string(dir.join("response.body")).unwrap();
    let mut req = hello("claude-opus-4-6");
    req.settings = effort(ReasoningEffort::XHigh, None);
    let (err, sent) = refused_with(&body, &req).await;
    assert_eq!(sent["output_config"]["effort"], "xhigh");
    assert_eq!(err.class, ProviderErrorClass::BadRequest);
    assert!(!err.retryable);
    assert_eq!(err.status, Some(400));
    assert_eq!(err.setting.as_deref(), Some("reasoning.effort"));
    let line = err.to_string();
    assert!(
        line.contains("refused setting `reasoning.effort` (sent as `output_config.effort`)")
            && line.contains("does not support effort level 'xhigh'"),
        "{line}"
    );
    // The same body for a request that set nothing it could point at names nothing.
    let (err, _) = refused_with(&body, &hello("claude-opus-4-6")).await;
    assert_eq!(err.setting, None);
    assert!(err.hint.starts_with("request rejected"), "{}", err.hint);
}
