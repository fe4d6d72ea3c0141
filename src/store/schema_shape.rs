//! Whether a database's tables are those of the schema version its label (`PRAGMA
//! user_version`) names, checked when the file is opened and before anything is written.
//!
//! A label edited by hand, or a table dropped, would otherwise surface later and elsewhere: a
//! migration replaying its DDL over tables that exist, "no such column" from a read, or — with
//! `outbox` gone — a run row written before the first commit fails. The expected tables are
//! not listed by hand: [`shapes`] builds each version's schema in memory from the migrations
//! themselves, so a new migration is checked the day it is added.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use rusqlite::Connection;

use super::StoreError;

/// A database's tables (SQLite's own `sqlite_*` aside), each with its columns.
pub(super) type Shape = BTreeMap<String, BTreeSet<String>>;

/// The tables of `conn`'s database and their columns.
pub(super) fn shape_of(conn: &Connection) -> rusqlite::Result<Shape> {
    let mut shape = Shape::new();
    let mut stmt = conn.prepare(
        "SELECT m.name, p.name FROM sqlite_schema AS m, pragma_table_info(m.name) AS p \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite%'",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        shape
            .entry(r.get::<_, String>(0)?)
            .or_default()
            .insert(r.get(1)?);
    }
    Ok(shape)
}

/// The shape of every schema version, from 0 (no tables) to
/// [`SCHEMA_VERSION`](super::SCHEMA_VERSION), as the migrations make it: built once, on an
/// empty in-memory database.
pub(super) fn shapes() -> &'static [Shape] {
    static SHAPES: OnceLock<Vec<Shape>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        // The migrations are this crate's own SQL, run in order on an empty in-memory
        // database, where they cannot fail (`every_version_has_a_shape` runs them).
        let conn = Connection::open_in_memory().expect("an in-memory database opens");
        let mut out = vec![Shape::new()];
        for sql in super::schema::migration_sql() {
            conn.execute_batch(sql)
                .expect("a migration applies to the schema before it");
            out.push(shape_of(&conn).expect("an in-memory schema reads"));
        }
        out
    })
}

/// Whether `found` is the schema `expected`: every table of it with exactly its columns, and no
/// table of another runtape version (tables of other programs are left alone).
fn fits(found: &Shape, expected: &Shape) -> bool {
    let ours = || shapes().iter().flat_map(|s| s.keys());
    expected.iter().all(|(t, cols)| found.get(t) == Some(cols))
        && ours().all(|t| expected.contains_key(t) || !found.contains_key(t))
}

/// Checks that the tables `found` in the database `shown` are those of schema version
/// `labelled` (at most [`SCHEMA_VERSION`](super::SCHEMA_VERSION), checked before). A file with
/// no tables at version 0 is a new database. Otherwise the error says what is wrong in one
/// line, without the schema's DDL: a label that names another version than the tables have
/// ([`StoreError::MislabelledSchema`]), tables of no version (a foreign database, or one with a
/// table or column missing: [`StoreError::Corrupt`]).
pub(super) fn check(found: &Shape, labelled: i64, shown: &str) -> Result<(), StoreError> {
    if labelled == 0 && found.is_empty() {
        return Ok(());
    }
    // The common case, a database of this version with nothing else in it, is told by its
    // digest alone: building every version's shape runs every migration in memory, which
    // cost more than the rest of a `show` or `resume` (about 4 ms a process).
    if labelled == super::SCHEMA_VERSION && digest(found) == LATEST_SHAPE_DIGEST {
        return Ok(());
    }
    let all = shapes();
    // Version 0 has no tables: a file labelled 0 with tables is another program's (or a
    // runtape database whose label was reset, told below).
    let at_label = usize::try_from(labelled)
        .ok()
        .filter(|&v| v > 0)
        .and_then(|v| all.get(v));
    if at_label.is_some_and(|expected| fits(found, expected)) {
        return Ok(());
    }
    if let Some(actual) = (1..all.len()).rev().find(|&v| fits(found, &all[v])) {
        return Err(StoreError::MislabelledSchema {
            path: shown.to_owned(),
            labelled,
            actual: actual as i64,
        });
    }
    let detail = match at_label {
        Some(expected) => difference(found, expected, labelled),
        None if labelled == 0 => "a SQLite database, but not one of runtape's".to_owned(),
        None => format!(
            "labelled schema version {labelled} (PRAGMA user_version), which no runtape writes, and its tables are of no runtape version"
        ),
    };
    Err(StoreError::Corrupt {
        path: shown.to_owned(),
        detail,
    })
}

