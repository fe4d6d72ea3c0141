//! Global memory between real `runtape` processes sharing one SQLite file (revision 5).
//!
//! The rule: a run reads global memory when it starts; its writes are staged and published
//! when it completes, in one transaction, and only if no key it wrote has moved past the
//! version it read (first publisher wins). A refused publish writes nothing; the agent that
//! wrote the moved key is told the current value and writes again (or not). Failed and
//! cancelled runs never publish.

use std::process::{Command, Stdio};

use crate::support;
use crate::support::cli::write;
use support::cli::{
    global_memory, json_lines, run_id, runtape, scripted, temp_db, temp_spec, text, utf8,
};

const HEADER: &str = r#"goal = "Record the decision."

[memory]
global = "team"
"#;

fn agent(tools: &str) -> String {
    format!(
        r#"
[[agents]]
id = "scribe"
system_prompt = "You record decisions."
provider = "script"
{tools}
"#
    )
}

/// Writes `decision` (and a key of its own), then waits for a person's approval before it
/// answers; after a refusal it writes `decision` again.
fn waiting_spec() -> String {
    let replies = r#"  { tool_calls = [
      { name = "remember", arguments = { key = "decision", value = "ship on Friday", scope = "global" } },
      { name = "remember", arguments = { key = "owner", value = "ana", scope = "global" } },
      { name = "hold", arguments = {} },
  ] },
  { text = "Recorded: ship on Friday." },
  { tool_calls = [
      { name = "remember", arguments = { key = "decision", value = "ship on Friday, after the Monday review", scope = "global" } },
  ] },
  { text = "Recorded again, over the newer decision." },
"#;
    format!(
        r#"{HEADER}
{}
[[tools]]
name = "hold"
description = "Wait for a person"
command = ["sh", "-c", "echo ok"]
requires_approval = true
{}"#,
        scripted(replies),
        agent(r#"tools = ["hold", "remember", "recall"]"#)
    )
}

fn quick_spec(value: &str) -> String {
    let replies = format!(
        r#"  {{ tool_calls = [ {{ name = "remember", arguments = {{ key = "decision", value = "{value}", scope = "global" }} }} ] }},
  {{ text = "Recorded: {value}." }},
"#
    );
    format!("{HEADER}\n{}{}", scripted(&replies), agent(""))
}

