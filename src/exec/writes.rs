//! The engine's writes in flight, bounded: a write takes a permit before it is submitted and
//! gives it back when the store acknowledges it, so a store that falls behind slows the
//! drivers down (they wait for a permit, on tokio, never blocking a thread) instead of letting
//! its queue grow without end.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, oneshot};

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
    /// Waits until the write is durable. An acknowledgement already given (the in-memory
    /// store applies a write as it is submitted) is taken without awaiting the channel, but
    /// still counts against the task's cooperative budget: a run whose every write is
    /// acknowledged at once must still yield now and then, or it would keep its thread (and,
    /// on a single-threaded runtime, everything else) until it ends.
    pub(crate) async fn done(mut self) -> Result<Written, StoreError> {
        match self.ack.try_recv() {
            Ok(written) => {
                tokio::task::consume_budget().await;
                written
            }
            Err(oneshot::error::TryRecvError::Closed) => Err(StoreError::Closed),
            Err(oneshot::error::TryRecvError::Empty) => {
                self.ack.await.unwrap_or(Err(StoreError::Closed))
            }
        }
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
        // goes ahead unbounded rather than not at all. A free permit is taken at once (tokio's
        // semaphore hands released permits to waiters first, so this never jumps the queue);
        // only a full queue waits.
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(TryAcquireError::NoPermits) => self.permits.clone().acquire_owned().await.ok(),
            Err(TryAcquireError::Closed) => None,
        };
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

    #[tokio::test]
    async fn done_gives_the_acknowledgement_sent_before_or_after_and_closed_when_none_comes() {
        let writes = Writes::new(Arc::new(MemoryStore::new()), 4);
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Err(StoreError::Io("full".into())));
        let before = writes.submit_with(|_| rx).await;
        assert_eq!(before.done().await, Err(StoreError::Io("full".into())));

        let (tx, rx) = oneshot::channel();
        let later = writes.submit_with(|_| rx).await.done();
        tokio::pin!(later);
        assert!(futures_util::poll!(later.as_mut()).is_pending(), "waits");
        let _ = tx.send(Ok(Written::Done));
        assert_eq!(later.await, Ok(Written::Done));

        let (tx, rx) = oneshot::channel::<Result<Written, StoreError>>();
        drop(tx);
        let dropped = writes.submit_with(|_| rx).await;
        assert_eq!(dropped.done().await, Err(StoreError::Closed));
        let (tx, rx) = oneshot::channel::<Result<Written, StoreError>>();
        let dropped_later = writes.submit_with(|_| rx).await.done();
        tokio::pin!(dropped_later);
        assert!(futures_util::poll!(dropped_later.as_mut()).is_pending());
        drop(tx);
        assert_eq!(dropped_later.await, Err(StoreError::Closed));
        assert_eq!(
            writes.permits.available_permits(),
            4,
            "every permit given back"
        );
    }
}
