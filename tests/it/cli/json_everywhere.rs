//! `--json` is accepted by every command that prints a result, and each of the commands that
//! print one result prints exactly one JSON document on stdout (errors stay on stderr):
//! `keygen`, `migrate`, `statechart` (and `--check`), `cassette export`, `receipts export`,
//! `pause`, `cancel`, `memory rm` and `sessions` (an array, `[]` when there is none).

use std::path::Path;

use serde_json::Value;

use crate::support::cli::{bare, err, example, out, runtape, temp_db, utf8};

use super::help_reference::command_tree;

/// Commands without `--json`, and why: none prints a result a program would read.
const WITHOUT_JSON: [&str; 9] = [
    "cassette",    // a group: its commands have --json
    "receipts",    // a group
    "memory",      // a group
    "schedule",    // a group
    "demo",        // a tour for people; its runs are read with ls/log/show --json
    "worker",      // its log is one JSON object per line already
    "serve",       // a server: its HTTP API answers JSON
    "completions", // prints a shell script
    "man",         // prints a roff page
];

#[test]
fn every_command_that_prints_a_result_accepts_json() {
    let mut without = Vec::new();
    for c in command_tree() {
        if !c.flags.iter().any(|f| f == "--json") {
            without.push(c.path.join(" "));
        }
    }
    assert_eq!(without, WITHOUT_JSON, "commands without --json");
}

/// Runs `runtape --db DB ARGS…`, expects `status`, and parses stdout as one JSON document.
fn one_document(db: &Path, args: &[&str], status: i32) -> Value {
    let o = runtape(db, args);
    assert_eq!(o.status.code(), Some(status), "{args:?}: {}", err(&o));
    let stdout = out(&o);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed not one JSON document ({e}): {stdout}"))
}

#[test]
fn commands_that_print_one_result_print_one_json_document() {
    let (dir, db) = temp_db();
    let v = one_document(&db, &["migrate", "--json"], 0);
    assert_eq!(
        (v["type"].as_str(), v["done"].as_str()),
        (Some("migrate"), Some("created"))
    );
    assert!(v["schema_version"].as_u64().is_some(), "{v}");

    let v = one_document(&db, &["sessions", "--json"], 0);
    assert_eq!(v, serde_json::json!([]), "no sessions: an empty array");

    let key = dir.path().join("k.key");
    let v = one_document(&db, &["keygen", "-o", utf8(&key), "--json"], 0);
    assert_eq!(v["type"], "keygen");
    assert_eq!(v["public_key"].as_str().map(str::len), Some(64), "{v}");
    assert!(key.exists() && dir.path().join("k.key.pub").exists());

    let v = one_document(&db, &["statechart", "--json"], 0);
    assert!(
        v["markdown"]
            .as_str()
            .is_some_and(|m| m.starts_with("# runtape statechart"))
    );
    let chart = dir.path().join("statechart.md");
    std::fs::write(&chart, v["markdown"].as_str().expect("text")).expect("writes");
    let v = one_document(
        &db,
        &["statechart", "--check", "--file", utf8(&chart), "--json"],
        0,
    );
    assert_eq!(v["matches"], true);
    std::fs::write(&chart, "edited").expect("writes");
    let v = one_document(
        &db,
        &["statechart", "--check", "--file", utf8(&chart), "--json"],
        1,
    );
    assert_eq!(v["matches"], false);

    let approval = example("approval.toml");
    let o = runtape(&db, &["run", utf8(&approval), "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let first: Value = serde_json::from_str(out(&o).lines().next().expect("a line")).expect("json");
    let run = first["id"].as_str().expect("the run id").to_owned();

    let cassette = dir.path().join("c.json");
    let v = one_document(
        &db,
        &["cassette", "export", &run, "-o", utf8(&cassette), "--json"],
        0,
    );
    assert_eq!(
        (v["type"].as_str(), v["run"].as_str()),
        (Some("cassette.export"), Some(run.as_str()))
    );
    assert_eq!(v["model_turns"], 1, "{v}");

    let receipts = dir.path().join("r.jsonl");
    let v = one_document(
        &db,
        &["receipts", "export", &run, "-o", utf8(&receipts), "--json"],
        0,
    );
    assert_eq!(
        (v["type"].as_str(), v["receipts"].as_u64()),
        (Some("receipts.export"), Some(1))
    );

    // A run waiting for a person cannot be paused: one line on stderr, nothing on stdout.
    let o = runtape(&db, &["pause", &run, "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(out(&o), "", "an error prints no JSON");
    assert!(
        err(&o).contains("only a running run can be paused"),
        "{}",
        err(&o)
    );

    let v = one_document(&db, &["cancel", &run, "--reason", "test", "--json"], 0);
    assert_eq!(
        (v["type"].as_str(), v["outcome"].as_str()),
        (Some("cancel"), Some("cancelled"))
    );

    // A queued run: nothing drives it, so the pause is settled at once.
    let o = runtape(&db, &["run", utf8(&approval), "--detach"]);
    assert!(o.status.success(), "{}", err(&o));
    let queued = out(&o)
        .lines()
        .next()
        .expect("the run id")
        .trim()
        .to_owned();
    let v = one_document(&db, &["pause", &queued, "--json"], 0);
    assert_eq!(
        (v["type"].as_str(), v["outcome"].as_str()),
        (Some("pause"), Some("queued"))
    );

    let memory = example("memory.toml");
    let o = runtape(&db, &["run", utf8(&memory)]);
    assert!(o.status.success(), "{}", err(&o));
    let v = one_document(
        &db,
        &[
            "memory",
            "rm",
            "last_offsite",
            "--name",
            "demo-team",
            "--yes",
            "--json",
        ],
        0,
    );
    assert_eq!(
        (v["type"].as_str(), v["key"].as_str()),
        (Some("memory.removed"), Some("last_offsite"))
    );
    assert!(v["version"].as_u64().is_some_and(|n| n >= 2), "{v}");
}

#[test]
fn json_for_a_command_without_a_database_is_still_one_document() {
    let v: Value = serde_json::from_str(&out(&bare(&["statechart", "--json"]))).expect("json");
    assert_eq!(v["type"], "statechart");
}
