//! Crash safety with real processes: a child drives a run with parallel tool calls (one
//! idempotent, one not, each appending a line to a file); the parent SIGKILLs it at 50
//! instants spread over the run, resumes in a fresh process each time, and checks:
//! - the run ends in the same final state (same hash) as an uninterrupted run, unless the kill
//!   left a non-idempotent call in doubt, in which case `EffectInDoubt` was recorded and the
//!   agent's `on_in_doubt` policy (fail, retry, ask — rotated over the kills) was applied;
//! - no transition committed before the kill was lost or changed;
//! - the idempotent tool only ever repeated with the same idempotency key;
//! - the non-idempotent tool ran at most once per call.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::support::cli::temp_db;
use support::durable::child::*;
use support::durable::spawn_child;

const CHILD_TEST: &str = concat!(module_path!(), "::child_process_entry");

#[test]
fn child_process_entry() {
    support::durable::child::child_main();
}

struct Row {
    seq: i64,
    event: String,
    effects: String,
    edge: String,
    hash: Vec<u8>,
    chain: Vec<u8>,
}

fn history(db: &Path, run: &str) -> Vec<Row> {
    if !db.exists() {
        return Vec::new();
    }
    let conn = crate::support::cli::read_only(db);
    let Ok(key) = conn.query_row("SELECT key FROM runs WHERE id = ?1", [run], |r| {
        r.get::<_, i64>(0)
    }) else {
        return Vec::new();
    };
    let mut stmt = conn
        .prepare("SELECT id, event, edge, state_hash, chain, effects FROM transitions WHERE id >> 32 = ?1 ORDER BY id")
        .expect("prepares");
    stmt.query_map([key], |r| {
        Ok(Row {
            seq: r.get::<_, i64>(0)? & 0xffff_ffff,
            event: json_text(&r.get::<_, Vec<u8>>(1)?),
            edge: runtape::format::stored::stored_edge(r.get_ref(2)?.as_bytes()?)
                .expect("a stored edge")
                .as_str()
                .to_owned(),
            hash: r.get(3)?,
            chain: r.get(4)?,
            effects: json_text(&r.get::<_, Vec<u8>>(5)?),
        })
    })
    .expect("queries")
    .collect::<Result<_, _>>()
    .expect("reads")
}

/// A stored JSON column as text (packed JSON is unpacked first).
fn json_text(stored: &[u8]) -> String {
    let json = runtape::format::packed::unpack(stored).expect("a readable column");
    String::from_utf8_lossy(&json).into_owned()
}

fn env(dir: &Path, mode: &str, policy: &str) -> Vec<(&'static str, String)> {
    vec![
        (MODE, mode.into()),
        (DB, dir.join("runs.db").display().to_string()),
        (RUN, "crash-run".into()),
        (FILE, dir.join("effects.log").display().to_string()),
        (POLICY, policy.into()),
    ]
}

