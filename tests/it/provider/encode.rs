//! Request encoding is a pure function of the request: how each protocol carries the system
//! prompt, tool calls, tool results, tools, the stream flag and the output-token cap.

use crate::support;

use runtape::machine::{Message, Role, ToolCall};
use runtape::provider::ToolDef;
use runtape::provider::http::{EncodeOptions, ProviderKind, encode_request};
use serde_json::{Value, json};
use support::provider::request;

fn conversation() -> Vec<Message> {
    let mut assistant = Message::text(Role::Assistant, "Let me look.");
    assistant.tool_calls = vec![
        ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: json!({"q": "a"}),
        },
        ToolCall {
            id: "call_2".into(),
            name: "lookup".into(),
            arguments: Value::String("{\"q\":".into()),
        },
    ];
    let result = |id: &str, text: &str, is_error: bool| Message {
        role: Role::Tool,
        content: Some(text.into()),
        tool_calls: Vec::new(),
        tool_call_id: Some(id.into()),
        name: Some("lookup".into()),
        is_error,
        reasoning: Vec::new(),
        attachments: Vec::new(),
        label: Default::default(),
    };
    vec![
        Message::text(Role::System, "Be brief."),
        Message::text(Role::User, "Find a."),
        assistant,
        result("call_1", "found a", false),
        result("call_2", "arguments did not parse", true),
        Message::text(Role::User, "And?"),
    ]
}

fn tool() -> ToolDef {
    ToolDef {
        name: "lookup".into(),
        description: "Look something up".into(),
        schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

fn encode(
    kind: ProviderKind,
    stream: bool,
    max_tokens: Option<u64>,
    remaining: Option<u64>,
) -> Value {
    let mut req = request("m-1", conversation());
    req.tools = vec![tool()];
    req.remaining.tokens = remaining;
    let options = EncodeOptions {
        default_model: "fallback".into(),
        stream,
        max_tokens,
        ..EncodeOptions::default()
    };
    encode_request(kind, &req, &options)
}

#[test]
fn openai_keeps_roles_and_sends_arguments_as_strings() {
    let body = encode(ProviderKind::OpenAi, true, None, None);
    assert_eq!(
        body,
        json!({
            "model": "m-1",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Find a."},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"a\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "found a"},
                {"role": "tool", "tool_call_id": "call_2", "content": "arguments did not parse"},
                {"role": "user", "content": "And?"}
            ],
            "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look something up", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn openai_without_streaming_asks_for_no_usage_chunk_and_caps_output_by_budget() {
    let body = encode(ProviderKind::OpenAi, false, None, Some(300));
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none());
    assert_eq!(body["max_completion_tokens"], json!(300));
    assert!(
        encode(ProviderKind::OpenAi, false, None, None)
            .get("max_completion_tokens")
            .is_none()
    );
}

#[test]
fn a_tool_only_assistant_turn_has_no_content_and_an_empty_turn_has_empty_content() {
    let mut tool_only = Message::text(Role::Assistant, "");
    tool_only.content = None;
    tool_only.tool_calls = vec![ToolCall {
        id: "c".into(),
        name: "t".into(),
        arguments: json!({}),
    }];
    let mut empty = Message::text(Role::Assistant, "");
    empty.content = None;
    let req = request("m", vec![tool_only, empty]);
    let body = encode_request(ProviderKind::OpenAi, &req, &EncodeOptions::default());
    assert!(body["messages"][0].get("content").is_none());
    assert_eq!(
        body["messages"][0]["tool_calls"][0]["function"]["arguments"],
        json!("{}")
    );
    assert_eq!(body["messages"][1]["content"], json!(""));
}

#[test]
fn anthropic_hoists_system_and_merges_tool_results_into_one_user_message() {
    // Prompt caching is on by default: the system prompt, the last tool and the turn before
    // the newest carry a cache mark.
    let body = encode(ProviderKind::Anthropic, false, None, None);
    let mark = json!({"type": "ephemeral"});
    assert_eq!(
        body,
        json!({
            "model": "m-1",
            "max_tokens": 4096,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": mark}],
            "messages": [
                {"role": "user", "content": "Find a."},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "a"}},
                    {"type": "tool_use", "id": "call_2", "name": "lookup", "input": {}, "cache_control": mark}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "found a"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "arguments did not parse", "is_error": true},
                    {"type": "text", "text": "And?"}
                ]}
            ],
            "tools": [{"name": "lookup", "description": "Look something up", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}, "cache_control": mark}],
            "stream": false
        })
    );
}

#[test]
fn anthropic_max_tokens_defaults_to_4096_and_is_lowered_to_the_remaining_budget() {
    let max = |configured, remaining| {
        encode(ProviderKind::Anthropic, true, configured, remaining)["max_tokens"].clone()
    };
    assert_eq!(max(None, None), json!(4096));
    assert_eq!(max(Some(1000), None), json!(1000));
    assert_eq!(max(None, Some(250)), json!(250));
    assert_eq!(max(Some(100), Some(250)), json!(100));
    assert_eq!(max(None, Some(0)), json!(1), "never 0: the API rejects it");
}

#[test]
fn anthropic_puts_tool_results_before_text_in_a_merged_user_message() {
    let mut result = Message::text(Role::Tool, "r");
    result.tool_call_id = Some("c".into());
    let mut req = request("m", vec![Message::text(Role::User, "first"), result]);
    // With no tools offered the API refuses tool blocks, so they are sent as text then.
    req.tools = vec![tool()];
    let body = encode_request(ProviderKind::Anthropic, &req, &EncodeOptions::default());
    let content = &body["messages"][0]["content"];
    assert_eq!(content[0]["type"], json!("tool_result"));
    assert_eq!(content[1], json!({"type": "text", "text": "first"}));
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn ollama_sends_object_arguments_and_tool_names() {
    let body = encode(ProviderKind::Ollama, true, Some(64), None);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        body["messages"][2]["tool_calls"],
        json!([
            {"function": {"name": "lookup", "arguments": {"q": "a"}}},
            {"function": {"name": "lookup", "arguments": {}}}
        ])
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "content": "found a", "tool_name": "lookup"})
    );
    assert_eq!(body["tools"][0]["type"], json!("function"));
    assert_eq!(body["tools"][0]["function"]["parameters"], tool().schema);
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["options"], json!({"num_predict": 64}));
}

#[test]
fn the_request_model_wins_and_the_config_model_fills_in() {
    let options = EncodeOptions {
        default_model: "fallback".into(),
        ..EncodeOptions::default()
    };
    for kind in [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Ollama,
    ] {
        let named = request("route-model", vec![Message::text(Role::User, "x")]);
        assert_eq!(
            encode_request(kind, &named, &options)["model"],
            json!("route-model")
        );
        let unnamed = request("", vec![Message::text(Role::User, "x")]);
        assert_eq!(
            encode_request(kind, &unnamed, &options)["model"],
            json!("fallback")
        );
    }
}
