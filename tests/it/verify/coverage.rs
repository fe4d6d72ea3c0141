//! Every column of every table runtape stores is either verified or listed as operational,
//! with its reason, in `ledger::coverage` — read from the database itself
//! (`PRAGMA table_info`), for a new database and for one migrated from runtape 0.1.0. A new
//! stored field fails this test until someone decides how `verify` covers it (and
//! `verify_tamper.rs` then demands an edit case for it).

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::cli::{column, fixture};
use runtape::ledger::coverage::{COLUMNS, Coverage, coverage_of};
use runtape::store::{Durability, SqliteStore};

/// `(table, column)` for every column of every table in the database at `path`.
fn stored_columns(path: &Path) -> BTreeSet<(String, String)> {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let tables: Vec<String> = column(
        &conn,
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    );
    let mut out = BTreeSet::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("PRAGMA table_info({table})"))
            .expect("prepares");
        let names: Vec<String> = stmt
            .query_map([], |r| r.get(1))
            .expect("lists columns")
            .collect::<Result<_, _>>()
            .expect("reads");
        for name in names {
            out.insert((table.clone(), name));
        }
    }
    out
}

fn assert_covered(columns: &BTreeSet<(String, String)>) {
    for (table, name) in columns {
        match coverage_of(table, name) {
            Some(Coverage::Verified(how)) => assert!(!how.is_empty(), "{table}.{name}"),
            Some(Coverage::Operational(why)) => assert!(!why.is_empty(), "{table}.{name}"),
            None => panic!(
                "{table}.{name} is stored but neither verified nor listed as operational in ledger::coverage"
            ),
        }
    }
    for c in COLUMNS {
        assert!(
            columns.contains(&(c.table.to_owned(), c.name.to_owned())),
            "ledger::coverage lists {}.{}, which is not stored",
            c.table,
            c.name
        );
    }
}

#[test]
fn every_column_of_a_new_database_is_covered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("new.db");
    drop(SqliteStore::open(&path, Durability::Full).expect("creates"));
    let columns = stored_columns(&path);
    assert!(columns.len() >= 30, "{columns:?}");
    assert_covered(&columns);
}

#[test]
fn a_database_migrated_from_0_1_0_has_the_same_columns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = dir.path().join("old.db");
    std::fs::copy(fixture("db-0.1.0/runtape.db"), &old).expect("copies");
    drop(SqliteStore::open(&old, Durability::Full).expect("migrates"));
    let new = dir.path().join("new.db");
    drop(SqliteStore::open(&new, Durability::Full).expect("creates"));
    assert_eq!(stored_columns(&old), stored_columns(&new));
    assert_covered(&stored_columns(&old));
}

#[test]
fn only_lease_and_control_columns_are_operational() {
    // Besides the lease and control columns, whole tables that hold no run's history: the run
    // list's index (every run it lists is checked again from verified rows) and the schedules'
    // timetable (a run a schedule starts seals the schedule in its own setup), and which runs
    // refer to each blob (read by prune alone: a row removed can let a prune remove a blob a
    // kept run needs, which that run's verify then reports missing).
    let outside_history = [
        "run_summary",
        "run_tags",
        "schedules",
        "schedule_fires",
        "blob_refs",
    ];
    let operational: Vec<String> = COLUMNS
        .iter()
        .filter(|c| matches!(c.coverage, Coverage::Operational(_)))
        .filter(|c| !outside_history.contains(&c.table))
        .map(|c| format!("{}.{}", c.table, c.name))
        .collect();
    assert_eq!(
        operational,
        [
            "runs.lease_epoch",
            "runs.lease_owner",
            "runs.lease_expires_ms",
            "runs.control"
        ]
    );
}
