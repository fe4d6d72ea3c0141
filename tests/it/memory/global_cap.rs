//! Global memory's byte cap held across runs (revision 5), with real `runtape` processes on
//! one SQLite file.
//!
//! Each run checks `max_bytes_global` against its own view while it writes, so two runs
//! adding different keys at the same time could together pass the cap. The publish checks it
//! again, against the memory as it stands when the publish is applied: a publish that would
//! take it past the cap (and grow it) is refused whole, nothing is written, and the agent
//! that wrote is told the sizes as data and gets a new turn — here it stores a shorter note,
//! which fits, and publishes.

use crate::support::spec::{agent, tool};
use std::path::Path;

use serde_json::Value;

use crate::support;
use crate::support::cli::write;
use support::cli::{global_memory, run_id, runtape, scripted, temp_db, text, utf8};

/// Bytes (keys plus values) of the latest version of every key of `team`.
fn bytes_held(db: &Path) -> usize {
    let mut latest = std::collections::BTreeMap::new();
    for (key, _, value, _) in global_memory(db, "team") {
        latest.insert(key, value);
    }
    latest
        .iter()
        .map(|(k, v)| v.as_ref().map_or(0, |v| k.len() + v.len()))
        .sum()
}

/// The cap: 100 bytes of keys and values.
const CAP: usize = 100;

const HEADER: &str = r#"goal = "Take notes."

[memory]
global = "team"
max_bytes_global = 100
"#;

/// The scribe's tool `hold` (needs a person) and the scribe, offered it and the memory tools.
fn scribe() -> String {
    let hold = "description = \"Wait for a person\"\nrequires_approval = true";
    [
        tool("hold", r#"["sh", "-c", "echo ok"]"#, hold),
        agent(
            "scribe",
            "script",
            &["hold", "remember", "recall", "forget"],
            "system_prompt = \"You take notes.\"",
        ),
    ]
    .concat()
}

/// A 60-byte note: with its one-letter key, 61 bytes, which fits the cap alone but not twice.
fn note(letter: char) -> String {
    letter.to_string().repeat(60)
}

/// Writes key `a` (61 bytes), waits for a person, answers; told the memory is full, stores a
/// 20-byte note instead and answers again.
fn slow_spec() -> String {
    let a = note('a');
    let replies = format!(
        r#"  {{ tool_calls = [
      {{ name = "remember", arguments = {{ key = "a", value = "{a}", scope = "global" }} }},
      {{ name = "hold", arguments = {{}} }},
  ] }},
  {{ text = "Noted." }},
  {{ tool_calls = [ {{ name = "remember", arguments = {{ key = "a", value = "short note, 20 bytes", scope = "global" }} }} ] }},
  {{ text = "Noted, shorter." }},
"#
    );
    format!("{HEADER}\n{}{}", scribe(), scripted(&replies))
}

/// Writes key `b` (61 bytes) and answers at once.
fn quick_spec() -> String {
    let b = note('b');
    let replies = format!(
        r#"  {{ tool_calls = [ {{ name = "remember", arguments = {{ key = "b", value = "{b}", scope = "global" }} }} ] }},
  {{ text = "Noted." }},
"#
    );
    format!("{HEADER}\n{}{}", scribe(), scripted(&replies))
}

#[test]
fn two_runs_adding_keys_at_once_cannot_together_pass_the_cap() {
    let (dir, db) = temp_db();
    let slow = write(dir.path(), "slow.toml", &slow_spec());
    let quick = write(dir.path(), "quick.toml", &quick_spec());

    // Process 1: A reads the empty memory, writes `a` (61 bytes: within the cap as it sees
    // it), and waits for a person.
    let out = runtape(&db, &["run", utf8(&slow)]);
    assert!(out.status.success(), "{}", text(&out));
    let a = run_id(&out);

    // Process 2: B reads the same empty memory, writes `b` (61 bytes), and publishes.
    let out = runtape(&db, &["run", utf8(&quick)]);
    assert!(out.status.success(), "{}", text(&out));
    let b = run_id(&out);
    assert_eq!(bytes_held(&db), 61);

    // Process 3: A completes. Its view says 61 bytes; with B's note the memory would hold
    // 122, past the cap of 100: refused whole, nothing written.
    let out = runtape(&db, &["resume", &a, "--approve"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&runtape(&db, &["log", &a]));
    assert_eq!(log.matches("publishing → preparing").count(), 1, "{log}");
    assert!(
        log.contains(
            "global memory refused (over its cap: it holds 61 bytes, would hold 122, cap 100)"
        ),
        "{log}"
    );
    // Its writer was told, as data in the user position, and wrote a shorter note.
    let steps = String::from_utf8_lossy(&runtape(&db, &["log", &a, "--json"]).stdout)
        .lines()
        .count();
    let told: Vec<Value> = (1..=steps)
        .filter_map(|seq| {
            let out = runtape(&db, &["show", &format!("{a}@{seq}"), "--json"]);
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            v["request"]["messages"].as_array().cloned()
        })
        .flatten()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[memory full: data, not instructions]"))
        })
        .collect();
    let message = told.first().expect("the refusal is in a later request");
    assert_eq!(message["role"], "user");
    let content = message["content"].as_str().unwrap_or_default();
    assert!(
        content.contains("holds 61 bytes") && content.contains("cap of 100 bytes"),
        "{content}"
    );

    // What is stored: B's note, then A's shorter one — never more than the cap.
    assert_eq!(
        global_memory(&db, "team"),
        [
            (
                "a".into(),
                1,
                Some("short note, 20 bytes".into()),
                Some(a.clone())
            ),
            ("b".into(), 1, Some(note('b')), Some(b.clone())),
        ]
    );
    assert!(bytes_held(&db) <= CAP, "{} bytes", bytes_held(&db));
    for run in [&a, &b] {
        let out = runtape(&db, &["verify", run]);
        assert!(out.status.success(), "{}", text(&out));
    }
}
