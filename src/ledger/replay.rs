//! Replaying a recorded history through the current [`step`]: each transition's edge,
//! effects, state hash and chain link must be what the machine produces now, like a workflow
//! replay test. Used by `verify` (stored runs) and by canned-history tests.

use serde::Serialize;

use super::codec::{chain_link, effects_bytes};
use crate::machine::{Digest, Event, RunSpec, RunState, step};

/// The first place a stored run and what it should be disagree: a seq whose transition does
/// not replay, or a stored column that does not match the sealed head or the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}{what}: expected {expected}, found {found}", place(*seq, column.as_deref()))]
pub struct Divergence {
    /// The first bad seq (0 when the fault is a column not tied to a seq).
    pub seq: u64,
    /// The stored column at fault (`table.column`), when the fault is a column's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// What disagrees (`state hash`, `effects`, `edge`, `chain link`, `missing transition`, ...).
    pub what: String,
    /// What the replay (or the sequence, or the sealed head) expected.
    pub expected: String,
    /// What was stored.
    pub found: String,
}

/// `seq N: `, `seq N (table.column): ` or `table.column: `.
fn place(seq: u64, column: Option<&str>) -> String {
    match (seq, column) {
        (0, Some(c)) => format!("{c}: "),
        (s, Some(c)) => format!("seq {s} ({c}): "),
        (s, None) => format!("seq {s}: "),
    }
}

/// `text` made fit for a one-line message: control characters replaced, at most 160
/// characters.
pub(crate) fn clip(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(160)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(160).is_some() {
        out.push('…');
    }
    out
}

/// Two byte strings shown from a little before their first difference, so that a clipped
/// one-line message still shows what differs.
pub(crate) fn where_they_differ(expected: &[u8], found: &[u8]) -> (String, String) {
    let first = expected
        .iter()
        .zip(found)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(found.len()));
    let from = first.saturating_sub(40);
    let show = |bytes: &[u8]| {
        let tail = String::from_utf8_lossy(bytes.get(from..).unwrap_or_default()).into_owned();
        let tail: String = tail.chars().take(80).collect();
        let tail = if tail.is_empty() {
            "(end)".to_owned()
        } else {
            tail
        };
        if from > 0 { format!("…{tail}") } else { tail }
    };
    (show(expected), show(found))
}

impl Divergence {
    /// A divergence at `seq`.
    pub(crate) fn new(
        seq: u64,
        what: &str,
        expected: impl AsRef<str>,
        found: impl AsRef<str>,
    ) -> Self {
        Divergence {
            seq,
            column: None,
            what: what.into(),
            expected: clip(expected.as_ref()),
            found: clip(found.as_ref()),
        }
    }

    /// A divergence of a stored column (at `seq`, or 0 when not tied to one).
    pub(crate) fn column(
        seq: u64,
        column: &str,
        what: &str,
        expected: impl AsRef<str>,
        found: impl AsRef<str>,
    ) -> Self {
        Divergence {
            column: Some(column.into()),
            ..Divergence::new(seq, what, expected, found)
        }
    }
}

/// One recorded transition as replay needs it.
#[derive(Clone, Debug)]
pub struct Recorded<'a> {
    /// Its seq.
    pub seq: u64,
    /// The event's exact stored bytes (the chain covers them).
    pub event_bytes: &'a [u8],
    /// The decoded event.
    pub event: Event,
    /// The edge stored.
    pub edge: &'a str,
    /// The effects as stored (JSON array bytes, empty for none).
    pub effects: &'a [u8],
    /// The stored state hash.
    pub state_hash: Digest,
    /// The stored chain link (`None` to skip the chain check, e.g. canned histories).
    pub chain: Option<Digest>,
}

/// Folds `recorded` from `Created` through [`step`] under `spec`, checking each transition.
/// Returns the final state.
pub fn replay<'a>(
    spec: &RunSpec,
    recorded: impl IntoIterator<Item = Recorded<'a>>,
) -> Result<RunState, Divergence> {
    replay_with(spec, recorded, &mut |_, _| Ok(()))
}

/// [`replay`], calling `visit` with each recorded transition and what the machine did with it,
/// once it has been checked.
pub fn replay_with<'a>(
    spec: &RunSpec,
    recorded: impl IntoIterator<Item = Recorded<'a>>,
    visit: &mut dyn FnMut(&Recorded<'a>, &crate::machine::Transition) -> Result<(), Divergence>,
) -> Result<RunState, Divergence> {
    replay_from(spec, RunState::Created, Digest::ZERO, recorded, visit)
}

/// [`replay_with`] from `state` (a state the history reached, with `chain` the link of its
/// transition) instead of from `Created`: `recorded` starts at the seq after `state`'s. What a
/// check of a history's tail folds, from a snapshot it has bound to the chain.
pub fn replay_from<'a>(
    spec: &RunSpec,
    state: RunState,
    chain: Digest,
    recorded: impl IntoIterator<Item = Recorded<'a>>,
    visit: &mut dyn FnMut(&Recorded<'a>, &crate::machine::Transition) -> Result<(), Divergence>,
) -> Result<RunState, Divergence> {
    let (mut state, mut chain) = (state, chain);
    for (expected_seq, r) in (state.seq() + 1..).zip(recorded) {
        if r.seq != expected_seq {
            return Err(Divergence::new(
                expected_seq,
                "missing transition",
                format!("seq {expected_seq}"),
                format!("seq {}", r.seq),
            ));
        }
        let t = step(&state, &r.event, spec).map_err(|e| {
            Divergence::new(
                r.seq,
                "event",
                "an event the machine accepts",
                format!("refused: {e}"),
            )
        })?;
        if t.edge != r.edge {
            return Err(Divergence::new(r.seq, "edge", t.edge.as_str(), r.edge));
        }
        let effects = effects_bytes(&t.effects)
            .map_err(|e| Divergence::new(r.seq, "effects", "encodable effects", e.to_string()))?;
        if effects != r.effects {
            let (expected, found) = where_they_differ(&effects, r.effects);
            return Err(Divergence::new(r.seq, "effects", expected, found));
        }
        let hash = t.next.state_hash(spec.history_hash());
        if hash != r.state_hash {
            return Err(Divergence::new(
                r.seq,
                "state hash",
                hash.to_hex(),
                r.state_hash.to_hex(),
            ));
        }
        if let Some(stored) = r.chain {
            let link = chain_link(spec.history_hash(), &chain, r.event_bytes, &hash);
            if link != stored {
                return Err(Divergence::new(
                    r.seq,
                    "chain link",
                    link.to_hex(),
                    stored.to_hex(),
                ));
            }
            chain = stored;
        }
        visit(&r, &t)?;
        state = t.next;
    }
    Ok(state)
}
