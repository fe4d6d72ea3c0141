//! What a fork inherits that its state at the fork point does not hold: the event its
//! ancestors began with (for a fork from step 0), and the view of global memory its ancestors
//! loaded after the fork point (for a fork taken before global memory was loaded, revision 5).
//!
//! **Global memory as of the fork point.** A run loads its global memory at its first step
//! boundary. A fork taken before that has no view in its state, so it must load one; loading
//! the memory as it is now would show it what its parent published after the fork point.
//! Instead it takes the view the line it branched from loaded next: the first `MemoryLoaded`
//! after the fork point in its parent's history, else (the parent never loaded after that
//! point) in the parent's parent's after the parent's own fork point, and so on. That view was
//! read before any of those runs published anything (a run publishes only after it loaded),
//! so none of their later writes is in it. When no ancestor loaded after the fork point, none
//! published after it either, and the fork loads the memory as it is now. The fork's
//! `MemoryLoaded` names the load it copied ([`LoadedAt`]), and `verify` checks it against it.

use super::codec::decode_event;
use super::read::{ancestry, record};
use super::{HistoryError, damaged};
use crate::machine::{EventBody, LoadedAt, RunId, Versioned};
use crate::store::Store;

/// Transitions read at a time while looking for a load (it comes at the first step boundary,
/// so the first window almost always holds it).
const WINDOW: u64 = 16;

/// A load of global memory an ancestor recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct AncestorLoad {
    /// Where: the run whose history holds the event, and its seq.
    pub at: LoadedAt,
    /// The entries it loaded.
    pub entries: std::collections::BTreeMap<String, Versioned>,
    /// Whether those came from a cassette (the ancestor was a replay).
    pub replayed: bool,
}

/// The first event of `run`'s history (across its ancestry), if it has begun.
pub fn first_event(store: &dyn Store, run: &RunId) -> Result<Option<EventBody>, HistoryError> {
    super::event_at(store, run, 1)
}

/// The view of global memory `name` fork `run` takes when it loads one (see the module doc):
/// the first load of `name` after the fork point in the line it branched from, or `None` when
/// `run` is not a fork or no ancestor loaded after its fork point.
pub fn ancestor_load(
    store: &dyn Store,
    run: &RunId,
    name: &str,
) -> Result<Option<AncestorLoad>, HistoryError> {
    let Some((mut current, mut at)) = record(store, run)?.parent else {
        return Ok(None);
    };
    for _ in 0..10_000 {
        let rec = record(store, &current)?;
        if let Some(found) = first_load_after(store, &current, at, rec.seq, name)? {
            return Ok(Some(found));
        }
        match rec.parent {
            Some((parent, fork_seq)) => {
                at = at.min(fork_seq);
                current = parent;
            }
            None => return Ok(None),
        }
    }
    Err(damaged(run, 0, "fork ancestry does not end"))
}

/// The first `MemoryLoaded` of `name` in `run`'s history (across its ancestry) with
/// `after < seq <= to`.
fn first_load_after(
    store: &dyn Store,
    run: &RunId,
    after: u64,
    to: u64,
    name: &str,
) -> Result<Option<AncestorLoad>, HistoryError> {
    for seg in ancestry(store, run, to)? {
        let mut lo = seg.from.max(after + 1);
        while lo <= seg.to {
            let hi = seg.to.min(lo + WINDOW - 1);
            for t in store.transitions(&seg.run, lo, hi)? {
                let event = decode_event(&seg.run, t.seq, &t.event)?;
                if let EventBody::MemoryLoaded {
                    name: loaded,
                    entries,
                    replayed,
                    ..
                } = event.body
                    && loaded == name
                {
                    return Ok(Some(AncestorLoad {
                        at: LoadedAt {
                            run: seg.run.clone(),
                            seq: t.seq,
                        },
                        entries,
                        replayed,
                    }));
                }
            }
            lo = hi + 1;
        }
    }
    Ok(None)
}

/// Whether `at` is a point of the line fork `run` branched from that lies after its fork point
/// (so a load there is one `run` may take as its view): `at.run` is an ancestor of `run`, and
/// `at.seq` is after the fork point as seen from that ancestor.
pub(crate) fn is_after_fork_point(
    store: &dyn Store,
    run: &RunId,
    at: &LoadedAt,
) -> Result<bool, HistoryError> {
    let Some((mut current, mut point)) = record(store, run)?.parent else {
        return Ok(false);
    };
    for _ in 0..10_000 {
        if current == at.run {
            return Ok(at.seq > point);
        }
        match record(store, &current)?.parent {
            Some((parent, fork_seq)) => {
                point = point.min(fork_seq);
                current = parent;
            }
            None => return Ok(false),
        }
    }
    Err(damaged(run, 0, "fork ancestry does not end"))
}
