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
