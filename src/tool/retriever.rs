//! The retriever: a program (`[retriever] command = [...]`) asked for passages before each
//! model turn of the agents that have it (revision 5; see [`crate::machine::retrieval`]).
//!
//! # The protocol
//!
//! It runs exactly like a [command tool](super::command) — in the spec file's directory, with
//! the minimal environment (plus what its `env` names) and the call's `RUNTAPE_*` variables,
//! in its own process group, killed with its children on timeout or cancel — and gets the
//! **query** as one JSON object on stdin:
//!
//! ```json
//! {"run": "01…", "agent": "assistant", "goal": "…", "turn": 1,
//!  "query": "the last user message", "last_role": "user", "session": "support-42"}
//! ```
//!
//! `query` is the text of the agent's last user message that is not data (the goal, a handoff
//! note, a person's words); `last_role` is the role of its last message (`user` on a fresh
//! question, `tool` after tool results, …) — a retriever that answers only new questions
//! prints `[]` otherwise; `turn` counts the agent's model turns in this run, this one
//! included (a session summary the agent wrote counts as one); `session` is present for a run
//! of a session.
//!
//! It prints **passages** as JSON on stdout: a list whose items are strings or objects
//! `{"text": "…", "source": "…"}` (`source` optional; other keys are ignored), or
//! `{"passages": [ … ]}`. An empty list means none.
//!
//! # Failures
//!
//! A non-zero exit, a signal, a timeout (`timeout_ms`, default 10 s), output that is not
//! passages, or passages larger than `max_bytes` (default 64 KiB, at most 1 MiB, measured as
//! their JSON) is recorded as [`Retrieval::Failed`] with one line saying what happened; the
//! turn goes on without passages (see [`crate::machine::retrieval`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::command::{CommandConfig, CommandTool};
use super::{Tool, ToolContext};
use crate::machine::{Message, Passage, Retrieval, Role};

/// The most passage bytes a retriever may return unless its `max_bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: usize = 64 << 10;

/// The largest `max_bytes` accepted.
pub const MAX_MAX_BYTES: usize = 1 << 20;

/// How long a retriever may take unless its `timeout_ms` says otherwise.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// A retriever program as the setup stores it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrieverConfig {
    /// How it is run: program, arguments, directory, timeout and environment, as a command
    /// tool named `retriever`.
    pub command: CommandConfig,
    /// The most bytes of passages (their JSON) it may return.
    pub max_bytes: usize,
}

/// A retriever ready to be asked: the tool that runs it and its output cap.
#[derive(Clone)]
pub struct Retriever {
    tool: Arc<dyn Tool>,
    max_bytes: usize,
}

impl std::fmt::Debug for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever")
            .field("tool", &self.tool.name())
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl Retriever {
    /// A retriever answered by `tool` (its arguments are the query; its result the passages),
    /// whose passages may take at most `max_bytes`. For a program embedding runtape; spec files
    /// build theirs with [`Retriever::command`].
    pub fn new(tool: Arc<dyn Tool>, max_bytes: usize) -> Retriever {
        Retriever {
            tool,
            max_bytes: max_bytes.min(MAX_MAX_BYTES),
        }
    }

    /// The retriever `config` describes, never passing the variables `withheld` under
    /// `env_all` (the setup withholds its providers' key variables this way).
    pub fn command<'a>(
        config: &RetrieverConfig,
        withheld: impl IntoIterator<Item = &'a str>,
    ) -> Retriever {
        let tool = CommandTool::new(config.command.clone()).without_env(withheld);
        Retriever::new(Arc::new(tool), config.max_bytes)
    }

    /// How long it may take: its own limit, else `default`.
    pub fn timeout(&self, default: Duration) -> Duration {
        self.tool.timeout().unwrap_or(default)
    }

    /// Asks for passages for `query`. Never fails: what goes wrong is the result.
    pub async fn retrieve(&self, query: Value, ctx: ToolContext) -> Retrieval {
        match self.tool.invoke(query, ctx).await {
            Ok(mut value) => {
                // The passages become an event: no known secret value may land through them.
                crate::secrets::global().scrub_value(&mut value);
                passages_of(&value, self.max_bytes)
            }
            Err(e) => Retrieval::Failed {
                error: crate::secrets::global().scrub_str(&e.message).into_owned(),
            },
        }
    }
}

