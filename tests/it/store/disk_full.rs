//! A full disk, with the real binary: when a commit cannot be written (SQLite reports
//! SQLITE_FULL), nothing is performed for the transition that was not committed, the process
//! exits 3 with one line saying so and how to continue, the run is left resumable (paused
//! with its lease released, or — when not even that can be written — as a crash leaves it),
//! and `resume` completes it once there is space again.
//!
//! Two ways to fill the disk: `RUNTAPE_DB_MAX_BYTES` (SQLite's `max_page_count`; runs
//! everywhere), and a real tmpfs of a few hundred KiB mounted in a private user and mount
//! namespace (`unshare -rm`; ignored in plain `cargo test`, failing loudly with `--include-ignored` where namespaces cannot be made). The line
//! says which limit was hit: the size cap, or the disk ("disk full"), also when SQLite meets
//! the full disk as an I/O error. A run whose first commit found no room verifies as a run
//! not yet started, not as a tamper.

use crate::support;
use crate::support::cli::on;

use std::path::Path;
use std::process::Command;

use crate::support::cli::{first_id, run_id, temp_db, text, utf8};
use support::protocol::*;

/// A spec whose model asks for `rounds` calls to an idempotent `charge` tool, one per turn.
fn rounds_spec(dir: &Path, rounds: usize) -> std::path::PathBuf {
    charge_spec(
        dir,
        &ChargeSpec {
            then: "",
            charges: rounds,
            tool_extra: "idempotent = true",
            ..ChargeSpec::default()
        },
    )
}

/// Bytes of a database holding only the empty schema (every table and index), so a size cap
/// can leave room for a known number of pages whatever tables the schema gains.
fn empty_schema_bytes(dir: &Path) -> u64 {
    let db = dir.join("empty.db");
    let o = on(&db).arg("migrate").output().expect("runs");
    assert!(o.status.success(), "{}", text(&o));
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("reads");
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("reads");
    (pages * size) as u64
}

/// Every call the tool performed (the keys in `log`) belongs to a committed transition: the
/// seq in its idempotency key (`RUN:SEQ:INDEX`) is at most the run's committed seq.
fn performed_only_committed(log: &str, committed_seq: i64) {
    for key in log.lines().filter(|l| !l.is_empty()) {
        let seq: i64 = key
            .split(':')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("key {key}"));
        assert!(
            seq <= committed_seq,
            "call {key} was performed but its transition was never committed (committed up to {committed_seq})"
        );
    }
}

#[test]
fn a_full_database_stops_the_run_cleanly_and_it_resumes_with_space() {
    let (dir, db) = temp_db();
    let spec = rounds_spec(dir.path(), 30);
    // Room for four pages of 4 KiB beyond the empty schema.
    let cap = empty_schema_bytes(dir.path()) + 4 * 4096 + 2048;
    let o = on(&db)
        .args(["run", utf8(&spec)])
        .env("RUNTAPE_DB_MAX_BYTES", cap.to_string())
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let line = one_line(&err(&o)).to_owned();
    let run = run_id(&o);
    assert!(line.contains("reached its size cap"), "{line}");
    assert!(line.contains(&format!("`runtape resume {run}`")), "{line}");
    let row = run_row(&db, &run);
    assert_ne!(row.status, "running", "{row:?}");
    assert_eq!(row.owner, None, "{row:?}");
    assert!(charge_lines(dir.path()) < 30, "stopped mid-run");
    let log = std::fs::read_to_string(dir.path().join("charges.log")).unwrap_or_default();
    performed_only_committed(&log, row.seq);

    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(run_row(&db, &run).status, "completed");
    assert_eq!(charges(dir.path()).len(), 30, "every call performed");
    assert!(runtape(&db, &["verify", &run]).status.success());
}

