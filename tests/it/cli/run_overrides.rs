//! `runtape run`'s per-run overrides (`--model`, `--max-steps`, `--timeout`, `--max-retries`,
//! `--run-id`) on real SQLite files: each changes the spec the run is stored with and what the
//! run does, `verify` passes, and bad input is one line, exit 2, nothing written.

use crate::support::cli::{err, out, runtape, temp_db, text, utf8, write};
use crate::support::spec::{SAFE, agent, provider, scripted_as, tool};
use std::path::{Path, PathBuf};

const TWO_TICKS_THEN_DONE: &str = r#"{ tool_calls = [{ name = "tick", arguments = {} }] }, { tool_calls = [{ name = "tick", arguments = {} }] }, { text = "done" }"#;

/// A scripted provider `s` with two tool rounds then `done`, and an echo provider `e`.
fn spec(dir: &Path) -> PathBuf {
    write(
        dir,
        "overrides.toml",
        &[
            "goal = \"tick\"\n",
            &scripted_as("s", TWO_TICKS_THEN_DONE),
            &provider("e", "echo", ""),
            &tool("tick", r#"["sh", "-c", "cat"]"#, SAFE),
            &agent("a", "s", &["tick"], ""),
        ]
        .concat(),
    )
}

/// The spec stored with run `id`, as JSON.
fn stored_spec(db: &Path, id: &str) -> serde_json::Value {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let spec: String = conn
        .query_row(
            "SELECT s.spec FROM run_specs s JOIN runs r ON r.key = s.run WHERE r.id = ?1",
            [id],
            |r| r.get(0),
        )
        .expect("the run's spec");
    serde_json::from_str(&spec).expect("JSON")
}

fn run_count(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("opens");
    conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .expect("counts")
}

/// A scratch database and [`spec`] written beside it.
fn with_spec() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, db) = temp_db();
    let spec = spec(dir.path());
    (dir, db, spec)
}

/// Runs `runtape run SPEC` with `overrides`, a command line of space-separated words.
fn run_with(db: &Path, spec: &Path, overrides: &str) -> std::process::Output {
    let mut args = vec!["run", utf8(spec)];
    args.extend(overrides.split(' '));
    runtape(db, &args)
}

#[test]
fn model_timeout_retries_and_run_id_are_stored_and_followed() {
    let (_dir, db, spec) = with_spec();
    let o = run_with(
        &db,
        &spec,
        "--model e/echo-2 --timeout 5m --max-retries 4 --run-id nightly-2026.11_29",
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).starts_with("started run nightly-2026.11_29"),
        "{}",
        out(&o)
    );
    // The echo provider answered: the scripted one would have called `tick` first.
    assert!(out(&o).contains("answer: echo: tick"), "{}", out(&o));
    let stored = stored_spec(&db, "nightly-2026.11_29");
    let route = &stored["agents"][0]["routes"][0];
    assert_eq!(route["provider"], "e");
    assert_eq!(route["model"], "echo-2");
    assert_eq!(route["max_attempts"], 5);
    assert_eq!(stored["limits"]["max_wall_ms"], 300_000);
    let o = runtape(&db, &["verify", "nightly-2026.11_29"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Per agent: `a=` names the agent; the file as written is used without overrides.
    let o = run_with(&db, &spec, "--model a=e/x --run-id r2");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        stored_spec(&db, "r2")["agents"][0]["routes"][0]["model"],
        "x"
    );
    let o = runtape(&db, &["run", utf8(&spec), "--run-id", "r3"]);
    assert!(out(&o).contains("answer: done"), "{}", out(&o));
    assert_eq!(
        stored_spec(&db, "r3")["agents"][0]["routes"][0]["provider"],
        "s"
    );
}

#[test]
fn max_steps_ends_the_run_at_its_turn_cap() {
    let (_dir, db, spec) = with_spec();
    let o = run_with(&db, &spec, "--max-steps 1 --run-id capped");
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(out(&o).contains("failed (turn_limit)"), "{}", out(&o));
    assert!(out(&o).contains("1 model turns"), "{}", out(&o));
    assert_eq!(stored_spec(&db, "capped")["limits"]["max_turns"], 1);
    let o = runtape(&db, &["verify", "capped"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_detached_run_is_queued_with_its_overrides() {
    let (_dir, db, spec) = with_spec();
    let o = run_with(&db, &spec, "--detach --run-id queued-1 --max-steps 2");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o).trim(), "queued-1");
    assert_eq!(stored_spec(&db, "queued-1")["limits"]["max_turns"], 2);
    let o = runtape(
        &db,
        &["run", utf8(&spec), "--detach", "--run-id", "queued-1"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert_eq!(run_count(&db), 1);
}

#[test]
fn bad_overrides_and_a_taken_run_id_are_one_line_exit_2_nothing_written() {
    let (dir, db, spec) = with_spec();
    let o = runtape(&db, &["run", utf8(&spec), "--run-id", "taken"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let steps_before = runtape(&db, &["show", "taken", "--json"]);
    for (args, says) in [
        (
            vec!["--run-id", "taken"],
            "a run with id `taken` exists already",
        ),
        (vec!["--model", "b=e/x"], "no agent `b`"),
        (vec!["--model", "nope/x"], "no provider `nope`"),
        (vec!["--model", "e"], "write PROVIDER/MODEL"),
        (vec!["--timeout", "10"], "--timeout"),
        (vec!["--max-steps", "0"], "--max-steps must be at least 1"),
        (vec!["--run-id", "a b"], "a run id is 1 to 64"),
        (vec!["--run-id", &"x".repeat(65)], "a run id is 1 to 64"),
    ] {
        let mut all = vec!["run", utf8(&spec)];
        all.extend(args.iter().copied());
        let o = runtape(&db, &all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert_eq!(err(&o).lines().count(), 1, "{args:?}: {}", err(&o));
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
        assert_eq!(out(&o), "", "{args:?}: no run id announced");
        assert_eq!(run_count(&db), 1, "{args:?}: nothing written");
    }
    let steps_after = runtape(&db, &["show", "taken", "--json"]);
    assert_eq!(
        out(&steps_before),
        out(&steps_after),
        "the taken run is untouched"
    );

    // A bad override against a database that does not exist yet does not create it.
    let fresh = dir.path().join("fresh.db");
    let o = runtape(&fresh, &["run", utf8(&spec), "--model", "nope/x"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(!fresh.exists());
}
