//! The engine's writes in flight, bounded: a write takes a permit before it is submitted and
//! gives it back when the store acknowledges it, so a store that falls behind slows the
//! drivers down (they wait for a permit, on tokio, never blocking a thread) instead of letting
//! its queue grow without end.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::{Ack, Store, StoreError, Write, Written};

/// Writes an engine may have submitted and not yet acknowledged.
pub(crate) const WRITES_IN_FLIGHT: usize = 4096;

/// The store, and the permits its writes in flight hold.
pub(crate) struct Writes {
    pub(crate) store: Arc<dyn Store>,
    permits: Arc<Semaphore>,
}

/// A submitted write: resolves when it is durable, then gives its permit back.
#[derive(Debug)]
pub(crate) struct Pending {
    ack: Ack,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Pending {
    /// Waits until the write is durable.
    pub(crate) async fn done(self) -> Result<Written, StoreError> {
        self.ack.await.unwrap_or(Err(StoreError::Closed))
    }
}

impl Writes {
    pub(crate) fn new(store: Arc<dyn Store>, in_flight: usize) -> Self {
        Writes {
            store,
            permits: Arc::new(Semaphore::new(in_flight.max(1))),
        }
    }

    /// Waits for room, then runs `submit` (which hands one write to the store and returns its
    /// ack).
    pub(crate) async fn submit_with(&self, submit: impl FnOnce(&dyn Store) -> Ack) -> Pending {
        // The semaphore is never closed, so acquiring fails only if it were; then the write
        // goes ahead unbounded rather than not at all.
        let permit = self.permits.clone().acquire_owned().await.ok();
        Pending {
            ack: submit(self.store.as_ref()),
            _permit: permit,
        }
    }

    /// Submits `write` once there is room.
    pub(crate) async fn submit(&self, write: Write) -> Pending {
        self.submit_with(|store| store.submit(write)).await
    }

    /// Submits `write` and waits until it is durable.
    pub(crate) async fn write(&self, write: Write) -> Result<Written, StoreError> {
        self.submit(write).await.done().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[tokio::test]
    async fn a_full_queue_makes_the_next_write_wait_for_an_acknowledgement() {
        let writes = Writes::new(Arc::new(MemoryStore::new()), 1);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A write the store has not acknowledged yet holds the only permit.
        let first = writes.submit_with(|_| rx).await;
        let second = writes.submit(Write::SetControl {
            run: crate::machine::RunId::new("nobody"),
            control: None,
        });
        tokio::pin!(second);
        assert!(
            futures_util::poll!(second.as_mut()).is_pending(),
            "waits for room"
        );
        let _ = tx.send(Ok(Written::Done));
        assert_eq!(first.done().await, Ok(Written::Done));
        let second = second.await;
        assert!(
            second.done().await.is_err(),
            "the store answered it (no such run)"
        );
    }
}