/// The query the retriever is given for `agent`'s turn `turn`, from its conversation.
pub fn query(
    run: &str,
    agent: &str,
    goal: &str,
    turn: u64,
    session: Option<&str>,
    messages: &[Message],
) -> Value {
    let asked = messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User && m.name.is_none())
        .and_then(|m| m.content.clone())
        .unwrap_or_default();
    let last_role = messages.last().map_or("none", |m| match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    });
    let mut q = json!({
        "run": run,
        "agent": agent,
        "goal": goal,
        "turn": turn,
        "query": asked,
        "last_role": last_role,
    });
    if let (Some(session), Some(map)) = (session, q.as_object_mut()) {
        map.insert("session".into(), session.into());
    }
    q
}

/// Reads a retriever's output as passages (see the module doc), at most `max_bytes` of them.
pub fn passages_of(value: &Value, max_bytes: usize) -> Retrieval {
    let fail = |error: String| Retrieval::Failed { error };
    let items = match value {
        Value::Array(items) => items,
        Value::Object(map) => match map.get("passages") {
            Some(Value::Array(items)) => items,
            _ => {
                return fail(
                    "the retriever printed an object without a `passages` list; print [\"text\", …], [{\"text\": …, \"source\": …}] or {\"passages\": [...]}".into(),
                );
            }
        },
        Value::String(_) => {
            return fail(
                "the retriever printed text, not JSON passages; print [\"text\", …] or [{\"text\": …, \"source\": …}]".into(),
            );
        }
        other => {
            return fail(format!(
                "the retriever printed {}, not a list of passages",
                kind(other)
            ));
        }
    };
    let mut passages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let passage = match item {
            Value::String(text) => Passage {
                text: text.clone(),
                source: None,
            },
            Value::Object(map) => {
                let Some(Value::String(text)) = map.get("text") else {
                    return fail(format!(
                        "passage {i} has no `text` string; give {{\"text\": \"…\", \"source\": \"…\"}}"
                    ));
                };
                let source = match map.get("source") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                };
                Passage {
                    text: text.clone(),
                    source,
                }
            }
            other => {
                return fail(format!(
                    "passage {i} is {}, not a string or {{\"text\": …}}",
                    kind(other)
                ));
            }
        };
        passages.push(passage);
    }
    let size = serde_json::to_vec(&passages).map_or(usize::MAX, |b| b.len());
    if size > max_bytes {
        return fail(format!(
            "the retriever returned {size} bytes of passages, more than its max_bytes ({max_bytes}); return fewer or shorter passages, or raise max_bytes"
        ));
    }
    Retrieval::Passages { passages }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passages_are_strings_or_objects_with_text() {
        let r = passages_of(
            &json!(["a", {"text": "b", "source": "f.md", "score": 1}]),
            1000,
        );
        assert_eq!(
            r,
            Retrieval::Passages {
                passages: vec![
                    Passage {
                        text: "a".into(),
                        source: None
                    },
                    Passage {
                        text: "b".into(),
                        source: Some("f.md".into())
                    }
                ]
            }
        );
        assert_eq!(
            passages_of(&json!({"passages": []}), 10),
            Retrieval::Passages { passages: vec![] }
        );
        for bad in [
            json!("plain text"),
            json!(3),
            json!({"x": 1}),
            json!([1]),
            json!([{"source": "s"}]),
        ] {
            assert!(
                matches!(passages_of(&bad, 1000), Retrieval::Failed { .. }),
                "{bad}"
            );
        }
        let Retrieval::Failed { error } = passages_of(&json!(["x".repeat(100)]), 50) else {
            panic!("too big is refused");
        };
        assert!(error.contains("max_bytes"), "{error}");
    }

    #[test]
    fn the_query_is_the_last_user_message_that_is_not_data() {
        let messages = vec![
            Message::text(Role::System, "s"),
            Message::text(Role::User, "what is tea?"),
            Message {
                name: Some("runtape.passages".into()),
                ..Message::text(Role::User, "[passages]")
            },
            Message::text(Role::Assistant, "…"),
        ];
        let q = query("r", "a", "g", 2, Some("s1"), &messages);
        assert_eq!(q["query"], "what is tea?");
        assert_eq!(q["last_role"], "assistant");
        assert_eq!(q["session"], "s1");
        assert_eq!(q["turn"], 2);
    }
}
