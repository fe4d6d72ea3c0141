//! Shared by in-process crash tests: a store that fails one chosen write as a crash would
//! stop the process there, so a test can resume on a fresh engine from exactly that point.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use runtape::store::{Ack, Store, StoreError, Write};

/// A store that refuses (as a crash would stop) the first write matching `crash`.
pub struct CrashOnce {
    pub inner: Arc<dyn Store>,
    pub crash: fn(&Write) -> bool,
    pub crashed: std::sync::atomic::AtomicBool,
}

impl CrashOnce {
    /// A fresh SQLite store in `dir` (`runs.db`, durability `normal`) and that store behind a
    /// [`CrashOnce`] that fails the first write matching `crash`.
    pub fn over_sqlite(
        dir: &std::path::Path,
        crash: fn(&Write) -> bool,
    ) -> (Arc<dyn Store>, Arc<CrashOnce>) {
        let path = dir.join("runs.db");
        let sqlite = runtape::store::SqliteStore::open(&path, runtape::store::Durability::Normal);
        let sqlite: Arc<dyn Store> = Arc::new(sqlite.expect("opens"));
        (sqlite.clone(), CrashOnce::wrap(sqlite, crash))
    }

    /// `inner` behind a [`CrashOnce`] that fails the first write matching `crash`.
    pub fn wrap(inner: Arc<dyn Store>, crash: fn(&Write) -> bool) -> Arc<CrashOnce> {
        Arc::new(CrashOnce {
            inner,
            crash,
            crashed: false.into(),
        })
    }

    /// Whether the crash has happened.
    pub fn crashed(&self) -> bool {
        self.crashed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Store for CrashOnce {
    fn submit(&self, write: Write) -> Ack {
        if (self.crash)(&write) && !self.crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let _ = tx.send(Err(StoreError::Io("injected crash".into())));
            return rx;
        }
        self.inner.submit(write)
    }
    runtape::forward_store_reads!(inner);
}
