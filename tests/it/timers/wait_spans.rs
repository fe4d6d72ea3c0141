//! OpenTelemetry spans cover timer waits: each timer that fires is a `wait sleep` or
//! `wait deadline` span from the transition that started it to its firing, saying its due
//! instant and what fired it. On the stepped clock (`examples/nap.toml`: an hour's sleep, then
//! a day's deadline on an approval) both fire in the process that ran the run, each at its
//! instant (`fired_by = clock`); a run killed asleep and woken early by `runtape wake` in
//! another process gets one span begun where the first process started the sleep, ended
//! before its due instant (`fired_by = wake`). The in-process OTLP receiver on 127.0.0.1.

use crate::support::cli::{example, on, text};
use crate::support::otlp::{Span, of_run, receiver, spans};

use super::{fired, killed_asleep, ms_of, steps};

const HOUR_MS: u64 = 3_600_000;

/// Runs `runtape --db DB ARGS…` exporting to `url`; it must succeed.
fn exporting(db: &std::path::Path, url: &str, args: &[&str]) -> std::process::Output {
    let out = on(db)
        .args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        .output()
        .expect("runs the binary");
    assert!(out.status.success(), "{}", text(&out));
    out
}

/// The timer-wait spans of `run` among `all`.
fn waits<'a>(all: &'a [Span], run: &str) -> Vec<&'a Span> {
    of_run(all, run)
        .into_iter()
        .filter(|s| s.name.starts_with("wait "))
        .collect()
}

fn int(s: &Span, key: &str) -> u64 {
    s.attrs[key]
        .as_u64()
        .unwrap_or_else(|| panic!("span {} has no integer {key}", s.name))
}

#[test]
fn the_stepped_clock_fires_a_sleep_and_a_deadline_each_in_a_span_of_its_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("nap.db");
    let (url, got) = receiver();
    let nap = example("nap.toml");
    let out = exporting(
        &db,
        &url,
        &[
            "run",
            nap.to_str().expect("utf-8"),
            "--stepped-clock",
            "--json",
        ],
    );
    let first = String::from_utf8_lossy(&out.stdout);
    let run: serde_json::Value =
        serde_json::from_str(first.lines().next().expect("a line")).expect("JSON");
    let run = run["id"].as_str().expect("id").to_owned();

    let all = spans(&got);
    let waits = waits(&all, &run);
    assert_eq!(waits.len(), 2, "one span per timer: {waits:#?}");
    let root = of_run(&all, &run)
        .into_iter()
        .find(|s| s.name == "invoke_workflow runtape")
        .expect("the run's span")
        .clone();
    for (name, kind, lasts) in [
        ("wait sleep", "sleep", HOUR_MS),
        ("wait deadline", "deadline", 24 * HOUR_MS),
    ] {
        let w = waits
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no `{name}` span: {waits:#?}"));
        assert_eq!(w.text("runtape.timer.kind"), kind);
        assert_eq!(w.text("runtape.timer.fired_by"), "clock", "{w:#?}");
        assert_eq!(w.attrs["runtape.timer.early"], false);
        let due = int(w, "runtape.timer.due_ms");
        assert_eq!(
            due - w.start_ms,
            lasts,
            "begun when the timer started: {w:#?}"
        );
        assert_eq!(w.end_ms, due, "fired at its instant on this clock: {w:#?}");
        assert_eq!(
            w.text("runtape.timer.due"),
            runtape::schedule::cron::rfc3339(due)
        );
        assert_eq!(
            (w.trace.as_str(), w.parent.as_str()),
            (root.trace.as_str(), root.id.as_str())
        );
    }
    // The spans' instants are the committed history's.
    let fired_at: Vec<u64> = fired(&db, &run)
        .iter()
        .map(|s| s["at_ms"].as_u64().expect("at_ms"))
        .collect();
    let mut ends: Vec<u64> = waits.iter().map(|w| w.end_ms).collect();
    ends.sort_unstable();
    assert_eq!(ends, fired_at);
}

#[test]
fn a_sleep_woken_early_in_another_process_spans_from_the_sleeps_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);
    let (url, got) = receiver();
    exporting(&db, &url, &["wake", &run]);

    let all = spans(&got);
    let waits = waits(&all, &run);
    assert_eq!(waits.len(), 1, "{waits:#?}");
    let w = waits[0];
    assert_eq!(w.name, "wait sleep");
    assert_eq!(w.text("runtape.timer.fired_by"), "wake", "{w:#?}");
    assert_eq!(w.attrs["runtape.timer.early"], true);
    assert_eq!(int(w, "runtape.timer.due_ms"), ms_of(due));
    let started_seq = int(w, "runtape.timer.started_seq");
    let started = steps(&db, &run)
        .into_iter()
        .find(|s| s["seq"].as_u64() == Some(started_seq))
        .expect("the step that started the sleep");
    assert_eq!(
        w.start_ms,
        started["at_ms"].as_u64().expect("at_ms"),
        "begun when the killed process started the sleep"
    );
    let fired = fired(&db, &run);
    assert_eq!(w.end_ms, fired[0]["at_ms"].as_u64().expect("at_ms"));
    assert!(w.end_ms < ms_of(due), "woken before its instant: {w:#?}");
}