/// A database that fills at a run's first commit: the run's row and sealed head were written,
/// its first transition was not. `verify` accepts the run as it is (a run not started yet,
/// not a tamper), and `resume` starts and completes it once there is room.
#[test]
fn a_database_full_at_the_first_commit_leaves_a_run_that_verifies() {
    let (dir, db) = temp_db();
    let spec = rounds_spec(dir.path(), 2);
    // A 100 KB goal is stored three times: in the run's row and its run-list summary (written
    // together) and as its first message (not): 62 pages of 4 KiB beyond the empty schema hold
    // the first two and not all three, with some 10 pages to spare either way.
    let goal = "g".repeat(100_000);
    let cap = empty_schema_bytes(dir.path()) + 62 * 4096;
    let o = on(&db)
        .args(["run", spec.to_str().expect("utf-8"), &goal])
        .env("RUNTAPE_DB_MAX_BYTES", cap.to_string())
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let run = run_id(&o);
    assert_eq!(run_row(&db, &run).seq, 0, "the first commit did not land");
    let verify = runtape(&db, &["verify", &run]);
    assert!(
        verify.status.success(),
        "no false tamper alarm: {}{}",
        out(&verify),
        err(&verify)
    );
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(run_row(&db, &run).status, "completed");
    assert!(runtape(&db, &["verify", &run]).status.success());
}

/// Why the two tests on a real tmpfs are not in the Rust-only tier: they need a private user
/// and mount namespace, which the kernel or a container may forbid.
const NAMESPACES: &str = "needs user and mount namespaces: `unshare -rm sh -c 'mount -t tmpfs none /mnt'` must succeed (util-linux)";

/// A new directory holding [`rounds_spec`] of `rounds`, once a private user and mount
/// namespace has been shown to work here; fails naming what is missing otherwise.
fn namespaced_rounds(rounds: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let made = Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "`unshare -rm` failed: {NAMESPACES}");
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = rounds_spec(dir.path(), rounds);
    (dir, spec)
}

/// Runs `script` with `sh` in a private user and mount namespace, `RT` the binary and `vars`
/// set (paths); fails naming what is missing where it cannot mount a tmpfs there (the script
/// exits 90).
fn in_namespace(script: &str, vars: &[(&str, &Path)]) {
    let status = Command::new("unshare")
        .args(["-rm", "sh", "-c", script])
        .env("RT", env!("CARGO_BIN_EXE_runtape"))
        .envs(vars.iter().copied())
        .env_remove("RUNTAPE_DB")
        .env_remove("RUNTAPE_DB_MAX_BYTES")
        .status()
        .expect("unshare runs");
    assert_ne!(
        status.code(),
        Some(90),
        "cannot mount a tmpfs in a user namespace here: {NAMESPACES}"
    );
    assert!(status.success(), "the namespace script failed: {status:?}");
}

