//! A saga to undo, written by the real binary's spec format: an agent creates two things with
//! a command tool whose undo is declared, then its model fails (or it waits to be cancelled).
//! Used by the `compensate` area and by the browser test of the timeline.

use std::path::{Path, PathBuf};

use crate::support::cli::write;

/// How the saga spec's run ends and how its undo tool behaves.
pub struct Saga {
    /// The undo of the thing with this name exits 3.
    pub failing: Option<&'static str>,
    /// The undo tool is declared idempotent.
    pub idempotent: bool,
    /// After creating, the agent calls `wait` (60 s) instead of failing: for a cancel.
    pub wait: bool,
}

/// Writes `saga.toml` and its scripts in `dir`: the agent creates `a`, then `b` (each a line
/// `create {...}` in `effects.log`; the result is `{"made": ARGS}`), then its model fails
/// (or it calls `wait`). `create` declares `delete` as its undo, with `name` from the result;
/// `delete` writes `undo ARGS KEY` when it starts and `undone ARGS KEY` when it finishes. A
/// file `hold` makes the next undo hang (it removes the file first), so a test can kill the
/// driver while an undo runs.
pub fn saga_spec(dir: &Path, saga: &Saga) -> PathBuf {
    write(
        dir,
        "create.sh",
        "a=$(cat)\necho \"create $a\" >> effects.log\nprintf '{\"made\": %s}' \"$a\"\n",
    );
    let fail = saga.failing.map_or(String::new(), |name| {
        format!("case \"$a\" in *'\"{name}\"'*) echo 'cannot delete {name}' >&2; exit 3;; esac\n")
    });
    write(
        dir,
        "delete.sh",
        &format!(
            "a=$(cat)\necho \"undo $a $RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log\n\
             if [ -f hold ]; then rm hold; while :; do sleep 0.05; done; fi\n{fail}\
             echo \"undone $a $RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log\necho deleted\n"
        ),
    );
    let last = if saga.wait {
        r#"{ tool_calls = [{ name = "wait", arguments = {} }] }, { text = "never" }"#
    } else {
        r#"{ error = { class = "provider_auth", message = "bad key" } }"#
    };
    let spec = format!(
        r#"goal = "make two things"

[run]
on_failure = "compensate"

[[providers]]
name = "s"
kind = "scripted"
replies = [
  {{ tool_calls = [{{ name = "create", arguments = {{ name = "a" }} }}] }},
  {{ tool_calls = [{{ name = "create", arguments = {{ name = "b" }} }}] }},
  {last},
]

[[tools]]
name = "create"
command = ["sh", "create.sh"]
compensate = {{ tool = "delete", arguments = {{ name = "{{result.made.name}}" }} }}

[[tools]]
name = "delete"
command = ["sh", "delete.sh"]
idempotent = {idempotent}

[[tools]]
name = "wait"
command = ["sh", "-c", "echo waiting >> effects.log; sleep 60"]

[[agents]]
id = "a"
provider = "s"
tools = ["create", "wait"]
"#,
        idempotent = saga.idempotent
    );
    write(dir, "saga.toml", &spec)
}

/// The lines of `effects.log` in `dir` that start with `word ` (without it).
pub fn logged(dir: &Path, word: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("effects.log")).unwrap_or_default();
    let prefix = format!("{word} ");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}
