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
use std::process::{Child, Command, Output, Stdio};

use rustix::process::{Pid, WaitOptions, getpid, set_child_subreaper, waitpid};

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

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_runtape"));
    c.env_remove("RUNTAPE_DB").env_remove("RUNTAPE_RECEIPT_KEY");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

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
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tool.sh"), TOOL).expect("tool");
    let spec = dir.path().join("spec.toml");
    std::fs::write(&spec, SPEC).expect("spec");
    let db = dir.path().join("runs.db");
    let mut engine: Child = bin()
        .arg("--db")
        .arg(&db)
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

fn runtape(o: &Orphans, args: &[&str]) -> Output {
    bin()
        .arg("--db")
        .arg(&o.db)
        .args(args)
        .output()
        .expect("runs")
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
    let o = killed_mid_call();
    let out = runtape(&o, &["resume", &o.run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("completed"),
        "{}",
        text(&out.stdout)
    );
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
    let again = runtape(&o, &["resume", &o.run]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
}

#[test]
fn cancel_of_an_undriven_run_kills_the_orphans_too() {
    let o = killed_mid_call();
    let out = runtape(&o, &["cancel", &o.run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !o.dir.path().join("second.seen").exists(),
        "nothing performed"
    );
    assert_killed_and_collected(&o);
}
