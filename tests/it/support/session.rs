//! Shared by the session and retriever tests: the real binary on a real SQLite file, a chat
//! spec with scripted answers and an `echo` summariser, and readers of what a run's model
//! calls were sent.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;

use serde_json::Value;

pub use super::cli::{first_id, ok, on, runtape, text, utf8, write};

/// Runs `spec` toward `goal` as the next run of `session`; returns the run id.
pub fn session_run(db: &Path, spec: &Path, goal: &str, session: &str) -> String {
    first_id(&ok(db, &["run", utf8(spec), goal, "--session", session]))
}

/// A chat: `assistant` answers from a script (its answer to its n-th turn in a conversation
/// is `answers[n]`), `summarizer` echoes what it is given (so a summary shows exactly what it
/// was asked to summarise), and a session keeps the last `window` messages.
pub fn chat_spec(window: u32, answers: &[&str], extra: &str) -> String {
    let replies: Vec<String> = answers
        .iter()
        .map(|a| format!("{{ text = \"{a}\", usage = {{ input = 10, output = 5 }} }}"))
        .collect();
    format!(
        r#"
[[providers]]
name = "script"
kind = "scripted"
replies = [{}]

[[providers]]
name = "echo"
kind = "echo"

[[agents]]
id = "assistant"
system_prompt = "You are a friendly assistant."
provider = "script"

[[agents]]
id = "summarizer"
provider = "echo"

[session]
window = {{ messages = {window} }}
summarizer = "summarizer"
{extra}
"#,
        replies.join(", ")
    )
}

/// `show --json RUN@SEQ`.
pub fn show(db: &Path, run: &str, seq: u64) -> Value {
    serde_json::from_str(&ok(db, &["show", &format!("{run}@{seq}"), "--json"])).expect("json")
}

/// The run's latest seq.
pub fn steps(db: &Path, run: &str) -> u64 {
    let v: Value = serde_json::from_str(&ok(db, &["show", run, "--json"])).expect("json");
    v["seq"].as_u64().expect("a seq")
}

/// Every model request the run sent, in order: `(agent, messages)`.
pub fn requests(db: &Path, run: &str) -> Vec<(String, Vec<Value>)> {
    (1..=steps(db, run))
        .filter_map(|seq| {
            let v = show(db, run, seq);
            let req = v.get("request")?;
            Some((
                req["agent"].as_str().expect("agent").to_owned(),
                req["messages"].as_array().expect("messages").clone(),
            ))
        })
        .collect()
}

/// `(role, content)` of each message.
pub fn said(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Asserts `verify RUN` passes.
pub fn verifies(db: &Path, run: &str) {
    let o = runtape(db, &["verify", run]);
    assert!(o.status.success(), "verify {run}: {}", text(&o));
}
