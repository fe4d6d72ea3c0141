//! Read connections: a pool of read-only connections for a store's ordinary reads (WAL lets
//! them read while the writer writes, and concurrent readers — drivers, a server, `verify` —
//! do not queue on one connection), or one connection holding a read transaction for a
//! snapshot view, so every read of the view sees the database at one moment.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OpenFlags};

use super::super::StoreError;
use super::super::schema::classify;

/// Idle connections a pool keeps; readers beyond it open one and close it after.
const IDLE_READERS: usize = 4;

/// Where a store's reads are made.
pub(super) enum Readers {
    /// Any free connection; a new one when none is free.
    Pool(Mutex<Vec<Connection>>),
    /// One connection inside a read transaction: a snapshot.
    Snapshot(Mutex<Connection>),
}

/// A read-only connection to `path`, waiting up to 10 s for a lock.
pub(super) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let shown = path.display().to_string();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(&shown, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| classify(&shown, e))?;
    Ok(conn)
}

impl Readers {
    /// A pool starting with `first`.
    pub(super) fn pool(first: Connection) -> Readers {
        Readers::Pool(Mutex::new(vec![first]))
    }

    /// A snapshot view of the database at `path` as it is now.
    pub(super) fn snapshot(path: &Path) -> Result<Readers, StoreError> {
        let conn = open_reader(path)?;
        // BEGIN is deferred: the first read fixes the snapshot.
        conn.execute_batch("BEGIN; SELECT count(*) FROM sqlite_schema;")
            .map_err(|e| classify(&path.display().to_string(), e))?;
        Ok(Readers::Snapshot(Mutex::new(conn)))
    }

    /// Runs `f` on a connection of this store.
    pub(super) fn read<T>(
        &self,
        path: &Path,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let shown = || path.display().to_string();
        match self {
            Readers::Snapshot(conn) => {
                let conn = conn
                    .lock()
                    .map_err(|_| StoreError::Io("reader lock poisoned".into()))?;
                f(&conn).map_err(|e| classify(&shown(), e))
            }
            Readers::Pool(idle) => {
                let taken = lock(idle).pop();
                let conn = match taken {
                    Some(conn) => conn,
                    None => open_reader(path)?,
                };
                let result = f(&conn).map_err(|e| classify(&shown(), e));
                let mut idle = lock(idle);
                if idle.len() < IDLE_READERS {
                    idle.push(conn);
                }
                result
            }
        }
    }
}

// The pool is a list of connections pushed and popped whole: a panic elsewhere cannot leave it
// torn, so a poisoned lock is safe to keep using.
fn lock(idle: &Mutex<Vec<Connection>>) -> MutexGuard<'_, Vec<Connection>> {
    idle.lock().unwrap_or_else(|p| p.into_inner())
}
