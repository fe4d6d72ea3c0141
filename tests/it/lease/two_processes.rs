//! One writer per run: two processes resume the same run at the same moment; exactly one
//! drives it, the other gets a clear error and writes nothing.

use crate::support;

use crate::support::cli::{column, temp_db};
use support::durable::child::*;
use support::durable::spawn_child;

const CHILD_TEST: &str = concat!(module_path!(), "::child_process_entry");

#[test]
fn child_process_entry() {
    support::durable::child::child_main();
}

/// Committed transitions so far (0 while the child is still creating the database).
fn transitions(db: &std::path::Path) -> i64 {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("SELECT count(*) FROM transitions", [], |r| r.get(0)))
        .unwrap_or(0)
}

#[test]
fn two_resumers_one_winner() {
    if std::env::var(MODE).is_ok() {
        return;
    }
    let (dir, db) = temp_db();
    let env = |mode: &str| {
        vec![
            (MODE, mode.to_owned()),
            (DB, db.display().to_string()),
            (RUN, "shared-run".to_owned()),
            (FILE, dir.path().join("effects.log").display().to_string()),
            (LATENCY_MS, "150".to_owned()),
            // The first driver is killed mid-flight; retrying an in-doubt call lets the winner finish.
            (POLICY, "retry".to_owned()),
        ]
    };
    // Create the run, then kill its first driver so the run is left mid-flight.
    let mut first = spawn_child(CHILD_TEST, &env("start"));
    while !db.exists() || transitions(&db) < 3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let before = transitions(&db);

    let a = spawn_child(CHILD_TEST, &env("resume"));
    let b = spawn_child(CHILD_TEST, &env("resume"));
    let (a, b) = (
        a.wait_with_output().expect("runs"),
        b.wait_with_output().expect("runs"),
    );
    let (winner, loser) = if a.status.success() { (a, b) } else { (b, a) };
    assert!(
        winner.status.success(),
        "one resumer drives the run: {}",
        String::from_utf8_lossy(&winner.stderr)
    );
    assert_eq!(
        loser.status.code(),
        Some(4),
        "the other is refused: {}",
        String::from_utf8_lossy(&loser.stderr)
    );
    let stderr = String::from_utf8_lossy(&loser.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("shared-run"))
        .unwrap_or_default();
    assert!(
        line.contains("being driven by another process"),
        "clear error: {stderr}"
    );
    assert!(
        String::from_utf8_lossy(&winner.stdout).contains("STATUS=completed"),
        "{}",
        String::from_utf8_lossy(&winner.stdout)
    );

    // One history, no gaps, no duplicates: the loser wrote nothing.
    let conn = crate::support::cli::read_only(&db);
    let seqs: Vec<i64> = column(&conn, "SELECT id & 4294967295 FROM transitions ORDER BY id");
    assert!(seqs.len() as i64 > before);
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let epoch: i64 = conn
        .query_row("SELECT lease_epoch FROM runs", [], |r| r.get(0))
        .expect("reads");
    assert_eq!(epoch, 2, "exactly one takeover after the first driver");
}
