//! OpenTelemetry export as the GenAI semantic conventions say, from a real `runtape run`
//! against a local OpenAI-compatible server and a real OTLP/HTTP receiver on loopback: the
//! chat span's response and request attributes, server, output type and cache and reasoning
//! usage; the tool spans' type and description (a command tool and an MCP tool); the MCP
//! client span of the MCP call and the W3C `traceparent` its request carried in
//! `params._meta`; the `gen_ai.client.*` histograms; `OTEL_SERVICE_NAME`; protobuf by default; a protocol
//! runtape does not speak refused with one line before anything runs.

use crate::support;

use serde_json::{Value, json};
use support::otlp::{
    attrs_of, content_types, histogram_points, named, receiver, service_names, spans,
};
use support::provider::{Behaviour, MockServer};
use support::serve::{bin, scratch_db};

/// The fake key the local server is called with: it must appear in no export.
const KEY: &str = "sk-otel-conventions-0123456789abcdef";

fn reply(body: Value) -> Behaviour {
    Behaviour::json(200, &body.to_string())
}

/// The server: tool calls first, then the answer, with a response id, the model that
/// answered, and cached and reasoning token counts.
async fn server() -> MockServer {
    MockServer::start(|req| {
        if req.answers_a_tool() {
            return reply(json!({
                "id": "chatcmpl-otel-2",
                "model": "m-2026-01-01",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "{\"city\": \"Paris\"}"}}],
                "usage": {"prompt_tokens": 300, "completion_tokens": 20,
                    "prompt_tokens_details": {"cached_tokens": 256},
                    "completion_tokens_details": {"reasoning_tokens": 8}}
            }));
        }
        reply(json!({
            "id": "chatcmpl-otel-1",
            "model": "m-2026-01-01",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c_words", "type": "function",
                     "function": {"name": "count_words", "arguments": "{\"text\": \"a b c\"}"}},
                    {"id": "c_dump", "type": "function",
                     "function": {"name": "srv__dump", "arguments": "{}"}}
                ]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 30}
        }))
    })
    .await
}

