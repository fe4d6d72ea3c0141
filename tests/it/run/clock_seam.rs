//! The clock seam is whole: outside the clock module (`src/clock.rs`) no code reads the system
//! clock or arms a timer of its own — no `Instant::now`, `SystemTime::now`,
//! `std::thread::sleep`, nor tokio's `sleep`, `sleep_until`, `timeout`, `timeout_at` or
//! `interval`. Every wait that decides what happens (a retry's backoff, a model call's or a
//! tool's timeout, lease renewal, the worker's polling, the wait for a paused run's driver)
//! goes through the engine's `Clock`, so a test or a demo that gives the engine another clock
//! moves all of them; measurements for reports read the clock module's stopwatch. Read from
//! the source.

use crate::support::sources::{sources, src, without_unit_tests};

/// What only the clock module may write. `time::sleep` also catches `sleep_until`,
/// `time::timeout` also `timeout_at`, `time::interval` also `interval_at`.
const CLOCK_CALLS: [&str; 6] = [
    "Instant::now",
    "SystemTime::now",
    "thread::sleep",
    "time::sleep",
    "time::timeout",
    "time::interval",
];

/// Where the rule does not apply, and why.
const ALLOWED: [(&str, &str); 5] = [
    ("clock.rs", "the clock module itself"),
    (
        "bench/",
        "the benchmarks (binary only) measure wall time and pace their mock replies on it",
    ),
    (
        "exec/protocol_model/",
        "a stateright model, compiled for tests only, that times its own check",
    ),
    (
        "store/session_model.rs",
        "a stateright model, compiled for tests only, that times its own check",
    ),
    (
        "store/publish_model/",
        "a stateright model, compiled for tests only, that times its own check",
    ),
];

#[test]
fn only_the_clock_module_reads_the_system_clock_or_arms_a_timer() {
    let root = src();
    for (path, _) in ALLOWED {
        assert!(
            root.join(path).exists(),
            "the allow-list names `src/{path}`, which is gone: take it off"
        );
    }
    let files = sources(&root);
    assert!(files.len() > 100, "read only {} files", files.len());
    let mut calls = Vec::new();
    let mut in_clock = 0;
    for (file, code) in &files {
        let rel = file
            .strip_prefix(&root)
            .expect("under src")
            .to_string_lossy()
            .into_owned();
        let allowed = ALLOWED.iter().any(|(p, _)| rel.starts_with(p));
        for line in without_unit_tests(code).lines() {
            let clock_call = CLOCK_CALLS.iter().any(|c| line.contains(c))
                || (line.contains("use tokio::time::")
                    && ["sleep", "timeout", "interval"]
                        .iter()
                        .any(|t| line.contains(t)));
            if !clock_call {
                continue;
            }
            if rel == "clock.rs" {
                in_clock += 1;
            }
            if !allowed {
                calls.push(format!("src/{rel}: {}", line.trim()));
            }
        }
    }
    // The clock module is where they are: a scan that found none there is not reading the
    // code it means to.
    assert!(
        in_clock >= 4,
        "found {in_clock} clock calls in src/clock.rs"
    );
    assert!(
        calls.is_empty(),
        "read the clock through the engine's `Clock` (or the clock module's `system`, \
         `timeout`, `stopwatch`, `wall_ms`) instead:\n{}",
        calls.join("\n")
    );
}
