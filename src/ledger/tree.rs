//! Delegation trees read back (revision 4 on): which child run served each `RunChild` effect of
//! a run's history, the whole tree below a run in a defined order, and where a finished child's
//! record ends (the [`ChildProof`] its parent's result names from revision 5).
//!
//! A child run's id derives from the effect that started it (`PARENT.SEQ.INDEX`), and its
//! stored spec names that effect (`delegated_by`, covered by its sealed head). A fork shares
//! its parent's history up to the fork point, so a `RunChild` effect in that shared prefix may
//! have been served by the parent's child (its result was already in the history, or a
//! `--tape` fork was served the recorded result) or by a child the fork started itself
//! (`FORK.SEQ.INDEX`, when the fork performed the effect again). [`children`] resolves that
//! the same way for every caller: cassette export, `receipts export --recursive` and
//! `diff --recursive`.

use std::collections::BTreeMap;

use super::pairing::pairs;
use super::read::{record, transitions};
use super::replay::Divergence;
use super::{HistoryError, damaged};
use crate::machine::{ChildProof, ChildReceipt, Digest, Effect, EffectRef, EventBody, RunId};
use crate::store::Store;

/// Trees deeper than this are refused as damaged (the machine caps depth at 16).
const MAX_TREE_DEPTH: usize = 64;

/// One child of a run: where the effect that asked for it sits in the run's history, and the
/// run that served it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeChild {
    /// The `RunChild` effect's position in the parent's history.
    pub at: EffectRef,
    /// The child run.
    pub run: RunId,
}

/// One run of a tree below (and including) its root, in tree order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeRun {
    /// The run.
    pub run: RunId,
    /// Its place below the root: the `SEQ.INDEX` of each delegating effect from the root down,
    /// joined by dots (`3.0`, `3.0.5.1`); empty for the root. The same under new run ids (a
    /// replay, a fork), so it is what a cassette keys a child's section by.
    pub path: String,
    /// How many levels below the root (0 for the root).
    pub depth: usize,
}

/// The child runs serving `run`'s `RunChild` effects, in the order the effects were emitted
/// (by seq, then index), across its fork ancestry. An answered effect: the child of the run
/// whose event answered it, else (a fork's tape served the recorded result) the child of the
/// run that emitted it. An effect not answered yet: the child `run` started for it (a fork
/// performs what it inherited outstanding under its own id, never with its parent's child).
/// An effect no existing run serves (never started, or its result replaced by a fork's edit)
/// is left out.
pub fn children(store: &dyn Store, run: &RunId) -> Result<Vec<TreeChild>, HistoryError> {
    let rec = record(store, run)?;
    let rows = transitions(store, run, 1, rec.seq)?;
    // Position → (the run that emitted the effect, the run whose answer came, if any).
    let mut asked: BTreeMap<EffectRef, (RunId, Option<RunId>)> = BTreeMap::new();
    for step in pairs(run, &rows) {
        let step = step?;
        for e in &step.effects {
            if let Effect::RunChild { id, .. } = e {
                let at = EffectRef {
                    seq: id.seq,
                    index: id.index,
                };
                asked.insert(at, (id.run.clone(), None));
            }
        }
        if let EventBody::ChildFinished { effect, .. } = &step.event.body {
            let at = EffectRef {
                seq: effect.seq,
                index: effect.index,
            };
            if let Some(entry) = asked.get_mut(&at) {
                entry.1 = Some(effect.run.clone());
            }
        }
    }
    let mut out = Vec::new();
    for (at, (emitter, answerer)) in asked {
        let candidates: Vec<RunId> = match answerer {
            Some(a) => vec![a, emitter],
            None => vec![run.clone()],
        };
        let candidates = candidates.iter().map(|r| at.in_run(r).child_run_id());
        let mut found = None;
        for c in candidates {
            if store.run(&c)?.is_some() {
                found = Some(c);
                break;
            }
        }
        if let Some(child) = found {
            out.push(TreeChild { at, run: child });
        }
    }
    Ok(out)
}

