//! The aggregate views of `runtape serve`: what the runs add up to (the store's
//! [`RunStats`](crate::store::RunStats): runs per status over time, spend per agent and
//! model, failures per class) and how long each kind of step takes ([`step_durations`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::OpsError;
use crate::store::{RunQuery, RunStats, Store};

/// The aggregates of the runs created at or after `since_ms`, per `bucket_ms` of creation
/// time.
pub fn run_stats(store: &dyn Store, since_ms: u64, bucket_ms: u64) -> Result<RunStats, OpsError> {
    Ok(store.run_stats(since_ms, bucket_ms)?)
}

/// How long one kind of step took: the time from the step before it to its commit (a
/// `model_replied` step: the model call; a `tool_returned` step: the tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepDuration {
    /// The event kind of the step (`model_replied`, `tool_returned`, …).
    pub kind: String,
    /// How many such steps were measured.
    pub steps: u64,
    /// Their median, ms.
    pub p50_ms: u64,
    /// Their 95th percentile, ms.
    pub p95_ms: u64,
}

/// The value at fraction `q` of `sorted` (nearest rank).
fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// p50 and p95 of each kind of step over the newest `runs` runs' own steps (a fork's steps
/// inherited from its parent are not counted twice), by kind name.
pub fn step_durations(store: &dyn Store, runs: usize) -> Result<Vec<StepDuration>, OpsError> {
    let page = store.run_page(
        &RunQuery {
            limit: runs.max(1),
            ..RunQuery::default()
        },
        crate::clock::wall_ms(),
    )?;
    let mut by_kind: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in &page.runs {
        let own_from = r.parent.as_ref().map_or(0, |(_, seq)| *seq);
        let entries = crate::history::timeline(store, &r.id)?;
        for pair in entries.windows(2) {
            let (before, step) = (&pair[0], &pair[1]);
            if step.seq <= own_from {
                continue;
            }
            let kind = serde_json::to_value(step.event)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            by_kind
                .entry(kind)
                .or_default()
                .push(step.at_ms.saturating_sub(before.at_ms));
        }
    }
    Ok(by_kind
        .into_iter()
        .map(|(kind, mut ms)| {
            ms.sort_unstable();
            StepDuration {
                kind,
                steps: ms.len() as u64,
                p50_ms: percentile(&ms, 0.50),
                p95_ms: percentile(&ms, 0.95),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.95), 95);
        assert_eq!(percentile(&[7], 0.95), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
