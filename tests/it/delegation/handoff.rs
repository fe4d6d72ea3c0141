//! A model-chosen handoff carries the conversation (revision 5), with the real binary on real
//! SQLite files: the receiver's request, as `show` prints it, is its own system prompt, the
//! sender's messages (not its system prompt), the transfer call answered, then the note; the
//! handover is one recorded step (`conversation_supplied`) that `verify` re-folds; and a fork
//! at the step waiting for the conversation reproduces it, live and from the tape.

use crate::support;

use std::path::Path;

use crate::support::cli::{example, temp_db, utf8};
use serde_json::Value;
use support::delegation::*;

fn step(db: &Path, at: &str) -> Value {
    serde_json::from_str(&ok(db, &["show", at, "--json"])).expect("one JSON object")
}

/// The reviewer's first request in the team example's run `id`: `(roles, contents)`.
fn reviewers_request(db: &Path, id: &str) -> (Vec<String>, Vec<String>) {
    let v = step(db, &format!("{id}@9"));
    assert_eq!(v["request"]["agent"], "reviewer", "{v}");
    let messages = v["request"]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let roles = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_owned())
        .collect();
    let contents = messages
        .iter()
        .map(|m| match m["content"].as_str() {
            Some(c) => c.to_owned(),
            None => m["tool_calls"][0]["name"].as_str().unwrap_or("").to_owned(),
        })
        .collect();
    (roles, contents)
}

#[test]
fn the_receiver_continues_the_senders_conversation() {
    let (_dir, db) = temp_db();
    let printed = ok(&db, &["run", utf8(&example("team.toml"))]);
    assert!(printed.contains("answer: APPROVED"), "{printed}");
    let id = root_id(&db, "the lead's run");
    let log = ok(&db, &["log", &id]);
    assert!(
        log.contains("conversation_supplied")
            && log.contains("lead's conversation (7 messages) handed over"),
        "{log}"
    );

    let (roles, contents) = reviewers_request(&db, &id);
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "user"
        ]
    );
    assert_eq!(
        contents[0], "You review and conclude.",
        "its own system prompt"
    );
    assert!(
        !contents.iter().any(|c| c.starts_with("You lead.")),
        "not the sender's"
    );
    assert_eq!(
        contents[1],
        "Find out why the nightly export is slow and propose a fix."
    );
    assert_eq!(contents[2], "delegate_researcher", "the sender's turns");
    assert!(contents[3].starts_with("FINDINGS:") || contents[3].starts_with("FIX:"));
    assert_eq!(contents[5], "transfer_to_reviewer");
    assert_eq!(contents[6], "transferred to reviewer", "the call answered");
    assert_eq!(
        contents[7],
        "[transfer from lead]\nResearch and a fix are in; please review and conclude."
    );
    // The text view prints the same request.
    let text = ok(&db, &["show", &format!("{id}@9")]);
    assert!(
        text.contains("request to script/scripted — 8 messages")
            && text.contains("[transfer from lead]"),
        "{text}"
    );
    ok(&db, &["verify", &id, "--recursive"]);
}

#[test]
fn a_fork_waiting_for_the_conversation_hands_it_over_live_and_from_the_tape() {
    let (_dir, db) = temp_db();
    ok(&db, &["run", utf8(&example("team.toml"))]);
    let id = root_id(&db, "the lead's run");
    // Step 7: the transfer was answered and the run waits in `handoff` for the conversation.
    let waiting = step(&db, &format!("{id}@7"));
    assert_eq!(waiting["state"]["state"], "handoff");
    assert_eq!(waiting["state"]["transfer"]["to"], "reviewer");
    let expected = reviewers_request(&db, &id);
    for mode in [&[][..], &["--tape"][..]] {
        let at = format!("{id}@7");
        let mut args = vec!["fork", at.as_str()];
        args.extend(mode);
        let printed = ok(&db, &args);
        assert!(printed.contains("answer: APPROVED"), "{mode:?}: {printed}");
        let fork = printed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("forked {id}@7 as run ")))
            .expect("the fork's id")
            .trim()
            .to_owned();
        assert_eq!(reviewers_request(&db, &fork), expected, "{mode:?}");
        ok(&db, &["verify", &fork, "--recursive"]);
    }
}
