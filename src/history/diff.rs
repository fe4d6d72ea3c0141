//! Where two runs part (`runtape diff A B`): the first seq whose state differs, with both
//! sides. For a run and its fork, everything before the fork point is shared and equal.

use serde::Serialize;

use crate::ledger::codec::decode_event;
use crate::ledger::{HistoryError, record, transitions};
use crate::machine::{EdgeId, EventKind, RunId, StateKind};
use crate::store::{Store, TransitionRecord};

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunDiff {
    /// First run.
    pub a: RunId,
    /// Second run.
    pub b: RunId,
    /// Steps both runs have in common (identical states up to and including this seq).
    pub common: u64,
    /// The first step that differs, or `None` when the histories are identical.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<DiffPoint>,
}

/// The first step where two runs differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffPoint {
    /// The seq.
    pub seq: u64,
    /// Run A at that seq (`None`: A ended before it).
    pub a: Option<Side>,
    /// Run B at that seq (`None`: B ended before it).
    pub b: Option<Side>,
}

/// One run at one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Side {
    /// The event kind.
    pub event: EventKind,
    /// The edge taken.
    pub edge: EdgeId,
    /// The state after it.
    pub state: StateKind,
    /// Its hash.
    pub state_hash: String,
    /// The event, as stored (JSON).
    pub detail: serde_json::Value,
}

/// Compares `a` and `b` step by step.
pub fn diff_runs(store: &dyn Store, a: &RunId, b: &RunId) -> Result<RunDiff, HistoryError> {
    let (ra, rb) = (record(store, a)?, record(store, b)?);
    let ta = transitions(store, a, 1, ra.seq)?;
    let tb = transitions(store, b, 1, rb.seq)?;
    let mut common = 0;
    for i in 0..ta.len().max(tb.len()) {
        let (x, y) = (ta.get(i), tb.get(i));
        match (x, y) {
            (Some(x), Some(y)) if x.state_hash == y.state_hash && same_event(x, y) => {
                common = x.seq
            }
            _ => {
                return Ok(RunDiff {
                    a: a.clone(),
                    b: b.clone(),
                    common,
                    first_difference: Some(DiffPoint {
                        seq: common + 1,
                        a: x.map(|t| side(a, t)).transpose()?,
                        b: y.map(|t| side(b, t)).transpose()?,
                    }),
                });
            }
        }
    }
    Ok(RunDiff {
        a: a.clone(),
        b: b.clone(),
        common,
        first_difference: None,
    })
}

/// Events equal apart from the run they were addressed to.
fn same_event(x: &TransitionRecord, y: &TransitionRecord) -> bool {
    x.event == y.event || x.edge == y.edge && x.at == y.at && x.state_hash == y.state_hash
}

fn side(run: &RunId, t: &TransitionRecord) -> Result<Side, HistoryError> {
    let event = decode_event(run, t.seq, &t.event)?;
    Ok(Side {
        event: event.kind(),
        edge: t.edge,
        state: t.state_kind,
        state_hash: t.state_hash.to_hex(),
        detail: serde_json::to_value(&event.body).unwrap_or_default(),
    })
}
