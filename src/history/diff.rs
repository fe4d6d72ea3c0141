//! Where two runs part (`runtape diff A B`): the first step at which they did something
//! different, with both sides and what differs.
//!
//! Two comparisons, step by step:
//!
//! - **identical**: the same state hash and the same event. A run and its fork share every
//!   step up to the fork point this way.
//! - **alike**: the same edge, and the same event and state once what never repeats between
//!   two runs is set aside — times (each event's `at`, the state's start and activation
//!   times, cooldown deadlines), run ids (inside effect ids, a child's proof), provider call
//!   and response ids, how a reply was cut into stream chunks, and conversation heads (which
//!   follow from the events; they differ when call ids do). Two child runs of the same task,
//!   a child in a run and the same child re-run by a fork, or a run replayed from its
//!   cassette without `--stepped-clock` are alike where they did the same thing.
//!
//! The first step that is not alike is the first difference, reported with the fields that
//! differ (JSON pointers into the event and the state, values cut short). [`diff_trees`]
//! pairs two delegation trees' runs by their place in the tree and compares each pair.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::ledger::codec::decode_event;
use crate::ledger::{HistoryError, record, transitions, tree};
use crate::machine::{EdgeId, EventKind, RunId, StateKind};
use crate::store::{Store, TransitionRecord};

/// At most this many differing fields are listed for the first difference.
const MAX_CHANGES: usize = 6;
/// A differing value is shown cut to this many characters.
const MAX_VALUE_CHARS: usize = 120;

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunDiff {
    /// First run.
    pub a: RunId,
    /// Second run.
    pub b: RunId,
    /// Steps both runs have in common (identical states up to and including this seq).
    pub common: u64,
    /// Steps both runs took alike (see the module doc) up to and including this seq; at
    /// least `common`.
    pub alike: u64,
    /// The first step that differs (the step after `alike`), or `None` when neither run has
    /// a step the other did not take alike.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<DiffPoint>,
}

impl RunDiff {
    /// True when both histories are the same step for step, hashes included.
    pub fn is_identical(&self) -> bool {
        self.first_difference.is_none() && self.common == self.alike
    }
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
    /// What differs there: `event/…` and `state/…` JSON pointers with both values (times and
    /// ids set aside), at most six.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
}

/// One field that differs between two steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Where: `event` or `state`, then a JSON pointer (`event/reply/text`).
    pub at: String,
    /// Run A's value (`null` when absent), cut short.
    pub a: Value,
    /// Run B's value, cut short.
    pub b: Value,
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
    let (mut sa, mut sb) = (Folder::new(store, a)?, Folder::new(store, b)?);
    let mut common = 0;
    let mut identical = true;
    let mut alike = 0;
    for i in 0..ta.len().max(tb.len()) {
        let (x, y) = (ta.get(i), tb.get(i));
        let steps = match (x, y) {
            (Some(x), Some(y)) => Some((sa.step(x)?, sb.step(y)?)),
            _ => None,
        };
        match (x, y, &steps) {
            (Some(x), Some(y), _)
                if identical && x.state_hash == y.state_hash && same_event(x, y) =>
            {
                common = x.seq;
                alike = x.seq;
            }
            (Some(x), Some(y), Some((p, q))) if x.edge == y.edge && p == q => {
                identical = false;
                alike = x.seq;
            }
            _ => {
                let changes = match &steps {
                    Some((p, q)) => changes(p, q),
                    None => Vec::new(),
                };
                return Ok(RunDiff {
                    a: a.clone(),
                    b: b.clone(),
                    common,
                    alike,
                    first_difference: Some(DiffPoint {
                        seq: alike + 1,
                        a: x.map(|t| side(a, t)).transpose()?,
                        b: y.map(|t| side(b, t)).transpose()?,
                        changes,
                    }),
                });
            }
        }
    }
    Ok(RunDiff {
        a: a.clone(),
        b: b.clone(),
        common,
        alike,
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

/// A step as compared for "alike": its event body and the state after it, times and ids set
/// aside.
#[derive(PartialEq)]
struct Step {
    event: Value,
    state: Value,
}

/// Folds one run's history through the machine, one stored transition at a time, to have the
/// state after each (a row keeps only its hash).
struct Folder {
    run: RunId,
    spec: crate::machine::RunSpec,
    state: crate::machine::RunState,
}

impl Folder {
    fn new(store: &dyn Store, run: &RunId) -> Result<Folder, HistoryError> {
        Ok(Folder {
            run: run.clone(),
            spec: crate::ledger::spec_of(&record(store, run)?)?,
            state: crate::machine::RunState::Created,
        })
    }

    /// The next transition `t` as compared.
    fn step(&mut self, t: &TransitionRecord) -> Result<Step, HistoryError> {
        let event = decode_event(&self.run, t.seq, &t.event)?;
        let next = crate::machine::step(&self.state, &event, &self.spec)
            .map_err(|e| crate::ledger::damaged(&self.run, t.seq, e.to_string()))?;
        self.state = next.next;
        let mut body = serde_json::to_value(&event.body).unwrap_or_default();
        strip(&mut body, EVENT_NOISE);
        let mut state = serde_json::to_value(&self.state).unwrap_or_default();
        strip(&mut state, STATE_NOISE);
        Ok(Step { event: body, state })
    }
}

/// Keys of an event that never repeat between two runs.
const EVENT_NOISE: &[&str] = &["run", "chunks", "response_id", "proof", "tool_call_id"];
/// Keys of a state that never repeat between two runs.
const STATE_NOISE: &[&str] = &[
    "started_at",
    "first_active_at",
    "cooldowns",
    "not_before",
    "head",
];

/// Removes `keys` everywhere in `value`, and the provider's `id` of every tool call.
fn strip(value: &mut Value, keys: &[&str]) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                for k in keys {
                    map.remove(*k);
                }
                if let Some(Value::Array(calls)) = map.get_mut("tool_calls") {
                    for c in calls.iter_mut() {
                        if let Value::Object(call) = c {
                            call.remove("id");
                        }
                    }
                }
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
}

/// The fields that differ between two steps: the event's first, then the state's.
fn changes(a: &Step, b: &Step) -> Vec<Change> {
    let mut out = Vec::new();
    fields("event", &a.event, &b.event, &mut out);
    fields("state", &a.state, &b.state, &mut out);
    out.truncate(MAX_CHANGES);
    out
}

/// Appends each leaf where `a` and `b` differ, below the pointer `at`, while there is room.
fn fields(at: &str, a: &Value, b: &Value, out: &mut Vec<Change>) {
    if out.len() >= MAX_CHANGES || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let pointer = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                fields(
                    &pointer,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                fields(&format!("{at}/{i}"), p, q, out);
            }
        }
        _ => out.push(Change {
            at: at.to_owned(),
            a: cut(a),
            b: cut(b),
        }),
    }
}