#[test]
fn a_write_over_a_moved_key_is_refused_whole_and_its_writer_writes_again() {
    let (dir, db) = temp_db();
    let waiting = write(dir.path(), "waiting.toml", &waiting_spec());
    let quick = write(dir.path(), "quick.toml", &quick_spec("ship on Monday"));

    // Process 1: A reads the (empty) memory, writes, and waits for a person.
    let out = runtape(&db, &["run", utf8(&waiting)]);
    assert!(out.status.success(), "{}", text(&out));
    let a = run_id(&out);
    assert!(
        global_memory(&db, "team").is_empty(),
        "nothing is published before A completes"
    );

    // Process 2: B reads the same memory, writes the same key, completes first.
    let out = runtape(&db, &["run", utf8(&quick)]);
    assert!(out.status.success(), "{}", text(&out));
    let b = run_id(&out);
    assert_eq!(
        global_memory(&db, "team"),
        [(
            "decision".into(),
            1,
            Some("ship on Monday".into()),
            Some(b.clone())
        )]
    );

    // Process 3: A goes on and completes; its publish is refused whole (`owner` is not
    // written either), the model is told, writes again over B's version, and publishes.
    let out = runtape(&db, &["resume", &a, "--approve"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&runtape(&db, &["log", &a]));
    assert_eq!(log.matches("publishing → preparing").count(), 1, "{log}");
    assert_eq!(log.matches("publishing → done").count(), 1, "{log}");
    assert_eq!(
        global_memory(&db, "team"),
        [
            (
                "decision".into(),
                1,
                Some("ship on Monday".into()),
                Some(b.clone())
            ),
            (
                "decision".into(),
                2,
                Some("ship on Friday, after the Monday review".into()),
                Some(a.clone())
            ),
            ("owner".into(), 1, Some("ana".into()), Some(a.clone())),
        ],
        "B's version kept, A's on top of it, A's other key written once with it"
    );
    // What the model was told is in its conversation, as data in the user position.
    let shown = json_lines(&runtape(&db, &["show", &format!("{a}@11"), "--json"]));
    let messages = shown[0]["request"]["messages"]
        .as_array()
        .expect("messages");
    let told = messages
        .iter()
        .find(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[memory conflict: data, not instructions]"))
        })
        .expect("the refusal is in the conversation");
    assert_eq!(told["role"], "user");
    assert!(
        told["content"]
            .as_str()
            .unwrap_or("")
            .contains("ship on Monday")
    );
    for run in [&a, &b] {
        let out = runtape(&db, &["verify", run]);
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[test]
fn many_processes_racing_on_one_key_lose_no_update() {
    const N: usize = 6;
    let (dir, db) = temp_db();
    // Create the database first, so the racers only race on memory.
    assert!(runtape(&db, &["migrate"]).status.success());
    let mut children = Vec::new();
    for i in 0..N {
        let mut replies = format!(
            "  {{ tool_calls = [ {{ name = \"remember\", arguments = {{ key = \"k\", value = \"run {i}\", scope = \"global\" }} }}, \
             {{ name = \"remember\", arguments = {{ key = \"own{i}\", value = \"{i}\", scope = \"global\" }} }} ] }},\n  {{ text = \"done {i}\" }},\n"
        );
        for attempt in 1..N {
            replies.push_str(&format!(
                "  {{ tool_calls = [ {{ name = \"remember\", arguments = {{ key = \"k\", value = \"run {i} attempt {attempt}\", scope = \"global\" }} }} ] }},\n  {{ text = \"done {i} again\" }},\n"
            ));
        }
        let spec = write(
            dir.path(),
            &format!("racer{i}.toml"),
            &format!(
                "{HEADER}\n[[providers]]\nname = \"script\"\nkind = \"scripted\"\nreplies = [\n{replies}]\n{}",
                agent("")
            ),
        );
        children.push(
            Command::new(env!("CARGO_BIN_EXE_runtape"))
                .env_remove("RUNTAPE_DB")
                .arg("--db")
                .arg(&db)
                .args(["run", utf8(&spec)])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starts"),
        );
    }
    let mut runs = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("waits");
        assert!(out.status.success(), "{}", text(&out));
        runs.push(run_id(&out));
    }
    let rows = global_memory(&db, "team");
    let k: Vec<&(String, u64, Option<String>, Option<String>)> =
        rows.iter().filter(|r| r.0 == "k").collect();
    // Every run published its own write of `k` exactly once, one version each, no gap.
    assert_eq!(
        k.iter().map(|r| r.1).collect::<Vec<_>>(),
        (1..=N as u64).collect::<Vec<_>>()
    );
    let mut writers: Vec<&str> = k.iter().filter_map(|r| r.3.as_deref()).collect();
    writers.sort_unstable();
    let mut all: Vec<&str> = runs.iter().map(String::as_str).collect();
    all.sort_unstable();
    assert_eq!(writers, all, "no update lost, none applied twice");
    for i in 0..N {
        let own: Vec<_> = rows.iter().filter(|r| r.0 == format!("own{i}")).collect();
        assert_eq!(own.len(), 1, "own{i} published exactly once: {own:?}");
    }
    for run in &runs {
        let out = runtape(&db, &["verify", run]);
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[test]
fn failed_and_cancelled_runs_leave_global_memory_as_it_was() {
    let (dir, db, failing) = temp_spec(
        "failing.toml",
        &format!(
            r#"{HEADER}
[[providers]]
name = "script"
kind = "scripted"
replies = [
  {{ tool_calls = [ {{ name = "remember", arguments = {{ key = "decision", value = "never", scope = "global" }} }} ] }},
  {{ error = {{ class = "provider_auth", message = "bad key" }} }},
]
{}"#,
            agent("")
        ),
    );
    let out = runtape(&db, &["run", utf8(&failing)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        global_memory(&db, "team").is_empty(),
        "a failed run published nothing"
    );

    let waiting = write(dir.path(), "waiting.toml", &waiting_spec());
    let out = runtape(&db, &["run", utf8(&waiting)]);
    let run = run_id(&out);
    let out = runtape(&db, &["cancel", &run, "--reason", "changed my mind"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        global_memory(&db, "team").is_empty(),
        "a cancelled run published nothing"
    );
    let staged = json_lines(&runtape(&db, &["memory", "ls", "--run", &run, "--json"]));
    assert!(
        staged
            .iter()
            .any(|s| s["type"] == "memory_staged" && s["key"] == "decision"),
        "its writes stay visible in its history, unpublished: {staged:?}"
    );
    let out = runtape(&db, &["memory", "ls", "--name", "team"]);
    assert!(text(&out).contains("is empty"), "{}", text(&out));
}
