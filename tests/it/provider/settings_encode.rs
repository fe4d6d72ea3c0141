//! Model settings, output schemas and reasoning as each protocol's encoder writes them (pure:
//! bytes in, bytes out), and the Responses API's stream events that end a reply differently
//! (incomplete, failed, refused).

use crate::support;

use runtape::machine::*;
use runtape::provider::ToolDef;
use runtape::provider::http::{
    DecodeError, EncodeOptions, OpenAiCompat, ProviderKind, decode_response, decode_stream,
    encode_request,
};
use serde_json::{Value, json};
use support::provider::request;

fn closed_schema() -> Value {
    json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": false})
}

fn settings() -> ModelSettings {
    ModelSettings {
        temperature: Some(0.2),
        top_p: Some(0.95),
        seed: Some(7),
        stop: vec!["END".into()],
        max_output_tokens: Some(2000),
        reasoning: Some(ReasoningSettings {
            effort: ReasoningEffort::Medium,
            budget_tokens: None,
        }),
        parallel_tool_calls: Some(false),
        strict_tools: Some(true),
        prompt_cache: None,
    }
}

fn encode(kind: ProviderKind, settings: ModelSettings, schema: Option<Value>) -> Value {
    let mut req = request("m", vec![Message::text(Role::User, "hi")]);
    req.agent = AgentId::from("extractor");
    req.settings = settings;
    req.output_schema = schema;
    req.tools = vec![
        ToolDef {
            name: "closed".into(),
            description: "d".into(),
            schema: closed_schema(),
        },
        ToolDef {
            name: "open".into(),
            description: "d".into(),
            schema: json!({"type": "object"}),
        },
    ];
    encode_request(kind, &req, &EncodeOptions::default())
}

#[test]
fn openai_chat_sends_every_setting_and_a_strict_schema_where_it_can() {
    let body = encode(ProviderKind::OpenAi, settings(), Some(closed_schema()));
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["top_p"], 0.95);
    assert_eq!(body["seed"], 7);
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(body["max_completion_tokens"], 2000);
    assert_eq!(body["reasoning_effort"], "medium");
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(
        body["tools"][0]["function"]["strict"], true,
        "a closed schema is strict"
    );
    assert!(
        body["tools"][1]["function"].get("strict").is_none(),
        "an open one is not"
    );
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "extractor", "schema": closed_schema(), "strict": true}})
    );
    let open = encode(
        ProviderKind::OpenAi,
        ModelSettings::default(),
        Some(json!({"type": "object"})),
    );
    assert_eq!(open["response_format"]["json_schema"]["strict"], false);
    for key in [
        "temperature",
        "seed",
        "stop",
        "reasoning_effort",
        "parallel_tool_calls",
    ] {
        assert!(open.get(key).is_none(), "{key} is sent only when set");
    }
}

#[test]
fn anthropic_maps_effort_to_a_thinking_budget_on_top_of_the_visible_cap() {
    let mut s = settings();
    s.temperature = None;
    s.seed = None;
    let body = encode(ProviderKind::Anthropic, s, Some(closed_schema()));
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 10_000})
    );
    assert_eq!(
        body["max_tokens"], 12_000,
        "2000 visible + the 10000 thinking budget"
    );
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert_eq!(body["top_p"], 0.95);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(body["tools"][0]["strict"], true);
    assert!(body["tools"][1].get("strict").is_none());
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": closed_schema()}})
    );
    let explicit = ModelSettings {
        reasoning: Some(ReasoningSettings {
            effort: ReasoningEffort::Low,
            budget_tokens: Some(3000),
        }),
        ..ModelSettings::default()
    };
    let body = encode(ProviderKind::Anthropic, explicit, None);
    assert_eq!(body["thinking"]["budget_tokens"], 3000);
    assert_eq!(body["max_tokens"], 4096 + 3000);
}

#[test]
fn ollama_puts_sampling_in_options_and_the_schema_in_format() {
    let mut s = settings();
    s.parallel_tool_calls = None;
    s.strict_tools = None;
    let body = encode(ProviderKind::Ollama, s, Some(closed_schema()));
    assert_eq!(
        body["options"],
        json!({"num_predict": 2000, "temperature": 0.2, "top_p": 0.95, "seed": 7, "stop": ["END"]})
    );
    assert_eq!(body["think"], true);
    assert_eq!(body["format"], closed_schema());
    let off = ModelSettings {
        reasoning: Some(ReasoningSettings {
            effort: ReasoningEffort::None,
            budget_tokens: None,
        }),
        ..ModelSettings::default()
    };
    assert_eq!(encode(ProviderKind::Ollama, off, None)["think"], false);
}

