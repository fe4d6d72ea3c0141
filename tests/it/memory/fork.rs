//! Time travel over memory (revision 5): `show RUN@SEQ` has the memory the agents could see at
//! that step, and a fork is a copy-on-write view of it as of the fork point — the parent's
//! later writes (its global publish included) are not visible to the fork, and the fork's
//! writes (a fork edit, its own publish) do not touch the parent.

use crate::support::spec::agent;
use std::path::Path;

use serde_json::Value;

use crate::support;
use support::cli::{first_id, ok, runtape, temp_db, utf8, write};

fn state_at(db: &Path, at: &str) -> Value {
    let shown: Value = serde_json::from_str(&ok(db, &["show", at, "--json"])).expect("show --json");
    shown["state"]["run"]["memory"].clone()
}

/// The planner notes a city; the writer reads it and the global memory, writes a global note,
/// and (after a refusal) writes it again.
const SCRIPT: &str = r#"goal = "Plan the offsite."

[memory]
global = "team"

[[providers]]
name = "script"
kind = "scripted"
[providers.by_agent]
planner = [
  { tool_calls = [ { name = "remember", arguments = { key = "city", value = "Lisbon", scope = "shared" } } ] },
  { text = "PLAN ready." },
]
writer = [
  { tool_calls = [
      { name = "recall", arguments = { key = "city", scope = "shared" } },
      { name = "recall", arguments = { scope = "global" } },
      { name = "remember", arguments = { key = "offsite", value = "planned", scope = "global" } },
  ] },
  { text = "Announced." },
  { tool_calls = [ { name = "remember", arguments = { key = "offsite", value = "planned again", scope = "global" } } ] },
  { text = "Announced again." },
]
"#;

/// [`SCRIPT`] with its two agents, the planner handing over to the writer.
fn spec() -> String {
    let plan = "[plan]\nentry = \"planner\"\nexits = [\"writer\"]\n[[plan.edges]]\nfrom = \"planner\"\nto = \"writer\"\nwhen = \"always\"\n";
    [
        SCRIPT,
        &agent("planner", "script", &[], "system_prompt = \"You plan.\""),
        &agent("writer", "script", &[], "system_prompt = \"You write.\""),
        plan,
    ]
    .concat()
}

/// A scratch database holding one finished run of [`spec`]: the directory, the database and the
/// run's id.
fn parent_run() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), "offsite.toml", &spec());
    let parent = first_id(&ok(&db, &["run", utf8(&spec)]));
    (dir, db, parent)
}

