//! Concurrent resumers, with real processes: a run is SIGKILLed while its one non-idempotent
//! call ("charge") is in flight, then K `runtape resume RUN` processes start together.
//!
//! Exactly one of them takes the run up (its lease is taken by compare-and-swap before
//! anything is read); it finds the call in doubt and, under `on_in_doubt = "fail"`, ends the
//! run failed. Every other resumer is refused with one line and writes nothing: no
//! transition, no lease epoch, no status. The checker after every trial:
//!
//! - no idempotency key of the non-idempotent tool was performed twice;
//! - no run is left `running` without a live driver;
//! - the history is contiguous and verifies, and the lease was taken exactly once.
//!
//! Every run checks K = 2, 4, 8 with 20 trials each, and K = 3, 6, 12, 16 with 2 trials each.
//! The soak raises the trials of every K:
//!
//! ```sh
//! RUNTAPE_SOAK_TRIALS=200 cargo test --release --test it run::concurrent_resumers -- --nocapture
//! ```

use crate::support;
use crate::support::cli::{all_at_once, on};

use std::path::Path;
use std::process::Output;

use crate::support::cli::temp_db;
use support::protocol::*;

/// What went wrong in one trial, if anything.
fn trial(k: usize) -> Result<(), String> {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::default());
    let run = run_killed_mid_charge(dir.path(), &db, &spec);
    let before = run_row(&db, &run);
    let outputs = all_at_once((0..k).map(|_| {
        let mut resume = on(&db);
        resume.args(["resume", &run]).current_dir(dir.path());
        resume
    }));
    check(dir.path(), &db, &run, &before, &outputs)
}

fn check(
    dir: &Path,
    db: &Path,
    run: &str,
    before: &RunRow,
    outputs: &[Output],
) -> Result<(), String> {
    let mut problems = Vec::new();
    let twice: Vec<_> = charges(dir).into_iter().filter(|(_, n)| *n > 1).collect();
    if !twice.is_empty() {
        problems.push(format!("performed more than once: {twice:?}"));
    }
    let row = run_row(db, run);
    if row.status == "running" && !row.owner.as_deref().is_some_and(owner_alive) {
        problems.push(format!("left running without a live driver: {row:?}"));
    }
    if row.status != "failed" {
        problems.push(format!("the in-doubt call should fail the run: {row:?}"));
    }
    let seqs = seqs(db);
    if seqs != (1..=seqs.len() as i64).collect::<Vec<_>>() {
        problems.push(format!("history has gaps or duplicates: {seqs:?}"));
    }
    if row.epoch != before.epoch + 1 {
        problems.push(format!(
            "the lease was taken {} times (exactly one resumer should take it)",
            row.epoch - before.epoch
        ));
    }
    let winners: Vec<&Output> = outputs
        .iter()
        .filter(|o| out(o).contains("effect_in_doubt"))
        .collect();
    if winners.len() != 1 {
        problems.push(format!("{} resumers drove the run", winners.len()));
    }
    for o in outputs {
        if out(o).contains("effect_in_doubt") {
            if o.status.code() != Some(1) {
                problems.push(format!("the driver exited {:?}", o.status.code()));
            }
            continue;
        }
        let e = err(o);
        let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
        let refused = lines.len() == 1
            && (lines[0].contains("being driven by another process")
                || lines[0].contains("has already ended"));
        if o.status.code() != Some(2) || !refused || !out(o).is_empty() {
            problems.push(format!(
                "a loser was not refused cleanly (exit {:?}): stdout {:?} stderr {e:?}",
                o.status.code(),
                out(o)
            ));
        }
    }
    let verify = runtape(db, &["verify", run]);
    if !verify.status.success() {
        problems.push(format!("verify failed: {}", out(&verify)));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn trials(k: usize, n: usize) -> Vec<String> {
    (0..n)
        .filter_map(|i| trial(k).err().map(|e| format!("K={k} trial {i}: {e}")))
        .collect()
}

/// `RUNTAPE_SOAK_TRIALS` when set (a soak by hand), else `default`.
fn trials_or(default: usize) -> usize {
    std::env::var("RUNTAPE_SOAK_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn exactly_one_drives(ks: &[usize], default_trials: usize) {
    let n = trials_or(default_trials);
    let started = std::time::Instant::now();
    let mut all = Vec::new();
    for &k in ks {
        let failures = trials(k, n);
        println!(
            "K={k}: {n} trials, {} failures ({:.1} s so far)",
            failures.len(),
            started.elapsed().as_secs_f64()
        );
        all.extend(failures);
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn two_resumers_exactly_one_drives() {
    exactly_one_drives(&[2], 20);
}

#[test]
fn four_resumers_exactly_one_drives() {
    exactly_one_drives(&[4], 20);
}

#[test]
fn eight_resumers_exactly_one_drives() {
    exactly_one_drives(&[8], 20);
}

#[test]
fn three_to_sixteen_resumers_exactly_one_drives() {
    exactly_one_drives(&[3, 6, 12, 16], 2);
}
