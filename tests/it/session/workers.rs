//! Session runs queued for workers on PostgreSQL: `runtape run SPEC GOAL --session S --detach`
//! creates the session's next run and queues it; two `runtape worker` processes take the runs
//! up. Each run after the first begins with the conversation the one before it ended with (its
//! first step is `session_start`, naming the previous run), places are 1, 2, 3, and every run
//! verifies. Three processes open the fresh database at once (the first `run` and two
//! workers): its schema is created once.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::cli::utf8;
use serde_json::Value;
use support::session::*;

/// `ls --json` line of `run`.
fn listed(db: &Path, run: &str) -> Value {
    ok(db, &["ls", "--flat", "--json"])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .find(|l| l["id"] == run)
        .unwrap_or_else(|| panic!("run {run} is listed"))
}

fn wait_completed(db: &Path, run: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = listed(db, run);
        if line["status"] == "completed" {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = (0..2)
                .map(|n| {
                    std::fs::read_to_string(dir.join(format!("worker{n}.log"))).unwrap_or_default()
                })
                .collect();
            panic!(
                "run {run} did not complete: {line}\n{}",
                logs.join("\n---\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn session_runs_queued_for_workers_begin_with_the_previous_runs_conversation() {
    let server = support::pg::PgServer::start();
    let url = server.fresh_db();
    let db = Path::new(&url);
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(
        dir.path(),
        "chat.toml",
        &chat_spec(
            4,
            &[
                "Nice to meet you, Ada.",
                "Tea, noted.",
                "You are Ada; you like tea.",
            ],
            "",
        ),
    );
    let spec = utf8(&spec);
    let _workers = support::pg::Reaper(vec![
        support::pg::worker(&url, dir.path(), "worker0.log", &[], &[]),
        support::pg::worker(&url, dir.path(), "worker1.log", &[], &[]),
    ]);

    let mut runs: Vec<String> = Vec::new();
    for goal in [
        "My name is Ada.",
        "I like tea.",
        "What do you know about me?",
    ] {
        let queued = ok(db, &["run", spec, goal, "--session", "chat", "--detach"]);
        let run = queued.lines().next().expect("the id").trim().to_owned();
        wait_completed(db, &run, dir.path());
        runs.push(run);
    }

    for (i, run) in runs.iter().enumerate() {
        let line = listed(db, run);
        assert_eq!(line["session"], "chat", "{line}");
        assert_eq!(line["session_index"], i + 1, "{line}");
        let first = show(db, run, 1);
        let body = &first["event"]["body"];
        match i {
            0 => assert_eq!(
                body["type"], "start",
                "the first run begins afresh: {first}"
            ),
            _ => {
                assert_eq!(body["type"], "session_start", "{first}");
                assert_eq!(body["seed"]["previous"], runs[i - 1].as_str(), "{first}");
            }
        }
        verifies(db, run);
    }
    // The third run was sent the whole conversation so far (the window holds four messages).
    let asked = requests(db, &runs[2]);
    let (agent, messages) = asked.last().expect("a request");
    assert_eq!(agent, "assistant");
    let said: Vec<String> = said(messages).into_iter().map(|(_, t)| t).collect();
    for earlier in [
        "My name is Ada.",
        "Nice to meet you, Ada.",
        "I like tea.",
        "Tea, noted.",
    ] {
        assert!(said.iter().any(|t| t == earlier), "{earlier:?} in {said:?}");
    }
}