/// A disk that fills up after the database was made: opening it needs room for SQLite's
/// shared-memory index, which SQLite reports as a "disk I/O error". The line says the disk is
/// full, names the file and says what to do, for a read (`ls`) and for a new run alike.
#[test]
#[ignore = "needs user and mount namespaces: unshare -rm true (util-linux; the kernel must allow them)"]
fn a_disk_that_fills_up_later_is_called_full_not_an_io_error() {
    let (dir, spec) = namespaced_rounds(2);
    let db = dir.path().join("runs.db");
    let o = runtape(&db, &["run", spec.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // Closed as SQLite closes its last connection: checkpointed, no -wal or -shm left.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoints");
    drop(conn);
    assert!(!dir.path().join("runs.db-shm").exists());
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let script = r#"
        set -u
        mount -t tmpfs -o size=400k tmpfs "$MNT" || exit 90
        cp "$DB" "$MNT/runs.db"
        dd if=/dev/zero of="$MNT/filler" bs=4k 2> /dev/null
        "$RT" --db "$MNT/runs.db" ls > "$OUT/ls.out" 2> "$OUT/ls.err"
        echo $? > "$OUT/ls.code"
        "$RT" --db "$MNT/runs.db" run "$SPEC" > "$OUT/run.out" 2> "$OUT/run.err"
        echo $? > "$OUT/run.code"
    "#;
    in_namespace(
        script,
        &[
            ("MNT", &mnt),
            ("DB", &db),
            ("SPEC", &spec),
            ("OUT", dir.path()),
        ],
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let file = mnt.join("runs.db").display().to_string();
    for command in ["ls", "run"] {
        let code = read(&format!("{command}.code"));
        let stderr = read(&format!("{command}.err"));
        assert_eq!(code.trim(), "3", "{command}: {stderr}");
        let line = one_line(&stderr);
        assert!(
            line.starts_with(&format!(
                "error: disk full: no space left on the disk holding the database {file}"
            )),
            "{command}: {line}"
        );
        assert!(
            line.contains("free space on that disk"),
            "{command}: {line}"
        );
    }
}

#[test]
#[ignore = "needs user and mount namespaces: unshare -rm true (util-linux; the kernel must allow them)"]
fn a_full_tmpfs_stops_the_run_cleanly_and_it_resumes_after_growing() {
    let (dir, spec) = namespaced_rounds(40);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    // In a private namespace: a tmpfs of the empty schema plus 100 KiB (the write-ahead log
    // and its index take the rest) holds the database; fill it with one run, grow it, resume,
    // and copy the database out for the checks.
    let size_k = empty_schema_bytes(dir.path()) / 1024 + 100;
    let script = r#"
        set -u
        mount -t tmpfs -o size=SIZEk tmpfs "$MNT" || exit 90
        "$RT" --db "$MNT/runs.db" run "$SPEC" > "$OUT/run.out" 2> "$OUT/run.err"
        echo $? > "$OUT/run.code"
        cp "$MNT/runs.db" "$OUT/full.db"
        cp "$OUT/charges.log" "$OUT/charges_at_full.log" 2> /dev/null || true
        [ -e "$MNT/runs.db-wal" ] && cp "$MNT/runs.db-wal" "$OUT/full.db-wal"
        mount -o remount,size=16m "$MNT" || exit 91
        run=$(head -1 "$OUT/run.out" | awk '{print $3}')
        "$RT" --db "$MNT/runs.db" resume "$run" > "$OUT/resume.out" 2> "$OUT/resume.err"
        echo $? > "$OUT/resume.code"
        "$RT" --db "$MNT/runs.db" verify "$run" > "$OUT/verify.out" 2>&1
        echo $? > "$OUT/verify.code"
    "#;
    in_namespace(
        &script.replace("SIZEk", &format!("{size_k}k")),
        &[("MNT", &mnt), ("SPEC", &spec), ("OUT", dir.path())],
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    assert_eq!(
        read("run.code").trim(),
        "3",
        "{}{}",
        read("run.out"),
        read("run.err")
    );
    let line = one_line(&read("run.err")).to_owned();
    assert!(line.contains("disk full: no space left"), "{line}");
    let run = first_id(&read("run.out"));
    let full = dir.path().join("full.db");
    let row = run_row(&full, &run);
    // On a really full disk not even the lease's release can be written: the run is left as
    // a crash leaves it, `running` under an owner that has exited, taken over at once.
    assert!(
        row.status != "running" || !row.owner.as_deref().is_some_and(owner_alive),
        "{row:?}"
    );
    let log = read("charges_at_full.log");
    assert!(log.lines().count() < 40, "stopped mid-run");
    performed_only_committed(&log, row.seq);
    assert_eq!(
        read("resume.code").trim(),
        "0",
        "{}{}",
        read("resume.out"),
        read("resume.err")
    );
    assert!(
        read("resume.out").contains("completed"),
        "{}",
        read("resume.out")
    );
    assert_eq!(
        read("verify.code").trim(),
        "0",
        "verify: {}",
        read("verify.out")
    );
    assert_eq!(charges(dir.path()).len(), 40, "every call performed");
}
