//! A partition of the lease, with real processes: a driver frozen with SIGSTOP for longer than
//! its lease (as a partitioned or descheduled process would be) is taken over by another
//! process once the lease has expired — not before — and when it wakes up (SIGCONT) its later
//! commits are fenced: it exits with one line and performs nothing more. The non-idempotent
//! charge is performed once.

use crate::support;

use std::io::{BufRead, Read};
use std::path::Path;

use crate::support::cli::{exit_and_stderr, temp_db};
use support::protocol::*;

/// The lease's stored expiry, wall-clock ms.
fn lease_expires_ms(db: &Path, run: &str) -> u64 {
    let conn = crate::support::cli::read_only(db);
    conn.query_row(
        "SELECT lease_expires_ms FROM runs WHERE id = ?1",
        [run],
        |r| r.get::<_, i64>(0),
    )
    .expect("reads") as u64
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// Freezes `bg`'s process, checks it cannot be taken over while its lease lasts, waits until
/// the lease has expired by the stored expiry, then resumes the run in another process.
fn freeze_until_expired(db: &Path, bg: &Background) -> std::process::Output {
    signal(bg.child.id(), "STOP");
    // Frozen, the holder renews no more: its lease ends at this expiry.
    let holder_expires = lease_expires_ms(db, &bg.run);
    let early = runtape(db, &["resume", &bg.run]);
    let refused = err(&early).contains("being driven by another process");
    if !refused && now_ms() >= holder_expires {
        // On a loaded machine the lease (1 s) ran out before this resume looked, so it took
        // the run over, rightly: it is the taker. (Resuming once more found the run ended.)
        return early;
    }
    if holder_expires > now_ms() + 50 {
        assert_eq!(early.status.code(), Some(2), "{}", err(&early));
        assert!(
            one_line(&err(&early)).contains("being driven by another process"),
            "a frozen holder keeps its lease until it expires: {}",
            err(&early)
        );
    }
    wait_until("the frozen driver's lease has expired", || {
        lease_expires_ms(db, &bg.run) < now_ms()
    });
    runtape(db, &["resume", &bg.run])
}

/// Wakes the frozen driver and returns its exit code and stderr.
fn thaw(mut bg: Background) -> (Option<i32>, String) {
    signal(bg.child.id(), "CONT");
    let mut rest = String::new();
    let _ = bg.lines.read_to_string(&mut rest);
    let (code, stderr) = exit_and_stderr(&mut bg.child);
    (code, stderr)
}

#[test]
fn frozen_mid_call_then_taken_over_then_fenced() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::default());
    let bg = start(&db, &spec, &[("RUNTAPE_LEASE_TTL_MS", "1000")]);
    let run = bg.run.clone();
    wait_until("the charge is in flight", || charge_lines(dir.path()) >= 1);
    let seq_before = run_row(&db, &run).seq;

    let taker = freeze_until_expired(&db, &bg);
    // The call was marked started by the frozen driver: the new driver finds it in doubt and
    // (default policy) fails the run rather than charging again.
    assert_eq!(taker.status.code(), Some(1), "{}", text(&taker));
    assert!(out(&taker).contains("effect_in_doubt"), "{}", out(&taker));
    let after_takeover = run_row(&db, &run);

    let (code, stderr) = thaw(bg);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        one_line(&stderr).contains("taken over by another process"),
        "{stderr}"
    );
    let row = run_row(&db, &run);
    assert_eq!(row, after_takeover, "the woken driver wrote nothing");
    assert_eq!(
        row.status, "failed",
        "not overwritten by the fenced driver: {row:?}"
    );
    assert!(row.seq > seq_before);
    assert_eq!(charge_lines(dir.path()), 1, "charged once");
    assert_eq!(seqs(&db), (1..=row.seq).collect::<Vec<_>>());
}

/// The single run in the database.
fn single_run(db: &Path) -> String {
    crate::support::cli::read_only(db)
        .query_row("SELECT id FROM runs", [], |r| r.get(0))
        .expect("one run")
}

#[test]
fn frozen_before_the_call_then_taken_over_the_woken_driver_never_performs_it() {
    let (dir, db) = temp_db();
    let spec = charge_spec(
        dir.path(),
        &ChargeSpec {
            then: "",
            latency_ms: 1500,
            ..ChargeSpec::default()
        },
    );
    let mut bg = start(&db, &spec, &[("RUNTAPE_LEASE_TTL_MS", "1000")]);
    let mut line = String::new();
    while !line.contains("\"model.request\"") {
        line.clear();
        assert!(
            bg.lines.read_line(&mut line).expect("reads") > 0,
            "ended early"
        );
    }

    let taker = freeze_until_expired(&db, &bg);
    assert_eq!(taker.status.code(), Some(0), "{}", text(&taker));
    assert!(out(&taker).contains("completed"), "{}", out(&taker));
    assert_eq!(charge_lines(dir.path()), 1, "the new driver charged once");

    let (code, stderr) = thaw(bg);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        one_line(&stderr).contains("taken over by another process"),
        "{stderr}"
    );
    let run = single_run(&db);
    assert_eq!(run_row(&db, &run).status, "completed");
    assert_eq!(
        charge_lines(dir.path()),
        1,
        "the woken driver never performed the call"
    );
    assert!(runtape(&db, &["verify", &run]).status.success());
}
