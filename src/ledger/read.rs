//! Reading a run's record back: its row, its history across fork ancestry, its state at any
//! seq (the nearest snapshot, then a fold of the events after it through [`step`]), and its
//! conversations (walked from their Merkle heads through the blob store, each node checked
//! against its digest).
//!
//! A fork's history up to its fork seq is its parent's, read in place (never copied).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::codec::{decode_effects, decode_event};
use super::{HistoryError, damaged};
use crate::format::stored::node_parts;
use crate::machine::{
    AgentId, ConversationRef, Digest, Effect, EffectRef, EventBody, Message, RunId, RunSpec,
    RunState, step,
};
use crate::store::{RunRecord, Store, TransitionRecord};

/// One stretch of a run's history stored under one run id: seqs `from..=to` of `run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Whose rows.
    pub run: RunId,
    /// First seq.
    pub from: u64,
    /// Last seq.
    pub to: u64,
}

/// The run's row, or [`HistoryError::UnknownRun`].
pub fn record(store: &dyn Store, run: &RunId) -> Result<RunRecord, HistoryError> {
    store
        .run(run)?
        .ok_or_else(|| HistoryError::UnknownRun(run.to_string()))
}

/// The run's row without its setup ([`Store::run_without_setup`]), or
/// [`HistoryError::UnknownRun`]: for walking a run's ancestry or history, where the setup (how
/// to rebuild its providers) is not used and can be large. Use [`record`] to check the row
/// against its sealed head or to build from the setup.
pub fn row(store: &dyn Store, run: &RunId) -> Result<RunRecord, HistoryError> {
    store
        .run_without_setup(run)?
        .ok_or_else(|| HistoryError::UnknownRun(run.to_string()))
}

/// The run's spec, validated as stored (see [`RunSpec`]'s `Deserialize`).
pub fn spec_of(record: &RunRecord) -> Result<RunSpec, HistoryError> {
    serde_json::from_str(&record.spec)
        .map_err(|e| damaged(&record.id, 0, format!("stored spec does not load: {e}")))
}

/// The segments making up `run`'s history through `to` (oldest ancestor first), `to` clamped
/// to the run's latest seq.
pub fn ancestry(store: &dyn Store, run: &RunId, to: u64) -> Result<Vec<Segment>, HistoryError> {
    let rec = row(store, run)?;
    let to = to.min(rec.seq);
    ancestry_of(store, rec, to)
}

/// [`ancestry`] through `to` as given, not clamped to the run's row: for `verify` and the
/// continuation check, which read as far as the sealed head says the history goes.
pub fn ancestry_through(
    store: &dyn Store,
    run: &RunId,
    to: u64,
) -> Result<Vec<Segment>, HistoryError> {
    ancestry_of(store, row(store, run)?, to)
}

/// [`ancestry_through`] from `run`'s row already read (`rec`): only its ancestors' rows are
/// read (without their setups), one per fork.
pub(crate) fn ancestry_of(
    store: &dyn Store,
    rec: RunRecord,
    to: u64,
) -> Result<Vec<Segment>, HistoryError> {
    let run = rec.id.clone();
    let run = &run;
    let mut segments = Vec::new();
    let mut current = rec;
    let mut hi = to;
    loop {
        match current.parent.clone() {
            Some((parent, fork_seq)) => {
                if hi > fork_seq {
                    segments.push(Segment {
                        run: current.id.clone(),
                        from: fork_seq + 1,
                        to: hi,
                    });
                }
                hi = hi.min(fork_seq);
                current = row(store, &parent)?;
            }
            None => {
                if hi >= 1 {
                    segments.push(Segment {
                        run: current.id.clone(),
                        from: 1,
                        to: hi,
                    });
                }
                break;
            }
        }
        if segments.len() > 10_000 {
            return Err(damaged(run, to, "fork ancestry does not end"));
        }
    }
    segments.reverse();
    Ok(segments)
}

/// The event of `run`'s transition `seq` (across its ancestry), decoded, or `None` when there
/// is no such transition: one read, no state rebuilt. For a reader that needs what happened at
/// a step, not the state after it ([`crate::history::show`] gives both).
pub fn event_at(
    store: &dyn Store,
    run: &RunId,
    seq: u64,
) -> Result<Option<EventBody>, HistoryError> {
    let Some(t) = transitions(store, run, seq, seq)?.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(decode_event(run, t.seq, &t.event)?.body))
}

