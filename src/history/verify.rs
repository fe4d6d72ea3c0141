//! `verify`: re-fold every recorded event through the current [`step`] and check what was
//! stored against what the machine does now — the edge, the effects, the state hash, the
//! hash chain — reporting the first seq where they part, like a workflow replay test.

use serde::Serialize;

use super::{HistoryError, chain_link, event_of, record, spec_of, transitions};
use crate::machine::{Digest, Event, RunId, RunSpec, RunState, step};
use crate::store::{Store, TransitionRecord};

/// What `verify` checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The run.
    pub run: RunId,
    /// Transitions replayed.
    pub transitions: u64,
    /// Hash of the final state.
    pub final_state_hash: String,
    /// The receipt check.
    pub receipts: super::ReceiptSummary,
}

/// The first place a history and the current machine disagree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("seq {seq}: {what}: expected {expected}, found {found}")]
pub struct Divergence {
    /// The first bad seq.
    pub seq: u64,
    /// What disagrees (`state hash`, `effects`, `edge`, `chain link`, `missing transition`, ...).
    pub what: String,
    /// What the replay (or the sequence) expected.
    pub expected: String,
    /// What was stored.
    pub found: String,
}

impl Divergence {
    fn new(seq: u64, what: &str, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Divergence {
            seq,
            what: what.into(),
            expected: expected.into(),
            found: found.into(),
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
    let mut state = RunState::Created;
    let mut chain = Digest::ZERO;
    for (expected_seq, r) in (1..).zip(recorded) {
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
            return Err(Divergence::new(r.seq, "edge", t.edge, r.edge));
        }
        let effects = if t.effects.is_empty() {
            Vec::new()
        } else {
            serde_json::to_vec(&t.effects).map_err(|e| {
                Divergence::new(r.seq, "effects", "encodable effects", e.to_string())
            })?
        };
        if effects != r.effects {
            return Err(Divergence::new(
                r.seq,
                "effects",
                String::from_utf8_lossy(&effects),
                String::from_utf8_lossy(r.effects),
            ));
        }
        let hash = t.next.state_hash();
        if hash != r.state_hash {
            return Err(Divergence::new(
                r.seq,
                "state hash",
                hash.to_hex(),
                r.state_hash.to_hex(),
            ));
        }
        if let Some(stored) = r.chain {
            let link = chain_link(&chain, r.event_bytes, &hash);
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

/// Verifies a stored run from its first transition (across fork ancestry) to its latest:
/// every transition replays to what was stored, and every receipt matches its transition
/// (checked against `key` when given, else against the key the receipts name).
pub fn verify(
    store: &dyn Store,
    run: &RunId,
    key: Option<&crate::receipt::VerifyingKey>,
) -> Result<Result<VerifyReport, Divergence>, HistoryError> {
    let rec = record(store, run)?;
    let spec: RunSpec = spec_of(&rec)?;
    let rows: Vec<TransitionRecord> = transitions(store, run, 1, rec.seq)?;
    let mut decoded = Vec::with_capacity(rows.len());
    for t in &rows {
        match event_of(run, t) {
            Ok(e) => decoded.push(e),
            Err(_) => {
                return Ok(Err(Divergence::new(
                    t.seq,
                    "event",
                    "a decodable event",
                    String::from_utf8_lossy(&t.event),
                )));
            }
        }
    }
    let recorded = rows.iter().zip(decoded).map(|(t, event)| Recorded {
        seq: t.seq,
        event_bytes: &t.event,
        event,
        edge: &t.edge,
        effects: &t.effects,
        state_hash: t.state_hash,
        chain: Some(t.chain),
    });
    let mut receipts = super::receipts::ChainBuilder::default();
    let mut failure: Option<HistoryError> = None;
    let mut visit = |r: &Recorded<'_>, t: &crate::machine::Transition| -> Result<(), Divergence> {
        let seal = rows
            .get(usize::try_from(r.seq).unwrap_or(usize::MAX).wrapping_sub(1))
            .and_then(|row| row.seal.as_deref());
        if let Err(e) = receipts.visit(run, r.seq, &r.event, r.event_bytes, seal, &t.effects) {
            failure = Some(e);
        }
        Ok(())
    };
    let state = match replay_with(&spec, recorded, &mut visit) {
        Ok(state) => state,
        Err(d) => return Ok(Err(d)),
    };
    if let Some(e) = failure {
        return Err(e);
    }
    if state.seq() != rec.seq {
        let next = state.seq() + 1;
        return Ok(Err(Divergence::new(
            next,
            "missing transition",
            format!("seq {next}"),
            "nothing",
        )));
    }
    let receipts = match super::receipts::check_chain(receipts.finish(), key) {
        Ok(r) => r,
        Err(d) => return Ok(Err(d)),
    };
    Ok(Ok(VerifyReport {
        run: run.clone(),
        transitions: rec.seq,
        final_state_hash: state.state_hash().to_hex(),
        receipts,
    }))
}
