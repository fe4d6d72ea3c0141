//! Time for the executor: one seam for every clock reading and every wait.
//!
//! The machine never reads a clock; the executor stamps each event with [`Clock::stamp`]. Every
//! wait the executor makes goes through the engine's [`Clock`] too: a retry's backoff
//! ([`Clock::until`] then [`Clock::sleep`]), the control poll and lease renewal
//! ([`Clock::now`], [`Clock::sleep_until`]), the grace period of a graceful stop, tool
//! timeouts. So a test can drive a run on virtual time ([`VirtualClock`]) and check the delays
//! it waited, and a demo can make a run's timestamps and state hashes reproducible
//! ([`SteppedClock`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::machine::Hlc;

/// A wait the clock hands out.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where the executor gets time from. Implement it to run the engine on another timeline; the
/// defaults are the system's.
pub trait Clock: Send + Sync {
    /// The timestamp for transition `seq` of a run; never earlier than `after`.
    fn stamp(&self, seq: u64, after: Hlc) -> Hlc;

    /// A timestamp for a trace event.
    fn trace(&self) -> Hlc;

    /// Wall-clock milliseconds since the Unix epoch (leases, `created`, `updated`). Leases are
    /// judged by it across processes, so it must be the wall's for engines sharing a database.
    fn wall_ms(&self) -> u64 {
        wall_ms()
    }

    /// Monotonic now, for deadlines and intervals (the grace period, the control poll).
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Completes at `deadline` (a [`now`](Self::now) value).
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }

    /// Completes after `d`.
    fn sleep(&self, d: Duration) -> Sleep {
        self.sleep_until(self.now() + d)
    }

    /// How long to wait before a call scheduled for `not_before` (an event time the machine
    /// set: a retry's backoff) may be sent: zero once it has passed.
    fn until(&self, not_before: Hlc) -> Duration {
        Duration::from_millis(not_before.ms().saturating_sub(self.wall_ms()))
    }

    /// True when a run's history must not depend on timing: the driver then commits the
    /// results of parallel calls in call order rather than arrival order, so the same inputs
    /// give the same history, state hash for state hash.
    fn deterministic(&self) -> bool {
        false
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The next HLC value after `last` and `after` at wall time `wall_ms`: the wall time when it is
/// ahead, else one logical tick past the later of the two.
fn tick(last: &Mutex<Hlc>, after: Hlc, wall_ms: u64) -> Hlc {
    let wall = Hlc::from_ms(wall_ms);
    // A poisoned lock only means another thread panicked mid-tick; the value is still a valid
    // HLC, so keep using it.
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
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

/// A hybrid logical clock over the system clock: strictly increasing within a process, and
/// never behind the timestamp it is asked to follow. Waits are tokio's.
#[derive(Debug, Default)]
pub struct SystemClock {
    last: Mutex<Hlc>,
}

impl Clock for SystemClock {
    fn stamp(&self, _seq: u64, after: Hlc) -> Hlc {
        tick(&self.last, after, wall_ms())
    }

    fn trace(&self) -> Hlc {
        tick(&self.last, Hlc::default(), wall_ms())
    }
}

/// A deterministic clock: transition `seq` happens at `start_ms + seq × step_ms`. For tests
/// and demos that must reproduce state hashes across processes. Its time is not the wall's, so
/// a wait until one of its times (a retry's backoff) is not taken, and the results of
/// parallel calls are committed in call order.
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

    fn until(&self, _not_before: Hlc) -> Duration {
        Duration::ZERO
    }

    fn deterministic(&self) -> bool {
        true
    }
}

/// A clock on tokio's timeline: wall time is `origin_ms` plus the time tokio says has passed
/// since the clock was made, events are stamped from it like [`SystemClock`], and every delay
/// before a scheduled call ([`Clock::until`]: a retry's backoff) is recorded
/// ([`waits`](Self::waits)). Under a paused tokio runtime
/// (`#[tokio::test(start_paused = true)]`, or `tokio::time::pause`) that time is virtual: a
/// wait ends as soon as nothing else can run, so a run with long backoffs takes no real time
/// and its timestamps are the delays it waited. Make it inside the runtime.
#[derive(Debug)]
pub struct VirtualClock {
    origin_ms: u64,
    start: Instant,
    last: Mutex<Hlc>,
    waits: Mutex<Vec<Duration>>,
}

impl VirtualClock {
    /// A clock whose wall time starts at `origin_ms`.
    pub fn new(origin_ms: u64) -> Self {
        VirtualClock {
            origin_ms,
            start: Instant::now(),
            last: Mutex::new(Hlc::default()),
            waits: Mutex::new(Vec::new()),
        }
    }

    /// Every non-zero delay [`Clock::until`] reported so far (the backoffs waited), in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note(&self, d: Duration) {
        self.waits.lock().unwrap_or_else(|p| p.into_inner()).push(d);
    }
}

impl Clock for VirtualClock {
    fn stamp(&self, _seq: u64, after: Hlc) -> Hlc {
        tick(&self.last, after, self.wall_ms())
    }

    fn trace(&self) -> Hlc {
        tick(&self.last, Hlc::default(), self.wall_ms())
    }

    fn wall_ms(&self) -> u64 {
        let passed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.origin_ms.saturating_add(passed)
    }

    fn until(&self, not_before: Hlc) -> Duration {
        let wait = Duration::from_millis(not_before.ms().saturating_sub(self.wall_ms()));
        if !wait.is_zero() {
            self.note(wait);
        }
        wait
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

    #[tokio::test(start_paused = true)]
    async fn a_virtual_clock_moves_only_as_tokio_time_does() {
        let c = VirtualClock::new(1_000);
        assert_eq!(c.wall_ms(), 1_000);
        let wait = c.until(Hlc::from_ms(1_500));
        assert_eq!(wait, Duration::from_millis(500));
        c.sleep(wait).await;
        assert_eq!(
            c.wall_ms(),
            1_500,
            "the sleep took exactly the virtual wait"
        );
        assert_eq!(c.until(Hlc::from_ms(1_200)), Duration::ZERO, "already past");
        assert_eq!(c.waits(), vec![Duration::from_millis(500)]);
        assert!(c.stamp(1, Hlc::default()) >= Hlc::from_ms(1_500));
    }
}
