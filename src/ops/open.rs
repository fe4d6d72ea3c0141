//! Where the runs are and the engine over them: the database a front end names (a SQLite
//! file or a PostgreSQL URL), opening it, and an [`Engine`] configured as the `runtape`
//! command configures it (receipt key, clock, durability, the environment's settings).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::OpsError;
use crate::exec::{Engine, EngineConfig, SteppedClock};
use crate::receipt::{DEFAULT_KEY_ENV, ReceiptSigner};
use crate::store::{Durability, PostgresStore, SqliteStore, Store, is_postgres_url};

/// Where a warning line goes (a SQLite file opened at `normal` durability, an MCP server's
/// complaint): the `runtape` command writes it to stderr, a program does what it likes.
pub type Warn = fn(&str);

/// The default [`Warn`]: a `tracing` warning.
pub fn trace_warning(line: &str) {
    tracing::warn!("{line}");
}

/// The database to use: `flag` (`--db`), else `$RUNTAPE_DB`, else `fallback` (a spec file's
/// `database`), else `./runtape.db`. A `postgres://` URL is carried as it is (see
/// [`postgres_url`]).
pub fn db_path(flag: Option<&Path>, fallback: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("RUNTAPE_DB")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| fallback.map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("runtape.db"))
}

/// The PostgreSQL URL `db` holds, when it is one rather than a SQLite file's path.
pub fn postgres_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| is_postgres_url(s))
}

/// The database as messages show it: a file's path, or a URL without its password.
pub fn shown(db: &Path) -> String {
    match postgres_url(db) {
        Some(url) => crate::store::display_url(url),
        None => db.display().to_string(),
    }
}

/// Opens an existing database for an operation that reads or changes runs: a SQLite file
/// that must exist, or a PostgreSQL database (its schema is created on first use).
pub fn open_existing(db: &Path) -> Result<Arc<dyn Store>, OpsError> {
    Ok(match postgres_url(db) {
        Some(url) => Arc::new(PostgresStore::open(url)?),
        None => Arc::new(SqliteStore::open_existing(db, Durability::Full)?),
    })
}

/// The store at `db`: a PostgreSQL database, or a SQLite file (created only when `create`),
/// committing every write durably.
pub fn open_store(db: &Path, create: bool) -> Result<Arc<dyn Store>, OpsError> {
    open_store_with(db, create, Durability::Full, trace_warning)
}

/// [`open_store`] committing with `durability`. `normal` is for SQLite files only: with a
/// PostgreSQL database it is refused (the server's `synchronous_commit` decides there). A
/// SQLite file opened at `normal` says so to `warn`, from the mode its connection reports.
/// `$RUNTAPE_DB_MAX_BYTES` caps the file and `$RUNTAPE_WRITER_NICE` sets its writer thread's
/// priority.
pub fn open_store_with(
    db: &Path,
    create: bool,
    durability: Durability,
    warn: Warn,
) -> Result<Arc<dyn Store>, OpsError> {
    Ok(match postgres_url(db) {
        Some(_) if durability == Durability::Normal => {
            return Err(OpsError::NormalDurabilityOnPostgres);
        }
        Some(url) => Arc::new(PostgresStore::open(url)?),
        None => {
            if !create && !db.exists() {
                SqliteStore::open_existing(db, durability)?;
            }
            let nice = writer_nice()?;
            let store = SqliteStore::open_capped(db, durability, db_cap()?)?;
            if let Some(nice) = nice {
                store
                    .set_writer_nice(nice)
                    .map_err(|e| OpsError::BadSetting(e.to_string()))?;
            }
            if store.durability() == Durability::Normal {
                warn(&format!(
                    "{}: durability \"normal\": a process crash loses nothing, a power loss can lose the latest commits",
                    db.display()
                ));
            }
            Arc::new(store)
        }
    })
}

/// A duration in ms from the environment variable `name` (unset or empty: `default`); a value
/// that is not a whole number of at least `min` ms is refused, naming the variable.
pub fn env_ms(name: &str, default: u64, min: u64) -> Result<Duration, OpsError> {
    let Some(raw) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
        return Ok(Duration::from_millis(default));
    };
    match raw.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(ms) if ms >= min => Ok(Duration::from_millis(ms)),
        _ => Err(OpsError::BadSetting(format!(
            "${name} must be a whole number of milliseconds, at least {min}; unset it for the default ({default})"
        ))),
    }
}

/// `$RUNTAPE_DB_MAX_BYTES`: a cap on the database's size, if set.
fn db_cap() -> Result<Option<u64>, OpsError> {
    let Some(raw) = std::env::var_os("RUNTAPE_DB_MAX_BYTES").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    raw.to_str()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            OpsError::BadSetting(
                "$RUNTAPE_DB_MAX_BYTES must be a whole number of bytes; unset it for no cap".into(),
            )
        })
}

/// `$RUNTAPE_WRITER_NICE`: the SQLite writer thread's nice value, if set
/// ([`crate::store::sqlite_priority`]).
fn writer_nice() -> Result<Option<i32>, OpsError> {
    crate::store::sqlite_priority::nice_from_env().map_err(OpsError::BadSetting)
}

/// How an engine that drives stored runs is configured: what `runtape run`, `resume` and
/// `fork` take as options.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// The receipt signing key file (else `$RUNTAPE_RECEIPT_KEY`; neither: unsigned,
    /// hash-chained receipts). It must be the key a continued run was started with.
    pub receipt_key: Option<PathBuf>,
    /// Stamp events with a deterministic clock (1 ms per step from a fixed epoch), so a
    /// replay reproduces the state hashes.
    pub stepped_clock: bool,
    /// How a SQLite file commits (`None`: [`Durability::Full`]).
    pub durability: Option<Durability>,
    /// Where warnings go.
    pub warn: Warn,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            receipt_key: None,
            stepped_clock: false,
            durability: None,
            warn: trace_warning,
        }
    }
}

/// The engine configuration `settings` ask for: the receipt signer (`receipt_key`, else
/// `$RUNTAPE_RECEIPT_KEY`), the clock and the lease TTL (`$RUNTAPE_LEASE_TTL_MS`, default
/// 15 s). The key file's text is registered as a secret first ([`crate::secrets`]).
pub fn engine_config(settings: &EngineSettings) -> Result<EngineConfig, OpsError> {
    if let Some(path) = &settings.receipt_key
        && let Ok(text) = std::fs::read_to_string(path)
    {
        crate::secrets::register_key_text("receipt-key", &text);
    }
    let receipts =
        ReceiptSigner::from_env_or_file(DEFAULT_KEY_ENV, settings.receipt_key.as_deref())?;
    let mut config = EngineConfig {
        receipts: Arc::new(receipts),
        lease_ttl: env_ms("RUNTAPE_LEASE_TTL_MS", 15_000, 100)?,
        ..EngineConfig::default()
    };
    if settings.stepped_clock {
        config.clock = Arc::new(SteppedClock {
            start_ms: 1_700_000_000_000,
            step_ms: 1,
        });
    }
    Ok(config)
}

/// An engine over the database `db` (a SQLite file created only when `create`) configured as
/// `settings` say, forwarding MCP servers' progress to its trace.
pub fn engine(db: &Path, settings: &EngineSettings, create: bool) -> Result<Engine, OpsError> {
    let mut config = engine_config(settings)?;
    config.durability = settings.durability.unwrap_or_default();
    let store = open_store_with(db, create, config.durability, settings.warn)?;
    let engine = Engine::with_store(store, config);
    crate::exec::forward_mcp_progress(&engine);
    Ok(engine)
}
