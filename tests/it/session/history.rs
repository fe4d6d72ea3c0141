//! A session's runs go on with the conversation the previous run ended with (the real binary
//! on a real SQLite file): the third run of a session sees the first two's conversation within
//! its window and a summary of what fell out; the fourth's summary rolls the third's forward;
//! `sessions` and `log --session` list them; every run verifies; a session whose latest run
//! has not ended refuses a next one; a failed or cancelled run is skipped as a source.

use crate::support;

use crate::support::cli::{temp_db, utf8};
use serde_json::Value;
use support::session::*;

const ANSWERS: [&str; 3] = [
    "Nice to meet you, Ada.",
    "Tea, noted.",
    "You are Ada and you like tea.",
];

/// The data message holding a session summary, if `messages` has one.
fn summary_in(messages: &[Value]) -> Option<String> {
    messages
        .iter()
        .find(|m| m["name"] == "runtape.session_summary")
        .map(|m| {
            assert_eq!(m["role"], "user", "a summary is user-position data");
            m["content"].as_str().expect("text").to_owned()
        })
}

#[test]
fn the_third_run_sees_the_first_two_within_its_window_and_a_summary_of_the_rest() {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), "chat.toml", &chat_spec(3, &ANSWERS, ""));

    let r1 = session_run(&db, &spec, "My name is Ada.", "support-42");
    let r2 = session_run(&db, &spec, "I like tea.", "support-42");
    let r3 = session_run(&db, &spec, "What do you know about me?", "support-42");

    // Run 2 carries all of run 1 (two messages fit a window of three): no summary call.
    let asked = requests(&db, &r2);
    assert_eq!(asked.len(), 1, "one model call, no summary: {asked:?}");
    assert_eq!(
        said(&asked[0].1),
        vec![
            ("system".into(), "You are a friendly assistant.".into()),
            ("user".into(), "My name is Ada.".into()),
            ("assistant".into(), ANSWERS[0].into()),
            ("user".into(), "I like tea.".into()),
        ]
    );

    // Run 3: "My name is Ada." falls out of the window and is summarised first, by a
    // recorded model call of the summarizer, given the message as data.
    let asked = requests(&db, &r3);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (writer, summary_request) = &asked[0];
    assert_eq!(writer, "summarizer");
    assert_eq!(summary_request[0]["role"], "system");
    let given = summary_request[1]["content"].as_str().expect("text");
    assert!(
        given.contains("Summary so far:\n(none)") && given.contains("[user] My name is Ada."),
        "{given}"
    );
    assert!(
        !given.contains("I like tea."),
        "kept messages are not summarised: {given}"
    );
    let (agent, messages) = &asked[1];
    assert_eq!(agent, "assistant");
    let summary = summary_in(messages).expect("the summary opens the conversation");
    assert!(summary.contains("My name is Ada."), "{summary}");
    let mut expected: Vec<(String, String)> = vec![
        ("system".into(), "You are a friendly assistant.".into()),
        ("user".into(), summary.clone()),
    ];
    expected.extend([
        ("assistant".into(), ANSWERS[0].into()),
        ("user".into(), "I like tea.".into()),
        ("assistant".into(), ANSWERS[1].into()),
        ("user".into(), "What do you know about me?".into()),
    ]);
    assert_eq!(said(messages), expected, "the window, after the summary");

    // Run 4: the summary so far (run 3's) is rolled into the new one.
    let r4 = session_run(&db, &spec, "Anything else?", "support-42");
    let asked = requests(&db, &r4);
    let given = asked[0].1[1]["content"].as_str().expect("text");
    let run3_summary = summary
        .split_once("\n\n")
        .map(|(_, s)| s)
        .expect("header then summary");
    assert!(
        given.contains(&format!("Summary so far:\n{run3_summary}")),
        "run 4's summariser is given run 3's summary: {given}"
    );
    assert!(given.contains("[user] I like tea."), "{given}");
    let summary4 = summary_in(&asked[1].1).expect("a summary");
    assert!(
        summary4.contains("My name is Ada.") && summary4.contains("I like tea."),
        "what fell out in runs 3 and 4 is in the summary: {summary4}"
    );

    // Listed in order, and every run verifies, its session place and carried history with it.
    let listed = ok(&db, &["sessions"]);
    assert!(
        listed.contains("support-42") && listed.contains(&r4),
        "{listed}"
    );
    let json = ok(&db, &["sessions", "--json"]);
    let all: Value = serde_json::from_str(json.trim()).expect("one JSON document");
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{json}");
    let v = &all[0];
    assert_eq!(
        (v["name"].as_str(), v["runs"].as_u64()),
        (Some("support-42"), Some(4))
    );
    let log = ok(&db, &["log", "--session", "support-42", "--json"]);
    let order: Vec<(u64, String, Option<String>)> = log
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            (
                v["index"].as_u64().expect("index"),
                v["run"].as_str().expect("run").to_owned(),
                v["previous"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        order,
        vec![
            (1, r1.clone(), None),
            (2, r2.clone(), Some(r1.clone())),
            (3, r3.clone(), Some(r2.clone())),
            (4, r4.clone(), Some(r3.clone())),
        ]
    );
    let human = ok(&db, &["log", "--session", "support-42"]);
    assert!(human.starts_with("session support-42 — 4 runs"), "{human}");
    for run in [&r1, &r2, &r3, &r4] {
        verifies(&db, run);
    }
    // A fork of a session run keeps the history it was forked from — from step 0 it begins
    // with the same carried history — but takes no place in the session; both verify.
    let from_start = first_id(&ok(&db, &["fork", &format!("{r3}@0")]));
    let after_summary = first_id(&ok(&db, &["fork", &format!("{r3}@2"), "--tape"]));
    for fork in [&from_start, &after_summary] {
        assert_eq!(
            said(&requests(&db, fork).last().expect("a model call").1),
            said(&requests(&db, &r3).last().expect("a model call").1),
            "the fork saw what run 3 saw"
        );
        verifies(&db, fork);
    }
    let forked = ok(&db, &["show", &format!("{from_start}@1")]);
    assert!(
        forked.contains("a fork is not a run of the session"),
        "{forked}"
    );
    let places = ok(&db, &["log", "--session", "support-42", "--json"]);
    assert_eq!(places.lines().count(), 4, "forks take no place: {places}");
    // What `show` says at the step a session run began: its place and what it carried.
    let shown = ok(&db, &["show", &format!("{r3}@1")]);
    assert!(
        shown.contains(&format!("session support-42 run 3 — goes on from run {r2}"))
            && shown.contains("history assistant: 5 messages carried"),
        "{shown}"
    );
}

