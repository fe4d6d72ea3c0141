//! Durability modes: `[run] durability = "full" | "normal"` in a spec file and `--durability`
//! on the command line reach the SQLite writer's `synchronous` pragma (read back from the
//! writer connection itself), the flag overrides the file, a bad value is one line naming the
//! key, and `normal` with a PostgreSQL database is refused before anything is opened.

use std::path::{Path, PathBuf};

use runtape::config;
use runtape::store::{Durability, SqliteStore};

use crate::support;
use crate::support::cli::{err, example, temp_db, utf8, write};
use support::cli::runtape;

/// The quickstart example with `extra` added to its text, written into `dir`.
fn spec_with(dir: &Path, extra: &str) -> PathBuf {
    let example = example("quickstart.toml");
    let text = std::fs::read_to_string(example).expect("the quickstart example");

    write(dir, "spec.toml", &format!("{text}\n{extra}\n"))
}

const NOTE: &str = "durability \"normal\"";

#[test]
fn a_spec_names_its_durability_or_leaves_it_to_the_caller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let normal = spec_with(dir.path(), "[run]\ndurability = \"normal\"");
    assert_eq!(
        config::load(&normal).expect("loads").durability,
        Some(Durability::Normal)
    );
    let full = spec_with(dir.path(), "[run]\ndurability = \"full\"");
    assert_eq!(
        config::load(&full).expect("loads").durability,
        Some(Durability::Full)
    );
    let silent = spec_with(dir.path(), "");
    assert_eq!(config::load(&silent).expect("loads").durability, None);
}

#[test]
fn the_writer_commits_with_the_mode_it_was_opened_with() {
    let (_dir, db) = temp_db();
    let normal = SqliteStore::open(&db, Durability::Normal).expect("opens");
    assert_eq!(normal.durability(), Durability::Normal);
    // Another store on the same file chooses its own: the mode belongs to the connection.
    let full = SqliteStore::open(&db, Durability::Full).expect("opens");
    assert_eq!(full.durability(), Durability::Full);
    assert_eq!(normal.durability(), Durability::Normal, "unchanged");
}

#[test]
fn a_bad_durability_in_a_spec_is_one_line_naming_the_key_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec_with(dir.path(), "[run]\ndurability = \"sometimes\"");
    let db = dir.path().join("runs.db");
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(
        e.contains("durability") && e.contains("sometimes") && e.contains("\"full\""),
        "{e}"
    );
    assert!(!db.exists(), "no database is created");
}

#[test]
fn the_spec_sets_normal_and_the_flag_overrides_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec_with(dir.path(), "[run]\ndurability = \"normal\"");
    let spec = utf8(&spec);
    let db = dir.path().join("runs.db");

    let by_spec = runtape(&db, &["run", spec]);
    assert!(by_spec.status.success(), "{}", err(&by_spec));
    assert!(err(&by_spec).contains(NOTE), "{}", err(&by_spec));

    let by_flag = runtape(&db, &["run", spec, "--durability", "full"]);
    assert!(by_flag.status.success(), "{}", err(&by_flag));
    assert!(!err(&by_flag).contains(NOTE), "{}", err(&by_flag));

    let plain = spec_with(dir.path(), "");
    let plain = utf8(&plain);
    let flag_only = runtape(&db, &["run", plain, "--durability", "normal"]);
    assert!(flag_only.status.success(), "{}", err(&flag_only));
    assert!(err(&flag_only).contains(NOTE), "{}", err(&flag_only));

    let default = runtape(&db, &["run", plain]);
    assert!(default.status.success(), "{}", err(&default));
    assert!(!err(&default).contains(NOTE), "{}", err(&default));
}

#[test]
fn normal_with_postgresql_is_refused_in_one_line_before_connecting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec_with(dir.path(), "");
    // Nothing listens on port 1: a refusal that tried to connect first would say so instead.
    let url = Path::new("postgres://runtape@127.0.0.1:1/nowhere");
    let o = runtape(url, &["run", utf8(&spec), "--durability", "normal"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.contains("synchronous_commit"), "{e}");
}
