//! Shared fixtures for the cassette tests: a three-turn tool-using conversation, a scripted
//! model that answers it, a recorder run, and helpers to edit a saved file on disk.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use runtape::cassette::{Cassette, CassetteError, LoadOptions, RecordOptions, RecordingProvider};
use runtape::machine::{AgentId, Message, ModelReply, Remaining, Role, ToolCall, ToolCallRequest};
use runtape::provider::{
    ModelProvider, ProviderError, ProviderRequest, ScriptOutcome, ScriptedProvider, ToolDef,
};
use serde_json::{Value, json};

/// The time every fixture recording gives.
pub const RECORDED_AT: &str = "2025-01-31T12:00:00Z";

/// What one call returned: the result and the token chunks the sink saw.
pub type Outcome = (Result<ModelReply, ProviderError>, Vec<String>);

/// Runs a future on a fresh single-threaded runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime needs no resources that can be missing")
        .block_on(future)
}

/// The tools offered on every turn.
pub fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "lookup".into(),
            description: "Look something up".into(),
            schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        },
        ToolDef {
            name: "write".into(),
            description: "Append text to the notes".into(),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        },
    ]
}

/// The model's replies: look up, write, answer.
pub fn replies() -> Vec<ModelReply> {
    vec![
        ModelReply::tools(vec![ToolCallRequest::new(
            "call_1",
            "lookup",
            json!({"q": "capital of France"}),
        )]),
        ModelReply::tools(vec![ToolCallRequest::new(
            "call_2",
            "write",
            json!({"text": "Paris"}),
        )])
        .with_usage(120, 9),
        ModelReply::text("The capital of France is Paris.").with_usage(150, 8),
    ]
}

/// A request from agent `geo` with these messages and the fixture tools.
pub fn request(messages: Vec<Message>) -> ProviderRequest {
    ProviderRequest {
        agent: AgentId::from("geo"),
        model: "model-a".into(),
        messages: Arc::new(messages),
        tools: tools(),
        remaining: Remaining::default(),
        attempt: 1,
        ..ProviderRequest::default()
    }
}

fn assistant_call(id: &str, name: &str, arguments: Value) -> Message {
    Message {
        content: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }],
        ..Message::text(Role::Assistant, "")
    }
}

fn tool_result(id: &str, name: &str, text: &str) -> Message {
    Message {
        tool_call_id: Some(id.into()),
        name: Some(name.into()),
        ..Message::text(Role::Tool, text)
    }
}

/// The conversation's requests, turn 0 to 3, with `system` as the system prompt. Turn 3
/// asks past the end of the script, so the scripted model fails it.
pub fn requests_with_system(system: &str) -> Vec<ProviderRequest> {
    let mut messages = vec![
        Message::text(Role::System, system),
        Message::text(Role::User, "What is the capital of France? Note it down."),
    ];
    let mut out = vec![request(messages.clone())];
    messages.push(assistant_call(
        "call_1",
        "lookup",
        json!({"q": "capital of France"}),
    ));
    messages.push(tool_result("call_1", "lookup", "Paris"));
    out.push(request(messages.clone()));
    messages.push(assistant_call("call_2", "write", json!({"text": "Paris"})));
    messages.push(tool_result("call_2", "write", "ok"));
    out.push(request(messages.clone()));
    messages.push(Message::text(
        Role::Assistant,
        "The capital of France is Paris.",
    ));
    messages.push(Message::text(Role::User, "And of Italy?"));
    out.push(request(messages));
    out
}

/// [`requests_with_system`] with the usual system prompt.
pub fn requests() -> Vec<ProviderRequest> {
    requests_with_system("You are a geography assistant.")
}

/// The scripted model of [`replies`] (one chunk per text reply; turn 3 fails).
pub fn model() -> Arc<dyn ModelProvider> {
    Arc::new(ScriptedProvider::replies("geo-model", replies()))
}

/// A scripted model that streams turn 2's text in three chunks.
pub fn streaming_model() -> Arc<dyn ModelProvider> {
    let replies = replies();
    Arc::new(ScriptedProvider::new(
        "geo-stream",
        move |req| match replies.get(req.turn()) {
            Some(reply) if reply.text.is_some() => ScriptOutcome {
                chunks: vec![
                    "The capital ".into(),
                    "of France is ".into(),
                    "Paris.".into(),
                ],
                ..ScriptOutcome::reply(reply.clone())
            },
            Some(reply) => ScriptOutcome::reply(reply.clone()),
            None => ScriptOutcome::fail(ProviderError::new(
                "geo-stream",
                runtape::machine::ProviderErrorClass::ProviderRateLimit,
                "slow down",
            )),
        },
    ))
}

/// One call, collecting the chunks the token sink receives.
pub async fn call(provider: &dyn ModelProvider, request: &ProviderRequest) -> Outcome {
    let chunks = Mutex::new(Vec::new());
    let sink = |d: &str| {
        chunks
            .lock()
            .expect("not poisoned: the sink never panics")
            .push(d.to_owned())
    };
    let result = provider.complete(request, &sink).await;
    (
        result,
        chunks
            .into_inner()
            .expect("not poisoned: the sink never panics"),
    )
}

/// Calls `provider` with each request in order.
pub async fn call_all(provider: &dyn ModelProvider, requests: &[ProviderRequest]) -> Vec<Outcome> {
    let mut out = Vec::new();
    for r in requests {
        out.push(call(provider, r).await);
    }
    out
}

/// Records `requests` against `model` and returns the cassette and what the caller saw.
pub fn record_with(
    model: Arc<dyn ModelProvider>,
    options: RecordOptions,
    requests: &[ProviderRequest],
) -> (Cassette, Vec<Outcome>) {
    let recorder = RecordingProvider::new(model, options).expect("a random id");
    let outcomes = block_on(call_all(&recorder, requests));
    let cassette = recorder
        .finish(RECORDED_AT)
        .expect("the fixture records cleanly");
    (cassette, outcomes)
}

/// The fixture conversation's first three turns, recorded with default options.
pub fn record_default() -> Cassette {
    record_with(model(), RecordOptions::default(), &requests()[..3]).0
}

/// Saves `cassette` as `name` in `dir` and returns the path.
pub fn save(cassette: &Cassette, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    cassette.save(&path).expect("the temp dir is writable");
    path
}

/// Reads the file as JSON, applies `edit`, and writes it back (as a person with an editor
/// would: the hashes are left as they were).
pub fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let text = std::fs::read_to_string(path).expect("the file was just written");
    let mut value: Value = serde_json::from_str(&text).expect("the recorder writes JSON");
    edit(&mut value);
    let out = serde_json::to_string_pretty(&value).expect("a Value always serialises");
    std::fs::write(path, out).expect("the temp dir is writable");
}

/// Replaces `from` (which must occur) by `to` in the file's text.
pub fn edit_text(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("the file was just written");
    assert!(
        text.contains(from),
        "fixture text {from:?} not found in the file"
    );
    std::fs::write(path, text.replacen(from, to, 1)).expect("the temp dir is writable");
}

/// Loads with default options.
pub fn load(path: &Path) -> Result<Cassette, CassetteError> {
    Cassette::load(path, &LoadOptions::default())
}
