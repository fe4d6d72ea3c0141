//! [`TimedStore`]: any store, with the time each commit took to become durable recorded (from
//! `submit`, or from the instant its caller names, to the commit that made it durable), for
//! `runtape bench` and the worker's exit report. The stores time their own commits
//! ([`Store::submit_timed`]): the instant is taken on the thread that committed, so the figure
//! is the store's, not the scheduler's, and the caller's acknowledgement comes straight from
//! the store.

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
    /// Wraps `inner`, timing each commit from its submission to the commit that made it
    /// durable.
    pub fn new(inner: Arc<dyn Store>) -> TimedStore {
        Self::timed_from(inner, |write| {
            matches!(write, Write::Commit(_) | Write::Commits(_)).then(crate::clock::stopwatch)
        })
    }

    /// Wraps `inner`, timing each write `origin` gives a start for, from that instant to the
    /// commit that made it durable (e.g. from a model reply's arrival to the commit holding
    /// it). `origin` is called on `submit`'s path: keep it cheap.
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

/// What [`Store::submit_timed`] does for a store that cannot tell when a write became durable:
/// waits for `ack` in a task of the current tokio runtime, tells `durable` when it came (if the
/// write succeeded), and passes it on. Without a runtime, `ack` is returned as it is.
pub(super) fn observe(ack: Ack, durable: super::Durable) -> Ack {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return ack;
    };
    let (tx, rx) = oneshot::channel();
    handle.spawn(async move {
        let result = ack.await.unwrap_or(Err(StoreError::Closed));
        if result.is_ok() {
            durable(crate::clock::stopwatch());
        }
        let _ = tx.send(result);
    });
    rx
}

impl Store for TimedStore {
    fn submit(&self, write: Write) -> Ack {
        let Some(started) = (self.origin)(&write) else {
            return self.inner.submit(write);
        };
        let samples = self.samples.clone();
        self.inner.submit_timed(
            write,
            Box::new(move |at| {
                let us = at.saturating_duration_since(started).as_micros();
                let us = us.min(u128::from(u32::MAX)) as u32;
                samples.lock().unwrap_or_else(|p| p.into_inner()).push(us);
            }),
        )
    }

    crate::forward_store_reads!(inner);

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        self.inner.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Durability, MemoryStore, NewRun, SqliteStore, StoreError, Written, write};

    fn create(id: &str) -> Write {
        Write::CreateRun(NewRun::sample(id))
    }

    /// Times every write (creations included), from when it is submitted.
    fn timing_all(inner: Arc<dyn Store>) -> TimedStore {
        TimedStore::timed_from(inner, |_| Some(Instant::now()))
    }

    /// Passes writes on through `submit` only, as a wrapper that does not time them would.
    struct Plain {
        inner: Arc<dyn Store>,
    }

    impl Store for Plain {
        fn submit(&self, write: Write) -> Ack {
            self.inner.submit(write)
        }
        crate::forward_store_reads!(inner);
    }

    #[tokio::test]
    async fn each_store_times_its_commits_and_never_a_write_it_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite: Arc<dyn Store> = Arc::new(
            SqliteStore::open(&dir.path().join("t.db"), Durability::Normal).expect("opens"),
        );
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // The last one through the trait's default: timed when its acknowledgement comes.
        let plain: Arc<dyn Store> = Arc::new(Plain {
            inner: Arc::new(MemoryStore::new()),
        });
        for inner in [sqlite, memory, plain] {
            let timed = timing_all(inner);
            let before = Instant::now();
            assert_eq!(write(&timed, create("a")).await, Ok(Written::Lease(1)));
            let elapsed = before.elapsed();
            assert!(matches!(
                write(&timed, create("a")).await,
                Err(StoreError::DuplicateRun(_))
            ));
            let samples = timed.samples();
            assert_eq!(samples.len(), 1, "only the write that succeeded");
            assert!(
                u128::from(samples[0]) <= elapsed.as_micros(),
                "{} µs, at most the {} µs it took",
                samples[0],
                elapsed.as_micros()
            );
            assert_eq!(timed.latency().commits, 1);
        }
    }

    #[test]
    fn without_a_runtime_the_default_passes_the_acknowledgement_on_untimed() {
        let timed = timing_all(Arc::new(Plain {
            inner: Arc::new(MemoryStore::new()),
        }));
        let ack = timed.submit(create("a"));
        assert_eq!(
            ack.blocking_recv().expect("acknowledged"),
            Ok(Written::Lease(1))
        );
        assert!(timed.samples().is_empty());
    }
}
