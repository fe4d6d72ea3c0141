//! The engine's lease keeper: one task that, every `control_poll`, reads the lease and control
//! request of every run the engine drives in one store read ([`Store::leases`]), tells each
//! driver what concerns it — taken over by another process (fenced), asked to pause or cancel
//! from another process — and renews the leases that are past half their time to live.
//!
//! One read per tick for all runs, instead of one per driver: at 10,000 runs in flight the
//! per-driver polls were a fifth of the process's CPU. A takeover or a request made in another
//! process reaches the driver within one tick, and a lease is renewed when less than half of
//! its time to live is left. Renewals and commits stay fenced by the epoch in the store, so a
//! renewal racing a takeover writes nothing.
//!
//! A tick is `control_poll` apart, as each driver's poll was — unless reading the leases takes
//! long (tens of thousands of runs): then the keeper waits [`IDLE_PER_BUSY`] times as long as
//! the read took, so it never keeps a thread busy more than a tenth of the time, but never
//! longer than a quarter of the lease ttl, so every lease is renewed with margin. At 10,000
//! runs a read takes tens of ms (a pause is seen within half a second); at 100,000, hundreds.
//!
//! The task starts with the first driver registered and ends when none is left (or the engine
//! is dropped), so an engine used from one runtime after another has a keeper in each.
//!
//! [`Store::leases`]: crate::store::Store::leases

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::mpsc;

use super::reads::off_thread;
use super::{Ctl, Shared, lock};
use crate::machine::RunId;
use crate::store::{Control, LeaseRecord, Write};

/// The runs an engine's drivers hold leases on, and whether the keeper task is running.
#[derive(Default)]
pub(crate) struct KeptLeases {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    runs: HashMap<RunId, Held>,
    /// True while a keeper task runs; set and cleared under the lock, so a run registered
    /// just as the last one leaves is never left without a keeper.
    running: bool,
}

/// A driver's lease as the driver holds it.
#[derive(Clone)]
struct Held {
    epoch: u64,
    tx: mpsc::Sender<Ctl>,
}

/// Registers the lease a driver of `run` holds at `epoch` (its control queue is `tx`), and
/// starts the keeper task if none runs. Call from inside the tokio runtime the driver runs on.
pub(crate) fn keep(shared: &Arc<Shared>, run: RunId, epoch: u64, tx: mpsc::Sender<Ctl>) {
    let mut kept = lock(&shared.kept.inner);
    kept.runs.insert(run, Held { epoch, tx });
    if !kept.running {
        kept.running = true;
        tokio::spawn(keep_leases(Arc::downgrade(shared)));
    }
}

/// Forgets the lease a driver of `run` held at `epoch` (a newer driver's stays).
pub(crate) fn forget(shared: &Shared, run: &RunId, epoch: u64) {
    let mut kept = lock(&shared.kept.inner);
    if kept.runs.get(run).is_some_and(|h| h.epoch == epoch) {
        kept.runs.remove(run);
    }
}

/// A tick waits at least this many times as long as its read of the leases took.
const IDLE_PER_BUSY: u32 = 9;

/// The keeper task: one tick per `control_poll` (longer when reads are slow, see the module
/// docs) until no run is kept or the engine is gone.
async fn keep_leases(shared: Weak<Shared>) {
    let mut last_read = std::time::Duration::ZERO;
    loop {
        let Some((clock, every)) = shared.upgrade().map(|s| {
            let floor = s.config.control_poll;
            let ceiling = (s.config.lease_ttl / 4).max(floor);
            (
                s.config.clock.clone(),
                (last_read * IDLE_PER_BUSY).clamp(floor, ceiling),
            )
        }) else {
            return;
        };
        clock.sleep(every).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let held: HashMap<RunId, Held> = {
            let mut kept = lock(&shared.kept.inner);
            if kept.runs.is_empty() {
                kept.running = false;
                return;
            }
            kept.runs.clone()
        };
        let ids: Vec<RunId> = held.keys().cloned().collect();
        let began = clock.now();
        let read = off_thread(&shared.store, move |s| s.leases(&ids)).await;
        last_read = clock.now().saturating_duration_since(began);
        match read {
            Ok(leases) => tick(&shared, &held, leases).await,
            // Commits are fenced and fail on their own; a read that failed is made again at
            // the next tick.
            Err(e) => tracing::warn!(error = %e, "reading the leases of the runs in flight"),
        }
    }
}

/// Acts on one read of the leases of the runs in `held`.
async fn tick(shared: &Shared, held: &HashMap<RunId, Held>, leases: Vec<LeaseRecord>) {
    let now = shared.config.clock.wall_ms();
    let ttl = shared.config.lease_ttl.as_millis() as u64;
    for lease in leases {
        let Some(h) = held.get(&lease.id) else {
            continue;
        };
        if lease.lease_epoch != h.epoch {
            // A full or closed queue: the driver is busy or gone; the next tick tells it again.
            let _ = h.tx.try_send(Ctl::Fenced(lease.lease_epoch));
            continue;
        }
        let told = match lease.control {
            Some(Control::Pause) => h.tx.try_send(Ctl::Pause).is_ok(),
            Some(Control::Cancel(reason)) => {
                let reason = reason.unwrap_or_else(|| "cancelled from another process".into());
                h.tx.try_send(Ctl::Cancel(Some(reason))).is_ok()
            }
            None => false,
        };
        if told {
            // Fire and forget: the write happens whether or not anyone waits for its ack.
            drop(
                shared
                    .writes
                    .submit(Write::SetControl {
                        run: lease.id.clone(),
                        control: None,
                    })
                    .await,
            );
        }
        if lease.lease_expires_ms < now + ttl / 2 {
            drop(
                shared
                    .writes
                    .submit(Write::RenewLease {
                        run: lease.id,
                        epoch: h.epoch,
                        expires_ms: now + ttl,
                    })
                    .await,
            );
        }
    }
}
