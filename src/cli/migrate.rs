//! `runtape migrate`: create or upgrade the database's schema, and say which version it has.
//! Every command does this on first use; running it first lets an operator do it with a role
//! that may create tables, and the workers run with one that may only read and write rows.

use std::path::Path;

use super::common::{CliError, postgres_url, shown};
use crate::store::{Durability, PG_SCHEMA_VERSION, PostgresStore, SCHEMA_VERSION, SqliteStore};
use crate::term::say_line;

/// Migrates `db` (a PostgreSQL URL or a SQLite file, created when absent).
pub(crate) fn migrate(db: &Path) -> Result<(), CliError> {
    let line = match postgres_url(db) {
        Some(url) => match PostgresStore::migrate(url)? {
            (0, now) => format!("created runtape's schema (version {now}) in {}", shown(db)),
            (before, now) if before < now => {
                format!(
                    "upgraded {} from schema version {before} to {now}",
                    shown(db)
                )
            }
            _ => format!(
                "{} is up to date (schema version {PG_SCHEMA_VERSION})",
                shown(db)
            ),
        },
        None => {
            let existed = db.exists();
            SqliteStore::open(db, Durability::Full)?;
            if existed {
                format!(
                    "{} is at schema version {SCHEMA_VERSION} (migrated if it was older)",
                    shown(db)
                )
            } else {
                format!("created {} (schema version {SCHEMA_VERSION})", shown(db))
            }
        }
    };
    let _ = say_line(&line);
    Ok(())
}