fn spec(url: &str) -> String {
    format!(
        r#"goal = "Pick a city."
[[providers]]
name = "local"
kind = "openai"
model = "m"
base_url = "{url}/v1"
api_key_env = "OTEL_TEST_KEY"
stream = false

[[tools]]
name = "count_words"
description = "Count the words of a text"
command = ["sh", "-c", "wc -w | tr -d ' '"]
schema = {{ type = "object", properties = {{ text = {{ type = "string" }} }} }}
read_only = true
idempotent = true

[[mcp]]
name = "srv"
command = ["sh", "mcp.sh"]

[[agents]]
id = "picker"
provider = "local"
tools = ["count_words", "srv__dump"]
output_schema = {{ type = "object", properties = {{ city = {{ type = "string" }} }}, required = ["city"] }}
[agents.model_settings]
temperature = 0.25
top_p = 0.5
seed = 7
stop = ["END"]
max_output_tokens = 500
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_the_conventions_attributes_and_histograms() {
    let (otlp, got) = receiver();
    let (dir, db) = scratch_db();
    let model = server().await;
    std::fs::write(
        dir.path().join("mcp.sh"),
        support::mcp::sh_server(
            "Dumps what it is given",
            "printf '%s\\n' \"$line\" > call.json; text=dumped",
        ),
    )
    .expect("mcp.sh");
    std::fs::write(dir.path().join("spec.toml"), spec(&model.url())).expect("spec");
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new(bin())
            .args(["run", "spec.toml", "--db"])
            .arg(&db)
            .current_dir(dir.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
            .env("OTEL_SERVICE_NAME", "billing-agents")
            .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
            .env("OTEL_TEST_KEY", KEY)
            .env_remove("RUNTAPE_DB")
            .output()
            .expect("runs")
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Protobuf by default, and the service named by the standard variable.
    let kinds = content_types(&got, "/v1/traces");
    assert!(!kinds.is_empty());
    assert!(
        kinds.iter().all(|k| k == "application/x-protobuf"),
        "{kinds:?}"
    );
    assert!(
        content_types(&got, "/v1/metrics")
            .iter()
            .all(|k| k == "application/x-protobuf")
    );
    for path in ["/v1/traces", "/v1/metrics"] {
        let names = service_names(&got, path);
        assert!(!names.is_empty(), "{path}");
        assert!(names.iter().all(|n| n == "billing-agents"), "{names:?}");
    }

    let all = spans(&got);
    let mut chats: Vec<_> = all.iter().filter(|s| s.name == "chat m").collect();
    chats.sort_by_key(|c| c.attrs["runtape.seq"].as_i64());
    assert_eq!(chats.len(), 2, "{all:#?}");
    let port = i64::from(model.addr.port());
    for c in &chats {
        assert_eq!(c.attrs["gen_ai.provider.name"], json!("openai"));
        assert_eq!(c.attrs["gen_ai.response.model"], json!("m-2026-01-01"));
        assert_eq!(c.attrs["gen_ai.request.temperature"], json!(0.25));
        assert_eq!(c.attrs["gen_ai.request.top_p"], json!(0.5));
        assert_eq!(c.attrs["gen_ai.request.seed"], json!(7));
        assert_eq!(c.attrs["gen_ai.request.stop_sequences"], json!(["END"]));
        assert_eq!(c.attrs["gen_ai.request.max_tokens"], json!(500));
        assert_eq!(c.attrs["gen_ai.output.type"], json!("json"));
        assert_eq!(c.attrs["server.address"], json!("127.0.0.1"));
        assert_eq!(c.attrs["server.port"], json!(port));
    }
    assert_eq!(
        chats[0].attrs["gen_ai.response.id"],
        json!("chatcmpl-otel-1")
    );
    assert_eq!(
        chats[1].attrs["gen_ai.response.id"],
        json!("chatcmpl-otel-2")
    );
    assert!(
        !chats[0]
            .attrs
            .contains_key("gen_ai.usage.cache_read.input_tokens")
    );
    assert_eq!(chats[1].attrs["gen_ai.usage.input_tokens"], json!(300));
    assert_eq!(
        chats[1].attrs["gen_ai.usage.cache_read.input_tokens"],
        json!(256)
    );
    assert_eq!(
        chats[1].attrs["gen_ai.usage.reasoning.output_tokens"],
        json!(8)
    );

    let words = named(&all, "execute_tool count_words");
    assert_eq!(words.attrs["gen_ai.tool.type"], json!("function"));
    assert_eq!(
        words.attrs["gen_ai.tool.description"],
        json!("Count the words of a text")
    );
    let dump = named(&all, "execute_tool srv__dump");
    assert_eq!(dump.attrs["gen_ai.tool.type"], json!("extension"));
    assert_eq!(
        dump.attrs["gen_ai.tool.description"],
        json!("Dumps what it is given")
    );

    // The MCP call: a client span under the tool's span, whose context the request carried.
    let client = named(&all, "tools/call dump");
    assert_eq!(client.parent, dump.id);
    assert_eq!(client.trace, dump.trace);
    assert_eq!(client.attrs["mcp.method.name"], json!("tools/call"));
    assert_eq!(client.attrs["gen_ai.tool.name"], json!("dump"));
    let sent = std::fs::read_to_string(dir.path().join("call.json")).expect("the call was kept");
    let traceparent = format!("\"traceparent\":\"00-{}-{}-01\"", client.trace, client.id);
    assert!(sent.contains(&traceparent), "{traceparent} not in {sent}");

    // The GenAI client histograms: both calls' tokens by type, and their durations.
    let usage = histogram_points(&got, "gen_ai.client.token.usage");
    let by_type = |kind: &str| {
        let p = usage
            .iter()
            .find(|p| attrs_of(p)["gen_ai.token.type"] == json!(kind))
            .unwrap_or_else(|| panic!("no {kind} point in {usage:#?}"));
        let a = attrs_of(p);
        assert_eq!(a["gen_ai.operation.name"], json!("chat"));
        assert_eq!(a["gen_ai.provider.name"], json!("openai"));
        assert_eq!(a["gen_ai.request.model"], json!("m"));
        assert_eq!(a["gen_ai.response.model"], json!("m-2026-01-01"));
        assert_eq!(a["server.address"], json!("127.0.0.1"));
        assert_eq!(a["server.port"], json!(port));
        (number(&p["count"]), number(&p["sum"]))
    };
    assert_eq!(by_type("input"), (2.0, 400.0));
    assert_eq!(by_type("output"), (2.0, 50.0));
    let durations = histogram_points(&got, "gen_ai.client.operation.duration");
    assert_eq!(durations.len(), 1, "{durations:#?}");
    assert_eq!(number(&durations[0]["count"]), 2.0);
    assert_eq!(
        attrs_of(&durations[0])["gen_ai.operation.name"],
        json!("chat")
    );
    assert!(!attrs_of(&durations[0]).contains_key("error.type"));

    let everything: String = got
        .lock()
        .expect("lock")
        .iter()
        .map(|(_, _, body)| body.clone())
        .collect();
    assert!(!everything.contains(KEY), "the key was exported");
}

/// A JSON number, or an integer sent as a string.
fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(f64::NAN),
        other => other.as_f64().unwrap_or(f64::NAN),
    }
}

#[test]
fn a_protocol_runtape_does_not_speak_is_refused_before_anything_runs() {
    let (otlp, got) = receiver();
    let (dir, db) = scratch_db();
    for (value, named) in [("grpc", "grpc"), ("http/xml", "http/xml")] {
        let out = std::process::Command::new(bin())
            .args(["run", "examples/quickstart.toml", "--db"])
            .arg(&db)
            .current_dir(dir.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", value)
            .env_remove("RUNTAPE_DB")
            .output()
            .expect("runs");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_PROTOCOL")
                && err.contains(named)
                && err.contains("http/protobuf")
                && err.contains("http/json"),
            "{err}"
        );
    }
    assert!(!db.exists(), "no run was started");
    assert!(got.lock().expect("lock").is_empty());
}
