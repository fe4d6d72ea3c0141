//! The SQLite writer thread's priority, with the real binary on Linux: by default it runs ten
//! nice steps ahead of the process where the OS permits (`CAP_SYS_NICE`), else at the
//! process's priority; `$RUNTAPE_WRITER_NICE` sets it; a bad value is one line, exit 2, and no
//! database. The WAL checkpointer gives way (nice 19) where it could take its priority back,
//! else keeps the process's. A tool the run starts runs at the process's priority, never the
//! writer's or the checkpointer's.
#![cfg(target_os = "linux")]

use crate::support;
use crate::support::cli::on;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::cli::{temp_db, utf8};
use support::protocol::*;

/// The nice value of each thread of `pid` named `comm`.
fn thread_nices(pid: u32, comm: &str) -> Vec<i32> {
    let mut nices = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let task = task.expect("task").path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if name.trim_end() != comm {
            continue;
        }
        let stat = std::fs::read_to_string(task.join("stat")).expect("stat");
        // After the `(comm)` field: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').expect("comm ends") + 2..];
        let nice = rest.split(' ').nth(16).expect("nice field");
        nices.push(nice.parse().expect("a number"));
    }
    nices
}

/// Whether this process may lower nice values (`CAP_SYS_NICE`, bit 23 of `CapEff`).
fn may_boost() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 23) != 0)
}

/// `runtape` as this process may run it (`unprivileged`: without `CAP_SYS_NICE`, dropped
/// with util-linux's `setpriv` when this process has it, so both paths are tested as root).
fn runtape_cmd(unprivileged: bool) -> Command {
    if unprivileged && may_boost() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set", "-sys_nice", env!("CARGO_BIN_EXE_runtape")]);
        for var in ["RUNTAPE_DB", "RUNTAPE_RECEIPT_KEY", "RUNTAPE_WRITER_NICE"] {
            c.env_remove(var);
        }
        c
    } else {
        bin()
    }
}

/// This process's nice value, which a child inherits.
fn own_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm ends") + 2..];
    rest.split(' ')
        .nth(16)
        .expect("nice")
        .parse()
        .expect("number")
}

/// The nice values of a run's threads and its tool.
#[derive(Debug, PartialEq, Eq)]
struct Nices {
    writer: i32,
    checkpointer: i32,
    tool: i32,
}

/// Starts a run whose tool records its own nice value and then sleeps, and returns, while the
/// tool runs, the nice values of the writer thread, the checkpointer thread and the tool; then
/// stops the run.
fn nices_while_running(dir: &Path, unprivileged: bool, env: &[(&str, &str)]) -> Nices {
    let db = dir.join("runs.db");
    let spec = charge_spec(dir, &ChargeSpec::running("nice > tool_nice; sleep 30"));
    let mut cmd = runtape_cmd(unprivileged);
    cmd.arg("--db")
        .arg(&db)
        .args(["run", "--json"])
        .arg(&spec)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("starts");
    let mut first = String::new();
    // Kept open: with --json a closed stdout stops the run.
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdout.read_line(&mut first).expect("the run id");
    wait_until("the tool has recorded its priority", || {
        std::fs::read_to_string(dir.join("tool_nice")).is_ok_and(|t| t.ends_with('\n'))
    });
    let writer = thread_nices(child.id(), "runtape-writer");
    // A thread's name is cut to 15 bytes.
    let checkpointer = thread_nices(child.id(), "runtape-checkpo");
    let tool: i32 = std::fs::read_to_string(dir.join("tool_nice"))
        .expect("written")
        .trim()
        .parse()
        .expect("a number");
    signal(child.id(), "KILL");
    let _ = child.wait();
    drop(stdout);
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut stderr));
    assert!(first.contains("\"id\""), "started: {first} {stderr}");
    assert_eq!(writer.len(), 1, "one writer thread: {writer:?} {stderr}");
    assert_eq!(
        checkpointer.len(),
        1,
        "one checkpointer: {checkpointer:?} {stderr}"
    );
    Nices {
        writer: writer[0],
        checkpointer: checkpointer[0],
        tool,
    }
}

#[test]
fn the_writer_runs_ahead_of_the_process_where_permitted_and_tools_do_not() {
    let process = own_nice();
    if may_boost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nices = nices_while_running(dir.path(), false, &[]);
        assert_eq!(
            nices,
            Nices {
                writer: (process - 10).max(-20),
                checkpointer: 19,
                // The tool runs at the process's priority.
                tool: process,
            },
            "boosted, and the checkpointer gives way"
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let nices = nices_while_running(dir.path(), true, &[]);
    assert_eq!(
        nices,
        Nices {
            writer: process,
            checkpointer: process,
            tool: process,
        },
        "not permitted: the process's own priority, and nothing given up it could not take back"
    );
}

#[test]
fn the_variable_sets_the_writer_nice_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wanted = (own_nice() + 7).min(19);
    let nices = nices_while_running(
        dir.path(),
        false,
        &[("RUNTAPE_WRITER_NICE", &wanted.to_string())],
    );
    assert_eq!(nices.writer, wanted);
    assert_eq!(nices.tool, own_nice());
}

#[test]
fn a_bad_value_is_one_line_and_no_database() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::default());
    for bad in ["high", "-21", "20", "1.5"] {
        let o = on(&db)
            .args(["run", utf8(&spec)])
            .env("RUNTAPE_WRITER_NICE", bad)
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
        let line = one_line(&err(&o)).to_owned();
        assert!(line.contains("RUNTAPE_WRITER_NICE"), "{line}");
        assert!(!db.exists(), "{bad}: nothing written");
        assert_eq!(charge_lines(dir.path()), 0, "nothing performed");
    }
}

#[test]
fn a_boost_the_os_refuses_is_one_line_and_nothing_performed() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::default());
    let o = runtape_cmd(true)
        .arg("--db")
        .arg(&db)
        .args(["run", utf8(&spec)])
        .env("RUNTAPE_WRITER_NICE", "-20")
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let line = one_line(&err(&o)).to_owned();
    assert!(
        line.contains("nice -20") && line.contains("RUNTAPE_WRITER_NICE"),
        "{line}"
    );
    assert_eq!(charge_lines(dir.path()), 0, "nothing performed");
}

/// `runtape bench --only w5 --json`'s report of the writer's and the checkpointer's priority.
fn w5_priorities(unprivileged: bool) -> (serde_json::Value, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = runtape_cmd(unprivileged)
        .args([
            "bench", "--only", "w5", "--runs", "20", "--reps", "1", "--json", "--dir",
        ])
        .arg(dir.path())
        .env_remove("RUNTAPE_WRITER_NICE")
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", err(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    (
        report["w5"]["writer_nice"].clone(),
        report["w5"]["checkpointer_gives_way"].clone(),
    )
}

#[test]
fn the_bench_reports_whether_the_checkpointer_gave_way() {
    let process = own_nice();
    if may_boost() {
        assert_eq!(
            w5_priorities(false),
            (
                serde_json::json!((process - 10).max(-20)),
                serde_json::json!(true)
            )
        );
    }
    assert_eq!(
        w5_priorities(true),
        (serde_json::json!(process), serde_json::json!(false)),
        "not permitted: nothing given up"
    );
}