/// A spec whose assistant asks for an approval first (so its run stops, waiting for a
/// person), then answers.
fn approval_spec() -> String {
    chat_spec(
        10,
        &["ok"],
        r#"
[[tools]]
name = "deploy"
command = ["sh", "-c", "echo deployed"]
requires_approval = true
"#,
    )
    .replace(
        r#"provider = "script"
"#,
        r#"provider = "script"
tools = ["deploy"]
"#,
    )
    .replace(
        "replies = [",
        // Its turn counts the answers carried from run 1: the call comes at turn 0 or 1.
        r#"replies = [{ tool_calls = [{ name = "deploy", arguments = {} }] }, { tool_calls = [{ name = "deploy", arguments = {} }] }, "#,
    )
}

#[test]
fn a_session_whose_latest_run_has_not_ended_refuses_the_next_and_goes_on_from_the_last_completed() {
    let (dir, db) = temp_db();
    let chat = write(dir.path(), "chat.toml", &chat_spec(10, &ANSWERS, ""));
    let waits = write(dir.path(), "waits.toml", &approval_spec());

    let r1 = session_run(&db, &chat, "My name is Ada.", "s");
    let r2 = session_run(&db, &waits, "Deploy it.", "s");
    let status: Value = serde_json::from_str(&ok(&db, &["show", &r2, "--json"])).expect("json");
    assert_eq!(status["state"]["state"], "awaiting_input");

    let o = runtape(&db, &["run", utf8(&chat), "Next?", "--session", "s"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!(
            "latest run, {r2} (run 2), has not ended (awaiting_input)"
        )) && err.contains(&format!("runtape resume {r2}")),
        "{err}"
    );
    let listed = ok(&db, &["log", "--session", "s", "--json"]);
    assert_eq!(listed.lines().count(), 2, "nothing was added: {listed}");
    let all = ok(&db, &["ls", "--json"]);
    assert_eq!(all.lines().count(), 2, "no run was created: {all}");

    // Cancelled, run 2 keeps its place; run 3 goes on from run 1, the last that completed.
    ok(&db, &["cancel", &r2]);
    let r3 = session_run(&db, &chat, "Still there?", "s");
    let asked = requests(&db, &r3);
    let (_, messages) = asked.last().expect("a model call");
    assert_eq!(
        said(messages),
        vec![
            ("system".into(), "You are a friendly assistant.".into()),
            ("user".into(), "My name is Ada.".into()),
            ("assistant".into(), ANSWERS[0].into()),
            ("user".into(), "Still there?".into()),
        ],
        "nothing of the cancelled run is carried"
    );
    let log = ok(&db, &["log", "--session", "s"]);
    assert!(log.contains(&format!("(goes on from {r1})")), "{log}");
    for run in [&r1, &r2, &r3] {
        verifies(&db, run);
    }

    // Bad names are one line, exit 2, before anything is read or written.
    for bad in ["", "a b", "x\ny"] {
        let o = runtape(&db, &["run", utf8(&chat), "Q", "--session", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", text(&o));
        assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
        let o = runtape(&db, &["log", "--session", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", text(&o));
    }
    let o = runtape(&db, &["log", "--session", "nobody"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no session named `nobody`"));
}
