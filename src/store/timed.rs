//! [`TimedStore`]: any store, with the time each commit took to become durable recorded (from
//! `submit` to its acknowledgement), for `runtape bench` and the worker's exit report.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{Ack, Store, StoreError, Write};

/// When a write's latency starts: `None` leaves the write untimed.
type Origin = dyn Fn(&Write) -> Option<Instant> + Send + Sync;

/// Wraps a store; every `Commit`/`Commits` write's latency is kept (in microseconds).
pub struct TimedStore {
    inner: Arc<dyn Store>,
    samples: Arc<Mutex<Vec<u32>>>,
    origin: Box<Origin>,
}

/// Commit latencies: how many, and the median and 99th percentile in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Commits measured.
    pub commits: usize,
    /// Median, µs.
    pub p50_us: u32,
    /// 99th percentile, µs.
    pub p99_us: u32,
}

impl TimedStore {
    /// Wraps `inner`, timing each commit from its submission to its acknowledgement.
    pub fn new(inner: Arc<dyn Store>) -> TimedStore {
        Self::timed_from(inner, |write| {
            matches!(write, Write::Commit(_) | Write::Commits(_)).then(Instant::now)
        })
    }

    /// Wraps `inner`, timing each write `origin` gives a start for, from that instant to the
    /// write's acknowledgement (e.g. from a model reply's arrival to the commit holding it
    /// being durable). `origin` is called on `submit`'s path: keep it cheap.
    pub fn timed_from(
        inner: Arc<dyn Store>,
        origin: impl Fn(&Write) -> Option<Instant> + Send + Sync + 'static,
    ) -> TimedStore {
        TimedStore {
            inner,
            samples: Arc::new(Mutex::new(Vec::new())),
            origin: Box::new(origin),
        }
    }

    /// Every latency recorded so far, sorted, in microseconds.
    pub fn samples(&self) -> Vec<u32> {
        let mut s = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        s.sort_unstable();
        s
    }

    /// The latencies recorded so far.
    pub fn latency(&self) -> Latency {
        let s = self.samples();
        if s.is_empty() {
            return Latency::default();
        }
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Latency {
            commits: s.len(),
            p50_us: at(0.5),
            p99_us: at(0.99),
        }
    }
}

impl Store for TimedStore {
    fn submit(&self, write: Write) -> Ack {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to wait on (the engine always has one): not timed.
            return self.inner.submit(write);
        };
        let Some(started) = (self.origin)(&write) else {
            return self.inner.submit(write);
        };
        let inner = self.inner.submit(write);
        let (tx, rx) = oneshot::channel();
        let samples = self.samples.clone();
        let wait = async move {
            let result = inner.await.unwrap_or(Err(StoreError::Closed));
            let us = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
            samples.lock().unwrap_or_else(|p| p.into_inner()).push(us);
            let _ = tx.send(result);
        };
        handle.spawn(wait);
        rx
    }

    crate::forward_store_reads!(inner);

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        self.inner.snapshot()
    }
}
