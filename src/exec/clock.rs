//! Time for the executor: HLC timestamps for events and traces, wall time for leases.
//!
//! The machine never reads a clock; the executor stamps each event with [`Clock::stamp`].
//! Tests inject [`SteppedClock`] so that a run's timestamps, and so its state hashes, are the
//! same on every execution.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::machine::Hlc;

/// Where the executor gets time from.
pub trait Clock: Send + Sync {
    /// The timestamp for transition `seq` of a run; never earlier than `after`.
    fn stamp(&self, seq: u64, after: Hlc) -> Hlc;

    /// A timestamp for a trace event.
    fn trace(&self) -> Hlc;

    /// Wall-clock milliseconds since the Unix epoch (leases, `created`, `updated`).
    fn wall_ms(&self) -> u64 {
        wall_ms()
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A hybrid logical clock over the system clock: strictly increasing within a process, and
/// never behind the timestamp it is asked to follow.
#[derive(Debug, Default)]
pub struct SystemClock {
    last: Mutex<Hlc>,
}

impl SystemClock {
    fn tick(&self, after: Hlc) -> Hlc {
        let wall = Hlc::from_ms(wall_ms());
        // A poisoned lock only means another thread panicked mid-tick; the value is still a
        // valid HLC, so keep using it.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let floor = (*last).max(after);
        let next = if wall > floor {
            wall
        } else if floor.logical() < u16::MAX {
            Hlc::new(floor.ms(), floor.logical() + 1)
        } else {
            Hlc::from_ms(floor.ms() + 1)
        };
        *last = next;
        next
    }
}

impl Clock for SystemClock {
    fn stamp(&self, _seq: u64, after: Hlc) -> Hlc {
        self.tick(after)
    }

    fn trace(&self) -> Hlc {
        self.tick(Hlc::default())
    }
}

/// A deterministic clock: transition `seq` happens at `start_ms + seq × step_ms`. For tests
/// and demos that must reproduce state hashes across processes.
#[derive(Clone, Copy, Debug)]
pub struct SteppedClock {
    /// Time of seq 0.
    pub start_ms: u64,
    /// Milliseconds per transition.
    pub step_ms: u64,
}

impl Clock for SteppedClock {
    fn stamp(&self, seq: u64, after: Hlc) -> Hlc {
        Hlc::from_ms(self.start_ms + seq * self.step_ms).max(after)
    }

    fn trace(&self) -> Hlc {
        Hlc::from_ms(self.start_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hlc_is_strictly_increasing_and_follows_its_floor() {
        let c = SystemClock::default();
        let a = c.trace();
        let b = c.trace();
        assert!(b > a);
        let future = Hlc::from_ms(wall_ms() + 60_000);
        assert!(c.stamp(1, future) > future);
    }
}
