//! Whether a worker is healthy (`GET /healthz` on `runtape worker --metrics-addr`,
//! [`super::endpoint`]): its database answers and its loop turns.
//!
//! The worker's loop tells [`Health`] what happens — each turn, each heartbeat's outcome, the
//! wait for the database at start, the drain — and [`verdict`] judges a [`Health::snapshot`]
//! at a given instant, purely. Healthy means all of:
//!
//! - the worker is running: not still connecting, not draining after a stop signal;
//! - its last heartbeat reached the database, no longer ago than `stale_after` (the lease
//!   length: a heartbeat older than that and other workers list this one as gone);
//! - its loop turned no longer ago than `stale_after`.
//!
//! The answer is one line of JSON either way: `200` with `"status": "ok"`, or `503` with the
//! status (`connecting`, `draining`, `unavailable`) and a `reason`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Where a worker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the database at start.
    Connecting,
    /// Claiming and driving runs.
    Running,
    /// Finishing what it drives after a stop signal; claims nothing.
    Draining,
}

/// What the loop last told. Shared by the loop and the endpoint.
#[derive(Debug)]
pub struct Health {
    origin: Instant,
    inner: Mutex<Snapshot>,
}

/// Health as of one instant; times are ms since the worker started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Where the worker is.
    pub phase: Phase,
    /// When the loop last turned.
    pub loop_at_ms: Option<u64>,
    /// When a heartbeat last reached the database.
    pub heartbeat_at_ms: Option<u64>,
    /// Why the last attempt to reach the database failed, while it fails.
    pub database_error: Option<String>,
    /// How old a loop turn or a heartbeat may be.
    pub stale_after_ms: u64,
}

impl Default for Health {
    fn default() -> Health {
        Health::new()
    }
}

