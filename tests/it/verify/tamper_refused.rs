//! No command acts on a run `verify` would reject: `resume`, `resume --approve`, `fork` (at the
//! tampered step and at the run's end) and `cancel` refuse every tamper of the catalogue
//! (`support::tamper_catalogue`, the edits `verify::tamper` shows `verify` names) with
//! `verify`'s own line, change no byte of the database, and run nothing (a setup edited to
//! `touch PWNED; …` never runs, an unapproved deploy never deploys). The real binary on real
//! SQLite files.

use crate::support;

use std::path::{Path, PathBuf};

use crate::support::cli::{db_files, run_id, temp_db, utf8};
use rusqlite::Connection;
use support::tamper::*;
use support::tamper_catalogue::{Case, Target, cases, run_cases, waiting_cases};

fn edit(db: &Path, sql: &str) {
    let conn = Connection::open(db).expect("opens");
    let n = conn.execute(sql, []).expect("edits");
    assert!(n > 0, "changed nothing: {sql}");
}

/// Runs `args` on a tampered copy: exit 1, one line naming `needle`, nothing written, nothing
/// run.
fn assert_refused(db: &Path, args: &[&str], needle: &str) {
    let f = fixture();
    let before = dump(db);
    let out = runtape(db, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not verify"), "{err}");
    assert!(err.contains(needle), "{needle}: {err}");
    assert_eq!(dump(db), before, "{args:?} wrote something");
    assert!(!f.dir.join("PWNED").exists(), "the edited command ran");
}

#[test]
fn a_fork_of_a_run_whose_setup_was_edited_is_refused_and_runs_nothing() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') WHERE run = (SELECT key FROM runs WHERE id = '{}')",
            f.long
        ),
    );
    let at = format!("{}@{FORK_SEQ}", f.long);
    assert_refused(&db, &["fork", &at, "--receipt-key", k], "run_specs.setup");
    // The same edit made to the fork's own row is refused when the fork is forked again.
    let (_dir, db) = copy();
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET setup = replace(setup, 'cat >> notes.log', 'touch PWNED; cat >> notes.log') WHERE run = (SELECT key FROM runs WHERE id = '{}')",
            f.fork
        ),
    );
    let at = format!("{}@{}", f.fork, FORK_SEQ + 2);
    assert_refused(&db, &["fork", &at, "--receipt-key", k], "run_specs.setup");
}

