//! What the runs add up to ([`super::Store::run_stats`]): runs per status per time bucket,
//! spend per agent and model, failures per error class. `runtape serve`'s aggregate views
//! show them.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{RunRecord, run_facts};

/// Runs created in one time bucket that now have one status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    /// The bucket's start, wall ms (a multiple of the bucket's length).
    pub bucket_ms: u64,
    /// The stored status (`running` includes queued and interrupted runs).
    pub status: String,
    /// How many.
    pub runs: u64,
}

/// What the runs that start with one agent and model spent. A run's whole spend counts under
/// the agent it starts with and that agent's primary route (`provider/model`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Spend {
    /// The entry agent.
    pub agent: String,
    /// Its primary route, `provider/model`.
    pub model: String,
    /// How many runs.
    pub runs: u64,
    /// Their known cost, nanodollars.
    pub cost_nanos: u64,
    /// Their tokens, input and output.
    pub tokens: u64,
}

/// Failed runs of one error class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailureCount {
    /// The class (`tool_failed`, `bad_request`, …).
    pub class: String,
    /// How many.
    pub runs: u64,
    /// The reason of the newest of them.
    pub example: String,
}

/// Every aggregate of the runs created at or after a time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    /// Runs per bucket and status, oldest bucket first.
    pub by_status: Vec<StatusCount>,
    /// Spend per entry agent and model, costliest first.
    pub spend: Vec<Spend>,
    /// Failures per class, most first.
    pub failures: Vec<FailureCount>,
}

/// The error class of a failed run's reason (`class: message`).
pub(crate) fn class_of(reason: &str) -> String {
    reason.split(':').next().unwrap_or_default().to_owned()
}

/// [`super::Store::run_stats`] over `runs` (newest first), for a backend without SQL for it.
pub(crate) fn stats_of_all(runs: &[RunRecord], since_ms: u64, bucket_ms: u64) -> RunStats {
    let bucket_ms = bucket_ms.max(1);
    let mut by_status: BTreeMap<(u64, String), u64> = BTreeMap::new();
    let mut spend: BTreeMap<(String, String), Spend> = BTreeMap::new();
    let mut failures: BTreeMap<String, FailureCount> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.created_ms >= since_ms) {
        let bucket = r.created_ms / bucket_ms * bucket_ms;
        *by_status
            .entry((bucket, r.status.as_str().to_owned()))
            .or_default() += 1;
        let (agent, model) = run_facts::spec_entry_route(&r.spec);
        let s = spend
            .entry((agent.clone(), model.clone()))
            .or_insert(Spend {
                agent,
                model,
                runs: 0,
                cost_nanos: 0,
                tokens: 0,
            });
        s.runs += 1;
        s.cost_nanos = s.cost_nanos.saturating_add(r.cost_nanos);
        s.tokens = s.tokens.saturating_add(r.tokens);
        if r.status == super::RunStatus::Failed {
            let reason = r.reason().unwrap_or_default();
            let f = failures
                .entry(class_of(&reason))
                .or_insert_with(|| FailureCount {
                    class: class_of(&reason),
                    runs: 0,
                    example: reason,
                });
            f.runs += 1;
        }
    }
    finish(
        by_status
            .into_iter()
            .map(|((bucket_ms, status), runs)| StatusCount {
                bucket_ms,
                status,
                runs,
            })
            .collect(),
        spend.into_values().collect(),
        failures.into_values().collect(),
    )
}

/// The aggregates in their documented orders.
pub(crate) fn finish(
    by_status: Vec<StatusCount>,
    mut spend: Vec<Spend>,
    mut failures: Vec<FailureCount>,
) -> RunStats {
    spend.sort_by(|a, b| {
        b.cost_nanos
            .cmp(&a.cost_nanos)
            .then_with(|| (&a.agent, &a.model).cmp(&(&b.agent, &b.model)))
    });
    failures.sort_by(|a, b| b.runs.cmp(&a.runs).then_with(|| a.class.cmp(&b.class)));
    RunStats {
        by_status,
        spend,
        failures,
    }
}
