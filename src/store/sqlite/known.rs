//! What the writer knows of each run between its writes: the run's key, its lease epoch and
//! latest seq, and the digest of its stored head — so a commit is fenced, sequenced and checked
//! against the head it replaces without reading the run's rows again.
//!
//! What is known is only what this connection itself read or wrote, and only while no other
//! connection has written the file: at the start of every transaction the writer reads
//! `PRAGMA data_version` (which changes when another connection commits), and forgets
//! everything when it moved. A run another process took over, paused or wrote is therefore
//! read afresh, and fencing by epoch holds exactly as when every write read its row.
//!
//! A write's changes are kept apart until it succeeds ([`Scope`]), a transaction's until it
//! commits ([`Known::committed`]); a write that fails leaves what was known before, and a
//! transaction rolled back forgets everything.

use std::borrow::Cow;
use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension};

use super::super::StoreError;
use super::bytes_at;
use crate::format::packed_head::unpack_head;
use crate::machine::{Digest, RunId};

/// Runs known at most; past this, everything is forgotten and read again as needed (a run
/// released by this writer is forgotten at once, so this bounds only runs held for long).
const MOST_KNOWN: usize = 1 << 18;

/// One run as this connection last read or wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Facts {
    /// `runs.key`.
    pub(super) key: i64,
    /// `runs.lease_epoch` and `runs.seq`, when known.
    pub(super) standing: Option<(u64, u64)>,
    /// BLAKE3 of the stored head's body, when known.
    pub(super) head: Option<Digest>,
}

/// Everything the writer knows, committed and within the open transaction.
#[derive(Debug, Default)]
pub(super) struct Known {
    committed: HashMap<RunId, Option<Facts>>,
    /// Changes made by the open transaction's writes that succeeded (`None`: forget the run).
    batch: HashMap<RunId, Option<Facts>>,
    data_version: Option<i64>,
}

impl Known {
    /// Call inside each new transaction, before any write: forgets everything if another
    /// connection has committed since the last one.
    pub(super) fn begin(&mut self, tx: &Connection) -> rusqlite::Result<()> {
        let version: i64 = tx
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if self.data_version != Some(version) || self.committed.len() > MOST_KNOWN {
            self.committed.clear();
            self.data_version = Some(version);
        }
        self.batch.clear();
        Ok(())
    }

    /// The open transaction committed: what its writes changed is now known.
    pub(super) fn committed(&mut self) {
        for (run, facts) in self.batch.drain() {
            match facts {
                Some(f) => {
                    self.committed.insert(run, Some(f));
                }
                None => {
                    self.committed.remove(&run);
                }
            }
        }
    }

    /// The open transaction was rolled back: forget everything.
    pub(super) fn rolled_back(&mut self) {
        self.batch.clear();
        self.committed.clear();
        self.data_version = None;
    }

    /// A scope for one write.
    pub(super) fn scope(&mut self) -> Scope<'_> {
        Scope {
            known: self,
            changed: HashMap::new(),
        }
    }

    fn get(&self, run: &RunId) -> Option<Option<Facts>> {
        self.batch
            .get(run)
            .or_else(|| self.committed.get(run))
            .copied()
    }
}

/// One write's view of what is known, and what it changed so far.
pub(super) struct Scope<'a> {
    known: &'a mut Known,
    changed: HashMap<RunId, Option<Facts>>,
}

