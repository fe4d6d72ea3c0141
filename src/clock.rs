//! Time for the engine: the one module that reads the system clock or arms tokio's timers.
//!
//! The machine never reads a clock; the executor stamps each event with [`Clock::stamp`]. Every
//! wait that decides what happens goes through a [`Clock`]: a retry's backoff
//! ([`Clock::until`] then [`Clock::sleep`]), the control poll and lease renewal
//! ([`Clock::now`], [`Clock::sleep_until`]), the grace period of a graceful stop, tool and
//! model-call timeouts ([`within`], [`within_until`]), the worker's polling and its lease
//! judgements ([`Clock::wall_ms`]). So a test can drive a run on virtual time
//! ([`VirtualClock`]) and check the delays it waited, and a demo can make a run's timestamps and
//! state hashes reproducible ([`SteppedClock`], `--stepped-clock`).
//!
//! The engine's clock reaches a model provider or a tool without a parameter: the executor
//! performs each call inside [`scope`], and [`current`] returns that clock there (the system's
//! elsewhere). Code that runs outside any engine (the HTTP server, MCP shutdown graces, a
//! store's reconnect backoff) waits on [`system`]; measurements for reports (latencies,
//! uptime, benchmarks) read [`stopwatch`]. Nothing else in the crate calls `Instant::now`,
//! `SystemTime::now`, `std::thread::sleep` or `tokio::time`'s timers: a test
//! (`tests/it/run/clock_seam.rs`) reads the sources and holds that.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
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

/// Monotonic now, for measuring how long something took (a latency, an uptime, a benchmark).
/// Never for deciding what happens: a decision reads a [`Clock`].
pub(crate) fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}

/// The system's clock, for waits made outside any engine (the HTTP server's accept loop, a
/// child's shutdown grace, a store waiting for its database). A run's waits use its engine's
/// clock instead ([`current`] inside a call the engine performs).
pub(crate) fn system() -> Arc<dyn Clock> {
    static SYSTEM: OnceLock<Arc<dyn Clock>> = OnceLock::new();
    SYSTEM
        .get_or_init(|| Arc::new(SystemClock::default()))
        .clone()
}

tokio::task_local! {
    static CURRENT: Arc<dyn Clock>;
}

/// Runs `fut` with `clock` as its [`current`] clock: the executor performs every model and
/// tool call inside this, so the provider's and the tool's own timeouts run on the engine's
/// clock.
pub(crate) async fn scope<F: Future>(clock: Arc<dyn Clock>, fut: F) -> F::Output {
    CURRENT.scope(clock, fut).await
}

/// The clock of the call being performed ([`scope`]), or [`system`] outside one.
pub(crate) fn current() -> Arc<dyn Clock> {
    CURRENT.try_with(Arc::clone).unwrap_or_else(|_| system())
}

/// `fut` ran past its deadline (see [`within`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// `fut`'s output, or [`TimedOut`] when `clock` reaches `deadline` (a [`Clock::now`] value)
/// first. `fut` is polled before the timer, so one that is ready is never timed out.
pub(crate) async fn within_until<F: Future>(
    clock: &dyn Clock,
    deadline: Instant,
    fut: F,
) -> Result<F::Output, TimedOut> {
    let mut fut = std::pin::pin!(fut);
    tokio::select! {
        biased;
        out = &mut fut => Ok(out),
        () = clock.sleep_until(deadline) => Err(TimedOut),
    }
}

/// `fut`'s output, or [`TimedOut`] when `limit` passes first on `clock`.
pub(crate) async fn within<F: Future>(
    clock: &dyn Clock,
    limit: Duration,
    fut: F,
) -> Result<F::Output, TimedOut> {
    let deadline = clock.now() + limit;
    within_until(clock, deadline, fut).await
}

/// `fut`'s output, or [`TimedOut`] when `limit` passes first on the [`current`] clock: the
/// engine's inside a call it performs, the system's elsewhere.
pub(crate) async fn timeout<F: Future>(limit: Duration, fut: F) -> Result<F::Output, TimedOut> {
    within(current().as_ref(), limit, fut).await
}

/// A tokio interval on the system clock (its first tick at once; a late tick delays the next
/// ones), for polling that is not a run's (the `serve` UI's watch of a run).
#[allow(dead_code)] // The binary's `serve` uses it; the library does not.
pub(crate) fn interval(every: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
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