#[test]
fn the_responses_api_asks_for_encrypted_reasoning_and_a_text_format() {
    let mut s = settings();
    s.seed = None;
    s.stop.clear();
    let body = encode(ProviderKind::OpenAiResponses, s, Some(closed_schema()));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["max_output_tokens"], 2000);
    assert_eq!(body["tools"][0]["strict"], true);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(
        body["text"]["format"],
        json!({"type": "json_schema", "name": "extractor", "schema": closed_schema(), "strict": true})
    );
    assert_eq!(body["input"], json!([{"role": "user", "content": "hi"}]));
    let plain = encode(
        ProviderKind::OpenAiResponses,
        ModelSettings::default(),
        None,
    );
    assert!(plain.get("store").is_none() && plain.get("include").is_none());
}

#[test]
fn azure_speaks_openai_chat() {
    let body = encode(ProviderKind::AzureOpenAi, ModelSettings::default(), None);
    assert_eq!(
        body,
        encode(ProviderKind::OpenAi, ModelSettings::default(), None)
    );
}

fn responses_stream(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_responses_stream_ends_incomplete_failed_or_refused() {
    let incomplete = responses_stream(&[
        json!({"type": "response.output_text.delta", "delta": "Par"}),
        json!({"type": "response.incomplete", "response": {"id": "r", "model": "m", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "output": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}),
    ]);
    let d = decode_stream(
        ProviderKind::OpenAiResponses,
        [incomplete.as_bytes()],
        &mut |_| {},
    )
    .expect("decodes");
    assert_eq!(d.reply.text.as_deref(), Some("Par"));
    assert_eq!(
        d.reply.finish_reason.raw.as_deref(),
        Some("max_output_tokens")
    );
    assert_eq!(d.reply.finish_reason.normalized, Some(Finish::Length));

    let failed = responses_stream(&[
        json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "boom"}}}),
    ]);
    let e = decode_stream(
        ProviderKind::OpenAiResponses,
        [failed.as_bytes()],
        &mut |_| {},
    )
    .expect_err("an error in a 200 stream");
    assert!(matches!(e, DecodeError::Reported(r) if r.message == "boom"));

    let cut = responses_stream(&[json!({"type": "response.output_text.delta", "delta": "x"})]);
    let e = decode_stream(ProviderKind::OpenAiResponses, [cut.as_bytes()], &mut |_| {})
        .expect_err("no terminal event");
    assert!(matches!(e, DecodeError::Truncated { .. }));

    let refused = json!({"id": "r", "model": "m", "status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help."}]}
    ]});
    let d = decode_response(
        ProviderKind::OpenAiResponses,
        refused.to_string().as_bytes(),
    )
    .expect("decodes");
    assert_eq!(d.reply.refusal.as_deref(), Some("I can't help."));
    assert_eq!(d.reply.text, None);
}

#[test]
fn a_compatible_server_can_take_the_older_cap_field_and_no_stream_options() {
    let mut req = request(
        "mistral-small-latest",
        vec![Message::text(Role::User, "hi")],
    );
    req.settings.max_output_tokens = Some(100);
    let options = |compat| EncodeOptions {
        stream: true,
        compat,
        ..EncodeOptions::default()
    };
    let openai = encode_request(
        ProviderKind::OpenAi,
        &req,
        &options(OpenAiCompat::default()),
    );
    assert_eq!(openai["max_completion_tokens"], 100);
    assert_eq!(openai["stream_options"], json!({"include_usage": true}));
    let mistral = encode_request(
        ProviderKind::OpenAi,
        &req,
        &options(OpenAiCompat {
            legacy_max_tokens: true,
            stream_usage: false,
        }),
    );
    assert_eq!(mistral["max_tokens"], 100);
    assert!(mistral.get("max_completion_tokens").is_none());
    assert!(mistral.get("stream_options").is_none());
}