impl Health {
    /// A worker that has just started: connecting.
    pub fn new() -> Health {
        Health {
            origin: crate::clock::stopwatch(),
            inner: Mutex::new(Snapshot {
                phase: Phase::Connecting,
                loop_at_ms: None,
                heartbeat_at_ms: None,
                database_error: None,
                stale_after_ms: 0,
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis().min(u128::from(u64::MAX)) as u64
    }

    fn update(&self, f: impl FnOnce(&mut Snapshot, u64)) {
        let now = self.now_ms();
        f(
            &mut self.inner.lock().unwrap_or_else(|p| p.into_inner()),
            now,
        );
    }

    /// An attempt to reach the database at start failed with `error`.
    pub fn unreachable_at_start(&self, error: &str) {
        self.update(|s, _| s.database_error = Some(error.to_owned()));
    }

    /// The worker is registered and claims runs; a loop turn or a heartbeat older than
    /// `stale_after` is unhealthy.
    pub fn running(&self, stale_after: Duration) {
        let ms = stale_after.as_millis().min(u128::from(u64::MAX)) as u64;
        self.update(|s, now| {
            s.phase = Phase::Running;
            s.stale_after_ms = ms;
            s.database_error = None;
            s.heartbeat_at_ms = Some(now);
            s.loop_at_ms = Some(now);
        });
    }

    /// The loop turned.
    pub fn loop_turned(&self) {
        self.update(|s, now| s.loop_at_ms = Some(now));
    }

    /// A heartbeat reached the database (`Ok`) or failed, saying why.
    pub fn heartbeat(&self, outcome: Result<(), String>) {
        self.update(|s, now| match outcome {
            Ok(()) => {
                s.heartbeat_at_ms = Some(now);
                s.database_error = None;
            }
            Err(e) => s.database_error = Some(e),
        });
    }

    /// A stop signal came: the worker drains.
    pub fn draining(&self) {
        self.update(|s, _| s.phase = Phase::Draining);
    }

    /// What the loop last told, and the instant (ms since start) to judge it at.
    pub fn snapshot(&self) -> (Snapshot, u64) {
        let now = self.now_ms();
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (s, now)
    }
}

/// Judges `s` at `now_ms`: healthy or not, and the one-line JSON body that says so
/// (`runs_in_flight` is added as it is).
pub fn verdict(s: &Snapshot, now_ms: u64, runs_in_flight: u64) -> (bool, Value) {
    let ago = |at: Option<u64>| at.map(|t| now_ms.saturating_sub(t));
    let (loop_ago, beat_ago) = (ago(s.loop_at_ms), ago(s.heartbeat_at_ms));
    let unhealthy = |status: &str, reason: String| {
        let body = json!({"status": status, "reason": reason, "runs_in_flight": runs_in_flight,
            "loop_ms_ago": loop_ago, "heartbeat_ms_ago": beat_ago});
        (false, body)
    };
    match s.phase {
        Phase::Connecting => {
            return unhealthy(
                "connecting",
                match &s.database_error {
                    Some(e) => format!("waiting for the database: {e}"),
                    None => "connecting to the database".to_owned(),
                },
            );
        }
        Phase::Draining => {
            return unhealthy(
                "draining",
                "stopping after a signal: finishing the runs it drives, claiming none".to_owned(),
            );
        }
        Phase::Running => {}
    }
    if let Some(e) = &s.database_error {
        return unhealthy(
            "unavailable",
            format!("the database cannot be reached: {e}"),
        );
    }
    match beat_ago {
        Some(ms) if ms <= s.stale_after_ms => {}
        _ => {
            return unhealthy(
                "unavailable",
                format!(
                    "no heartbeat has reached the database for more than {} ms",
                    s.stale_after_ms
                ),
            );
        }
    }
    match loop_ago {
        Some(ms) if ms <= s.stale_after_ms => {}
        _ => {
            return unhealthy(
                "unavailable",
                format!(
                    "the worker's loop has not turned for more than {} ms",
                    s.stale_after_ms
                ),
            );
        }
    }
    let body = json!({"status": "ok", "runs_in_flight": runs_in_flight,
        "loop_ms_ago": loop_ago, "heartbeat_ms_ago": beat_ago});
    (true, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Snapshot {
        Snapshot {
            phase: Phase::Running,
            loop_at_ms: Some(1_000),
            heartbeat_at_ms: Some(900),
            database_error: None,
            stale_after_ms: 3_000,
        }
    }

    #[test]
    fn a_running_worker_whose_loop_turns_and_heartbeat_lands_is_healthy() {
        let (ok, body) = verdict(&running(), 1_200, 2);
        assert!(ok, "{body}");
        assert_eq!(
            body,
            json!({"status": "ok", "runs_in_flight": 2, "loop_ms_ago": 200, "heartbeat_ms_ago": 300})
        );
        assert!(
            verdict(&running(), 3_900, 0).0,
            "at the limit still healthy"
        );
    }

    #[test]
    fn each_way_to_be_unhealthy_says_why() {
        let cases: Vec<(Snapshot, u64, &str, &str)> = vec![
            (
                Snapshot {
                    phase: Phase::Connecting,
                    database_error: Some("cannot connect".into()),
                    ..running()
                },
                1_000,
                "connecting",
                "waiting for the database: cannot connect",
            ),
            (
                Snapshot {
                    phase: Phase::Draining,
                    ..running()
                },
                1_000,
                "draining",
                "stopping after a signal",
            ),
            (
                Snapshot {
                    database_error: Some("connection refused".into()),
                    ..running()
                },
                1_000,
                "unavailable",
                "the database cannot be reached: connection refused",
            ),
            (
                Snapshot {
                    loop_at_ms: Some(3_950),
                    ..running()
                },
                3_950,
                "unavailable",
                "no heartbeat has reached the database for more than 3000 ms",
            ),
            (
                Snapshot {
                    heartbeat_at_ms: Some(3_950),
                    ..running()
                },
                4_001,
                "unavailable",
                "the worker's loop has not turned for more than 3000 ms",
            ),
        ];
        for (snapshot, now, status, reason) in cases {
            let (ok, body) = verdict(&snapshot, now, 0);
            assert!(!ok, "{body}");
            assert_eq!(body["status"], status, "{body}");
            assert!(
                body["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(reason),
                "{body}"
            );
            assert!(!body.to_string().contains('\n'), "one line: {body}");
        }
    }

    #[test]
    fn the_worker_tells_its_health_as_it_goes() {
        let h = Health::new();
        h.unreachable_at_start("refused");
        let (s, now) = h.snapshot();
        assert_eq!(verdict(&s, now, 0).1["status"], "connecting");
        h.running(Duration::from_secs(60));
        let (s, now) = h.snapshot();
        assert!(verdict(&s, now, 0).0, "{s:?}");
        h.heartbeat(Err("reset".into()));
        let (s, now) = h.snapshot();
        assert_eq!(verdict(&s, now, 0).1["status"], "unavailable");
        h.heartbeat(Ok(()));
        h.loop_turned();
        let (s, now) = h.snapshot();
        assert!(verdict(&s, now, 0).0, "back once a heartbeat lands");
        h.draining();
        let (s, now) = h.snapshot();
        assert_eq!(verdict(&s, now, 0).1["status"], "draining");
    }
}
