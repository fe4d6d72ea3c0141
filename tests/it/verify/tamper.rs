//! Tampering with a database, one stored column at a time, and cutting histories short:
//! `runtape verify RUN` (the real binary, on a real SQLite file) exits 1 with one line naming
//! the seq or the column at fault — with `--pubkey` and without. The fixture holds a long run
//! with a non-idempotent tool, signed receipts and a snapshot at seq 64, a fork of it, and a
//! run killed while its non-idempotent call ran (see `support::tamper`).
//!
//! The cases must cover every column `ledger::coverage` lists as verified, and that list
//! must hold every column of every table (`verify_coverage.rs`), so a new stored field cannot
//! go unchecked.

use crate::support;

use std::collections::BTreeSet;

use crate::support::cli::utf8;
use runtape::ledger::coverage::{COLUMNS, Coverage};
use rusqlite::Connection;
use support::tamper::*;

/// One edit: the column it tampers with, the run to verify, the SQL, and what the one-line
/// error must contain (any of).
struct Case {
    column: &'static str,
    run: String,
    sql: String,
    needles: Vec<String>,
}

fn case(column: &'static str, run: &str, sql: String, needles: &[&str]) -> Case {
    Case {
        column,
        run: run.to_owned(),
        sql,
        needles: needles.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn one(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn seq_of(id: i64) -> u64 {
    (id & 0xffff_ffff) as u64
}

/// Every edit, computed against the pristine database.
fn cases() -> Vec<Case> {
    let f = fixture();
    let conn = Connection::open(&f.db).expect("opens");
    let (long, fork, killed) = (f.long.as_str(), f.fork.as_str(), f.killed.as_str());
    let (first, second) = (f.session_first.as_str(), f.session_second.as_str());
    let (k1, k2) = (key_of(&conn, first), key_of(&conn, second));
    let mem = f.memory.as_str();
    let kl = key_of(&conn, long);
    let kf = key_of(&conn, fork);
    let kk = key_of(&conn, killed);
    let range = format!("id BETWEEN {} AND {}", row(kl, 1), row(kl, 100_000));
    // The transition whose event carries the model's reply "step 9", which appends that message.
    let reply = one(
        &conn,
        &format!(
            "SELECT min(id) FROM transitions WHERE {range} AND instr(event, CAST('step 9' AS BLOB)) > 0"
        ),
    );
    let reply_seq = seq_of(reply);
    let sealed = one(
        &conn,
        &format!(
            "SELECT min(id) FROM transitions WHERE {range} AND id > {} AND seal IS NOT NULL",
            row(kl, 20)
        ),
    );
    let unsealed = one(
        &conn,
        &format!(
            "SELECT min(id) FROM transitions WHERE {range} AND id > {} AND seal IS NULL",
            row(kl, 20)
        ),
    );
    let emitting = one(
        &conn,
        &format!(
            "SELECT min(id) FROM transitions WHERE {range} AND id > {} AND length(effects) > 0",
            row(kl, 20)
        ),
    );
    let mid = row(kl, 30);
    let done_seq = one(
        &conn,
        &format!("SELECT min(seq) FROM outbox WHERE run = {kl} AND seq > 20"),
    ) as u64;
    let started_seq = one(&conn, &format!("SELECT seq FROM outbox WHERE run = {kk}")) as u64;
    let blob = "instr(bytes, CAST('step 9' AS BLOB)) > 0";
    let s = |n: u64| format!("seq {n}");
    let (mid_s, reply_s, sealed_s, unsealed_s, emitting_s) = (
        s(30),
        s(reply_seq),
        s(seq_of(sealed)),
        s(seq_of(unsealed)),
        s(seq_of(emitting)),
    );
    let done_s = s(done_seq);
    let started_s = s(started_seq);
    let of_long = format!("WHERE id = '{long}'");
    let specs_of_long = format!("WHERE run = {kl}");
    vec![
        // runs
        case(
            "runs.key",
            long,
            format!(
                "UPDATE runs SET key = -1 WHERE key = {kl}; UPDATE runs SET key = {kl} WHERE key = {kk}; UPDATE runs SET key = {kk} WHERE key = -1"
            ),
            &["runs.key"],
        ),
        case(
            "runs.id",
            "01forgedrunid000",
            format!("UPDATE runs SET id = '01forgedrunid000' {of_long}"),
            &["runs.id"],
        ),
        case(
            "run_specs.parent_id",
            fork,
            format!("UPDATE run_specs SET parent_id = '{killed}' WHERE run = {kf}"),
            &["run_specs.parent_id"],
        ),
        case(
            "run_specs.fork_seq",
            fork,
            format!("UPDATE run_specs SET fork_seq = fork_seq + 1 WHERE run = {kf}"),
            &["run_specs.fork_seq"],
        ),
        case(
            "run_specs.spec",
            long,
            format!(
                "UPDATE run_specs SET spec = replace(spec, '\"idempotent\":false', '\"idempotent\":true') {specs_of_long}"
            ),
            &["run_specs.spec"],
        ),
        case(
            "run_specs.setup",
            long,
            format!(
                "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') {specs_of_long}"
            ),
            &["run_specs.setup"],
        ),
        case(
            "run_specs.goal",
            long,
            format!("UPDATE run_specs SET goal = 'Note nothing.' {specs_of_long}"),
            &["run_specs.goal"],
        ),
        case(
            "run_specs.run",
            long,
            format!(
                "UPDATE run_specs SET run = -1 WHERE run = {kl}; UPDATE run_specs SET run = {kl} WHERE run = {kk}; UPDATE run_specs SET run = {kk} WHERE run = -1"
            ),
            &["run_specs."],
        ),
        case(
            "run_specs.run",
            long,
            format!("DELETE FROM run_specs {specs_of_long}"),
            &["run_specs"],
        ),
        case(
            "runs.status",
            long,
            format!("UPDATE runs SET status = 'failed' {of_long}"),
            &["runs.status"],
        ),
        case(
            "runs.state_kind",
            long,
            format!("UPDATE runs SET state_kind = 'generating' {of_long}"),
            &["runs.state_kind"],
        ),
        case(
            "runs.seq",
            long,
            format!("UPDATE runs SET seq = seq - 1 {of_long}"),
            &["runs.seq"],
        ),
        case(
            "run_specs.created_ms",
            long,
            format!("UPDATE run_specs SET created_ms = created_ms - 1000 {specs_of_long}"),
            &["run_specs.created_ms"],
        ),
        case(
            "runs.updated_ms",
            long,
            format!("UPDATE runs SET updated_ms = updated_ms + 1000 {of_long}"),
            &["runs.updated_ms"],
        ),
        case(
            "runs.cost_nanos",
            long,
            format!("UPDATE runs SET cost_nanos = cost_nanos + 1 {of_long}"),
            &["runs.cost_nanos"],
        ),
        case(
            "runs.tokens",
            long,
            format!("UPDATE runs SET tokens = tokens * 10 {of_long}"),
            &["runs.tokens"],
        ),
        case(
            "runs.unpriced_turns",
            long,
            format!("UPDATE runs SET unpriced_turns = unpriced_turns + 1 {of_long}"),
            &["runs.unpriced_turns"],
        ),
        case(
            "run_specs.outcome",
            long,
            format!(
                "UPDATE run_specs SET outcome = replace(outcome, 'all noted', 'nothing noted') {specs_of_long}"
            ),
            &["run_specs.outcome"],
        ),
        // transitions
        case(
            "transitions.id",
            long,
            format!("UPDATE transitions SET id = id + 1000 WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.at",
            long,
            format!("UPDATE transitions SET at = at + 65536 WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.event",
            long,
            format!(
                // "step 9" becomes "step 8" in place, in plain and packed JSON alike: the row
                // still decodes, to an event the chain does not cover.
                "UPDATE transitions SET event = substr(event, 1, instr(event, CAST('step 9' AS BLOB)) + 4) \
                 || CAST('8' AS BLOB) || substr(event, instr(event, CAST('step 9' AS BLOB)) + 6) WHERE id = {reply}"
            ),
            &[&reply_s],
        ),
        case(
            "transitions.event",
            long,
            format!("UPDATE transitions SET event = event || CAST(' ' AS BLOB) WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.edge",
            long,
            format!(
                "UPDATE transitions SET edge = (SELECT edge FROM transitions WHERE id = {}) WHERE id = {mid}",
                row(kl, 1)
            ),
            &[&mid_s],
        ),
        case(
            "transitions.edge",
            long,
            format!("UPDATE transitions SET edge = X'00000000' WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.effects",
            long,
            format!(
                "UPDATE transitions SET effects = effects || CAST(' ' AS BLOB) WHERE id = {emitting}"
            ),
            &[&emitting_s],
        ),
        case(
            "transitions.state_hash",
            long,
            format!("UPDATE transitions SET state_hash = zeroblob(32) WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.chain",
            long,
            format!("UPDATE transitions SET chain = zeroblob(32) WHERE id = {mid}"),
            &[&mid_s],
        ),
        case(
            "transitions.seal",
            long,
            format!(
                "UPDATE transitions SET seal = substr(seal, 1, 33) || zeroblob(64) WHERE id = {sealed}"
            ),
            &[&sealed_s],
        ),
        case(
            "transitions.seal",
            long,
            format!("UPDATE transitions SET seal = NULL WHERE id = {sealed}"),
            &[&sealed_s],
        ),
        case(
            "transitions.seal",
            long,
            format!(
                "UPDATE transitions SET seal = (SELECT seal FROM transitions WHERE id = {sealed}) WHERE id = {unsealed}"
            ),
            &[&unsealed_s],
        ),
        // snapshots
        case(
            "snapshots.id",
            long,
            format!(
                "UPDATE snapshots SET id = id + 1 WHERE id = {}",
                row(kl, 64)
            ),
            &["seq 64"],
        ),
        case(
            "snapshots.id",
            long,
            format!("DELETE FROM snapshots WHERE id = {}", row(kl, 64)),
            &["seq 64"],
        ),
        case(
            "snapshots.state",
            long,
            format!(
                "UPDATE snapshots SET state = state || CAST(' ' AS BLOB) WHERE id = {}",
                row(kl, 64)
            ),
            &["seq 64"],
        ),
        // blobs
        case(
            "blobs.hash",
            long,
            format!("UPDATE blobs SET hash = zeroblob(32) WHERE {blob}"),
            &[&reply_s],
        ),
        case(
            "blobs.hash",
            long,
            format!("DELETE FROM blobs WHERE {blob}"),
            &[&reply_s],
        ),
        case(
            "blobs.bytes",
            long,
            format!(
                "UPDATE blobs SET bytes = substr(bytes, 1, instr(bytes, CAST('step 9' AS BLOB)) + 4) \
                 || CAST('X' AS BLOB) || substr(bytes, instr(bytes, CAST('step 9' AS BLOB)) + 6) WHERE {blob}"
            ),
            &[&reply_s],
        ),
        case(
            "blobs.bytes",
            long,
            format!("UPDATE blobs SET bytes = substr(bytes, 1, length(bytes) - 1) WHERE {blob}"),
            &[&reply_s],
        ),
        // outbox
        case(
            "outbox.run",
            killed,
            format!("UPDATE outbox SET run = {kf} WHERE run = {kk}"),
            &[&started_s],
        ),
        case(
            "outbox.seq",
            long,
            format!("UPDATE outbox SET seq = seq + 1 WHERE run = {kl} AND seq = {done_seq}"),
            &[&s(done_seq + 1)],
        ),
        case(
            "outbox.idx",
            long,
            format!("UPDATE outbox SET idx = idx + 7 WHERE run = {kl} AND seq = {done_seq}"),
            &[&done_s],
        ),
        case(
            "outbox.status",
            long,
            format!("UPDATE outbox SET status = 'pending' WHERE run = {kl} AND seq = {done_seq}"),
            &[&done_s],
        ),
        case(
            "outbox.status",
            killed,
            format!("UPDATE outbox SET status = 'pending' WHERE run = {kk}"),
            &[&started_s],
        ),
        case(
            "outbox.status",
            killed,
            format!("DELETE FROM outbox WHERE run = {kk}"),
            &[&started_s],
        ),
        case(
            "outbox.idempotency_key",
            long,
            format!(
                "UPDATE outbox SET idempotency_key = idempotency_key || 'x' WHERE run = {kl} AND seq = {done_seq}"
            ),
            &[&done_s],
        ),
        // session_runs (revision 5)
        case(
            "session_runs.session",
            second,
            format!("UPDATE session_runs SET session = 'forged' WHERE run = {k2}"),
            &["session_runs"],
        ),
        case(
            "session_runs.idx",
            second,
            format!("UPDATE session_runs SET idx = 9 WHERE run = {k2}"),
            &["session_runs"],
        ),
        case(
            "session_runs.run",
            second,
            format!(
                "UPDATE session_runs SET run = -1 WHERE run = {k1}; UPDATE session_runs SET run = {k1} WHERE run = {k2}; UPDATE session_runs SET run = {k2} WHERE run = -1"
            ),
            &["session_runs"],
        ),
        case(
            "session_runs.run",
            second,
            format!("DELETE FROM session_runs WHERE run = {k2}"),
            &["session_runs"],
        ),
        case(
            "session_runs.run",
            fork,
            format!("INSERT INTO session_runs (session, idx, run) VALUES ('tamper', 3, {kf})"),
            &["session_runs"],
        ),
        // The run a session run goes on from must have completed with what it carried.
        case(
            "runs.status",
            second,
            format!("UPDATE runs SET status = 'failed' WHERE key = {k1}"),
            &["session history comes from"],
        ),
        // the sealed head, packed in the run's row
        case(
            "runs.head",
            long,
            format!(
                "UPDATE runs SET head = (SELECT head FROM runs WHERE key = {kk}), seal = (SELECT seal FROM runs WHERE key = {kk}) WHERE key = {kl}"
            ),
            &["runs.key"],
        ),
        case(
            "runs.head",
            long,
            format!("UPDATE runs SET head = NULL WHERE key = {kl}"),
            &["runs.head"],
        ),
        case(
            "runs.head",
            long,
            // The packed head spells its status as text: `completed` becomes `cancelled`, as
            // long, so the head still unpacks, to a head its seal does not cover.
            format!(
                "UPDATE runs SET head = CAST(replace(CAST(head AS TEXT), 'completed', 'cancelled') AS BLOB) WHERE key = {kl}"
            ),
            &["runs.seal"],
        ),
        case(
            "runs.head",
            long,
            format!("UPDATE runs SET head = substr(head, 1, length(head) - 1) WHERE key = {kl}"),
            &["runs.head"],
        ),
        // global memory (revision 5): the memory run published `a` and `b`; `b` was removed.
        case(
            "memory_global.name",
            mem,
            "UPDATE memory_global SET name = 'other' WHERE key = 'a'".into(),
            &["memory_global.name"],
        ),
        case(
            "memory_global.key",
            mem,
            "UPDATE memory_global SET key = 'z' WHERE key = 'a'".into(),
            &["memory_global.key"],
        ),
        case(
            "memory_global.version",
            mem,
            "UPDATE memory_global SET version = 5 WHERE key = 'a'".into(),
            &["memory_global.version"],
        ),
        case(
            "memory_global.value",
            mem,
            "UPDATE memory_global SET value = 'forged' WHERE key = 'a'".into(),
            &["memory_global.value"],
        ),
        case(
            "memory_global.value",
            mem,
            "UPDATE memory_global SET value = 'back again' WHERE key = 'b' AND version = 2".into(),
            &["memory_global.removal"],
        ),
        case(
            "memory_global.run_id",
            mem,
            format!("UPDATE memory_global SET run_id = '{long}' WHERE key = 'a'"),
            &["memory_global.effect_seq", "memory_global.run_id"],
        ),
        case(
            "memory_global.run_id",
            mem,
            "UPDATE memory_global SET run_id = 'nosuchrun' WHERE key = 'a'".into(),
            &["memory_global.run_id"],
        ),
        case(
            "memory_global.effect_seq",
            mem,
            "UPDATE memory_global SET effect_seq = effect_seq - 1 WHERE key = 'a'".into(),
            &["memory_global.effect_seq"],
        ),
        case(
            "memory_global.effect_index",
            mem,
            "UPDATE memory_global SET effect_index = 1 WHERE key = 'a'".into(),
            &["memory_global.effect_index"],
        ),
        case(
            "memory_global.removal",
            mem,
            "UPDATE memory_global SET removal = 7 WHERE removal IS NOT NULL".into(),
            &["memory_global.removal"],
        ),
        case(
            "memory_global.removal",
            mem,
            "DELETE FROM memory_global WHERE removal IS NOT NULL".into(),
            &["memory_removals.body"],
        ),
        case(
            "memory_removals.id",
            mem,
            "UPDATE memory_removals SET id = 2".into(),
            &["memory_removals.id"],
        ),
        case(
            "memory_removals.body",
            mem,
            "UPDATE memory_removals SET body = CAST(replace(CAST(body AS TEXT), '\"by\":\"', '\"by\":\"someone else, ') AS BLOB)".into(),
            &["memory_removals.chain", "memory_removals.body"],
        ),
        case(
            "memory_removals.chain",
            mem,
            "UPDATE memory_removals SET chain = zeroblob(32)".into(),
            &["memory_removals.chain"],
        ),
        case(
            "memory_removals.seal",
            mem,
            "UPDATE memory_removals SET seal = CAST(substr(seal, 1, 33) || zeroblob(64) AS BLOB)".into(),
            &["memory_removals.seal"],
        ),
        case(
            "runs.seal",
            long,
            format!("UPDATE runs SET seal = substr(seal, 1, 33) || zeroblob(64) WHERE key = {kl}"),
            &["runs.seal"],
        ),
    ]
}

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
