//! Model routes and their retry rules: which provider and model an agent calls, how often a
//! route is retried, how long it waits in between, and how long a route that gave up is
//! skipped. The choices these rules drive are made in `route`.

use serde::{Deserialize, Serialize};

/// A provider and model to call, with its retry rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Name of a provider defined in the spec file.
    pub provider: String,
    /// Model name sent to the provider.
    pub model: String,
    /// Attempts on this route (first call included) for retryable errors.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Delay between attempts.
    #[serde(default)]
    pub backoff: Backoff,
    /// After this route gives up (its attempts spent), how long it is skipped: the agent
    /// uses its next route meanwhile and returns to this one once the time has passed.
    #[serde(
        default = "default_cooldown_ms",
        skip_serializing_if = "is_default_cooldown"
    )]
    pub cooldown_ms: u64,
}

fn default_attempts() -> u32 {
    3
}

/// How long a route that gave up is skipped by default: one minute.
pub const DEFAULT_COOLDOWN_MS: u64 = 60_000;

fn default_cooldown_ms() -> u64 {
    DEFAULT_COOLDOWN_MS
}

fn is_default_cooldown(ms: &u64) -> bool {
    *ms == DEFAULT_COOLDOWN_MS
}

/// The longest `Retry-After` a retry waits for: two minutes. A provider asking for longer
/// ends the route's attempts at once (it is cooled down for as long as asked) so the agent
/// moves to its next route, or fails, instead of sleeping.
pub const MAX_RETRY_AFTER_MS: u64 = 120_000;

/// Exponential backoff: attempt `n` (n ≥ 2) waits `min(max_ms, initial_ms × 2^(n-2))`, or the
/// provider's `retry_after` when that is longer. No jitter: the delay is part of the recorded
/// history and must be reproducible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// First delay.
    pub initial_ms: u64,
    /// Largest delay.
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_ms: 500,
            max_ms: 30_000,
        }
    }
}

impl Backoff {
    /// Milliseconds to wait before `attempt` (2 = first retry), at least `retry_after_ms`.
    pub fn delay_ms(&self, attempt: u32, retry_after_ms: Option<u64>) -> u64 {
        let shift = attempt.saturating_sub(2).min(32);
        let exp = self
            .initial_ms
            .saturating_mul(1u64 << shift)
            .min(self.max_ms);
        exp.max(retry_after_ms.unwrap_or(0))
    }
}

impl Route {
    /// A route with default attempts (3) and backoff.
    pub fn new(provider: &str, model: &str) -> Self {
        Route {
            provider: provider.to_owned(),
            model: model.to_owned(),
            max_attempts: default_attempts(),
            backoff: Backoff::default(),
            cooldown_ms: DEFAULT_COOLDOWN_MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_honours_retry_after() {
        let b = Backoff {
            initial_ms: 100,
            max_ms: 1000,
        };
        assert_eq!(b.delay_ms(2, None), 100);
        assert_eq!(b.delay_ms(3, None), 200);
        assert_eq!(b.delay_ms(6, None), 1000);
        assert_eq!(b.delay_ms(2, Some(5000)), 5000);
        assert_eq!(b.delay_ms(u32::MAX, None), 1000);
    }
}