/// Every transition of `run` with `from <= seq <= to`, across its ancestry, in order.
pub fn transitions(
    store: &dyn Store,
    run: &RunId,
    from: u64,
    to: u64,
) -> Result<Vec<TransitionRecord>, HistoryError> {
    rows_in(store, &ancestry(store, run, to)?, from, to)
}

/// The transitions with `from <= seq <= to` stored in `segments` (a run's ancestry), in order:
/// one read per segment.
fn rows_in(
    store: &dyn Store,
    segments: &[Segment],
    from: u64,
    to: u64,
) -> Result<Vec<TransitionRecord>, HistoryError> {
    let mut out = Vec::new();
    for seg in segments {
        let (lo, hi) = (seg.from.max(from), seg.to.min(to));
        if lo > hi {
            continue;
        }
        out.extend(store.transitions(&seg.run, lo, hi)?);
    }
    Ok(out)
}

/// The time of transition `seq` of `run` (across its ancestry); the default time at seq 0.
pub fn time_at(
    store: &dyn Store,
    run: &RunId,
    seq: u64,
) -> Result<crate::machine::Hlc, HistoryError> {
    if seq == 0 {
        return Ok(crate::machine::Hlc::default());
    }
    Ok(transitions(store, run, seq, seq)?
        .first()
        .map_or(crate::machine::Hlc::default(), |t| t.at))
}

/// A state rebuilt from storage, with the chain link at its seq.
#[derive(Clone, Debug)]
pub struct Rebuilt {
    /// The state.
    pub state: RunState,
    /// Chain link of its transition ([`Digest::ZERO`] at seq 0).
    pub chain: Digest,
}

/// The state of `run` right after transition `seq` (0 = before `Start`): the nearest snapshot
/// at or before it, then the events after it folded through `step`. Every folded state's hash
/// is checked against the stored one.
pub fn state_at(
    store: &dyn Store,
    run: &RunId,
    spec: &RunSpec,
    seq: u64,
) -> Result<Rebuilt, HistoryError> {
    let rec = row(store, run)?;
    if seq > rec.seq {
        return Err(HistoryError::SeqOutOfRange {
            run: run.to_string(),
            seq,
            latest: rec.seq,
        });
    }
    if seq == 0 {
        return Ok(Rebuilt {
            state: RunState::Created,
            chain: Digest::ZERO,
        });
    }
    // The run's row is read once: its ancestry and the rows after the snapshot come from it.
    let segments = ancestry_of(store, rec, seq)?;
    let mut base: Option<(u64, RunState)> = None;
    for seg in segments.iter().rev() {
        if let Some((s, bytes)) = store.snapshot_at_or_before(&seg.run, seg.to)?
            && s >= seg.from
        {
            let state: RunState = serde_json::from_slice(&bytes)
                .map_err(|e| damaged(run, s, format!("snapshot does not decode: {e}")))?;
            base = Some((s, state));
            break;
        }
    }
    let (from, mut state) = base.unwrap_or((0, RunState::Created));
    let rows = rows_in(store, &segments, from, seq)?;
    let mut chain = Digest::ZERO;
    let mut expected = from.max(1);
    for t in &rows {
        if t.seq != expected {
            return Err(damaged(
                run,
                expected,
                format!("transition {expected} is missing from the history"),
            ));
        }
        expected += 1;
        if from > 0 && t.seq == from {
            // The snapshot's own transition: only its hash and chain link are needed.
            if t.state_hash != state.state_hash(spec.history_hash()) {
                return Err(damaged(
                    run,
                    t.seq,
                    "snapshot does not match the stored state hash",
                ));
            }
            chain = t.chain;
            continue;
        }
        let event = decode_event(run, t.seq, &t.event)?;
        let next = step(&state, &event, spec)
            .map_err(|e| damaged(run, t.seq, format!("replaying the event failed: {e}")))?;
        let replayed = next.next.state_hash(spec.history_hash());
        if replayed != t.state_hash {
            return Err(damaged(
                run,
                t.seq,
                format!(
                    "state hash mismatch: stored {}, replay gives {replayed}",
                    t.state_hash
                ),
            ));
        }
        state = next.next;
        chain = t.chain;
    }
    if state.seq() != seq {
        return Err(damaged(
            run,
            expected,
            format!("transition {expected} is missing from the history"),
        ));
    }
    Ok(Rebuilt { state, chain })
}