/// The digest of the latest schema version's shape ([`digest`] of the last of [`shapes`]):
/// a file whose tables have this digest is of that version, with no other table. A new
/// migration changes it, and `the_latest_digest_is_the_latest_shape` says the new value.
const LATEST_SHAPE_DIGEST: &str =
    "51c0c2dc1bdb6ea4b2a04d8710b58f1637d709fe178fc3c4a9f0837d66ecd10b";

/// A digest of `shape`: every table and its columns, in order.
fn digest(shape: &Shape) -> String {
    let mut hasher = blake3::Hasher::new();
    for (table, cols) in shape {
        hasher.update(table.as_bytes());
        for col in cols {
            hasher.update(b"\x1f");
            hasher.update(col.as_bytes());
        }
        hasher.update(b"\x1e");
    }
    hasher.finalize().to_hex().to_string()
}

/// The first way `found` differs from schema `version`'s `expected` tables, in words.
fn difference(found: &Shape, expected: &Shape, version: i64) -> String {
    for (table, cols) in expected {
        let Some(have) = found.get(table) else {
            return format!("table `{table}` of schema version {version} is missing");
        };
        if let Some(col) = cols.difference(have).next() {
            return format!("column `{table}.{col}` of schema version {version} is missing");
        }
        if let Some(col) = have.difference(cols).next() {
            return format!("column `{table}.{col}` is not in schema version {version}");
        }
    }
    match found.keys().find(|t| !expected.contains_key(*t)) {
        Some(t) => format!("table `{t}` is not in schema version {version}"),
        None => format!("its tables are not those of schema version {version}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_has_a_shape() {
        let all = shapes();
        assert_eq!(all.len() as i64, super::super::SCHEMA_VERSION + 1);
        let latest = &all[all.len() - 1];
        for table in ["runs", "run_specs", "transitions", "outbox", "blobs"] {
            assert!(latest.contains_key(table), "{table}");
        }
        assert!(latest["runs"].contains("lease_owner"));
        for (v, shape) in all.iter().enumerate() {
            assert!(fits(shape, shape), "version {v} fits itself");
        }
    }

    #[test]
    fn the_latest_digest_is_the_latest_shape() {
        let all = shapes();
        let latest = digest(&all[all.len() - 1]);
        assert_eq!(
            LATEST_SHAPE_DIGEST, latest,
            "set LATEST_SHAPE_DIGEST to the new schema's digest"
        );
        // The latest tables with a table more or less, or a column less, have another digest,
        // so they take the full check (only a file labelled the latest version is let through
        // on its digest: earlier versions whose migrations added no column share it).
        let mut less = all[all.len() - 1].clone();
        less.remove("outbox");
        assert_ne!(digest(&less), latest);
        let mut column = all[all.len() - 1].clone();
        column
            .get_mut("runs")
            .map(|cols| cols.remove("lease_owner"));
        assert_ne!(digest(&column), latest);
        let mut more = all[all.len() - 1].clone();
        more.insert("other".into(), BTreeSet::from(["x".to_owned()]));
        assert_ne!(digest(&more), latest);
    }

    #[test]
    fn a_missing_table_is_named_and_a_wrong_label_is_told_apart() {
        let all = shapes();
        let latest = all.len() as i64 - 1;
        let mut dropped = all[all.len() - 1].clone();
        dropped.remove("outbox");
        let e = check(&dropped, latest, "x.db").expect_err("damaged");
        assert!(e.to_string().contains("`outbox`"), "{e}");
        assert!(
            matches!(
                check(&all[2], latest, "x.db"),
                Err(StoreError::MislabelledSchema {
                    labelled,
                    actual: 2,
                    ..
                }) if labelled == latest
            ),
            "version 2's tables labelled as the latest"
        );
        assert!(matches!(
            check(&all[all.len() - 1], -1, "x.db"),
            Err(StoreError::MislabelledSchema { actual, .. }) if actual == latest
        ));
        assert_eq!(check(&Shape::new(), 0, "x.db"), Ok(()), "a new file");
    }
}
