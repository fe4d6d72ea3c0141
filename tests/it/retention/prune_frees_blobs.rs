//! `runtape prune` removes the blobs (conversation nodes) of the runs it removes that no kept
//! run refers to, and keeps every one a kept run does, on SQLite and PostgreSQL.
//!
//! Runs of examples/approval.toml share nodes wholly: two approved runs (which go) have the
//! same conversation, a run waiting for a person (which stays) has its first three nodes, and
//! a fork of the waiting one from step 2, approved (it stays with its parent), has the same conversation
//! as the approved ones. A run of examples/quickstart.toml (which goes) shares nothing. The
//! prune frees exactly the quickstart run's nodes, as many bytes as `--dry-run` said; the
//! waiting run and the fork verify and `show` every step, and the waiting run goes on to
//! complete. Then runs committing that same conversation race prunes (real processes) and
//! every run left ends verified. The real binary, a real file or server.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::cli::{all_at_once, example, json_lines, on, out, run_id, runtape, text, utf8};
use crate::support::pg::PgServer;

/// Runs `args` on `db` and returns its stdout, failing on a non-zero exit.
fn ok(db: &Path, args: &[&str]) -> String {
    let o = runtape(db, args);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    out(&o)
}

fn approval() -> String {
    utf8(&example("approval.toml")).to_owned()
}

/// Starts a run of examples/approval.toml (it rests waiting for a person).
fn waiting(db: &Path) -> String {
    run_id(&runtape(db, &["run", &approval()]))
}

/// A run of examples/approval.toml, approved to its end.
fn approved(db: &Path) -> String {
    let run = waiting(db);
    ok(db, &["resume", &run, "--approve"]);
    run
}

/// `run` verifies, and `show` reads each of its steps.
fn reads_whole(db: &Path, run: &str) {
    let v = runtape(db, &["verify", run]);
    assert!(v.status.success(), "{run}: {}", text(&v));
    let steps = json_lines(&runtape(db, &["log", run, "--json"]));
    assert!(!steps.is_empty(), "{run} has steps");
    for s in &steps {
        let seq = s["seq"].as_u64().expect("seq");
        ok(db, &["show", &format!("{run}@{seq}"), "--json"]);
    }
}

/// A fork of waiting run `run` from step 2, run live (to the same request) and approved.
fn forked_from(db: &Path, run: &str) -> String {
    let o = runtape(db, &["fork", &format!("{run}@2"), "--json"]);
    let first = out(&o).lines().next().unwrap_or_default().to_owned();
    let line: serde_json::Value = serde_json::from_str(&first).expect("the fork's line");
    let fork = line["id"].as_str().expect("id").to_owned();
    ok(db, &["resume", &fork, "--approve"]);
    fork
}

fn prune(db: &Path, dry: bool) -> serde_json::Value {
    let mut args = vec!["prune", "--older-than", "0s", "--json"];
    if dry {
        args.push("--dry-run");
    }
    serde_json::from_str(&ok(db, &args)).expect("json")
}

/// Each stored blob's digest (hex) and size.
type Blobs = BTreeMap<String, u64>;

/// The scenario of the module doc on `db`; `blobs` reads the stored blobs.
fn frees_only_unshared_blobs(db: &Path, blobs: &dyn Fn() -> Blobs) {
    let (a, b) = (approved(db), approved(db));
    let kept = waiting(db);
    let forked = forked_from(db, &kept);
    let quick = run_id(&runtape(db, &["run", utf8(&example("quickstart.toml"))]));
    let before = blobs();

    let dry = prune(db, true);
    assert_eq!(dry["runs"], 3, "{dry}");
    assert_eq!(blobs(), before, "a dry run removes nothing");
    let done = prune(db, false);
    assert_eq!(done["runs"], 3, "{done}");
    for run in [&a, &b, &quick] {
        let v = runtape(db, &["verify", run]);
        assert_eq!(v.status.code(), Some(5), "{run} was pruned: {}", text(&v));
    }
    let after = blobs();
    assert!(after.keys().all(|d| before.contains_key(d)), "none added");
    let removed: Vec<u64> = before
        .iter()
        .filter(|(d, _)| !after.contains_key(*d))
        .map(|(_, size)| *size)
        .collect();
    let freed = done["blobs"].as_u64().expect("blobs");
    assert_eq!(removed.len() as u64, freed, "{done}");
    assert_eq!(removed.iter().sum::<u64>(), done["blob_bytes"], "{done}");
    assert_eq!(
        (dry["blobs"].clone(), dry["blob_bytes"].clone()),
        (done["blobs"].clone(), done["blob_bytes"].clone()),
        "the dry run said what the prune frees"
    );
    // The quickstart run's six messages went (system prompt, goal, the reply calling two
    // tools, their two results, the answer); the approval runs' five are all the fork's too.
    assert_eq!(freed, 6, "{done}");

    for run in [&kept, &forked] {
        reads_whole(db, run);
    }
    ok(db, &["resume", &kept, "--approve"]);
    reads_whole(db, &kept);
}