#[test]
fn a_fork_sees_memory_as_of_its_fork_point_and_neither_run_sees_the_others_writes() {
    let (_dir, db, parent) = parent_run();
    // Step 2 loaded the (empty) global memory, step 4 took the planner's note; the parent then
    // published `offsite`.
    assert_eq!(state_at(&db, &format!("{parent}@3"))["shared"], Value::Null);
    assert_eq!(
        state_at(&db, &format!("{parent}@4"))["shared"]["city"],
        "Lisbon"
    );
    let end = state_at(&db, &parent);
    assert_eq!(end["global"]["read"]["offsite"]["version"], 1);

    // A fork after the planner, with the city changed: the writer sees the fork's city and
    // none of the parent's later global write.
    let out = ok(
        &db,
        &[
            "fork",
            &format!("{parent}@6"),
            "--edit",
            "memory:shared:city=Porto",
        ],
    );
    let fork = first_id(&out);
    assert_eq!(
        state_at(&db, &format!("{fork}@7"))["shared"]["city"],
        "Porto"
    );
    let log = ok(&db, &["show", &format!("{fork}@11"), "--json"]);
    let shown: Value = serde_json::from_str(&log).expect("json");
    let results: Vec<String> = shown["request"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        results.iter().any(|r| r.contains("\"value\":\"Porto\"")),
        "the fork's edit is what its writer recalls: {results:?}"
    );
    assert!(
        results
            .iter()
            .any(|r| r == r#"{"entries":{},"scope":"global"}"#),
        "the parent's later publish is not in the fork's view: {results:?}"
    );
    // The fork's own publish was refused over the parent's (first publisher wins), its
    // writer wrote again, and it published on top; the parent's history is untouched.
    let fork_end = state_at(&db, &fork);
    assert_eq!(fork_end["shared"]["city"], "Porto");
    assert_eq!(fork_end["global"]["read"]["offsite"]["version"], 2);
    assert_eq!(
        state_at(&db, &parent),
        end,
        "the parent's memory is its own"
    );
    assert_eq!(
        state_at(&db, &format!("{parent}@7"))["shared"]["city"],
        "Lisbon"
    );
    let history = ok(
        &db,
        &["memory", "show", "offsite", "--name", "team", "--history"],
    );
    assert!(history.contains(&format!("v1 (run {parent}@")), "{history}");
    assert!(history.contains(&format!("v2 (run {fork}@")), "{history}");
    for run in [&parent, &fork] {
        ok(&db, &["verify", run]);
    }
    // An edit that does not fit is refused, and no fork is made.
    let out = runtape(
        &db,
        &[
            "fork",
            &format!("{parent}@6"),
            "--edit",
            "memory:elsewhere:k=v",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let listed = ok(&db, &["ls", "--json"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
}

/// The recall results (tool messages) the request at `at` carried.
fn recalled(db: &Path, at: &str) -> Vec<String> {
    let shown: Value = serde_json::from_str(&ok(db, &["show", at, "--json"])).expect("show --json");
    shown["request"]["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["content"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_fork_taken_before_the_load_sees_global_memory_as_of_its_fork_point() {
    let (_dir, db, parent) = parent_run();
    assert_eq!(
        state_at(&db, &parent)["global"]["read"]["offsite"]["version"],
        1,
        "the parent published `offsite`"
    );

    // Forked at step 1, before the parent loaded global memory, after the parent published:
    // the fork takes the view the parent loaded at step 2, not the memory as it is now.
    let fork = first_id(&ok(&db, &["fork", &format!("{parent}@1")]));
    let log = ok(&db, &["log", &fork]);
    assert!(
        log.contains(&format!(
            "loaded: 0 keys (as of the fork point: run {parent}@2's view)"
        )),
        "{log}"
    );
    assert_eq!(
        state_at(&db, &format!("{fork}@2"))["global"]["read"],
        Value::Null
    );
    let steps = ok(&db, &["log", &fork, "--json"]).lines().count();
    let results: Vec<String> = (1..=steps)
        .flat_map(|seq| recalled(&db, &format!("{fork}@{seq}")))
        .filter(|r| r.contains("\"scope\":\"global\""))
        .collect();
    assert_eq!(
        results.first().map(String::as_str),
        Some(r#"{"entries":{},"scope":"global"}"#),
        "the writer's recall of global memory does not see the parent's publish"
    );
    // Its own write was based on that view, so its publish was refused over the parent's and
    // its writer wrote again: nothing of the parent's was overwritten unseen.
    let end = state_at(&db, &fork);
    assert_eq!(end["global"]["read"]["offsite"]["version"], 2);
    assert_eq!(end["global"]["read"]["offsite"]["value"], "planned again");

    // A fork of the fork at step 1 takes the same view, through the fork's copy.
    let again = first_id(&ok(&db, &["fork", &format!("{fork}@1")]));
    let log = ok(&db, &["log", &again]);
    assert!(
        log.contains(&format!(
            "loaded: 0 keys (as of the fork point: run {fork}@2's view)"
        )),
        "{log}"
    );
    // verify checks each copied view against the load it names.
    for run in [&parent, &fork, &again] {
        let out = ok(&db, &["verify", run]);
        assert!(out.starts_with("OK"), "{out}");
    }
}