/// `value`, with a long string or a large structure cut to [`MAX_VALUE_CHARS`] characters.
fn cut(value: &Value) -> Value {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => value.to_string(),
        other => return other.clone(),
    };
    if text.chars().count() <= MAX_VALUE_CHARS {
        return match value {
            Value::String(_) => Value::String(text),
            other => other.clone(),
        };
    }
    let short: String = text.chars().take(MAX_VALUE_CHARS).collect();
    Value::String(format!("{short}…"))
}

/// Two delegation trees compared run by run (`runtape diff A B --recursive`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeDiff {
    /// The top runs.
    pub top: RunDiff,
    /// The runs below them, paired by their place in the tree (`3.0`), in tree order.
    pub children: Vec<ChildDiff>,
}

/// One place in two trees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChildDiff {
    /// The place: the `SEQ.INDEX` of each delegating effect from the top (`3.0`).
    pub path: String,
    /// Tree A's run there, if it has one.
    pub a: Option<RunId>,
    /// Tree B's run there, if it has one.
    pub b: Option<RunId>,
    /// Their comparison, when both trees have a run there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<RunDiff>,
}

/// Compares the trees below `a` and `b`: their top runs, then each place either tree has a
/// child run at. A fork shares the children its parent had before the fork point (see
/// [`crate::ledger::tree`](mod@crate::ledger::tree)), which then compare as identical.
pub fn diff_trees(store: &dyn Store, a: &RunId, b: &RunId) -> Result<TreeDiff, HistoryError> {
    let top = diff_runs(store, a, b)?;
    let below = |root: &RunId| -> Result<BTreeMap<Vec<u64>, (String, RunId)>, HistoryError> {
        Ok(tree(store, root)?
            .into_iter()
            .skip(1)
            .map(|r| {
                let key = r.path.split('.').filter_map(|p| p.parse().ok()).collect();
                (key, (r.path, r.run))
            })
            .collect())
    };
    let (mut ta, mut tb) = (below(a)?, below(b)?);
    let keys: std::collections::BTreeSet<Vec<u64>> = ta.keys().chain(tb.keys()).cloned().collect();
    let mut children = Vec::with_capacity(keys.len());
    for key in keys {
        let (x, y) = (ta.remove(&key), tb.remove(&key));
        let path = x
            .as_ref()
            .or(y.as_ref())
            .map(|(p, _)| p.clone())
            .unwrap_or_default();
        let (ra, rb) = (x.map(|(_, r)| r), y.map(|(_, r)| r));
        let diff = match (&ra, &rb) {
            (Some(p), Some(q)) => Some(diff_runs(store, p, q)?),
            _ => None,
        };
        children.push(ChildDiff {
            path,
            a: ra,
            b: rb,
            diff,
        });
    }
    Ok(TreeDiff { top, children })
}
