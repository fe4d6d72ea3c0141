//! Tampering with a database, one stored column at a time, and cutting histories short:
//! `runtape verify RUN` (the real binary, on a real SQLite file) exits 1 with one line naming
//! the seq or the column at fault — with `--pubkey` and without. The fixture holds a long run
//! with a non-idempotent tool, signed receipts and a snapshot at seq 64, a fork of it, and a
//! run killed while its non-idempotent call ran (see `support::tamper`).
//!
//! The cases (`support::tamper_catalogue`) must cover every column `ledger::coverage` lists as
//! verified, and that list must hold every column of every table (`verify::coverage`), so a
//! new stored field cannot go unchecked.

use crate::support;

use std::collections::BTreeSet;

use crate::support::cli::utf8;
use runtape::ledger::coverage::{COLUMNS, Coverage};
use rusqlite::Connection;
use support::tamper::*;
use support::tamper_catalogue::cases;

/// Runs `verify` with and without the trusted key; both must exit 1 with one line holding a
/// needle.
fn assert_caught(db: &std::path::Path, run: &str, needles: &[String], what: &str) {
    let f = fixture();
    for with_key in [false, true] {
        let mut args = vec!["verify", run];
        if with_key {
            args.extend(["--pubkey", f.pubkey.as_str()]);
        }
        let out = runtape(db, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what} (pubkey: {with_key}) was not caught: {}",
            text(&out)
        );
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(
            needles.iter().any(|n| err.contains(n.as_str())),
            "{what} (pubkey: {with_key}): expected one of {needles:?} in: {err}"
        );
    }
}

#[test]
fn the_pristine_database_verifies_with_and_without_the_key() {
    let f = fixture();
    for run in [
        &f.long,
        &f.fork,
        &f.killed,
        &f.session_first,
        &f.session_second,
        &f.memory,
        &f.waiting,
        &f.waiting_long,
    ] {
        for with_key in [false, true] {
            let mut args = vec!["verify", run.as_str()];
            if with_key {
                args.extend(["--pubkey", f.pubkey.as_str()]);
            }
            let out = runtape(&f.db, &args);
            assert!(out.status.success(), "{run}: {}", text(&out));
            let shown = text(&out);
            assert!(shown.starts_with("OK"), "{shown}");
            if with_key {
                assert!(shown.contains("head signed by the trusted key"), "{shown}");
            }
        }
    }
    let unsigned = runtape(&f.db, &["verify", &f.waiting_unsigned]);
    assert!(unsigned.status.success(), "{}", text(&unsigned));
    let long = text(&runtape(&f.db, &["verify", &f.long]));
    assert!(
        long.contains(&format!("ends at seq {LONG_STEPS} (completed)"))
            && long.contains("1 snapshots"),
        "{long}"
    );
}

#[test]
fn every_edit_of_every_verified_column_is_named() {
    let cases = cases();
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.column).collect();
    for col in COLUMNS {
        if let Coverage::Verified(_) = col.coverage {
            let name = format!("{}.{}", col.table, col.name);
            assert!(
                covered.contains(name.as_str()),
                "no tamper case edits the verified column {name}"
            );
        }
    }
    for c in &cases {
        let (_dir, db) = copy();
        let conn = Connection::open(&db).expect("opens");
        let before = conn.total_changes();
        conn.execute_batch(&c.sql)
            .unwrap_or_else(|e| panic!("{}: {e}", c.sql));
        assert!(
            conn.total_changes() > before,
            "{}: the edit changed nothing: {}",
            c.column,
            c.sql
        );
        drop(conn);
        assert_caught(
            &db,
            &c.run,
            &c.needles,
            &format!("{} ({})", c.column, c.sql),
        );
    }
}

/// A removal record whose signature was stripped passes without a trusted key (a record made
/// without a key is hash-chained only) and is refused with it; a removal signed with another
/// key holds under that key and is refused where the fixture's key is trusted.
#[test]
fn a_removal_signature_stripped_or_by_another_key_is_refused_where_the_key_is_trusted() {
    let f = fixture();
    let (_dir, db) = copy();
    let conn = Connection::open(&db).expect("opens");
    conn.execute("UPDATE memory_removals SET seal = NULL", [])
        .expect("strips");
    drop(conn);
    trusted_key_refuses(&db, &f.memory, &f.pubkey, "unsigned");

    let (dir, db) = copy();
    let other = dir.path().join("other.key");
    let other = utf8(&other);
    let made = runtape(&db, &["keygen", "-o", other]);
    assert!(made.status.success(), "{}", text(&made));
    let removed = runtape(
        &db,
        &[
            "memory",
            "rm",
            "a",
            "--name",
            "team",
            "--yes",
            "--receipt-key",
            other,
        ],
    );
    assert!(
        removed.status.success() && text(&removed).contains("signed by"),
        "{}",
        text(&removed)
    );
    trusted_key_refuses(&db, &f.memory, &f.pubkey, "not by the trusted key");
}

/// `verify RUN` passes, and `verify RUN --pubkey KEY` fails (exit 1) naming
/// `memory_removals.seal` and saying `why`.
fn trusted_key_refuses(db: &std::path::Path, run: &str, pubkey: &str, why: &str) {
    let plain = runtape(db, &["verify", run]);
    assert!(plain.status.success(), "{}", text(&plain));
    let checked = runtape(db, &["verify", run, "--pubkey", pubkey]);
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    assert!(
        text(&checked).contains("memory_removals.seal") && text(&checked).contains(why),
        "{}",
        text(&checked)
    );
}

#[test]
fn a_history_cut_short_is_named_at_its_first_missing_seq() {
    let f = fixture();
    for cut in 1..=5u64 {
        for lower_the_row in [false, true] {
            let (_dir, db) = copy();
            let conn = Connection::open(&db).expect("opens");
            let k = key_of(&conn, &f.long);
            let keep = LONG_STEPS - cut;
            conn.execute(
                "DELETE FROM transitions WHERE id > ?1 AND id <= ?2",
                [row(k, keep), row(k, 100_000)],
            )
            .expect("cuts");
            if lower_the_row {
                // What the reproduced attack did: the row claims the shorter history.
                conn.execute("UPDATE runs SET seq = ?1 WHERE key = ?2", [keep as i64, k])
                    .expect("lowers");
            }
            drop(conn);
            assert_caught(
                &db,
                &f.long,
                &[format!("seq {}", keep + 1)],
                &format!("a tail of {cut} cut (row lowered: {lower_the_row})"),
            );
        }
    }
}

#[test]
fn the_shared_prefix_of_a_fork_is_verified_through_the_fork() {
    let f = fixture();
    let (_dir, db) = copy();
    let conn = Connection::open(&db).expect("opens");
    let k = key_of(&conn, &f.long);
    conn.execute(
        "UPDATE transitions SET at = at + 65536 WHERE id = ?1",
        [row(k, FORK_SEQ - 2)],
    )
    .expect("edits");
    drop(conn);
    assert_caught(
        &db,
        &f.fork,
        &[format!("seq {}", FORK_SEQ - 2)],
        "the parent's row under the fork",
    );
}
