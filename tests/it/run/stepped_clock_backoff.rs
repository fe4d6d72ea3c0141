//! `--stepped-clock` drives a run's retry backoff through the real binary: a model that fails
//! with a retryable error under ten-minute backoffs is retried at once and the run ends after
//! its three attempts, where the same run on the system clock is still waiting out its first
//! backoff two seconds in.

use std::time::Duration;

use crate::support::cli::{json_lines, on, runtape, text, utf8, write};

/// A spec whose scripted model fails every attempt (`provider_unavailable`), tried three times
/// with a ten-minute backoff between attempts.
const SPEC: &str = r#"goal = "answer"
[[providers]]
name = "p"
kind = "scripted"
replies = [
  { error = { class = "provider_unavailable", message = "try later" } },
]
[[agents]]
id = "a"
provider = "p"
max_attempts = 3
backoff = { initial_ms = 600000, max_ms = 600000 }
"#;

/// The edges of the one run in `db`, in order.
fn edges(db: &std::path::Path) -> Vec<String> {
    let runs = json_lines(&runtape(db, &["ls", "--json"]));
    let run = runs[0]["id"].as_str().expect("id").to_owned();
    json_lines(&runtape(db, &["log", "--json", &run]))
        .iter()
        .filter(|l| l["type"] == "step")
        .filter_map(|l| l["edge"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn on_the_stepped_clock_ten_minute_backoffs_pass_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write(dir.path(), "retry.toml", SPEC);
    let db = dir.path().join("stepped.db");
    // Guarded by the support's own minute: twenty minutes of backoff would fail it.
    let out = crate::support::cli::runtape_within(
        &db,
        &["run", utf8(&spec), "--stepped-clock"],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "the run failed: {}", text(&out));
    let edges = edges(&db);
    let retries = edges
        .iter()
        .filter(|e| *e == "generating.failed.retry")
        .count();
    assert_eq!(retries, 2, "two retries, each after its backoff: {edges:?}");

    // The same run on the system clock waits its first backoff out.
    let db = dir.path().join("wall.db");
    let mut child = on(&db)
        .args(["run", utf8(&spec)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().expect("polls").is_none(), "still waiting");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let edges = self::edges(&db);
    assert_eq!(
        edges
            .iter()
            .filter(|e| *e == "generating.failed.retry")
            .count(),
        1,
        "one retry scheduled, not yet sent: {edges:?}"
    );
}
