//! `runtape migrate`: create or upgrade the database's schema, and say which version it has.
//! Every command does this on first use; running it first lets an operator do it with a role
//! that may create tables, and the workers run with one that may only read and write rows.

use std::path::Path;

use super::common::{CliError, postgres_url, shown};
use crate::store::{Durability, PG_SCHEMA_VERSION, PostgresStore, SCHEMA_VERSION, SqliteStore};
use crate::term::{say_json, say_line};

/// Migrates `db` (a PostgreSQL URL or a SQLite file, created when absent).
/// With `json`, one object: the database (credentials left out), the schema version it has
/// now, and what was done (`created`, `upgraded` from `before`, or `checked`).
pub(crate) fn migrate(db: &Path, json: bool) -> Result<(), CliError> {
    let (done, before, now, line) = match postgres_url(db) {
        Some(url) => match PostgresStore::migrate(url)? {
            (0, now) => (
                "created",
                None,
                now,
                format!("created runtape's schema (version {now}) in {}", shown(db)),
            ),
            (before, now) if before < now => (
                "upgraded",
                Some(before),
                now,
                format!(
                    "upgraded {} from schema version {before} to {now}",
                    shown(db)
                ),
            ),
            _ => (
                "checked",
                None,
                PG_SCHEMA_VERSION,
                format!(
                    "{} is up to date (schema version {PG_SCHEMA_VERSION})",
                    shown(db)
                ),
            ),
        },
        None => {
            let existed = db.exists();
            SqliteStore::open(db, Durability::Full)?;
            if existed {
                (
                    "checked",
                    None,
                    SCHEMA_VERSION,
                    format!(
                        "{} is at schema version {SCHEMA_VERSION} (migrated if it was older)",
                        shown(db)
                    ),
                )
            } else {
                (
                    "created",
                    None,
                    SCHEMA_VERSION,
                    format!("created {} (schema version {SCHEMA_VERSION})", shown(db)),
                )
            }
        }
    };
    if json {
        say_json(&serde_json::json!({
            "type": "migrate", "database": shown(db), "done": done,
            "schema_version": now, "before": before,
        }))?;
    } else {
        let _ = say_line(&line);
    }
    Ok(())
}
