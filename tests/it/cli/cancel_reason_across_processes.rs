//! `runtape cancel RUN --reason TEXT` from a second process, while a first `runtape run`
//! drives the run: the driver records the reason given, not a stand-in, so `show` and the
//! history say why the run was cancelled.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ChildStdout;

use crate::support::cli::{runtape, start_json, text};

/// A run of many slow turns, each calling a `cat` tool: long enough to be cancelled midway.
fn slow_spec(dir: &Path) -> PathBuf {
    let replies: Vec<String> = (0..50)
        .map(|i| format!("{{ tool_calls = [{{ name = \"tick\", arguments = {{ n = {i} }} }}] }}"))
        .chain(std::iter::once("{ text = \"done\" }".to_owned()))
        .collect();
    let spec = format!(
        "goal = \"tick\"\n[[providers]]\nname = \"s\"\nkind = \"scripted\"\nlatency_ms = 150\nreplies = [{}]\n\
         [[tools]]\nname = \"tick\"\ndescription = \"tick\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nschema = {{ type = \"object\" }}\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"tick\"]\n",
        replies.join(", ")
    );
    let path = dir.join("slow.toml");
    std::fs::write(&path, spec).expect("writes");
    path
}

/// Reads the driver's output until it has committed step `seq`.
fn wait_for_step(lines: &mut BufReader<ChildStdout>, seq: u64) {
    let mut line = String::new();
    while lines.read_line(&mut line).expect("reads") > 0 {
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
        if v["seq"].as_u64().is_some_and(|s| s >= seq) {
            return;
        }
        line.clear();
    }
    panic!("the run ended before step {seq}");
}

#[test]
fn the_reason_given_to_cancel_from_another_process_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let spec = slow_spec(dir.path());
    let (child, mut lines, run) = start_json(&db, &spec);
    wait_for_step(&mut lines, 3);

    let o = runtape(&db, &["cancel", &run, "--reason", "budget review: stop"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let driver = child.wait_with_output().expect("the driver exits");
    assert_eq!(driver.status.code(), Some(1), "a cancelled run exits 1");

    let o = runtape(&db, &["show", &run, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        shown["event"]["body"]["reason"], "budget review: stop",
        "the driver recorded the reason: {shown}"
    );
    assert_eq!(shown["state"]["outcome"]["outcome"], "cancelled", "{shown}");
    assert_eq!(
        shown["state"]["outcome"]["reason"], "budget review: stop",
        "{shown}"
    );
    let o = runtape(&db, &["show", &run]);
    assert!(
        text(&o).contains("cancelled budget review: stop"),
        "{}",
        text(&o)
    );
    assert!(runtape(&db, &["verify", &run]).status.success());
}
