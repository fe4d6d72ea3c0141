//! Deploys and racing resumers over a delegation tree, with the real binary, real child
//! processes and real signals.
//!
//! - SIGTERM while a parent's two children each run a non-idempotent tool: no new call
//!   starts, both calls in flight finish within the grace period and are committed, every run
//!   of the tree pauses and `runtape` exits 4; `runtape resume PARENT` in a new process
//!   finishes the tree without performing either call again, and the tree verifies.
//! - SIGTERM while the children wait on their models, then two `runtape resume PARENT` and
//!   one `runtape resume CHILD` per child, all at once: one takes the lead and finishes the
//!   tree (waiting for a child another process drives), each non-idempotent call is
//!   performed exactly once, and every loser changes nothing and says so in one line.

use crate::support;
use crate::support::spec::{agent, lead, tool};

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::{temp_db, utf8};
use support::delegation::*;

/// A lead delegating to `alpha` and `beta` in one reply; each calls `charge` once (it marks
/// its start in `started/`, takes `secs`, then appends its idempotency key to `charges.log`)
/// and answers. The children's model answers after `child_model_ms`.
fn charging_team(dir: &Path, secs: f64, child_model_ms: u64) -> std::path::PathBuf {
    let started = dir.join("started");
    std::fs::create_dir_all(&started).expect("mkdir");
    let log = dir.join("charges.log");
    let body = format!(
        r#"
goal = "Charge both accounts."

[[providers]]
name = "script"
kind = "scripted"
replies = [
  {{ tool_calls = [
      {{ id = "d0", name = "delegate_alpha", arguments = {{ task = "Charge alpha." }} }},
      {{ id = "d1", name = "delegate_beta", arguments = {{ task = "Charge beta." }} }},
  ] }},
  {{ text = "Both charged." }},
]

[[providers]]
name = "slow"
kind = "scripted"
latency_ms = {child_model_ms}
[providers.by_agent]
alpha = [
  {{ tool_calls = [{{ id = "c", name = "charge", arguments = {{ account = "alpha" }} }}] }},
  {{ text = "Charged alpha." }},
]
beta = [
  {{ tool_calls = [{{ id = "c", name = "charge", arguments = {{ account = "beta" }} }}] }},
  {{ text = "Charged beta." }},
]

{charge}{lead}{alpha}{beta}"#,
        charge = tool(
            "charge",
            &format!(
                r#"["sh", "-c", "touch {}/$RUNTAPE_IDEMPOTENCY_KEY; sleep {secs}; echo $RUNTAPE_IDEMPOTENCY_KEY >> {}; echo charged"]"#,
                started.display(),
                log.display()
            ),
            "description = \"Charge an account (not idempotent)\"",
        ),
        lead = lead("lead", "script", &["alpha", "beta"], ""),
        alpha = agent("alpha", "slow", &["charge"], ""),
        beta = agent("beta", "slow", &["charge"], ""),
    );
    write(dir, "charge.toml", &body)
}

/// A scratch database and [`charging_team`] (`secs`, `child_model_ms`) driven by `runtape run`
/// in the background: the directory, the database and the driving process.
fn charging(secs: f64, child_model_ms: u64) -> (tempfile::TempDir, std::path::PathBuf, Child) {
    let (dir, db) = temp_db();
    let spec = charging_team(dir.path(), secs, child_model_ms);
    let driver = spawn(&db, &["run", utf8(&spec)]);
    (dir, db, driver)
}

/// `runtape ARGS` on `db`, started with its output piped.
fn spawn(db: &Path, args: &[&str]) -> Child {
    on(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts runtape")
}

/// Sends SIGTERM to `driver` (a deploy stopping it) and waits for it to end.
fn sigterm(driver: Child) -> Output {
    let sent = crate::support::cli::try_signal(driver.id(), "TERM");
    assert!(sent.is_ok(), "SIGTERM reaches the driver: {sent:?}");
    driver.wait_with_output().expect("runtape ends")
}

/// The idempotency keys the charges wrote, sorted.
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
    let (dir, db, driver) = charging(0.6, 0);

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
    let out = sigterm(driver);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "paused: {stderr}");

    // Both calls in flight finished and were committed; nothing else ran.
    let done = charges(dir.path());
    assert_eq!(
        done.len(),
        2,
        "both charges finished within the grace period: {done:?}"
    );
    let (parent, id) = root_and_id(&db, "the lead's run");
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

#[test]
fn resumers_of_the_lead_and_of_each_child_racing_perform_each_call_once() {
    let (dir, db, driver) = charging(0.2, 700);
    // Both children exist (their model calls are in flight) before the signal.
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        if let Some(r) = root(&db) {
            let id = r["id"].as_str().expect("id").to_owned();
            if children_of(&db, &id).len() == 2 {
                break id;
            }
        }
        assert!(Instant::now() < deadline, "the children never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = sigterm(driver);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        charges(dir.path()).is_empty(),
        "no charge started after the signal"
    );

    // Two resumers of the lead and one of each child, at once.
    let targets = [
        id.clone(),
        id.clone(),
        format!("{id}.3.0"),
        format!("{id}.3.1"),
    ];
    let resumers: Vec<_> = targets
        .iter()
        .map(|run| spawn(&db, &["resume", run]))
        .collect();
    let mut lead_won = 0;
    for (run, r) in targets.iter().zip(resumers) {
        let o = r.wait_with_output().expect("a resumer ends");
        let stderr = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => lead_won += usize::from(run == &id),
            code => {
                // A loser changes nothing and says so in one line (one that came late finds
                // its run ended).
                assert_eq!(code, Some(2), "resume {run}: {stderr}");
                assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
                assert!(
                    stderr.contains("being driven by another process")
                        || stderr.contains("has already ended"),
                    "resume {run}: {stderr}"
                );
            }
        }
    }
    // The lead's driver waits for a child another process drives, then goes on.
    assert_eq!(lead_won, 1, "one resumer drove the lead");
    let done = charges(dir.path());
    assert_eq!(done.len(), 2, "each charge once: {done:?}");
    assert_ne!(done[0], done[1]);
    assert_eq!(root(&db).expect("the lead")["status"], "completed");
    for child in children_of(&db, &id) {
        assert_eq!(child["status"], "completed", "{child}");
    }
    ok(&db, &["verify", &id, "--recursive"]);
}
