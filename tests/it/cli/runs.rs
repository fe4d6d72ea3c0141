//! The real `runtape` binary driving runs on real SQLite files: run, approval then resume,
//! pause and cancel from a second process, kill -9 then resume, --json output, and every bad
//! input of the spec file and the database (one line on stderr, the documented exit status,
//! the database unchanged).

use crate::support::cli::{
    err, example, on, out, run_id, runtape, slow_tick_spec, spawn_json, temp_db, utf8,
    wait_for_step,
};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A slow offline spec: `rounds` tool rounds, 150 ms per model call.
fn slow_spec(dir: &Path, rounds: usize) -> PathBuf {
    slow_tick_spec(dir, rounds)
}

/// A scratch database and [`slow_spec`] of `rounds` rounds, run in the background with
/// `runtape run --json`: the directory, the database, the child, its run id and the rest of
/// its stdout.
fn start_slow(rounds: usize) -> (tempfile::TempDir, PathBuf, Child, String, JsonLines) {
    let (dir, db) = temp_db();
    let spec = slow_spec(dir.path(), rounds);
    let (child, run, lines) = start_background(&db, &spec);
    (dir, db, child, run, lines)
}

type JsonLines = BufReader<std::process::ChildStdout>;

/// Starts `runtape run --json` in the background; returns the child and its run id.
fn start_background(db: &Path, spec: &Path) -> (Child, String, JsonLines) {
    let (child, lines, v) = spawn_json(
        on(db)
            .args(["run", "--json"])
            .arg(spec)
            .stderr(Stdio::piped()),
    );
    assert_eq!(v["type"], "run", "the run id comes first, as JSON");
    (child, v["id"].as_str().expect("id").to_owned(), lines)
}