/// Resumes the run in a fresh process; returns the run's final status as stored.
fn finish(dir: &Path, policy: &str) -> String {
    let out = spawn_child(CHILD_TEST, &env(dir, "resume", policy))
        .wait_with_output()
        .expect("child runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Exit 4 with "already ended": the kill fell after the run had finished.
    assert!(
        out.status.success() || stderr.contains("has already ended"),
        "resume failed: {stderr}"
    );
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("opens");
    conn.query_row("SELECT status FROM runs WHERE id = 'crash-run'", [], |r| {
        r.get(0)
    })
    .expect("run row")
}

#[test]
fn killed_at_fifty_instants_every_run_resumes_correctly() {
    if std::env::var(MODE).is_ok() {
        return;
    }
    // The uninterrupted reference run.
    let reference = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let out = spawn_child(CHILD_TEST, &env(reference.path(), "start", "fail"))
        .wait_with_output()
        .expect("runs");
    let duration = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ref_rows = history(&reference.path().join("runs.db"), "crash-run");
    let ref_hash = ref_rows.last().expect("reference has history").hash.clone();
    let ref_lines = std::fs::read_to_string(reference.path().join("effects.log")).expect("log");
    assert_eq!(ref_lines.lines().count(), 2 * ROUNDS);

    let kills = 50u32;
    let (mut in_doubt, mut clean, mut before_any) = (0, 0, 0);
    let mut outcomes: BTreeMap<&str, u32> = BTreeMap::new();
    for i in 0..kills {
        let (dir, db) = temp_db();
        let policy = ["fail", "retry", "ask"][(i % 3) as usize];
        let delay = duration.mul_f64(f64::from(i + 1) / f64::from(kills + 2));
        let mut child = spawn_child(CHILD_TEST, &env(dir.path(), "start", policy));
        std::thread::sleep(delay);
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let at_kill = history(&db, "crash-run");
        if at_kill.is_empty() {
            before_any += 1;
        }

        let status = finish(dir.path(), policy);
        let after = history(&db, "crash-run");
        // No committed transition lost or changed.
        for (k, a) in at_kill.iter().zip(&after) {
            assert_eq!(
                (k.seq, &k.hash, &k.chain),
                (a.seq, &a.hash, &a.chain),
                "kill {i}: seq {} changed",
                k.seq
            );
        }
        assert!(after.len() >= at_kill.len(), "kill {i}: transitions lost");
        let seqs: Vec<i64> = after.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (1..=after.len() as i64).collect::<Vec<_>>(),
            "kill {i}: history has gaps"
        );

        // Side effects: idempotent repeats keep their key; the other tool ran at most once per call.
        let lines = std::fs::read_to_string(dir.path().join("effects.log")).unwrap_or_default();
        let mut once: BTreeMap<&str, u32> = BTreeMap::new();
        for line in lines.lines() {
            let (tool, key) = line.split_once(' ').expect("tool key");
            let quoted = format!("\"idempotency_key\":\"{key}\"");
            let issued = after.iter().any(|r| r.effects.contains(&quoted));
            assert!(
                issued,
                "kill {i}: {tool} ran with key {key} that no committed effect carries"
            );
            if tool == "once" {
                *once.entry(key).or_default() += 1;
            }
        }
        let doubted = after
            .iter()
            .any(|r| r.event.contains("\"effect_in_doubt\""));
        for (key, &n) in &once {
            // A repeat is only ever the policy at work: the call was recorded in doubt and
            // `retry` (or a person, under `ask`) authorised performing it again.
            let (seq, idx) = key
                .rsplit_once(':')
                .map(|(a, b)| (a.rsplit(':').next().unwrap_or(""), b))
                .expect("key");
            let marker = format!(
                "\"effect_in_doubt\",\"effect\":{{\"run\":\"crash-run\",\"seq\":{seq},\"index\":{idx}}}"
            );
            let doubts = after.iter().filter(|r| r.event.contains(&marker)).count() as u32;
            let allowed = if policy == "fail" { 1 } else { 1 + doubts };
            assert!(
                n <= allowed,
                "kill {i}: non-idempotent call {key} ran {n} times with {doubts} in-doubt records under {policy}"
            );
        }

        if doubted {
            in_doubt += 1;
            match policy {
                "fail" => {
                    assert_eq!(status, "failed", "kill {i}");
                    assert!(
                        after
                            .last()
                            .is_some_and(|r| r.edge == "calling_tools.in_doubt.fail")
                    );
                }
                "retry" => {
                    assert_eq!(status, "completed", "kill {i}");
                    assert!(
                        after
                            .iter()
                            .any(|r| r.edge == "calling_tools.in_doubt.retry")
                    );
                }
                _ => {
                    assert_eq!(status, "completed", "kill {i}");
                    assert!(
                        after
                            .iter()
                            .any(|r| r.edge.starts_with("calling_tools.in_doubt.ask"))
                    );
                    assert!(after.iter().any(|r| r.event.contains("\"input_provided\"")));
                }
            }
        } else {
            clean += 1;
            assert_eq!(status, "completed", "kill {i}");
            assert_eq!(
                after.last().expect("history").hash,
                ref_hash,
                "kill {i}: final state differs from the uninterrupted run"
            );
            assert_eq!(
                once.len(),
                ROUNDS,
                "kill {i}: every non-idempotent call ran exactly once"
            );
        }
        *outcomes
            .entry(if doubted { "in doubt" } else { "clean" })
            .or_default() += 1;
    }
    println!(
        "{kills} kills over a {duration:?} run: {clean} resumed to the reference state, {in_doubt} in doubt (policy applied), {before_any} before the first commit"
    );
    assert!(
        in_doubt >= 1,
        "no kill landed in a non-idempotent call's window; widen it"
    );
    assert!(clean >= 10, "too few kills resumed cleanly: {outcomes:?}");
}