/// `root` and every run below it, parents before children, each run's children in effect
/// order (depth first), with their paths. Fails on a tree deeper than any the machine allows
/// or one that comes back to a run already listed (a damaged database).
pub fn tree(store: &dyn Store, root: &RunId) -> Result<Vec<TreeRun>, HistoryError> {
    let mut out = Vec::new();
    let mut stack = vec![TreeRun {
        run: root.clone(),
        path: String::new(),
        depth: 0,
    }];
    while let Some(node) = stack.pop() {
        if node.depth > MAX_TREE_DEPTH || out.iter().any(|r: &TreeRun| r.run == node.run) {
            return Err(damaged(
                root,
                0,
                format!(
                    "the delegation tree below it loops or is too deep at {}",
                    node.run
                ),
            ));
        }
        let kids = children(store, &node.run)?;
        for k in kids.into_iter().rev() {
            let here = format!("{}.{}", k.at.seq, k.at.index);
            let path = if node.path.is_empty() {
                here
            } else {
                format!("{}.{here}", node.path)
            };
            stack.push(TreeRun {
                run: k.run,
                path,
                depth: node.depth + 1,
            });
        }
        out.push(node);
    }
    Ok(out)
}

/// Where `child`'s record ends, as its sealed head says: its last step and chain link, and its
/// last receipt. What a parent's `ChildFinished` names from revision 5; read it once the child
/// has ended (its head is final then).
pub fn child_proof(store: &dyn Store, child: &RunId) -> Result<ChildProof, HistoryError> {
    let stored = store.head(child)?.ok_or_else(|| HistoryError::Tampered {
        run: child.to_string(),
        detail: "it has no sealed head (runs.head is empty)".into(),
    })?;
    let (head, _) = super::audit::open_head(&stored).map_err(|d| HistoryError::Tampered {
        run: child.to_string(),
        detail: d.to_string(),
    })?;
    let chain = Digest::from_hex(&head.chain)
        .ok_or_else(|| damaged(child, head.seq, "the head's chain link is not a digest"))?;
    let anchor = super::receipts::delegation_anchor(store, child)?.map(|t| t.seal.link());
    Ok(ChildProof {
        run: child.clone(),
        seq: head.seq,
        chain,
        anchor,
        receipt: head.receipt_tip.map(|t| ChildReceipt {
            seq: t.seq,
            link: t.link,
        }),
    })
}

/// Whether what `parent`'s history says of the child run at effect position `at` holds: when
/// the `ChildFinished` answering that effect names where the child's record ends (revision 5),
/// `child`'s sealed head must end there. `Some(what differs)` when it does not; `None` when it
/// holds or nothing is named (the child has not finished, or the parent is of revision 4).
pub fn check_proof(
    store: &dyn Store,
    parent: &RunId,
    at: EffectRef,
    child: &RunId,
) -> Result<Option<String>, HistoryError> {
    let rec = record(store, parent)?;
    let rows = transitions(store, parent, at.seq + 1, rec.seq)?;
    for t in &rows {
        let event = super::codec::decode_event(parent, t.seq, &t.event)?;
        let EventBody::ChildFinished { effect, proof, .. } = &event.body else {
            continue;
        };
        if (effect.seq, effect.index) != (at.seq, at.index) {
            continue;
        }
        let Some(named) = proof else {
            return Ok(None);
        };
        if &named.run != child {
            return Ok(None);
        }
        let found = child_proof(store, child)?;
        if &found == named {
            return Ok(None);
        }
        let show = |p: &ChildProof| {
            format!(
                "step {} (chain {}), last receipt {}",
                p.seq,
                &p.chain.to_hex()[..16],
                p.receipt
                    .as_ref()
                    .map_or("none".to_owned(), |r| format!("at seq {}", r.seq))
            )
        };
        return Ok(Some(format!(
            "its parent's step {} says its record ends at {}, but its sealed head ends at {}",
            t.seq,
            show(named),
            show(&found)
        )));
    }
    Ok(None)
}

/// A child run `run`'s history commits to (revision 5): the `ChildFinished` at `seq` names it
/// and where its record ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedChild {
    /// The seq of the parent's `ChildFinished` (in `run`'s history, across its fork ancestry).
    pub seq: u64,
    /// What it names: the child's id and where its sealed head ends.
    pub proof: ChildProof,
}

