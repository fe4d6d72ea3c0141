//! SIGTERM (a deploy) while a parent's two children each run a non-idempotent tool, with the
//! real binary, real child processes and real signals: no new call starts, both calls in
//! flight finish within the grace period and are committed, every run of the tree pauses and
//! `runtape` exits 4. `runtape resume PARENT` in a new process finishes the tree without
//! performing either call again, and the tree verifies.

mod delegation_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use delegation_support::*;

/// A lead delegating to `alpha` and `beta` in one reply; each calls `charge` once (it marks
/// its start in `started/`, takes `secs`, then appends its idempotency key to `charges.log`)
/// and answers.
fn charging_team(dir: &Path, secs: f64) -> std::path::PathBuf {
    let started = dir.join("started");
    std::fs::create_dir_all(&started).expect("mkdir");
    let log = dir.join("charges.log");
    let body = format!(
        r#"
goal = "Charge both accounts."

[[providers]]
name = "script"
kind = "scripted"
[providers.by_agent]
lead = [
  {{ tool_calls = [
      {{ id = "d0", name = "delegate_alpha", arguments = {{ task = "Charge alpha." }} }},
      {{ id = "d1", name = "delegate_beta", arguments = {{ task = "Charge beta." }} }},
  ] }},
  {{ text = "Both charged." }},
]
alpha = [
  {{ tool_calls = [{{ id = "c", name = "charge", arguments = {{ account = "alpha" }} }}] }},
  {{ text = "Charged alpha." }},
]
beta = [
  {{ tool_calls = [{{ id = "c", name = "charge", arguments = {{ account = "beta" }} }}] }},
  {{ text = "Charged beta." }},
]

[[tools]]
name = "charge"
description = "Charge an account (not idempotent)"
command = ["sh", "-c", "touch {started}/$RUNTAPE_IDEMPOTENCY_KEY; sleep {secs}; echo $RUNTAPE_IDEMPOTENCY_KEY >> {log}; echo charged"]

[[agents]]
id = "lead"
provider = "script"
tools = []
delegates = ["alpha", "beta"]

[[agents]]
id = "alpha"
provider = "script"
tools = ["charge"]

[[agents]]
id = "beta"
provider = "script"
tools = ["charge"]
"#,
        started = started.display(),
        log = log.display(),
    );
    spec(dir, "charge.toml", &body)
}

fn charges(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(dir.join("charges.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn sigterm_with_two_children_mid_call_commits_both_pauses_the_tree_and_resume_finishes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let spec = charging_team(dir.path(), 0.6);
    let driver = runtape(&db)
        .args(["run", spec.to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts runtape run");

    // Both charges have started (their child runs are in flight) before the signal.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(dir.path().join("started"))
        .map(|d| d.count())
        .unwrap_or(0)
        < 2
    {
        assert!(Instant::now() < deadline, "both charges never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = Command::new("kill")
        .args(["-TERM", &driver.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let out = driver.wait_with_output().expect("runtape ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "paused: {stderr}");

    // Both calls in flight finished and were committed; nothing else ran.
    let done = charges(dir.path());
    assert_eq!(
        done.len(),
        2,
        "both charges finished within the grace period: {done:?}"
    );
    let parent = root(&db).expect("the lead's run");
    let id = parent["id"].as_str().expect("id").to_owned();
    assert_eq!(parent["status"], "paused", "{parent}");
    let children = children_of(&db, &id);
    assert_eq!(children.len(), 2, "{children:?}");
    for child in &children {
        assert_eq!(child["status"], "paused", "{child}");
        let log = ok(&db, &["log", child["id"].as_str().expect("id")]);
        assert!(
            log.contains("tool_returned"),
            "the charge's result was committed before the pause: {log}"
        );
    }

    let resumed = ok(&db, &["resume", &id]);
    assert!(resumed.contains("answer: Both charged."), "{resumed}");
    assert_eq!(charges(dir.path()), done, "no charge was performed again");
    for child in children_of(&db, &id) {
        assert_eq!(child["status"], "completed", "{child}");
    }
    ok(&db, &["verify", &id, "--recursive"]);
}
