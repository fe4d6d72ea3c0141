//! Checking part of a history: where such a check starts, how its start is tied to the sealed
//! head, and how the steps after its end are. `verify` checks a run from step 1 to where its
//! head says the history ends; a command that acts on a run checks only what it acts on
//! ([`super::continuable`]), through these pieces:
//!
//! - **The base**: a stored snapshot at seq `A` (or nothing, `A = 0`). Its bytes must be the
//!   canonical bytes of the state they decode to, whose hash must be the state hash stored at
//!   `A`, and the chain link stored at `A` must be `H(link at A-1 || event at A || that
//!   hash)`. The links after `A`, checked by the fold, then tie the snapshot to the head's
//!   sealed chain link: changing it, or anything the chain covers after it, breaks a link.
//! - **The fold** from the base (`replay_from`), with every check `verify` makes of a step.
//! - **The binding** of a point before the end ([`bind_to_head`]): for a fork at `F`, the links
//!   `F+1..=end` recomputed from the stored event bytes and state hashes (no fold), ending at
//!   the head's link, so the steps a fork shares are the ones the parent's head sealed.
//!
//! Where the base sits: [`base_at_or_before`] finds the newest snapshot at or before a seq.

use super::HistoryError;
use super::codec::{chain_link, decode_event};
use super::read::Segment;
use super::replay::Divergence;
use crate::machine::{Digest, HistoryHash, RunId, RunState};
use crate::receipt::RunHead;
use crate::store::{Store, TransitionRecord};

/// The newest seq `<= at` with a stored snapshot in `segments` (a run's ancestry), or 0 when
/// there is none (a check then starts from `Created`).
pub(crate) fn base_at_or_before(
    store: &dyn Store,
    segments: &[Segment],
    at: u64,
) -> Result<u64, HistoryError> {
    for seg in segments.iter().rev() {
        if seg.from > at {
            continue;
        }
        if let Some((seq, _)) = store.snapshot_at_or_before(&seg.run, seg.to.min(at))?
            && seq >= seg.from
        {
            return Ok(seq);
        }
    }
    Ok(0)
}

/// The segment of `segments` holding `seq`.
fn segment_of(segments: &[Segment], seq: u64) -> Option<&Segment> {
    segments.iter().find(|s| s.from <= seq && seq <= s.to)
}

/// The stored transition `seq` of a history whose ancestry is `segments`.
pub(crate) fn row_at(
    store: &dyn Store,
    segments: &[Segment],
    seq: u64,
) -> Result<Option<TransitionRecord>, HistoryError> {
    let Some(seg) = segment_of(segments, seq) else {
        return Ok(None);
    };
    Ok(store.transitions(&seg.run, seq, seq)?.into_iter().next())
}

/// A check's starting point, tied to the chain: the state at a seq and the link stored there.
pub(crate) struct Base {
    /// The state there.
    pub(crate) state: RunState,
    /// The chain link of its transition ([`Digest::ZERO`] at 0).
    pub(crate) chain: Digest,
}

