//! `verify PARENT --recursive` holds a parent to the children its history names: from
//! revision 5 a parent's `ChildFinished` names the child run and where its sealed record ends
//! (its last step, chain link and last receipt), covered by the parent's own hash chain and
//! head. A child removed from every table, or replaced by another run under its id, fails the
//! parent's recursive verify with one line naming the child. A revision-4 parent names no
//! child, so there it verifies as before (the limit of what its history committed to).
//!
//! Runs are made by the library's engine on a real SQLite file; `verify` is the real binary.

use std::path::Path;
use std::sync::Arc;

use crate::support::cli::{runtape, temp_db, text};
use crate::support::delegation::{lead_of_two_at, lead_of_two_model};
use runtape::exec::{Engine, EngineConfig};
use runtape::machine::*;
use runtape::store::RunStatus;

/// Runs the two-child team `runs` times at revision `semantics` into `db`; returns the parents.
async fn teams(db: &Path, semantics: u32, runs: usize) -> Vec<String> {
    let engine = Engine::open_with(db, EngineConfig::default()).expect("opens");
    engine.register_provider("script", Arc::new(lead_of_two_model()));
    let mut parents = Vec::new();
    for _ in 0..runs {
        let handle = engine
            .start(lead_of_two_at(semantics), "do both")
            .await
            .expect("starts");
        let id = handle.run_id().to_string();
        assert_eq!(
            handle.wait().await.expect("ends").status,
            RunStatus::Completed
        );
        parents.push(id);
    }
    parents
}

/// Removes `run` from every table that holds a row of it.
fn remove(conn: &rusqlite::Connection, run: &str) {
    let key: i64 = conn
        .query_row("SELECT key FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .expect("the run's row");
    let (lo, hi) = (key << 32, (key << 32) | 0xffff_ffff);
    conn.execute(
        "DELETE FROM transitions WHERE id BETWEEN ?1 AND ?2",
        [lo, hi],
    )
    .expect("deletes");
    conn.execute("DELETE FROM snapshots WHERE id BETWEEN ?1 AND ?2", [lo, hi])
        .expect("deletes");
    for table in ["outbox", "run_specs", "session_runs"] {
        conn.execute(&format!("DELETE FROM {table} WHERE run = ?1"), [key])
            .expect("deletes");
    }
    conn.execute("DELETE FROM runs WHERE key = ?1", [key])
        .expect("deletes");
}

/// `verify --recursive` of `parent` exits 1 with one line that names `child`.
fn assert_names(db: &Path, parent: &str, child: &str, needle: &str) {
    let out = runtape(db, &["verify", parent, "--recursive"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("run {parent} does not verify"))
            && err.contains(&format!("child run {child}"))
            && err.contains(needle),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_removed_from_every_table_fails_its_parents_recursive_verify() {
    let (_dir, db) = temp_db();
    let parent = teams(&db, SEMANTICS, 1).await.remove(0);
    let ok = runtape(&db, &["verify", &parent, "--recursive"]);
    assert!(ok.status.success(), "{}", text(&ok));
    let child = format!("{parent}.3.1");
    let conn = rusqlite::Connection::open(&db).expect("opens");
    remove(&conn, &child);
    drop(conn);
    assert_names(&db, &parent, &child, "none stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_replaced_by_another_run_under_its_id_fails_naming_it() {
    let (_dir, db) = temp_db();
    let parents = teams(&db, SEMANTICS, 2).await;
    let (first, second) = (&parents[0], &parents[1]);
    let child = format!("{first}.3.1");
    let conn = rusqlite::Connection::open(&db).expect("opens");
    remove(&conn, &child);
    // The other team's child, which did the same task, now answers to the removed one's id.
    conn.execute(
        "UPDATE runs SET id = ?1 WHERE id = ?2",
        [&child, &format!("{second}.3.1")],
    )
    .expect("renames");
    drop(conn);
    assert_names(&db, first, &child, "replaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_4_parent_commits_to_no_child_and_verifies_as_before() {
    let (_dir, db) = temp_db();
    let parent = teams(&db, 4, 1).await.remove(0);
    let conn = rusqlite::Connection::open(&db).expect("opens");
    remove(&conn, &format!("{parent}.3.1"));
    drop(conn);
    // Nothing in a revision-4 history names where a child's record ends: the parent and the
    // child still stored verify, as they always did.
    let out = runtape(&db, &["verify", &parent, "--recursive"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("OK: "))
            .count(),
        2,
        "{}",
        text(&out)
    );
}
