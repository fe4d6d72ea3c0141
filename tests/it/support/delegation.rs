//! Shared by the delegation tests: the real binary on a real SQLite file, and team specs
//! with scripted models.
#![allow(dead_code, unreachable_pub)]

use crate::support::spec::{agent, lead};
use std::path::Path;
use std::process::{Child, Stdio};

use runtape::machine::{AgentSpec, ModelReply, RunSpec, Spec, ToolCallRequest};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use serde_json::{Value, json};

pub use super::cli::{ok, on, runtape, utf8, write};

pub mod signed;

/// Every run in `db`, as `ls --flat --json` prints them.
pub fn runs(db: &Path) -> Vec<Value> {
    if !db.exists() {
        return Vec::new();
    }
    let o = runtape(db, &["ls", "--flat", "--json"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The run in `db` no other run started.
pub fn root(db: &Path) -> Option<Value> {
    runs(db).into_iter().find(|r| r["delegated_by"].is_null())
}

/// The id of the run no other run started (the tree's root); panics, naming `what`, when
/// there is none.
pub fn root_id(db: &Path, what: &str) -> String {
    root(db).expect(what)["id"].as_str().expect("id").to_owned()
}

/// The root run (as [`root`]) and its id; panics, naming `what`, when there is none.
pub fn root_and_id(db: &Path, what: &str) -> (Value, String) {
    let root = root(db).expect(what);
    let id = root["id"].as_str().expect("id").to_owned();
    (root, id)
}

/// The runs `parent` started.
pub fn children_of(db: &Path, parent: &str) -> Vec<Value> {
    runs(db)
        .into_iter()
        .filter(|r| r["delegated_by"]["run"] == parent)
        .collect()
}

/// The final state hash `verify --json` reports for `run`.
pub fn final_hash(db: &Path, run: &str) -> String {
    let v: Value = serde_json::from_str(&ok(db, &["verify", run, "--json"])).expect("json");
    v["final_state_hash"].as_str().expect("a hash").to_owned()
}

/// Starts `runtape run SPEC` on `db` in the background (its output discarded) and returns the
/// process and the root run's id once the root has started `children` child runs. Fails the
/// test if the run ends first.
pub fn drive_until_children(db: &Path, spec: &Path, children: usize) -> (Child, String) {
    let mut driver = on(db)
        .args(["run", utf8(spec)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawns");
    loop {
        if let Some(p) = root(db) {
            let id = p["id"].as_str().expect("id").to_owned();
            if children_of(db, &id).len() == children {
                return (driver, id);
            }
        }
        if let Some(status) = driver.try_wait().expect("polls") {
            panic!("the run ended before its children started: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Every run of `db`'s tree as `(path below the root, final state hash)`, sorted.
pub fn tree_hashes(db: &Path) -> Vec<(String, String)> {
    let root = root(db).expect("a root")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut out: Vec<(String, String)> = runs(db)
        .iter()
        .map(|r| {
            let id = r["id"].as_str().expect("id");
            let path = id.strip_prefix(&root).unwrap_or(id).trim_start_matches('.');
            (path.to_owned(), final_hash(db, id))
        })
        .collect();
    out.sort();
    out
}

/// [`drive_until_children`], then `runtape pause` of the root: the root's id and how the
/// driving process exited.
pub fn paused_with_children(
    db: &Path,
    spec: &Path,
    children: usize,
) -> (String, std::process::ExitStatus) {
    let (mut driver, id) = drive_until_children(db, spec, children);
    ok(db, &["pause", &id]);
    let status = driver.wait().expect("the driving process exits");
    (id, status)
}

/// A scratch database where [`parallel_team`] was paused with its two children started: the
/// directory, the database, the lead's id and how its driver exited. Each child turn takes 2 s,
/// so the pause (a new process) reaches the children while they still work, even on a loaded
/// machine: at 400 ms a child could finish first (seen at load 10).
pub fn paused_team() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    String,
    std::process::ExitStatus,
) {
    let (dir, db) = crate::support::cli::temp_db();
    let spec = crate::support::cli::write(dir.path(), "team.toml", &parallel_team(2_000));
    let (id, status) = paused_with_children(&db, &spec, 2);
    (dir, db, id, status)
}

/// Each child section of cassette `file` as `(path, how many KEY it holds)` (KEY: `entries`,
/// `retrievals`, ...).
pub fn sections<'a>(file: &'a Value, key: &str) -> Vec<(&'a str, usize)> {
    file["children"]
        .as_array()
        .expect("children")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or(""),
                c[key].as_array().map_or(0, Vec::len),
            )
        })
        .collect()
}

/// A lead that delegates to `researcher` and `coder` in one turn (each scripted reply of a
/// specialist takes `latency_ms`), then answers with what they said.
pub fn parallel_team(latency_ms: u64) -> String {
    format!(
        r#"
goal = "Plan the migration."

[run.budget]
max_turns = 20

[[providers]]
name = "script"
kind = "scripted"
[providers.by_agent]
lead = [
  {{ tool_calls = [
      {{ id = "d1", name = "delegate_researcher", arguments = {{ task = "List the tables." }} }},
      {{ id = "d2", name = "delegate_coder", arguments = {{ task = "Write the script." }} }},
  ], usage = {{ input = 100, output = 10 }} }},
  {{ text = "PLAN: tables listed, script written.", usage = {{ input = 200, output = 20 }} }},
]
researcher = [
  {{ tool_calls = [{{ id = "n1", name = "note", arguments = {{ text = "tables" }} }}], usage = {{ input = 30, output = 5 }}, latency_ms = {latency_ms} }},
  {{ text = "TABLES: users, orders.", usage = {{ input = 40, output = 6 }}, latency_ms = {latency_ms} }},
]
coder = [
  {{ tool_calls = [{{ id = "n1", name = "note", arguments = {{ text = "script" }} }}], usage = {{ input = 31, output = 5 }}, latency_ms = {latency_ms} }},
  {{ text = "SCRIPT: migrate.sql", usage = {{ input = 41, output = 7 }}, latency_ms = {latency_ms} }},
]

[[tools]]
name = "note"
description = "Echo a note"
command = ["sh", "-c", "cat"]
schema = {{ type = "object", properties = {{ text = {{ type = "string" }} }}, required = ["text"] }}
read_only = true
idempotent = true

{}{}{}"#,
        lead(
            "lead",
            "script",
            &["researcher", "coder"],
            "[agents.delegation]\nbudget = { share = 0.5 }",
        ),
        agent("researcher", "script", &["note"], ""),
        agent("coder", "script", &["note"], ""),
    )
}

/// A spec (no tools) whose `lead` delegates to agents `a` and `b`.
pub fn lead_of_two() -> RunSpec {
    lead_of_two_at(Spec::default().semantics)
}

/// [`lead_of_two`] at semantics revision `semantics`.
pub fn lead_of_two_at(semantics: u32) -> RunSpec {
    let mut lead = AgentSpec::new("lead", "script", "m");
    lead.tools = Some(Vec::new());
    lead.delegates = vec!["a".into(), "b".into()];
    let mut a = AgentSpec::new("a", "script", "m");
    a.tools = Some(Vec::new());
    let mut b = AgentSpec::new("b", "script", "m");
    b.tools = Some(Vec::new());
    RunSpec::build(Spec {
        agents: vec![lead, a, b],
        semantics,
        ..Spec::default()
    })
    .expect("valid")
}

/// The model of [`lead_of_two`]: the lead delegates to `a` and `b` at once, then says "both
/// done"; each child answers "{agent} did it".
pub fn lead_of_two_model() -> ScriptedProvider {
    ScriptedProvider::new("script", |req| {
        let reply = match (req.agent.as_str(), req.turn()) {
            ("lead", 0) => ModelReply::tools(vec![
                ToolCallRequest::new("d1", "delegate_a", json!({"task": "one"})),
                ToolCallRequest::new("d2", "delegate_b", json!({"task": "two"})),
            ]),
            ("lead", _) => ModelReply::text("both done"),
            (agent, _) => ModelReply::text(format!("{agent} did it")),
        };
        ScriptOutcome::reply(reply)
    })
}
