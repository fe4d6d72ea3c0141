//! Cassettes of a delegating run, with the real binary on real SQLite files: the prompts an
//! agent with delegates and handoffs was sent carry its `delegate_…` and `transfer_to_…`
//! tools, so `cassette export` writes them and `replay` of the cassette, in a database that
//! never saw the run, sends the same requests.

mod delegation_support;

use delegation_support::*;
use serde_json::Value;

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

#[test]
fn a_delegating_runs_cassette_records_its_offered_tools_and_replays_in_a_fresh_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let spec = spec(dir.path(), "team.toml", HANDOFF_TEAM);
    let spec = spec.to_str().expect("utf-8");
    let printed = ok(&db, &["run", "--stepped-clock", spec]);
    assert!(printed.contains("answer: APPROVED"), "{printed}");
    let id = root(&db).expect("the run")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let cassette = dir.path().join("team.cassette.json");
    let cassette = cassette.to_str().expect("utf-8");
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

    let fresh = dir.path().join("fresh.db");
    let replayed = ok(
        &fresh,
        &["replay", "--stepped-clock", spec, "--cassette", cassette],
    );
    assert!(
        replayed.contains("replayed 2 of 2 recorded model turns"),
        "{replayed}"
    );
    assert!(replayed.contains("answer: APPROVED"), "{replayed}");
    let again = root(&fresh).expect("the replayed run")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(final_hash(&fresh, &again), final_hash(&db, &id));
}