/// Every child run `run`'s history names with where its record ends: the proofs its
/// `ChildFinished` events carry from revision 5 on, in history order (a fork's shared prefix
/// included, naming its parent's children). A child whose result a revision-4 parent took, or
/// that has not finished, is not named: nothing in the parent commits to it.
pub fn named_children(store: &dyn Store, run: &RunId) -> Result<Vec<NamedChild>, HistoryError> {
    let rec = record(store, run)?;
    let mut out = Vec::new();
    for t in transitions(store, run, 1, rec.seq)? {
        let event = super::codec::decode_event(run, t.seq, &t.event)?;
        if let EventBody::ChildFinished {
            proof: Some(proof), ..
        } = event.body
        {
            out.push(NamedChild { seq: t.seq, proof });
        }
    }
    Ok(out)
}

/// Whether the child `named` names is stored and ends where its parent's history says:
/// `Some(the divergence)` at the parent's step that names it, naming the child, when it is
/// missing (removed from the database) or its sealed head ends elsewhere (replaced, cut
/// short, run on); `None` when it holds. What `verify --recursive` checks for every run of the
/// tree, so a child cannot be removed or swapped without its parent failing.
pub fn check_named(
    store: &dyn Store,
    named: &NamedChild,
) -> Result<Option<Divergence>, HistoryError> {
    let p = &named.proof;
    let what = format!("child run {}", p.run);
    let receipt = |r: &Option<ChildReceipt>| {
        r.as_ref()
            .map_or("none".to_owned(), |r| format!("at seq {}", r.seq))
    };
    let sealed = format!(
        "a run whose sealed head ends at its step {} (chain {}), last receipt {}",
        p.seq,
        &p.chain.to_hex()[..16],
        receipt(&p.receipt)
    );
    if store.run(&p.run)?.is_none() {
        let records = store.tombstones()?;
        let tombstone = records
            .iter()
            .find(|r| r.run == p.run)
            .and_then(|r| r.decode());
        if let Some(t) = tombstone {
            // Pruned (`runtape prune`): it holds when the tombstones' chain does and the
            // tombstone ends where the parent's history says.
            let fault = crate::store::retention::chain_fault(&records);
            if fault.is_none() && &t.proof == p {
                return Ok(None);
            }
            return Ok(Some(Divergence::column(
                named.seq,
                "pruned_runs.body",
                &what,
                sealed,
                fault.unwrap_or_else(|| {
                    format!(
                        "a tombstone ending at its step {} (chain {})",
                        t.proof.seq,
                        &t.proof.chain.to_hex()[..16]
                    )
                }),
            )));
        }
        return Ok(Some(Divergence::column(
            named.seq,
            "runs.id",
            &what,
            sealed,
            "none stored (removed from the database)",
        )));
    }
    let found = match child_proof(store, &p.run) {
        Ok(found) => found,
        Err(e) => {
            return Ok(Some(Divergence::column(
                named.seq,
                "runs.head",
                &what,
                sealed,
                format!("a head that cannot be read: {e}"),
            )));
        }
    };
    if &found == p {
        return Ok(None);
    }
    Ok(Some(Divergence::column(
        named.seq,
        "runs.head",
        &what,
        sealed,
        format!(
            "one ending at its step {} (chain {}), last receipt {} (replaced or changed since)",
            found.seq,
            &found.chain.to_hex()[..16],
            receipt(&found.receipt)
        ),
    )))
}

/// The link in a stored spec naming the parent's effect that started the run.
#[derive(serde::Deserialize)]
struct DelegatedBy {
    #[serde(default)]
    delegated_by: Option<crate::machine::EffectId>,
}

/// `run`'s path in its delegation tree ([`TreeRun::path`]): empty for a run nobody delegated,
/// else the `SEQ.INDEX` of each delegating effect from the top run down (`3.0.5.1`), read from
/// the `delegated_by` links of the stored specs. What a child's model requests carry, so a
/// cassette records and replays them in the child's section.
pub fn path_of(store: &dyn Store, run: &RunId) -> Result<String, HistoryError> {
    let mut parts = Vec::new();
    let mut current = run.clone();
    loop {
        let rec = record(store, &current)?;
        let link = serde_json::from_str::<DelegatedBy>(&rec.spec)
            .ok()
            .and_then(|l| l.delegated_by);
        let Some(effect) = link else { break };
        if parts.len() > MAX_TREE_DEPTH {
            return Err(damaged(run, 0, "its delegation links loop or go too deep"));
        }
        parts.push(format!("{}.{}", effect.seq, effect.index));
        current = effect.run;
    }
    parts.reverse();
    Ok(parts.join("."))
}
