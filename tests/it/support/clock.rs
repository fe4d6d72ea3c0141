//! A clock for the engine on which long waits pass at once ([`FastForward`]): give it to an
//! engine (`EngineConfig::clock`) to show that a wait goes through the engine's clock and not
//! the system's, by what it recorded rather than by how long a test took.

use std::sync::Mutex;
use std::time::Duration;

use runtape::exec::{Clock, Engine, EngineConfig, Sleep, VirtualClock};
use runtape::machine::Hlc;
use runtape::store::MemoryStore;
use tokio::time::Instant;

/// The engine's time starts here: 2023-11-14T22:13:20Z, years before the wall's.
pub const ORIGIN_MS: u64 = 1_700_000_000_000;
/// Waits at least this long pass at once on [`FastForward`]; shorter ones (the control poll,
/// lease renewal) take real time.
pub const LONG: Duration = Duration::from_secs(30);
/// The real time a long wait takes on [`FastForward`].
const MOMENT: Duration = Duration::from_millis(20);

/// A clock whose time starts at [`ORIGIN_MS`] and runs with the wall's, except that a wait of
/// [`LONG`] or more ends after a moment of real time ([`MOMENT`], so a loop that waits on it
/// does not spin) and moves the clock past it. It records each such skip.
pub struct FastForward {
    start: Instant,
    skipped: Mutex<Duration>,
    skips: Mutex<Vec<Duration>>,
}

impl FastForward {
    pub fn new() -> Self {
        FastForward {
            start: Instant::now(),
            skipped: Mutex::new(Duration::ZERO),
            skips: Mutex::new(Vec::new()),
        }
    }

    fn skipped(&self) -> Duration {
        *self.skipped.lock().expect("not poisoned")
    }

    /// Every long wait the clock passed, in order.
    pub fn skips(&self) -> Vec<Duration> {
        self.skips.lock().expect("not poisoned").clone()
    }
}

impl Clock for FastForward {
    fn stamp(&self, _seq: u64, after: Hlc) -> Hlc {
        Hlc::from_ms(self.wall_ms()).max(Hlc::new(after.ms(), after.logical() + 1))
    }

    fn trace(&self) -> Hlc {
        Hlc::from_ms(self.wall_ms())
    }

    fn wall_ms(&self) -> u64 {
        let passed = self.start.elapsed() + self.skipped();
        ORIGIN_MS + passed.as_millis() as u64
    }

    fn now(&self) -> Instant {
        Instant::now() + self.skipped()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let left = deadline.saturating_duration_since(self.now());
        if left >= LONG {
            *self.skipped.lock().expect("not poisoned") += left;
            self.skips.lock().expect("not poisoned").push(left);
            return Box::pin(tokio::time::sleep(MOMENT));
        }
        Box::pin(tokio::time::sleep(left))
    }
}

/// An engine over an in-memory store whose clock is a [`VirtualClock`] starting at
/// [`ORIGIN_MS`], and that clock: under a paused tokio runtime
/// (`#[tokio::test(start_paused = true)]`) its waits take no real time and are recorded
/// ([`VirtualClock::waits`]). Make it inside the runtime.
pub fn virtual_engine() -> (std::sync::Arc<VirtualClock>, Engine) {
    let clock = std::sync::Arc::new(VirtualClock::new(ORIGIN_MS));
    let engine = Engine::with_store(
        std::sync::Arc::new(MemoryStore::new()),
        EngineConfig {
            clock: clock.clone(),
            ..EngineConfig::default()
        },
    );
    (clock, engine)
}
