//! Cassettes of a delegating run, with the real binary on real SQLite files: the prompts an
//! agent with delegates and handoffs was sent carry its `delegate_…` and `transfer_to_…`
//! tools, so `cassette export` writes them and `replay` of the cassette, in a database that
//! never saw the run, sends the same requests. A whole tree records and replays (cassette
//! version 4): each child's model calls in a section keyed by its place in the tree, served
//! to the child that asks from its own section — two children side by side replay to the
//! same states every time — and a child whose request drifted fails the replay naming it.

use crate::support;
use crate::support::cli::replay_fresh;

use std::path::{Path, PathBuf};

use crate::support::cli::{example, temp_db, utf8};
use crate::support::durable::run_to_rest;
use serde_json::Value;
use support::delegation::*;

/// A lead offered a delegate and a handoff that hands over at once; the reviewer answers.
const HANDOFF_TEAM: &str = r#"
goal = "Review the migration."

[[providers]]
name = "script"
kind = "scripted"
[providers.by_agent]
lead = [
  { tool_calls = [{ id = "t1", name = "transfer_to_reviewer", arguments = { note = "Over to you." } }], usage = { input = 50, output = 5 } },
]
reviewer = [
  { text = "APPROVED: the migration is sound.", usage = { input = 60, output = 6 } },
]

[[agents]]
id = "lead"
provider = "script"
tools = []
delegates = ["researcher"]
handoffs = ["reviewer"]

[[agents]]
id = "researcher"
provider = "script"
tools = []

[[agents]]
id = "reviewer"
provider = "script"
tools = []
"#;

/// `examples/team.toml` as it is, and with `from` replaced by `to`.
fn team_with(from: &str, to: &str) -> (String, String) {
    let text = std::fs::read_to_string(example("team.toml")).expect("reads");
    let changed = text.replace(from, to);
    (text, changed)
}

#[test]
fn a_delegating_runs_cassette_records_its_offered_tools_and_replays_in_a_fresh_database() {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), "team.toml", HANDOFF_TEAM);
    let spec = utf8(&spec);
    let printed = ok(&db, &["run", "--stepped-clock", spec]);
    assert!(printed.contains("answer: APPROVED"), "{printed}");
    let id = root_id(&db, "the run");

    let cassette = dir.path().join("team.cassette.json");
    let cassette = utf8(&cassette);
    let wrote = ok(&db, &["cassette", "export", &id, "-o", cassette]);
    assert!(wrote.contains("wrote 2 model turns"), "{wrote}");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(cassette).expect("reads")).expect("json");
    let lead_tools: Vec<&str> = file["entries"][0]["prompt"]["tools"]
        .as_array()
        .expect("the lead's prompt is stored with its tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(lead_tools, ["delegate_researcher", "transfer_to_reviewer"]);

    let (fresh, replayed) = replay_fresh(dir.path(), spec, cassette);
    assert!(
        replayed.contains("replayed 2 of 2 recorded model turns"),
        "{replayed}"
    );
    assert!(replayed.contains("answer: APPROVED"), "{replayed}");
    let again = root_id(&fresh, "the replayed run");
    assert_eq!(final_hash(&fresh, &again), final_hash(&db, &id));
}

/// The team example run with a stepped clock in a new directory and exported: `(dir, db,
/// cassette path)`.
fn recorded_team() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, db) = temp_db();
    let example = example("team.toml");
    ok(&db, &["run", "--stepped-clock", utf8(&example)]);
    let id = root_id(&db, "the run");
    let cassette = dir.path().join("team.cassette.json");
    let wrote = ok(&db, &["cassette", "export", &id, "-o", utf8(&cassette)]);
    assert!(
        wrote.contains("wrote 5 model turns") && wrote.contains("2 of them by 2 child runs"),
        "{wrote}"
    );
    (dir, db, cassette)
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("reads")).expect("json")
}

#[test]
fn a_tree_records_a_section_per_child_and_replays_whole_in_a_fresh_database() {
    let (dir, db, cassette) = recorded_team();
    let file = read(&cassette);
    assert_eq!(file["version"], 4);
    assert_eq!(
        file["entries"].as_array().map(Vec::len),
        Some(3),
        "the lead's own"
    );
    let sections = sections(&file, "entries");
    assert_eq!(sections, [("3.0", 1), ("3.1", 1)]);
    assert_eq!(
        file["children"][0]["entries"][0]["prompt"]["messages"][1]["content"],
        "Find what in the nightly export takes the time.",
        "the researcher's own request"
    );

    let example = example("team.toml");
    let expected = tree_hashes(&db);
    assert_eq!(expected.len(), 3);
    // Twice, each in a database that never saw the run: the children run side by side and
    // each is served from its own section, so every run reaches the recorded states.
    for n in 0..2 {
        let fresh = dir.path().join(format!("fresh{n}.db"));
        let replayed = ok(
            &fresh,
            &[
                "replay",
                "--stepped-clock",
                utf8(&example),
                "--cassette",
                utf8(&cassette),
            ],
        );
        assert!(
            replayed.contains("replayed 5 of 5 recorded model turns")
                && replayed.contains("2 child runs from their own sections"),
            "{replayed}"
        );
        assert_eq!(tree_hashes(&fresh), expected, "replay {n}");
    }
}

