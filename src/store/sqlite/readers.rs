//! Read connections: a pool of read-only connections for a store's ordinary reads (WAL lets
//! them read while the writer writes, and concurrent readers — drivers, a server, `verify` —
//! do not queue on one connection), or one connection holding a read transaction for a
//! snapshot view, so every read of the view sees the database at one moment.

use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use rusqlite::{Connection, OpenFlags};

use super::super::StoreError;
use super::super::schema::classify;

/// Most connections a pool opens. A read that finds them all busy waits for one to come back
/// rather than opening another: opening a connection (and reading the schema, and preparing
/// statements anew) costs far more than the read, and many concurrent drivers polling their
/// runs would otherwise open and close connections without end. Reads take microseconds, no
/// read waits on another while it holds a connection, so the wait is short and cannot deadlock.
const MAX_READERS: usize = 8;

/// A pool's connections: the idle ones, and how many are open in all.
pub(super) struct Pool {
    state: Mutex<PoolState>,
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Connection>,
    open: usize,
}

/// Where a store's reads are made.
pub(super) enum Readers {
    /// Any free connection; a new one while fewer than [`MAX_READERS`] are open, else the
    /// next one given back.
    Pool(Pool),
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
        Readers::Pool(Pool {
            state: Mutex::new(PoolState {
                idle: vec![first],
                open: 1,
            }),
            returned: Condvar::new(),
        })
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
            Readers::Pool(pool) => {
                let conn = pool.take(path)?;
                let result = f(&conn).map_err(|e| classify(&shown(), e));
                pool.give_back(conn);
                result
            }
        }
    }
}

impl Pool {
    /// An idle connection, a new one while there is room, else the next one given back.
    fn take(&self, path: &Path) -> Result<Connection, StoreError> {
        let mut state = lock(&self.state);
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.open < MAX_READERS {
                state.open += 1;
                drop(state);
                return open_reader(path).inspect_err(|_| {
                    lock(&self.state).open -= 1;
                    self.returned.notify_one();
                });
            }
            state = self.returned.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn give_back(&self, conn: Connection) {
        lock(&self.state).idle.push(conn);
        self.returned.notify_one();
    }
}

// The pool is a list of connections pushed and popped whole and a count changed with them: a
// panic elsewhere cannot leave it torn, so a poisoned lock is safe to keep using.
fn lock(state: &Mutex<PoolState>) -> MutexGuard<'_, PoolState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}
