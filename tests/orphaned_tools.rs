//! Tool programs outliving a killed engine: a command tool starts a grandchild
//! (`sleep 1000 &`) and waits; the engine is killed with SIGKILL, which leaves both running.
//! `runtape resume` (or `runtape cancel`) kills them — the tool and its grandchild — before the
//! call is performed again, and they are gone: this test process is their subreaper, so it
//! collects them and sees that they were killed by SIGKILL, leaving no zombie behind.
//!
//! A test binary of its own, not a module of `tests/it`: it makes the test process the
//! subreaper of everything it starts, for the rest of its life, so in a shared process the
//! orphans of every other test would become this process's children (zombies nobody reaps).
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use rustix::process::{Pid, WaitOptions, getpid, set_child_subreaper, waitpid};

/// Running the binary and reading what it printed: the integration tests' own helpers.
#[path = "it/support/cli.rs"]
mod cli;

const TOOL: &str = r#"#!/bin/sh
# The second performance of the call records whether the first one and its grandchild are
# still alive when it starts, then answers at once.
state() { s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); echo "${s:-gone}"; }
if [ -e first.started ]; then
  echo "tool=$(state "$(cat tool.pid)") grandchild=$(state "$(cat grandchild.pid)")" > second.seen
  echo '"second"'
  exit 0
fi
touch first.started
sleep 1000 &
echo $! > grandchild.pid
echo $$ > tool.pid.tmp && mv tool.pid.tmp tool.pid
wait
"#;

const SPEC: &str = r#"goal = "spawn"
[[providers]]
name = "s"
kind = "scripted"
replies = [{ tool_calls = [{ name = "spawn", arguments = {} }] }, { text = "done" }]
[[tools]]
name = "spawn"
command = ["sh", "tool.sh"]
idempotent = true
read_only = true
[[agents]]
id = "a"
provider = "s"
"#;

/// The state letter of `pid` (`S`, `R`, `Z`, ...), or `None` when it does not exist.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid")
}

struct Orphans {
    dir: tempfile::TempDir,
    db: PathBuf,
    run: String,
    tool: i32,
    grandchild: i32,
}

/// Starts the run, waits until its tool has started the grandchild, and kills the engine
/// with SIGKILL.
fn killed_mid_call() -> Orphans {
    // Orphans of the killed engine become this process's children, so it can reap them and
    // read how they died (and no zombie is left to the system's init, which may not reap).
    set_child_subreaper(Some(getpid())).expect("PR_SET_CHILD_SUBREAPER");
    let (dir, db) = cli::temp_db();
    cli::write(dir.path(), "tool.sh", TOOL);
    let spec = cli::write(dir.path(), "spec.toml", SPEC);
    let mut engine: Child = cli::on(&db)
        .args(["run", "--json"])
        .arg(&spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(engine.stdout.take().expect("stdout"));
    let mut run = String::new();
    let mut line = String::new();
    while lines.read_line(&mut line).expect("reads") > 0 {
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        if v["type"] == "run" {
            run = v["id"].as_str().expect("id").to_owned();
        }
        if v["type"] == "tool.call" {
            break;
        }
        line.clear();
    }
    let pid_file = dir.path().join("tool.pid");
    while !pid_file.exists() {
        if let Some(status) = engine.try_wait().expect("polls") {
            panic!("the engine ended ({status}) before its tool started");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.kill().expect("SIGKILL");
    engine.wait().expect("reaped");
    let tool = read_pid(&pid_file);
    let grandchild = read_pid(&dir.path().join("grandchild.pid"));
    for (what, pid) in [("tool", tool), ("grandchild", grandchild)] {
        assert!(
            matches!(state(pid), Some('S' | 'R' | 'D')),
            "the {what} outlives the killed engine (that is the bug this guards against)"
        );
    }
    Orphans {
        dir,
        db,
        run,
        tool,
        grandchild,
    }
}

/// [`killed_mid_call`], then `runtape COMMAND RUN` on its run.
fn killed_then(command: &str) -> (Orphans, Output) {
    let o = killed_mid_call();
    let out = cli::runtape(&o.db, &[command, &o.run]);
    (o, out)
}

/// Both orphans were killed with SIGKILL, and collecting them leaves nothing behind.
fn assert_killed_and_collected(o: &Orphans) {
    for (what, pid) in [("tool", o.tool), ("grandchild", o.grandchild)] {
        let reaped = match waitpid(Pid::from_raw(pid), WaitOptions::NOHANG) {
            // The group's SIGKILL reaches the grandchild and its parent (the tool's shell,
            // blocked in `wait`) in turn; when the grandchild dies first, the shell can reap
            // it before its own SIGKILL lands, so it never becomes ours. Then it must be gone.
            Err(rustix::io::Errno::CHILD) if what == "grandchild" => {
                assert_eq!(
                    state(pid),
                    None,
                    "the {what} was reaped by its parent, so it is gone"
                );
                continue;
            }
            other => other.expect("our child"),
        };
        let (_, status) = reaped.unwrap_or_else(|| panic!("the {what} is still running"));
        assert_eq!(
            status.terminating_signal(),
            Some(9),
            "the {what} was killed by SIGKILL"
        );
        assert_eq!(state(pid), None, "the {what} left no zombie");
    }
}

#[test]
fn resume_kills_the_killed_engines_tool_and_grandchild_before_performing_the_call_again() {
    let (o, out) = killed_then("resume");
    assert_eq!(out.status.code(), Some(0), "{}", cli::err(&out));
    assert!(cli::out(&out).contains("completed"), "{}", cli::out(&out));
    let seen = std::fs::read_to_string(o.dir.path().join("second.seen"))
        .expect("the call was performed again");
    for part in seen.split_whitespace() {
        let (what, state) = part.split_once('=').expect("what=state");
        assert!(
            state == "Z" || state == "gone",
            "{what} was {state} when the call was performed again"
        );
    }
    assert_killed_and_collected(&o);

    // A later resume of the finished run has nothing to kill and changes nothing.
    let again = cli::runtape(&o.db, &["resume", &o.run]);
    assert_eq!(again.status.code(), Some(2), "{}", cli::err(&again));
}

#[test]
fn cancel_of_an_undriven_run_kills_the_orphans_too() {
    let (o, out) = killed_then("cancel");
    assert_eq!(out.status.code(), Some(0), "{}", cli::err(&out));
    assert!(
        !o.dir.path().join("second.seen").exists(),
        "nothing performed"
    );
    assert_killed_and_collected(&o);
}
