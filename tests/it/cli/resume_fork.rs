//! The real binary on real SQLite files, for the `resume`, `fork` and `cassette diff` options
//! the README's tour does not walk through: answering a person's question with `--input`,
//! raising an exhausted budget with `--raise`, forking from the parent's recording with
//! `--tape`, and `cassette diff`'s exit status.

use std::path::Path;

use crate::support;
use crate::support::cli::{echo_spec, err, json_lines, out, run_id, temp_db, text, utf8, write};
use support::cli::runtape;

fn status_of(db: &Path, run: &str) -> String {
    rusqlite::Connection::open(db)
        .expect("opens")
        .query_row("SELECT status FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .expect("run row")
}

fn example(name: &str) -> String {
    utf8(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name),
    )
    .to_owned()
}

const QUESTION: &str = r#"
goal = "Pick a colour."
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { tool_calls = [{ name = "ask_person", arguments = { question = "Which colour?" } }] },
  { text = "You chose it." },
]
[[tools]]
name = "ask_person"
description = "Ask the person a question"
kind = "human"
schema = { type = "object", properties = { question = { type = "string" } }, required = ["question"] }
[[agents]]
id = "a"
provider = "s"
tools = ["ask_person"]
"#;

#[test]
fn a_question_is_answered_with_input_and_cannot_be_approved() {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), "question.toml", QUESTION);
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "waiting is not a failure: {}",
        err(&o)
    );
    let run = run_id(&o);
    assert_eq!(status_of(&db, &run), "awaiting_input");
    assert!(
        out(&o).contains(&format!(
            "answer ask_person with: runtape resume {run} --input TEXT | --reject [REASON]"
        )),
        "the hint offers what a question accepts: {}",
        out(&o)
    );

    // Approving a question is refused in one line, and changes nothing.
    let o = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
    assert!(err(&o).contains("question"), "{}", err(&o));
    assert_eq!(status_of(&db, &run), "awaiting_input");

    let o = runtape(&db, &["resume", &run, "--input", "teal"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(status_of(&db, &run), "completed");
    // The answer went to the model as the tool's result.
    let cassette = dir.path().join("q.cassette.json");
    let o = runtape(&db, &["cassette", "export", &run, "-o", utf8(&cassette)]);
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(&cassette).expect("reads the cassette");
    assert!(
        text.contains("\"content\":\"teal\"") || text.contains("\"content\": \"teal\""),
        "the second request carries the person's answer"
    );
}

/// A budget of one turn, paused when spent.
fn budget() -> String {
    let replies = r#"  { tool_calls = [{ name = "echo", arguments = { n = 1 } }] },
  { text = "done" },"#;
    echo_spec(
        "Two turns.",
        replies,
        "on_exhausted = \"pause\"\n[agents.budget]\nmax_turns = 1\n",
    )
}

#[test]
fn an_exhausted_budget_is_raised_on_resume() {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), "budget.toml", &budget());
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(1), "exhausted exits 1: {}", out(&o));
    let run = run_id(&o);
    assert_eq!(status_of(&db, &run), "budget_exhausted");
    assert!(
        out(&o).contains(&format!(
            "raise it with: runtape resume {run} --raise budget.max_turns=VALUE"
        )),
        "{}",
        out(&o)
    );

    // A raise that does not lift the cap is refused before anything is written.
    let o = runtape(&db, &["resume", &run, "--raise", "budget.max_turns=nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(err(&o).lines().count(), 1);
    assert!(
        err(&o).starts_with("error: --raise `budget.max_turns=nope`"),
        "{}",
        err(&o)
    );
    assert_eq!(status_of(&db, &run), "budget_exhausted");
    // The same key given to a fork is named as the flag it came with.
    let o = runtape(
        &db,
        &["fork", &format!("{run}@1"), "--edit", "budget.max_turn=3"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).starts_with("error: --edit `budget.max_turn=3`: unknown budget `max_turn`"),
        "{}",
        err(&o)
    );

    let o = runtape(&db, &["resume", &run, "--raise", "budget.max_turns=3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&o).contains("answer: done"), "{}", out(&o));
    assert_eq!(status_of(&db, &run), "completed");
    assert!(runtape(&db, &["verify", &run]).status.success());
}

#[test]
fn a_tape_fork_serves_the_parents_replies_and_a_live_fork_asks_the_model() {
    let (_dir, db) = temp_db();
    let o = runtape(&db, &["run", &example("handoff.toml")]);
    assert!(o.status.success(), "{}", err(&o));
    let parent = run_id(&o);

    let tape = runtape(&db, &["fork", &format!("{parent}@3"), "--tape", "--json"]);
    assert_eq!(tape.status.code(), Some(0), "{}", err(&tape));
    let lines = json_lines(&tape);
    assert_eq!(lines[0]["type"], "run");
    assert_eq!(lines[0]["action"], "forked");
    assert_eq!(lines[0]["parent"], parent.as_str());
    assert_eq!(lines[0]["at"], 3);
    let fork = lines[0]["id"].as_str().expect("the fork's id").to_owned();
    let requests = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .filter(|l| l["type"] == "model.request")
            .count()
    };
    assert_eq!(
        requests(&lines),
        0,
        "every reply came from the parent's recording"
    );
    assert!(
        lines.iter().filter(|l| l["type"] == "model.reply").count() >= 3,
        "and the fork still got its replies"
    );
    assert_eq!(status_of(&db, &fork), "completed");

    let live = runtape(&db, &["fork", &format!("{parent}@3"), "--live", "--json"]);
    assert_eq!(live.status.code(), Some(0), "{}", err(&live));
    assert!(
        requests(&json_lines(&live)) >= 3,
        "a live fork asks the model"
    );

    // The tape fork took the parent's path exactly: the two runs differ only in their ids.
    let o = runtape(&db, &["diff", &parent, &fork]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(runtape(&db, &["verify", &fork]).status.success());
}

#[test]
fn cassette_diff_exits_1_when_the_cassettes_differ() {
    let (dir, db) = temp_db();
    let export = |spec: &str, name: &str| {
        let o = runtape(&db, &["run", &example(spec)]);
        assert!(o.status.success(), "{}", err(&o));
        let path = dir.path().join(name);
        let o = runtape(&db, &["cassette", "export", &run_id(&o), "-o", utf8(&path)]);
        assert!(o.status.success(), "{}", err(&o));
        utf8(&path).to_owned()
    };
    let a = export("handoff.toml", "a.json");
    let a2 = export("handoff.toml", "a2.json");
    let b = export("approval.toml", "b.json");

    let same = runtape(&db, &["cassette", "diff", &a, &a2]);
    assert_eq!(same.status.code(), Some(0), "{}", err(&same));
    assert!(out(&same).starts_with("cassettes match"), "{}", out(&same));

    let differ = runtape(&db, &["cassette", "diff", &a, &b]);
    assert_eq!(differ.status.code(), Some(1), "{}", err(&differ));
    assert!(out(&differ).starts_with("cassettes differ from turn 0"));
    let json = runtape(&db, &["cassette", "diff", &a, &b, "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(out(&json).trim()).expect("one JSON object");
    assert_eq!(v["type"], "cassette.diff");
    assert_eq!(
        v["firstDifference"], 0,
        "cassette JSON is camelCase, like the file"
    );
}

/// A fork from any step — including ones with calls outstanding, which the fork performs under
/// its own ids — continues to a history that verifies, receipts included.
#[test]
fn a_fork_from_every_step_verifies() {
    let (_dir, db) = temp_db();
    let o = runtape(&db, &["run", &example("handoff.toml")]);
    assert!(o.status.success(), "{}", err(&o));
    let parent = run_id(&o);
    let steps: i64 = rusqlite::Connection::open(&db)
        .expect("opens")
        .query_row("SELECT seq FROM runs WHERE id = ?1", [&parent], |r| {
            r.get(0)
        })
        .expect("run row");
    assert!(steps >= 10);
    for at in 1..steps {
        let o = runtape(&db, &["fork", &format!("{parent}@{at}")]);
        assert_eq!(o.status.code(), Some(0), "fork @{at}: {}", err(&o));
        let fork = run_id(&o);
        let v = runtape(&db, &["verify", &fork]);
        assert!(v.status.success(), "fork @{at}: {}{}", out(&v), err(&v));
    }
    // The last step is `Done`: nothing to continue, so the fork is refused and nothing written.
    let o = runtape(&db, &["fork", &format!("{parent}@{steps}")]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(err(&o).lines().count(), 1);
}

/// A fork at the step where its parent waits for a person has no step of its own to take: it
/// is released waiting for that person, verifies as it is, and the approval runs it on to a
/// history that verifies (the head its release sealed used to fail verify, so resume refused it).
#[test]
fn a_fork_at_a_waiting_step_rests_waiting_and_is_approved() {
    let (_dir, db) = temp_db();
    let o = runtape(&db, &["run", &example("approval.toml")]);
    assert!(o.status.success(), "{}", err(&o));
    let parent = run_id(&o);
    assert_eq!(status_of(&db, &parent), "awaiting_input");
    let last: i64 = rusqlite::Connection::open(&db)
        .expect("opens")
        .query_row("SELECT seq FROM runs WHERE id = ?1", [&parent], |r| {
            r.get(0)
        })
        .expect("run row");
    let o = runtape(&db, &["fork", &format!("{parent}@{last}")]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let fork = run_id(&o);
    assert_eq!(status_of(&db, &fork), "awaiting_input");
    let v = runtape(&db, &["verify", &fork]);
    assert!(v.status.success(), "{}{}", out(&v), err(&v));
    let o = runtape(&db, &["resume", &fork, "--approve"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
    assert_eq!(status_of(&db, &fork), "completed");
    let v = runtape(&db, &["verify", &fork]);
    assert!(v.status.success(), "{}{}", out(&v), err(&v));
    // The parent still waits: approving the fork's call did not answer the parent's.
    assert_eq!(status_of(&db, &parent), "awaiting_input");
}
