//! SIGKILL in the middle of a session run, then `runtape resume` in a fresh process (real
//! processes, one SQLite file): killed while its summary is being written, while the
//! retriever runs, and while the model answers, the third run of a session resumes and ends
//! exactly where an uninterrupted third run ends (same final state hash, stepped clock), with
//! the history and summary it began with placed once, and every run verifies.

use crate::support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::{temp_db, utf8};
use support::session::*;

/// The chat of `support::session`, with a summariser, a retriever and a model that each take
/// a while, so a kill can land inside each.
fn slow_spec(dir: &Path) -> std::path::PathBuf {
    let retriever = write(
        dir,
        "retrieve.sh",
        "cat > /dev/null\necho call >> retrieved.log\nsleep 1\necho '[\"Ada Lovelace wrote the first program.\"]'\n",
    );
    let body = chat_spec(
        3,
        &["Nice to meet you, Ada.", "Tea, noted.", "You are Ada."],
        &format!(
            r#"
[retriever]
command = ["sh", "{}"]
agents = ["assistant"]
"#,
            retriever.display()
        ),
    )
    .replace(
        "usage = { input = 10, output = 5 } }",
        "usage = { input = 10, output = 5 }, latency_ms = 1200 }",
    )
    .replace(
        "[[providers]]\nname = \"echo\"\nkind = \"echo\"",
        "[[providers]]\nname = \"echo\"\nkind = \"scripted\"\nreplies = [{ text = \"The user is Ada.\", latency_ms = 1200 }]",
    );
    write(dir, "slow.toml", &body)
}

fn stepped(db: &Path, spec: &Path, goal: &str) -> Child {
    on(db)
        .args([
            "run",
            utf8(spec),
            goal,
            "--session",
            "chat",
            "--stepped-clock",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawns")
}

fn finish(child: Child) -> String {
    let o = child.wait_with_output().expect("waits");
    assert!(o.status.success(), "{}", text(&o));
    first_id(&String::from_utf8_lossy(&o.stdout))
}

/// The state kind of the run toward `goal`, once it has one.
fn state_of(db: &Path, goal: &str) -> Option<String> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    conn.query_row(
        "SELECT r.state_kind FROM runs r JOIN run_specs s ON s.run = r.key WHERE s.goal = ?1",
        [goal],
        |r| r.get(0),
    )
    .ok()
}

/// The first two runs of the session, then the third run started; returns the third's
/// process (running) and the first two ids.
fn two_runs_then_a_third(dir: &Path, db: &Path) -> (Child, String, String) {
    let quick = write(
        dir,
        "quick.toml",
        &chat_spec(
            3,
            &["Nice to meet you, Ada.", "Tea, noted.", "You are Ada."],
            "",
        ),
    );
    let r1 = finish(stepped(db, &quick, "My name is Ada."));
    let r2 = finish(stepped(db, &quick, "I like tea."));
    let slow = slow_spec(dir);
    (stepped(db, &slow, "What do you know about me?"), r1, r2)
}

fn final_hash(db: &Path, run: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&ok(db, &["verify", run, "--json"])).expect("json");
    v["final_state_hash"].as_str().expect("hash").to_owned()
}

#[test]
fn a_session_run_killed_mid_summary_mid_retrieval_or_mid_answer_resumes_to_the_same_end() {
    // The reference: nobody is killed.
    let reference = tempfile::tempdir().expect("tempdir");
    let db = reference.path().join("chat.db");
    let (third, ..) = two_runs_then_a_third(reference.path(), &db);
    let r3 = finish(third);
    let expected_hash = final_hash(&db, &r3);
    let expected = requests(&db, &r3);
    assert_eq!(
        expected.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        vec!["summarizer", "assistant"]
    );

    for kill_in in ["summarizing", "retrieving", "generating"] {
        let (dir, db) = temp_db();
        let (mut third, r1, r2) = two_runs_then_a_third(dir.path(), &db);
        let started = Instant::now();
        while state_of(&db, "What do you know about me?").as_deref() != Some(kill_in) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the run never reached {kill_in}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        third.kill().expect("SIGKILL");
        let o = third.wait_with_output().expect("reaped");
        let r3 = first_id(&String::from_utf8_lossy(&o.stdout));

        let resumed = runtape(&db, &["resume", &r3, "--stepped-clock"]);
        assert!(resumed.status.success(), "{kill_in}: {}", text(&resumed));
        assert_eq!(
            final_hash(&db, &r3),
            expected_hash,
            "killed in {kill_in}: resumed to another end"
        );
        let asked = requests(&db, &r3);
        assert_eq!(
            asked.len(),
            2,
            "{kill_in}: one summary, one answer: {asked:?}"
        );
        assert_eq!(said(&asked[1].1), said(&expected[1].1), "{kill_in}");
        let summaries = asked[1]
            .1
            .iter()
            .filter(|m| m["name"] == "runtape.session_summary")
            .count();
        assert_eq!(summaries, 1, "{kill_in}: the summary is placed once");
        let places = ok(&db, &["log", "--session", "chat", "--json"]);
        assert_eq!(
            places.lines().count(),
            3,
            "{kill_in}: no second run 3: {places}"
        );
        for run in [&r1, &r2, &r3] {
            verifies(&db, run);
        }
    }
}

/// A session run created but never started (queued with `--detach`, as a process killed
/// between creating the run and its first step leaves it) begins with its history when a
/// process takes it up: the same history a run started at once gets.
#[test]
fn a_session_run_created_but_never_started_begins_with_its_history_when_taken_up() {
    let (dir, db) = temp_db();
    let quick = write(
        dir.path(),
        "quick.toml",
        &chat_spec(
            3,
            &["Nice to meet you, Ada.", "Tea, noted.", "You are Ada."],
            "",
        ),
    );
    let r1 = session_run(&db, &quick, "My name is Ada.", "chat");
    let r2 = session_run(&db, &quick, "I like tea.", "chat");
    let queued = ok(
        &db,
        &[
            "run",
            utf8(&quick),
            "What do you know about me?",
            "--session",
            "chat",
            "--detach",
        ],
    );
    let r3 = queued.lines().next().expect("the id").trim().to_owned();
    assert_eq!(steps(&db, &r3), 0, "nothing committed yet");
    ok(&db, &["resume", &r3]);
    let first = show(&db, &r3, 1);
    assert_eq!(first["event"]["body"]["type"], "session_start");
    assert_eq!(first["event"]["body"]["seed"]["previous"], r2.as_str());
    let asked = requests(&db, &r3);
    assert_eq!(
        asked.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        vec!["summarizer", "assistant"]
    );
    for run in [&r1, &r2, &r3] {
        verifies(&db, run);
    }
}