/// Reads `agent`'s conversation (`len` messages ending at `head`) from the blob store in one
/// walk of its chain ([`Store::conversation_nodes`]: a fixed number of queries whatever its
/// length), checking every node against its digest.
pub fn conversation(
    store: &dyn Store,
    agent: &AgentId,
    conv: &ConversationRef,
) -> Result<Vec<Message>, HistoryError> {
    let run = RunId::new(format!("(conversation of {agent})"));
    let mut out = Vec::with_capacity(conv.len as usize);
    if conv.head == Digest::ZERO {
        return match conv.len {
            0 => Ok(out),
            _ => Err(damaged(
                &run,
                0,
                "conversation is shorter than its state says",
            )),
        };
    }
    let nodes = store.conversation_nodes(&conv.head, u64::from(conv.len))?;
    let mut nodes = nodes.iter();
    let mut head = conv.head;
    while head != Digest::ZERO {
        if out.len() >= conv.len as usize {
            return Err(damaged(
                &run,
                0,
                "conversation is longer than its state says",
            ));
        }
        let bytes = match nodes.next() {
            Some((digest, bytes)) if *digest == head => bytes,
            _ => return Err(damaged(&run, 0, format!("message blob {head} is missing"))),
        };
        let (prev, msg) = node_parts(bytes)
            .ok_or_else(|| damaged(&run, 0, format!("message blob {head} is truncated")))?;
        if ConversationRef::chain(&prev, msg) != head {
            return Err(damaged(
                &run,
                0,
                format!("message blob {head} does not match its digest"),
            ));
        }
        let message: Message = serde_json::from_slice(msg)
            .map_err(|e| damaged(&run, 0, format!("message blob {head}: {e}")))?;
        out.push(message);
        head = prev;
    }
    if out.len() != conv.len as usize {
        return Err(damaged(
            &run,
            0,
            "conversation is shorter than its state says",
        ));
    }
    out.reverse();
    Ok(out)
}

/// Every agent's conversation in `state`.
pub fn conversations(
    store: &dyn Store,
    state: &RunState,
) -> Result<BTreeMap<AgentId, Arc<Vec<Message>>>, HistoryError> {
    let mut out = BTreeMap::new();
    if let Some(run) = state.data() {
        for (agent, a) in &run.agents {
            out.insert(
                agent.clone(),
                Arc::new(conversation(store, agent, &a.conversation)?),
            );
        }
    }
    Ok(out)
}

/// The effect emitted at `at` in `run`'s history (looked up in the transition that emitted
/// it), as stored: for a fork, an effect its parent emitted carries the parent's id.
pub fn effect_at(store: &dyn Store, run: &RunId, at: EffectRef) -> Result<Effect, HistoryError> {
    let rows = transitions(store, run, at.seq, at.seq)?;
    let t = rows.first().ok_or_else(|| {
        damaged(
            run,
            at.seq,
            "the transition that emitted an outstanding effect is missing",
        )
    })?;
    decode_effects(run, t.seq, &t.effects)?
        .into_iter()
        .nth(at.index as usize)
        .ok_or_else(|| {
            damaged(
                run,
                at.seq,
                format!("effect {} of the transition is missing", at.index),
            )
        })
}

/// The effects `state` waits on, as `run` performs them: an effect a fork inherited from its
/// parent is given the fork's id (and so its own idempotency key).
pub fn outstanding_effects(
    store: &dyn Store,
    run: &RunId,
    state: &RunState,
) -> Result<Vec<Effect>, HistoryError> {
    state
        .outstanding()
        .into_iter()
        .map(|at| {
            Ok(super::pairing::as_performed_by(
                run,
                effect_at(store, run, at)?,
            ))
        })
        .collect()
}