#[test]
fn a_resume_of_a_tampered_run_is_refused_and_performs_nothing() {
    let f = fixture();
    let k = utf8(&f.key);
    let killed = f.killed.as_str();
    let cases = [
        (
            format!(
                "UPDATE run_specs SET setup = replace(setup, 'touch started', 'touch PWNED; touch started') WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.setup",
        ),
        (
            format!(
                "UPDATE run_specs SET spec = replace(spec, '\"idempotent\":false', '\"idempotent\":true') WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.spec",
        ),
        (
            // The call that may have charged the card, made to look as if it never started:
            // a resume would charge it again.
            format!(
                "UPDATE outbox SET status = 'pending' WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "outbox.status",
        ),
        (
            format!("DELETE FROM outbox WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"),
            "outbox.status",
        ),
        (
            format!(
                "UPDATE run_specs SET goal = 'Charge it twice.' WHERE run = (SELECT key FROM runs WHERE id = '{killed}')"
            ),
            "run_specs.goal",
        ),
        (
            format!("UPDATE runs SET seq = seq - 1 WHERE id = '{killed}'"),
            "runs.seq",
        ),
    ];
    for (sql, needle) in &cases {
        let (_dir, db) = copy();
        edit(&db, sql);
        assert_refused(&db, &["resume", killed, "--receipt-key", k], needle);
    }
}

#[test]
fn a_history_cut_short_is_not_resumed() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    let conn = Connection::open(&db).expect("opens");
    let key = key_of(&conn, &f.killed);
    let last: i64 = conn
        .query_row(
            "SELECT max(id) FROM transitions WHERE id BETWEEN ?1 AND ?2",
            [row(key, 1), row(key, 100_000)],
            |r| r.get(0),
        )
        .expect("reads");
    conn.execute("DELETE FROM transitions WHERE id = ?1", [last])
        .expect("cuts");
    conn.execute("UPDATE runs SET seq = seq - 1 WHERE key = ?1", [key])
        .expect("lowers");
    drop(conn);
    assert_refused(&db, &["resume", &f.killed, "--receipt-key", k], "seq");
}

#[test]
fn an_untampered_run_resumes_and_its_started_call_is_in_doubt_not_repeated() {
    let f = fixture();
    let k = utf8(&f.key);
    let (_dir, db) = copy();
    let out = runtape(&db, &["resume", &f.killed, "--receipt-key", k]);
    // The charge was in flight when the run was killed: in doubt, the run fails (default
    // policy) rather than charging again.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("in_doubt") || text(&out).contains("in doubt"),
        "{}",
        text(&out)
    );
    let v = runtape(&db, &["verify", &f.killed, "--pubkey", &f.pubkey]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_signed_run_is_not_continued_with_another_key_or_none() {
    let f = fixture();
    let (_dir, db) = copy();
    let before = dump(&db);
    let out = runtape(&db, &["resume", &f.killed]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("same receipt key"), "{}", text(&out));
    let at = format!("{}@{FORK_SEQ}", f.long);
    let out = runtape(&db, &["fork", &at]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(dump(&db), before);
}

#[test]
fn an_unsigned_run_at_rest_is_not_cancelled_or_answered_once_tampered() {
    let (_dir, db) = temp_db();
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/approval.toml");
    let out = runtape(&db, &["run", utf8(&spec)]);
    assert!(out.status.success(), "{}", text(&out));
    let run = run_id(&out);
    edit(
        &db,
        &format!(
            "UPDATE run_specs SET goal = 'Deploy everything.' WHERE run = (SELECT key FROM runs WHERE id = '{run}')"
        ),
    );
    assert_refused(&db, &["cancel", &run], "run_specs.goal");
    assert_refused(&db, &["resume", &run, "--approve"], "run_specs.goal");
}

/// The database's bytes (its file and write-ahead log), for "nothing was written".
fn bytes(db: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    db_files(db)
}

/// Applies `c` to a fresh copy of the pristine database and folds the log into the file, so
/// what follows can be compared byte for byte; checks `verify` rejects it.
fn tampered(c: &Case) -> (tempfile::TempDir, PathBuf) {
    let (dir, db) = copy();
    let conn = Connection::open(&db).expect("opens");
    let before = conn.total_changes();
    conn.execute_batch(&c.sql)
        .unwrap_or_else(|e| panic!("{}: {e}", c.sql));
    assert!(conn.total_changes() > before, "changed nothing: {}", c.sql);
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoints");
    drop(conn);
    let v = runtape(&db, &["verify", &c.run]);
    assert_eq!(
        v.status.code(),
        Some(1),
        "{} ({}): verify must reject it: {}",
        c.column,
        c.sql,
        text(&v)
    );
    (dir, db)
}

/// How the run a case edits stands in the pristine database.
struct Standing {
    /// Where its history ends.
    end: u64,
    /// It has ended (completed, failed, cancelled).
    ended: bool,
    /// Its receipts and head are signed with the fixture's key.
    signed: bool,
}

fn standing(run: &str) -> Standing {
    let f = fixture();
    let conn = Connection::open(&f.db).expect("opens");
    let (end, status): (i64, String) = conn
        .query_row("SELECT seq, status FROM runs WHERE id = ?1", [run], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap_or_else(|e| panic!("{run}: {e}"));
    Standing {
        end: end as u64,
        ended: ["completed", "failed", "cancelled"].contains(&status.as_str()),
        signed: run != f.waiting_unsigned,
    }
}

/// Every command that would act on the run `c` edits (`pristine` is the run's id before the
/// edit, `c.run` after it), and whether its refusal must be `verify`'s line: it must,
/// wherever the command would otherwise act (a fork; a run that has not ended, continued with
/// its own key).
fn commands(c: &Case, pristine: &str) -> Vec<(Vec<String>, bool)> {
    let f = fixture();
    let s = standing(pristine);
    let key = f.key.to_str().expect("utf-8").to_owned();
    let with_key = |mut args: Vec<String>| {
        if s.signed {
            args.extend(["--receipt-key".to_owned(), key.clone()]);
        }
        args
    };
    let tip = if s.ended { s.end - 1 } else { s.end };
    let at = c.seq.clamp(1, tip);
    let acts = !s.ended;
    let mut out = vec![
        (with_key(vec!["resume".into(), c.run.clone()]), acts),
        (
            with_key(vec!["resume".into(), c.run.clone(), "--approve".into()]),
            acts,
        ),
        (
            with_key(vec!["fork".into(), format!("{}@{tip}", c.run)]),
            true,
        ),
        (
            with_key(vec!["fork".into(), format!("{}@{at}", c.run)]),
            true,
        ),
    ];
    // `cancel` takes no receipt key: it acts only on an unsigned run.
    out.push((vec!["cancel".into(), c.run.clone()], acts && !s.signed));
    out
}

/// Runs every command of `c` on its own tampered copy: each must exit non-zero with one line
/// (`verify`'s, naming one of the case's needles when `needles`, where the command would have
/// acted), change no byte of the database and run nothing. Returns what went wrong.
fn refusals(c: &Case, pristine: &str, needles: bool) -> Vec<String> {
    let f = fixture();
    let mut wrong = Vec::new();
    let (_dir, edited) = tampered(c);
    for (args, must_verify) in commands(c, pristine) {
        let (_dir, db) = temp_db();
        std::fs::copy(&edited, &db).expect("copies");
        let before = bytes(&db);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = runtape(&db, &refs);
        let err = String::from_utf8_lossy(&out.stderr);
        let what = format!("{} ({}) then {args:?}", c.column, c.sql);
        if out.status.code() == Some(0) {
            wrong.push(format!("{what} went ahead: {}", text(&out)));
        } else if err.lines().count() != 1 {
            wrong.push(format!("{what}: not one line: {err}"));
        } else if must_verify && !refused_as_verify_would(&err) {
            wrong.push(format!("{what}: not verify's line: {err}"));
        } else if must_verify && needles && !c.needles.iter().any(|n| err.contains(n.as_str())) {
            wrong.push(format!("{what}: expected one of {:?} in: {err}", c.needles));
        }
        if bytes(&db) != before {
            wrong.push(format!("{what} wrote to the database"));
        }
        for ran in ["PWNED", "DEPLOYED"] {
            if f.dir.join(ran).exists() {
                wrong.push(format!("{what}: {ran}"));
            }
        }
    }
    wrong
}

/// `verify`'s refusal: the run does not verify, or (a row the store cannot decode at all, as
/// `verify` reports it too) its stored data is damaged.
fn refused_as_verify_would(err: &str) -> bool {
    err.contains("does not verify") || err.contains("is damaged")
}

/// Fails listing every case and command that was not refused as it should be.
fn assert_all_refused(wrong: Vec<String>) {
    assert!(
        wrong.is_empty(),
        "{} not refused:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_tamper_verify_names_is_refused_by_every_command_that_acts() {
    let f = fixture();
    let mut wrong = Vec::new();
    for c in cases() {
        // A pruned run has no row a command could act on: its tombstone's edits are for
        // `verify` alone (verify::tamper).
        if c.column.starts_with("pruned_runs.") {
            continue;
        }
        let pristine = if c.run == "01forgedrunid000" {
            f.long.clone()
        } else {
            c.run.clone()
        };
        wrong.extend(refusals(&c, &pristine, true));
    }
    assert_all_refused(wrong);
}

/// The cases of a short run waiting for approval (every step after its start is in reach of
/// what `resume` checks), with the run as it was before the edit.
fn waiting(run: &str, other: &str, forged: &str) -> Vec<(Case, String)> {
    let conn = Connection::open(&fixture().db).expect("opens");
    let target = Target {
        run,
        other,
        after: 20,
        text: "step 9",
        forged_id: forged,
    };
    let mut out = run_cases(&conn, &target);
    out.extend(waiting_cases(&conn, run));
    out.into_iter().map(|c| (c, run.to_owned())).collect()
}

#[test]
fn a_signed_run_awaiting_approval_is_not_resumed_approved_forked_or_cancelled_once_tampered() {
    let f = fixture();
    waiting_run_refused_once_tampered(&f.waiting, &f.waiting_unsigned, "01forgedwaiting0");
}

/// Every tamper of the waiting run `run` (with `other`, the same run signed the other way,
/// and `forged`, an id for a forged run) is refused by resume, approve, fork and cancel.
fn waiting_run_refused_once_tampered(run: &str, other: &str, forged: &str) {
    let mut wrong = Vec::new();
    for (c, pristine) in waiting(run, other, forged) {
        wrong.extend(refusals(&c, &pristine, true));
    }
    assert_all_refused(wrong);
}

#[test]
fn an_unsigned_run_awaiting_approval_is_not_resumed_approved_forked_or_cancelled_once_tampered() {
    let f = fixture();
    waiting_run_refused_once_tampered(&f.waiting_unsigned, &f.waiting, "01forgedunsigned");
}

/// Past its first snapshot, a run's tail (the snapshot at seq 64 and every step after it) is
/// what `resume` checks: every edit there is refused too.
#[test]
fn a_run_past_its_snapshot_is_refused_for_every_tamper_of_its_tail() {
    let f = fixture();
    let conn = Connection::open(&f.db).expect("opens");
    let target = Target {
        run: &f.waiting_long,
        other: &f.waiting,
        after: 64,
        text: "step 22",
        forged_id: "01forgedwaitlong",
    };
    let mut cases = run_cases(&conn, &target);
    cases.extend(
        waiting_cases(&conn, &f.waiting_long)
            .into_iter()
            .filter(|c| c.seq != 2),
    );
    let mut wrong = Vec::new();
    for c in cases {
        let pristine = if c.run == target.forged_id {
            f.waiting_long.clone()
        } else {
            c.run.clone()
        };
        // The first problem `resume` meets in the tail is not always the first `verify` meets
        // from step 1 (a snapshot moved is a snapshot where none is due, here).
        wrong.extend(refusals(&c, &pristine, false));
    }
    assert_all_refused(wrong);
}

/// A run queued for a worker (`run --detach`: created, nothing committed, its head sealed
/// with no state yet) verifies, and `resume` takes it up: the check refuses tampering, not a
/// run that has not started.
#[test]
fn a_queued_run_verifies_and_is_resumed() {
    let (_dir, db) = temp_db();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.toml");
    let out = runtape(&db, &["run", spec.to_str().expect("utf-8"), "--detach"]);
    assert!(out.status.success(), "{}", text(&out));
    let run = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", text(&v));
    let r = runtape(&db, &["resume", &run]);
    assert!(r.status.success(), "{}", text(&r));
    assert!(text(&r).contains("completed"), "{}", text(&r));
}