#[test]
fn a_drifted_child_request_fails_the_replay_naming_the_child() {
    let (dir, _, cassette) = recorded_team();
    let (text, drifted) = team_with(
        "system_prompt = \"You write code.\"",
        "system_prompt = \"You write careful code.\"",
    );
    assert_ne!(drifted, text);
    let spec = write(dir.path(), "team.toml", &drifted);
    let fresh = dir.path().join("fresh.db");
    let o = runtape(
        &fresh,
        &["replay", utf8(&spec), "--cassette", utf8(&cassette)],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{stdout}{stderr}");
    let root = root_id(&fresh, "the replayed run");
    let line = stderr
        .lines()
        .find(|l| l.contains("replay stopped"))
        .unwrap_or_else(|| panic!("one line says why: {stderr}"));
    assert!(
        line.contains(&format!("child 3.1 (run {root}.3.1)"))
            && line.contains("turn 0 sent a different request"),
        "{line}"
    );
    // The diff printed below it shows what changed in the coder's request.
    assert!(stdout.contains("You write careful code."), "{stdout}");
}

#[test]
fn an_edited_moved_or_downgraded_child_section_is_refused() {
    let (dir, db, cassette) = recorded_team();
    let example = example("team.toml");
    let replay = |file: &Value, name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string_pretty(file).expect("encodes"))
            .expect("writes");
        let o = runtape(&db, &["replay", utf8(&example), "--cassette", utf8(&path)]);
        assert_eq!(o.status.code(), Some(2), "refused before running");
        String::from_utf8_lossy(&o.stderr).trim().to_owned()
    };
    let original = read(&cassette);

    let mut edited = original.clone();
    edited["children"][0]["entries"][0]["response"]["reply"]["text"] = "FINDINGS: none.".into();
    let e = replay(&edited, "edited.json");
    assert!(e.contains("child 3.0: cassette entry 0 was edited"), "{e}");

    let mut moved = original.clone();
    let a = moved["children"][0]["entries"].take();
    moved["children"][0]["entries"] = moved["children"][1]["entries"].take();
    moved["children"][1]["entries"] = a;
    let e = replay(&moved, "moved.json");
    assert!(
        e.contains("child 3.0: cassette entry 0 does not belong to this cassette"),
        "{e}"
    );

    let mut lowered = original.clone();
    lowered["version"] = 3.into();
    let e = replay(&lowered, "lowered.json");
    assert!(e.contains("`children`"), "{e}");
}

/// The recorder wrapping a live provider records a whole tree as it runs: each child's calls
/// go to the child's section, and the cassette replays the tree in an engine that never saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_records_children_in_their_sections_as_they_run() {
    use std::sync::Arc;

    use runtape::cassette::{CassetteProvider, RecordOptions, RecordingProvider, ReplayOptions};
    use runtape::exec::Engine;

    let spec = lead_of_two();
    let live = lead_of_two_model();
    let recorder = Arc::new(
        RecordingProvider::new(Arc::new(live), RecordOptions::default()).expect("records"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&dir.path().join("live.db")).expect("opens");
    engine.register_provider("script", recorder.clone());
    let end = run_to_rest(&engine, spec.clone(), "do both").await;
    let cassette = recorder.finish("2025-01-31T12:00:00Z").expect("a cassette");
    assert_eq!(cassette.entries().len(), 2, "the lead's two turns");
    let paths: Vec<&str> = cassette
        .children()
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(paths, ["3.0", "3.1"], "the reply at step 3 started both");
    assert_eq!(cassette.version(), 4);

    let replay =
        Arc::new(CassetteProvider::new(cassette, ReplayOptions::default()).expect("replays"));
    let fresh = Engine::open(&dir.path().join("fresh.db")).expect("opens");
    fresh.register_provider("script", replay.clone());
    let again = run_to_rest(&fresh, spec, "do both").await;
    assert_eq!(replay.first_error(), None);
    assert!(replay.is_finished());
    assert_eq!(again.state.outcome(), end.state.outcome());
}

#[test]
fn cassette_diff_compares_each_childs_section() {
    let (dir, _, before) = recorded_team();
    let (text, changed) = team_with(
        "FIX: wrap the rows in one transaction",
        "FIX: wrap the rows in two transactions",
    );
    assert_ne!(changed, text);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let db = other.join("runs.db");
    let spec = write(&other, "team.toml", &changed);
    ok(&db, &["run", utf8(&spec)]);
    let id = root_id(&db, "the run");
    let after = other.join("after.cassette.json");
    ok(&db, &["cassette", "export", &id, "-o", utf8(&after)]);
    let o = runtape(&db, &["cassette", "diff", utf8(&before), utf8(&after)]);
    let printed = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{printed}");
    // The coder's answer changed: its section, and the lead's turns that read it.
    assert!(
        printed.contains("child 3.1: 1 differing turns") && !printed.contains("child 3.0"),
        "{printed}"
    );
    let same = runtape(&db, &["cassette", "diff", utf8(&before), utf8(&before)]);
    assert_eq!(same.status.code(), Some(0));
}