/// The base at `seq` (a seq [`base_at_or_before`] found a snapshot at, or 0), checked: the
/// snapshot's bytes are canonical and hash to the state hash stored at `seq`, and that
/// transition's row is what its chain link covers (its event, its time, its run). `row` is
/// the transition at `seq`, already read.
pub(crate) fn open_base(
    store: &dyn Store,
    run: &RunId,
    segments: &[Segment],
    hash: HistoryHash,
    seq: u64,
    row: Option<&TransitionRecord>,
) -> Result<Result<Base, Divergence>, HistoryError> {
    if seq == 0 {
        return Ok(Ok(Base {
            state: RunState::Created,
            chain: Digest::ZERO,
        }));
    }
    let Some(row) = row.filter(|r| r.seq == seq) else {
        return Ok(Err(missing(seq)));
    };
    let Some(seg) = segment_of(segments, seq) else {
        return Ok(Err(missing(seq)));
    };
    let bytes = store
        .snapshots(&seg.run, seq, seq)?
        .into_iter()
        .next()
        .map(|(_, b)| b);
    let snapshot = |found: &str| {
        Divergence::column(
            seq,
            "snapshots.state",
            "snapshot",
            "the state folded to this seq",
            found,
        )
    };
    let Some(bytes) = bytes else {
        return Ok(Err(snapshot("none")));
    };
    let Ok(state) = serde_json::from_slice::<RunState>(&bytes) else {
        return Ok(Err(snapshot("bytes that do not decode")));
    };
    if state.canonical_bytes() != bytes || state.seq() != seq {
        return Ok(Err(snapshot("other bytes")));
    }
    let state_hash = state.state_hash(hash);
    if state_hash != row.state_hash {
        return Ok(Err(Divergence::new(
            seq,
            "state hash",
            state_hash.to_hex(),
            row.state_hash.to_hex(),
        )));
    }
    match decode_event(run, seq, &row.event) {
        Ok(event) if event.run != seg.run => {
            return Ok(Err(Divergence::column(
                seq,
                "transitions.event",
                "the event's run",
                seg.run.as_str(),
                event.run.as_str(),
            )));
        }
        Ok(event) if event.at != row.at => {
            return Ok(Err(Divergence::column(
                seq,
                "transitions.at",
                "time",
                event.at.0.to_string(),
                row.at.0.to_string(),
            )));
        }
        Ok(_) => {}
        Err(_) => {
            return Ok(Err(Divergence::column(
                seq,
                "transitions.event",
                "event",
                "a decodable event",
                String::from_utf8_lossy(&row.event),
            )));
        }
    }
    let previous = match seq {
        1 => Digest::ZERO,
        _ => match row_at(store, segments, seq - 1)? {
            Some(p) => p.chain,
            None => return Ok(Err(missing(seq - 1))),
        },
    };
    let link = chain_link(hash, &previous, &row.event, &row.state_hash);
    if link != row.chain {
        return Ok(Err(Divergence::new(
            seq,
            "chain link",
            link.to_hex(),
            row.chain.to_hex(),
        )));
    }
    Ok(Ok(Base {
        state,
        chain: row.chain,
    }))
}

/// Ties the link at `from` (the end of a checked stretch) to the head's sealed link through
/// every stored step after it: each link recomputed from the step's stored event bytes and
/// state hash. Reads the rows `from+1..=head.seq` (their bytes are hashed, not folded), and
/// hands each, once its link holds, to `after` (which decodes what it needs of them).
pub(crate) fn bind_to_head(
    store: &dyn Store,
    segments: &[Segment],
    hash: HistoryHash,
    from: u64,
    mut link: Digest,
    head: &RunHead,
    after: &mut dyn FnMut(&TransitionRecord) -> Result<(), Divergence>,
) -> Result<Result<(), Divergence>, HistoryError> {
    let mut expected = from + 1;
    for seg in segments {
        let lo = seg.from.max(expected);
        if lo > seg.to {
            continue;
        }
        for t in store.transitions(&seg.run, lo, seg.to)? {
            if t.seq != expected {
                return Ok(Err(missing_before_end(expected, head.seq)));
            }
            let next = chain_link(hash, &link, &t.event, &t.state_hash);
            if next != t.chain {
                return Ok(Err(Divergence::new(
                    t.seq,
                    "chain link",
                    next.to_hex(),
                    t.chain.to_hex(),
                )));
            }
            if let Err(d) = after(&t) {
                return Ok(Err(d));
            }
            link = t.chain;
            expected += 1;
        }
    }
    if expected != head.seq + 1 {
        return Ok(Err(missing_before_end(expected, head.seq)));
    }
    if link.to_hex() != head.chain {
        return Ok(Err(Divergence::column(
            head.seq,
            "runs.head",
            "chain link where the history ends",
            link.to_hex(),
            &head.chain,
        )));
    }
    Ok(Ok(()))
}

fn missing(seq: u64) -> Divergence {
    Divergence::new(seq, "missing transition", format!("seq {seq}"), "nothing")
}

/// A step missing before the sealed end, as `verify` names one.
pub(crate) fn missing_before_end(seq: u64, end: u64) -> Divergence {
    Divergence::new(
        seq,
        "missing transition",
        format!("seq {seq} (the sealed head ends at seq {end})"),
        "nothing",
    )
}