impl Scope<'_> {
    /// The write succeeded: its changes join the transaction's.
    pub(super) fn keep(self) {
        self.known.batch.extend(self.changed);
    }

    fn get(&self, run: &RunId) -> Option<Facts> {
        match self.changed.get(run) {
            Some(f) => *f,
            None => self.known.get(run).flatten(),
        }
    }

    fn put(&mut self, run: &RunId, facts: Facts) {
        self.changed.insert(run.clone(), Some(facts));
    }

    /// Forgets `run` (it was released: the next write of it reads its row).
    pub(super) fn forget(&mut self, run: &RunId) {
        self.changed.insert(run.clone(), None);
    }

    /// `run`'s key; [`StoreError::UnknownRun`] when there is no such run.
    pub(super) fn key(&mut self, tx: &Connection, run: &RunId) -> Result<i64, StoreError> {
        if let Some(f) = self.get(run) {
            return Ok(f.key);
        }
        let key: i64 = tx
            .prepare_cached("SELECT key FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::UnknownRun(run.to_string()))?;
        self.put(
            run,
            Facts {
                key,
                standing: None,
                head: None,
            },
        );
        Ok(key)
    }

    /// `run`'s key, lease epoch and latest seq.
    pub(super) fn standing(
        &mut self,
        tx: &Connection,
        run: &RunId,
    ) -> Result<(i64, u64, u64), StoreError> {
        let key = self.key(tx, run)?;
        let mut facts = self.get(run).unwrap_or(Facts {
            key,
            standing: None,
            head: None,
        });
        let (epoch, seq) = match facts.standing {
            Some(s) => s,
            None => {
                let (epoch, seq): (i64, i64) = tx
                    .prepare_cached("SELECT lease_epoch, seq FROM runs WHERE key = ?1")?
                    .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))?;
                let s = (epoch as u64, seq as u64);
                facts.standing = Some(s);
                self.put(run, facts);
                s
            }
        };
        Ok((key, epoch, seq))
    }

    /// Records `run`'s lease epoch and latest seq as just written.
    pub(super) fn set_standing(&mut self, run: &RunId, key: i64, epoch: u64, seq: u64) {
        let mut facts = self.get(run).unwrap_or(Facts {
            key,
            standing: None,
            head: None,
        });
        facts.standing = Some((epoch, seq));
        self.put(run, facts);
    }

    /// The digest of `run`'s stored head body (`None`: it has no head).
    pub(super) fn head(
        &mut self,
        tx: &Connection,
        run: &RunId,
        key: i64,
    ) -> Result<Option<Digest>, StoreError> {
        if let Some(d) = self.get(run).and_then(|f| f.head) {
            return Ok(Some(d));
        }
        let stored = tx
            .prepare_cached("SELECT head FROM runs WHERE key = ?1 AND head IS NOT NULL")?
            .query_row([key], |r| bytes_at(r, 0))
            .optional()?;
        // A head that does not unpack is digested as stored: it matches no head a writer
        // names, so the write is refused as stale rather than written over it.
        let stored = stored.map(|b| {
            crate::receipt::head_body_digest(&unpack_head(&b).unwrap_or(Cow::Borrowed(&b[..])))
        });
        if let Some(d) = stored {
            self.set_head(run, key, d);
        }
        Ok(stored)
    }

    /// Records the digest of `run`'s head body as just written.
    pub(super) fn set_head(&mut self, run: &RunId, key: i64, digest: Digest) {
        let mut facts = self.get(run).unwrap_or(Facts {
            key,
            standing: None,
            head: None,
        });
        facts.head = Some(digest);
        self.put(run, facts);
    }

    /// Records a run just created.
    pub(super) fn created(&mut self, run: &RunId, key: i64, seq: u64, head: Digest) {
        self.put(
            run,
            Facts {
                key,
                standing: Some((1, seq)),
                head: Some(head),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().expect("opens");
        c.execute_batch(
            "CREATE TABLE runs (key INTEGER PRIMARY KEY, id TEXT, lease_epoch INTEGER, seq INTEGER, head BLOB, seal BLOB);
             INSERT INTO runs VALUES (7, 'r', 3, 12, x'01', x'');",
        )
        .expect("schema");
        c
    }

    #[test]
    fn facts_are_read_once_then_known_until_another_connection_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k.db");
        let c = Connection::open(&path).expect("opens");
        c.execute_batch("PRAGMA journal_mode = WAL;").expect("wal");
        drop(c);
        let mut ours = Connection::open(&path).expect("opens");
        ours.execute_batch(
            "CREATE TABLE runs (key INTEGER PRIMARY KEY, id TEXT, lease_epoch INTEGER, seq INTEGER, head BLOB, seal BLOB);
             INSERT INTO runs (key, id, lease_epoch, seq) VALUES (7, 'r', 3, 12);",
        )
        .expect("schema");
        let run = RunId::new("r");
        let mut known = Known::default();
        let tx = ours.transaction().expect("begins");
        known.begin(&tx).expect("reads the version");
        let mut scope = known.scope();
        assert_eq!(scope.standing(&tx, &run).expect("reads"), (7, 3, 12));
        scope.set_standing(&run, 7, 3, 13);
        scope.keep();
        tx.commit().expect("commits");
        known.committed();

        // Our own writes do not count as another connection's.
        ours.execute("UPDATE runs SET seq = 99 WHERE key = 7", [])
            .expect("writes");
        let tx = ours.transaction().expect("begins");
        known.begin(&tx).expect("reads the version");
        assert_eq!(
            known.scope().standing(&tx, &run).expect("known"),
            (7, 3, 13)
        );
        tx.commit().expect("commits");

        // Another connection's commit: everything is read again.
        let other = Connection::open(&path).expect("opens");
        other
            .execute("UPDATE runs SET lease_epoch = 4 WHERE key = 7", [])
            .expect("takes over");
        let tx = ours.transaction().expect("begins");
        known.begin(&tx).expect("reads the version");
        assert_eq!(
            known.scope().standing(&tx, &run).expect("reads"),
            (7, 4, 99)
        );
    }

    #[test]
    fn a_write_that_fails_or_a_rollback_leaves_nothing_known() {
        let mut c = db();
        let run = RunId::new("r");
        let mut known = Known::default();
        let tx = c.transaction().expect("begins");
        known.begin(&tx).expect("reads the version");
        let mut scope = known.scope();
        assert_eq!(
            scope.head(&tx, &run, 7).expect("reads"),
            Some(crate::receipt::head_body_digest(&[1]))
        );
        scope.set_head(&run, 7, Digest::of(b"mine"));
        drop(scope); // the write failed: not kept
        let mut scope = known.scope();
        assert_eq!(
            scope.head(&tx, &run, 7).expect("reads"),
            Some(crate::receipt::head_body_digest(&[1])),
            "the failed write's head is not known"
        );
        scope.set_standing(&run, 7, 3, 13);
        scope.keep();
        known.rolled_back();
        let mut scope = known.scope();
        assert_eq!(scope.standing(&tx, &run).expect("reads"), (7, 3, 12));
        assert!(matches!(
            scope.key(&tx, &RunId::new("nobody")),
            Err(StoreError::UnknownRun(_))
        ));
    }
}
