//! A child run waiting for a person, with the real binary on real SQLite files: its parent
//! stops waiting on it and rests (the command exits like a run waiting for a person, naming
//! the child and how to answer), `ls` shows the parent as `awaiting child` and `log PARENT`
//! says which child waits for what, and `resume PARENT --approve` reaches the child and drives
//! the tree to its end; with two children waiting, it names both.

use crate::support;
use crate::support::spec::{agent, lead, tool};

use std::path::Path;

use crate::support::cli::{temp_db, utf8};
use support::delegation::*;

/// A lead delegating to `deployers` (one call each, in one reply); each deployer calls the
/// `deploy` tool, which needs approval and appends a line to `deploys.log` when it runs.
fn approval_team(dir: &Path, deployers: &[&str]) -> std::path::PathBuf {
    let calls: Vec<String> = deployers
        .iter()
        .enumerate()
        .map(|(i, d)| {
            format!(
                r#"{{ id = "d{i}", name = "delegate_{d}", arguments = {{ task = "Deploy {d}." }} }}"#
            )
        })
        .collect();
    let mut body = format!(
        r#"
goal = "Ship it."

[[providers]]
name = "script"
kind = "scripted"
[providers.by_agent]
lead = [
  {{ tool_calls = [{}] }},
  {{ text = "Shipped." }},
]
"#,
        calls.join(", ")
    );
    for d in deployers {
        body.push_str(&format!(
            "{d} = [\n  {{ tool_calls = [{{ id = \"p1\", name = \"deploy\", arguments = {{ target = \"{d}\" }} }}] }},\n  {{ text = \"Deployed {d}.\" }},\n]\n"
        ));
    }
    let log = dir.join("deploys.log");
    body.push('\n');
    body.push_str(&tool(
        "deploy",
        &format!(r#"["sh", "-c", "cat >> {}; echo deployed"]"#, log.display()),
        "description = \"Deploy\"\nrequires_approval = true",
    ));
    body.push_str(&lead("lead", "script", deployers, ""));
    for d in deployers {
        body.push_str(&agent(d, "script", &["deploy"], ""));
    }
    write(dir, "ship.toml", &body)
}

fn deploys(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("deploys.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn status_of(db: &Path, id: &str) -> serde_json::Value {
    runs(db)
        .into_iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("run {id} is listed"))
}

/// Whether `ls` shows `id` as resting on a child that waits for a person.
fn awaiting_child(db: &Path, id: &str) -> bool {
    ok(db, &["ls"])
        .lines()
        .any(|l| l.starts_with(id) && l.contains("awaiting child"))
}

#[test]
fn a_child_waiting_for_a_person_rests_its_parent_and_resume_reaches_it() {
    let (dir, db) = temp_db();
    let spec = approval_team(dir.path(), &["deployer"]);
    let printed = ok(&db, &["run", utf8(&spec)]);
    let id = root_id(&db, "the lead's run");
    let child = format!("{id}.3.0");
    assert!(
        printed.contains(&format!("waiting for a person in child run {child}"))
            && printed.contains(&format!("runtape resume {id} --approve")),
        "{printed}"
    );
    assert_eq!(deploys(dir.path()), 0, "nothing ran before the approval");
    assert_eq!(status_of(&db, &id)["status"], "paused");
    assert_eq!(status_of(&db, &child)["status"], "awaiting_input");
    assert!(awaiting_child(&db, &id));
    let log = ok(&db, &["log", &id]);
    assert!(
        log.contains(&format!(
            "waits on child {child}, which waits for a person (deploy): runtape resume {id} --approve"
        )),
        "{log}"
    );

    let resumed = ok(&db, &["resume", &id, "--approve"]);
    assert!(resumed.contains("answer: Shipped."), "{resumed}");
    assert_eq!(deploys(dir.path()), 1, "the approved call ran once");
    assert_eq!(status_of(&db, &child)["status"], "completed");
    assert!(!awaiting_child(&db, &id));
    ok(&db, &["verify", &id, "--recursive"]);
}

#[test]
fn two_waiting_children_are_named_and_each_is_answered_in_turn() {
    let (dir, db) = temp_db();
    let spec = approval_team(dir.path(), &["alpha", "beta"]);
    let printed = ok(&db, &["run", utf8(&spec)]);
    let id = root_id(&db, "the lead's run");
    let (a, b) = (format!("{id}.3.0"), format!("{id}.3.1"));
    assert!(
        printed.contains(&format!("child run {a}, {b}")),
        "{printed}"
    );

    // Which child? Resume names both and changes nothing.
    let o = runtape(&db, &["resume", &id, "--approve"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains(&a) && e.contains(&b), "{e}");
    assert_eq!(status_of(&db, &a)["status"], "awaiting_input");

    // One answered on its own; the parent still rests on the other.
    ok(&db, &["resume", &a, "--approve"]);
    assert_eq!(status_of(&db, &a)["status"], "completed");
    assert!(awaiting_child(&db, &id));
    // Now only one waits: the parent's resume reaches it and finishes the tree.
    let resumed = ok(&db, &["resume", &id, "--reject", "not today"]);
    assert!(resumed.contains("answer: Shipped."), "{resumed}");
    assert_eq!(
        deploys(dir.path()),
        1,
        "alpha's deploy ran, beta's was rejected"
    );
    let log = ok(&db, &["log", &b]);
    assert!(log.contains("Reject"), "{log}");
    ok(&db, &["verify", &id, "--recursive"]);
}

/// The serve API answers through the parent as `resume PARENT --approve` does: `POST
/// /api/runs/PARENT/approve` reaches the one child that waits, and the tree runs to its end
/// in the server's process; the approved call runs once.
#[test]
fn the_serve_api_approves_a_waiting_child_through_its_parent() {
    let (dir, db) = temp_db();
    let spec = approval_team(dir.path(), &["deployer"]);
    ok(&db, &["run", utf8(&spec)]);
    let id = root_id(&db, "the lead's run");
    let child = format!("{id}.3.0");
    assert_eq!(status_of(&db, &child)["status"], "awaiting_input");

    let server = support::serve::serve(dir.path(), &db);
    let (status, answer) = server.post(&format!("/api/runs/{id}/approve"), &serde_json::json!({}));
    assert_eq!(status, 202, "{answer}");
    server.wait_run(&id, std::time::Duration::from_secs(60), |r| {
        r["status"] == "completed"
    });
    let (code, stderr) = server.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(deploys(dir.path()), 1, "the approved call ran once");
    assert_eq!(status_of(&db, &child)["status"], "completed");
    ok(&db, &["verify", &id, "--recursive"]);
}