/// Runs committing the approval conversation race prunes of approved runs with it, twice,
/// and a last prune runs alone: every run left verifies and reads whole, and goes on to
/// complete.
fn racing_commits_lose_nothing(db: &Path) {
    let mut left = Vec::new();
    for _ in 0..2 {
        for _ in 0..3 {
            approved(db);
        }
        let mut commands = Vec::new();
        for _ in 0..3 {
            let mut c = on(db);
            c.args(["run", &approval()]);
            commands.push(c);
        }
        for _ in 0..2 {
            let mut c = on(db);
            c.args(["prune", "--older-than", "0s"]);
            commands.push(c);
        }
        for (i, o) in all_at_once(commands).iter().enumerate() {
            if i < 3 {
                left.push(run_id(o));
            } else {
                assert!(o.status.success(), "{}", text(o));
            }
        }
    }
    // One more prune of approved runs, with nothing committing meanwhile that could store
    // the shared nodes again.
    approved(db);
    ok(db, &["prune", "--older-than", "0s"]);
    for run in &left {
        reads_whole(db, run);
        ok(db, &["resume", run, "--approve"]);
        reads_whole(db, run);
    }
}

fn sqlite_blobs(db: &Path) -> Blobs {
    let conn = rusqlite::Connection::open(db).expect("opens");
    crate::support::cli::pairs::<String, i64>(&conn, "SELECT hex(hash), length(bytes) FROM blobs")
        .into_iter()
        .map(|(d, n)| (d.to_lowercase(), n as u64))
        .collect()
}

#[test]
fn prune_frees_the_blobs_only_pruned_runs_used_on_sqlite() {
    let (_dir, db) = crate::support::cli::temp_db();
    frees_only_unshared_blobs(&db, &|| sqlite_blobs(&db));
}

#[test]
fn prune_racing_commits_of_the_same_conversation_loses_nothing_on_sqlite() {
    let (_dir, db) = crate::support::cli::temp_db();
    racing_commits_lose_nothing(&db);
}

#[test]
#[ignore = "needs PostgreSQL: tests/extras/install.sh postgres"]
fn prune_frees_the_blobs_only_pruned_runs_used_on_postgres() {
    let server = PgServer::start();
    let url = server.fresh_db();
    let name = PgServer::db_of(&url).to_owned();
    let blobs = || {
        server
            .sql(
                &name,
                "SELECT encode(hash, 'hex') || ' ' || octet_length(bytes) FROM runtape.blobs",
            )
            .lines()
            .map(|l| {
                let (d, n) = l.split_once(' ').expect("digest and size");
                (d.to_owned(), n.parse().expect("size"))
            })
            .collect()
    };
    frees_only_unshared_blobs(Path::new(&url), &blobs);
}

#[test]
#[ignore = "needs PostgreSQL: tests/extras/install.sh postgres"]
fn prune_racing_commits_of_the_same_conversation_loses_nothing_on_postgres() {
    let server = PgServer::start();
    let url = server.fresh_db();
    racing_commits_lose_nothing(Path::new(&url));
}

/// A database from runtape 0.1.0 (tests/fixtures/db-0.1.0) recorded no blob references: its
/// finished runs are pruned and every blob it held stays (which runs used them is unknown) —
/// also those a new run of examples/approval.toml shares with its waiting run and then goes
/// with — and the waiting run still reads whole.
#[test]
fn blobs_stored_before_references_were_recorded_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = crate::support::cli::fixture_copy(dir.path(), "db-0.1.0/runtape.db");
    let awaiting = "01m8317cshve14rs";
    ok(&db, &["migrate"]);
    let before = sqlite_blobs(&db);
    let new = approved(&db);
    let done = prune(&db, false);
    assert!(done["runs"].as_u64().expect("runs") > 1, "{done}");
    let v = runtape(&db, &["verify", &new]);
    assert_eq!(v.status.code(), Some(5), "{new} was pruned: {}", text(&v));
    let after = sqlite_blobs(&db);
    assert!(before.keys().all(|d| after.contains_key(d)), "{done}");
    reads_whole(&db, awaiting);
}