fn status_of(db: &Path, run: &str) -> (String, i64) {
    let conn = rusqlite::Connection::open(db).expect("opens");
    conn.query_row("SELECT status, seq FROM runs WHERE id = ?1", [run], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .expect("run row")
}

#[test]
fn run_completes_and_json_is_one_typed_object_per_line() {
    let (_dir, db) = temp_db();
    let o = runtape(&db, &["run", utf8(&example("quickstart.toml"))]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).starts_with("started run "));
    assert!(out(&o).contains("completed: 8 steps"), "{}", out(&o));

    let o = runtape(&db, &["run", "--json", utf8(&example("handoff.toml"))]);
    assert_eq!(o.status.code(), Some(0));
    let events: Vec<serde_json::Value> = out(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert!(
        events.iter().all(|e| e["type"].is_string()),
        "a stable type field on every line"
    );
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for t in [
        "run",
        "run.started",
        "model.request",
        "model.reply",
        "tool.call",
        "tool.result",
        "handoff",
        "transition",
        "run.finished",
        "run.end",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }
    assert_eq!(
        events.last().map(|e| e["status"].clone()),
        Some(serde_json::json!("completed"))
    );
}

#[test]
fn an_approval_stops_the_run_and_resume_approve_completes_it() {
    let (_dir, db) = temp_db();
    let o = runtape(&db, &["run", utf8(&example("approval.toml"))]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("waiting for a person"), "{}", out(&o));
    let run = run_id(&o);
    assert_eq!(status_of(&db, &run).0, "awaiting_input");
    let o = runtape(&db, &["resume", &run, "--approve"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("completed"), "{}", out(&o));
    let log = out(&runtape(&db, &["log", &run]));
    assert!(log.contains("person: Approve"), "{log}");

    // Rejected instead: the model hears the refusal and the run still completes.
    let o = runtape(&db, &["run", utf8(&example("approval.toml"))]);
    let run = run_id(&o);
    let o = runtape(&db, &["resume", &run, "--reject", "not today"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let show = runtape(&db, &["show", &format!("{run}@5"), "--json"]);
    assert!(
        out(&show).contains("a person declined this call: not today"),
        "{}",
        out(&show)
    );
}

#[test]
fn pause_from_another_process_stops_at_a_step_boundary() {
    let (_dir, db, child, run, mut lines) = start_slow(12);
    wait_for_step(&mut lines, 4);
    let o = runtape(&db, &["pause", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // `pause` returns once the run has paused, so a `resume` may follow at once.
    let (status, seq) = status_of(&db, &run);
    assert_eq!(status, "paused");
    assert!(
        out(&o).starts_with(&format!("paused {run} at step {seq}")),
        "{}",
        out(&o)
    );
    let kind: String = rusqlite::Connection::open(&db)
        .expect("opens")
        .query_row("SELECT state_kind FROM runs", [], |r| r.get(0))
        .expect("reads");
    assert_eq!(kind, "preparing", "paused at a step boundary");
    assert!(seq < 40, "paused before the end ({seq})");
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).starts_with(&format!("resumed run {run}")));
    assert_eq!(status_of(&db, &run).0, "completed");
    let mut rest = String::new();
    lines
        .read_to_string(&mut rest)
        .expect("reads the first process's output");
    assert!(rest.contains("\"type\":\"run.paused\""), "{rest}");
    let o = child.wait_with_output().expect("the first process exits");
    assert_eq!(o.status.code(), Some(4), "a paused run exits 4");
    assert!(runtape(&db, &["verify", &run]).status.success());
}

#[test]
fn cancel_from_another_process_stops_the_run() {
    let (_dir, db, child, run, mut lines) = start_slow(20);
    wait_for_step(&mut lines, 3);
    let started = Instant::now();
    let o = runtape(&db, &["cancel", &run, "--reason", "enough"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // `cancel` returns once the driving process has committed the cancellation.
    assert_eq!(status_of(&db, &run).0, "cancelled", "{}", out(&o));
    assert!(out(&o).starts_with(&format!("cancelled {run}")));
    let o = child.wait_with_output().expect("exits");
    assert_eq!(o.status.code(), Some(1), "a cancelled run exits 1");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(status_of(&db, &run).0, "cancelled");
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(2), "nothing to resume: {}", err(&o));
}

#[test]
fn kill_9_then_resume_completes() {
    let (_dir, db, mut child, run, mut lines) = start_slow(8);
    wait_for_step(&mut lines, 6);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let (_, at_kill) = status_of(&db, &run);
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let (status, seq) = status_of(&db, &run);
    assert_eq!(status, "completed");
    assert!(seq > at_kill);
    assert!(runtape(&db, &["verify", &run]).status.success());
}

/// The state letter of process `pid` (`S`, `R`, `Z`, ...), `None` when there is none.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A driver killed with SIGKILL and never reaped (its parent holds it without waiting, as a
/// container without an init does) is a zombie: its pid still exists, but the process is
/// gone. `resume` takes the run over at once instead of waiting out the lease.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_driver_left_a_zombie_is_taken_over_at_once() {
    let (dir, db) = temp_db();
    let spec = slow_spec(dir.path(), 8);
    // A lease of ten minutes: only the owner's death can free it within this test.
    let (mut child, mut lines, first) = spawn_json(
        on(&db)
            .args(["run", "--json"])
            .arg(&spec)
            .env("RUNTAPE_LEASE_TTL_MS", "600000")
            .stderr(Stdio::null()),
    );
    let run = first["id"]
        .as_str()
        .expect("the run id comes first")
        .to_owned();
    wait_for_step(&mut lines, 4);
    child.kill().expect("SIGKILL");
    while process_state(child.id()) != Some('Z') {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, at_kill) = status_of(&db, &run);
    assert_eq!(status, "running", "left as a crash leaves it");
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(process_state(child.id()), Some('Z'), "still not reaped");
    let (status, seq) = status_of(&db, &run);
    assert_eq!(status, "completed");
    assert!(seq > at_kill);
    assert!(runtape(&db, &["verify", &run]).status.success());
    child.wait().expect("reaped at last");
}

fn db_snapshot(db: &Path) -> Option<Vec<u8>> {
    if !db.exists() {
        return None;
    }
    let conn = rusqlite::Connection::open(db).expect("opens");
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
    drop(conn);
    std::fs::read(db).ok()
}

/// Every bad input: one line on stderr, exit 2 (or 3 for storage trouble), database unchanged.
#[test]
fn bad_input_is_one_clear_line_and_changes_nothing() {
    let (dir, db) = temp_db();
    // A database with one run in it, to check it is left alone.
    assert!(
        runtape(&db, &["run", utf8(&example("quickstart.toml"))])
            .status
            .success()
    );
    let before = db_snapshot(&db);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("writes");
        p
    };
    let agent = "[[agents]]\nid = \"a\"\nprovider = \"p\"\n";
    let scripted =
        "[[providers]]\nname = \"p\"\nkind = \"scripted\"\nreplies = [{ text = \"hi\" }]\n";
    let cases: Vec<(&str, PathBuf, i32, Vec<&str>)> = vec![
        (
            "not TOML",
            write("a.toml", "this is = = not toml ["),
            2,
            vec!["a.toml:1:", "not valid TOML"],
        ),
        (
            "unknown field",
            write(
                "b.toml",
                &format!(
                    "{scripted}[[agents]]\nid = \"a\"\nprovider = \"p\"\nsytem_prompt = \"x\"\n"
                ),
            ),
            2,
            vec!["b.toml:8:", "did you mean `system_prompt`"],
        ),
        (
            "missing key variable",
            write(
                "c.toml",
                &format!(
                    "[[providers]]\nname = \"p\"\nkind = \"openai\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"RUNTAPE_TEST_UNSET_KEY_VAR\"\n{agent}"
                ),
            ),
            2,
            vec!["c.toml:5:", "RUNTAPE_TEST_UNSET_KEY_VAR", "is unset"],
        ),
        (
            "http to a remote host",
            write(
                "d.toml",
                &format!(
                    "[[providers]]\nname = \"p\"\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"http://example.com/v1\"\n{agent}"
                ),
            ),
            2,
            vec!["d.toml:5:", "non-loopback"],
        ),
        (
            "unknown tool in a grant",
            write("e.toml", &format!("{scripted}{agent}tools = [\"serch\"]\n")),
            2,
            vec!["e.toml:8:", "unknown tool `serch`"],
        ),
        (
            "unreachable exit",
            write(
                "f.toml",
                &format!(
                    "{scripted}{agent}[[agents]]\nid = \"b\"\nprovider = \"p\"\n[plan]\nentry = \"a\"\nexits = [\"b\"]\n"
                ),
            ),
            2,
            vec!["f.toml:", "unreachable from entry"],
        ),
        (
            "command not on PATH",
            write(
                "g.toml",
                &format!(
                    "{scripted}[[tools]]\nname = \"t\"\ndescription = \"x\"\ncommand = [\"runtape-no-such-program-4711\"]\n{agent}tools = [\"t\"]\n"
                ),
            ),
            2,
            vec!["g.toml:", "is not on PATH"],
        ),
    ];
    for (what, spec, code, needles) in cases {
        let o = on(&db)
            .args(["run"])
            .arg(&spec)
            .arg("go")
            .env("RUNTAPE_TEST_OTHER_KEY", "sk-test-SECRET-123456")
            .output()
            .expect("runs");
        let e = err(&o);
        assert_eq!(o.status.code(), Some(code), "{what}: {e}");
        assert_eq!(e.lines().count(), 1, "{what}: one line: {e}");
        for n in needles {
            assert!(e.contains(n), "{what}: `{n}` not in: {e}");
        }
        assert!(!e.contains("sk-test-SECRET"), "{what}: no value is printed");
        assert!(out(&o).is_empty(), "{what}: nothing started: {}", out(&o));
        assert_eq!(
            db_snapshot(&db),
            before,
            "{what}: the database is unchanged"
        );
    }
    // An unknown run id.
    let o = runtape(&db, &["resume", "no-such-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(err(&o).lines().count(), 1);
    assert!(err(&o).contains("no run with id `no-such-run`"));
    assert_eq!(db_snapshot(&db), before);

    // A database file that is not SQLite, and one from a newer runtape: exit 3, unchanged.
    let junk = write("junk.db", &"not sqlite\n".repeat(300));
    let o = runtape(&junk, &["run", utf8(&example("quickstart.toml"))]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(err(&o).lines().count(), 1);
    assert!(err(&o).contains("is not a runtape database"));
    assert_eq!(
        std::fs::read(&junk).expect("reads"),
        "not sqlite\n".repeat(300).into_bytes()
    );
    let newer = dir.path().join("newer.db");
    std::fs::copy(&db, &newer).expect("copies");
    rusqlite::Connection::open(&newer)
        .expect("opens")
        .pragma_update(None, "user_version", 99)
        .expect("bumps");
    let newer_before = db_snapshot(&newer);
    let o = runtape(&newer, &["run", utf8(&example("quickstart.toml"))]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains("newer than this runtape supports"),
        "{}",
        err(&o)
    );
    assert_eq!(db_snapshot(&newer), newer_before);
}
