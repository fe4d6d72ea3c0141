//! Delegation trees (revision 4): which run a child run belongs to, read from the link in its
//! stored spec (`delegated_by`, covered by its sealed head), the runs in tree order for `ls`,
//! a run's descendants for `verify --recursive`, and the child runs a run rests on that wait
//! for a person.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{OpsError, RunView};
use crate::machine::{Effect, EffectId, RunId, SlotStatus};
use crate::store::{RunRecord, Store};

/// Only the link of a stored spec.
#[derive(Deserialize)]
struct Link {
    #[serde(default)]
    delegated_by: Option<EffectId>,
}

/// The parent effect that started `r`, for a child run; `None` for any other run (or a spec
/// that does not parse, which `verify` reports on its own).
pub fn delegated_by(r: &RunRecord) -> Option<EffectId> {
    serde_json::from_str::<Link>(&r.spec).ok()?.delegated_by
}

/// A child run with the position of the effect that started it.
type Started<'a> = ((u64, u32), &'a RunView);

/// `runs` (newest first) in tree order: each run not started by another listed run, followed
/// by its children in the order their parent started them, each child one level deeper.
/// Returns each run with its depth.
pub fn in_tree_order(runs: &[RunView]) -> Vec<(&RunView, usize)> {
    let listed: BTreeMap<&RunId, &RunView> = runs.iter().map(|r| (&r.id, r)).collect();
    let mut children: BTreeMap<&RunId, Vec<Started<'_>>> = BTreeMap::new();
    let mut roots = Vec::new();
    for r in runs {
        match &r.delegated_by {
            Some(link) if link.run != r.id && listed.contains_key(&link.run) => {
                let parent = listed[&link.run];
                children
                    .entry(&parent.id)
                    .or_default()
                    .push(((link.seq, link.index), r));
            }
            _ => roots.push(r),
        }
    }
    for list in children.values_mut() {
        list.sort_by_key(|(at, _)| *at);
    }
    let mut out = Vec::with_capacity(runs.len());
    let mut stack: Vec<(&RunView, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((r, depth)) = stack.pop() {
        if out.len() >= runs.len() {
            break;
        }
        out.push((r, depth));
        if let Some(list) = children.get(&r.id) {
            stack.extend(list.iter().rev().map(|(_, c)| (*c, depth + 1)));
        }
    }
    out
}

/// Every descendant of `root` (children, their children, ...), parents before children,
/// each checked against its parent: the effect its link names must be a `RunChild` of the
/// parent that derives the child's id and gave it its goal.
pub fn descendants(store: &dyn Store, root: &RunId) -> Result<Vec<RunId>, OpsError> {
    let runs = store.runs()?;
    let mut out = Vec::new();
    let mut frontier = vec![root.clone()];
    while let Some(parent) = frontier.pop() {
        let mut found: Vec<(&RunRecord, EffectId)> = runs
            .iter()
            .filter_map(|r| delegated_by(r).map(|l| (r, l)))
            .filter(|(r, l)| l.run == parent && r.id != parent)
            .collect();
        found.sort_by_key(|(_, l)| (l.seq, l.index));
        for (child, link) in found {
            check_link(store, child, &link)?;
            out.push(child.id.clone());
            frontier.push(child.id.clone());
        }
    }
    Ok(out)
}

fn check_link(store: &dyn Store, child: &RunRecord, link: &EffectId) -> Result<(), OpsError> {
    let at = crate::machine::EffectRef {
        seq: link.seq,
        index: link.index,
    };
    let broken = |why: String| OpsError::BrokenLink {
        child: child.id.clone(),
        parent: link.run.clone(),
        why,
    };
    // A fork shares its parent's history up to the fork point: an effect there that the fork
    // performs (re-running the child under the fork's id) is read as the fork performs it.
    let emitted = crate::ledger::effect_at(store, &link.run, at);
    let inherited = matches!(&emitted, Ok(e) if e.id().run != link.run);
    let performed = emitted.map(|e| crate::ledger::pairing::as_performed_by(&link.run, e));
    match performed {
        Ok(Effect::RunChild { .. }) if inherited && !fork_performs(store, &link.run, at)? => {
            Err(broken(format!(
                "effect {}/{} was answered before the fork point, so the fork never started a child for it",
                link.seq, link.index
            )))
        }
        Ok(Effect::RunChild { id, task, .. }) => {
            if id.child_run_id() != child.id {
                return Err(broken(format!(
                    "effect {}/{} starts run {}, not this one",
                    link.seq,
                    link.index,
                    id.child_run_id()
                )));
            }
            if task != child.goal {
                return Err(broken("its goal is not the task its parent gave".into()));
            }
            match crate::ledger::check_proof(store, &link.run, at, &child.id) {
                Ok(None) => Ok(()),
                Ok(Some(why)) => Err(broken(why)),
                Err(e) => Err(broken(e.to_string())),
            }
        }
        Ok(_) => Err(broken(format!(
            "effect {}/{} of the parent does not start a child run",
            link.seq, link.index
        ))),
        Err(e) => Err(broken(e.to_string())),
    }
}

/// Whether the fork `run` performs the effect at `at` it inherited from its parent: no event
/// up to the fork point answered it.
fn fork_performs(
    store: &dyn Store,
    run: &RunId,
    at: crate::machine::EffectRef,
) -> Result<bool, OpsError> {
    let Some((_, fork_seq)) = store.run(run)?.and_then(|r| r.parent) else {
        return Ok(false);
    };
    for t in crate::ledger::transitions(store, run, at.seq + 1, fork_seq)? {
        let event = crate::ledger::codec::decode_event(run, t.seq, &t.event)?;
        if crate::ledger::answered(&event.body) == Some(at) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The `resume` options that answer a call in this state, or `None` if it waits for no one.
pub fn answers(status: &SlotStatus) -> Option<&'static str> {
    match status {
        SlotStatus::Approval { .. } => Some("--approve | --reject [REASON] | --input TEXT"),
        SlotStatus::Question { .. } => Some("--input TEXT | --reject [REASON]"),
        SlotStatus::InDoubt { .. } => {
            Some("--approve (perform it again) | --reject [REASON] | --input RESULT")
        }
        _ => None,
    }
}

/// A run below another that rests waiting for a person (revision 4): the run, and each call
/// it waits on as `(call id, tool, the resume options that answer it)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The child run.
    pub run: RunId,
    /// Its calls waiting for a person.
    pub asks: Vec<(String, String, &'static str)>,
}

/// The runs below `run` in its delegation tree that rest waiting for a person, in tree order:
/// what a parent resting on its children waits for (`run`, `log` and `resume` name them).
pub fn waiting_below(store: &dyn Store, run: &RunId) -> Result<Vec<Waiting>, OpsError> {
    let mut out = Vec::new();
    for below in crate::ledger::tree(store, run)?.into_iter().skip(1) {
        let rec = crate::ledger::record(store, &below.run)?;
        if rec.status != crate::store::RunStatus::AwaitingInput {
            continue;
        }
        let spec = crate::ledger::spec_of(&rec)?;
        let state = crate::ledger::state_at(store, &below.run, &spec, rec.seq)?.state;
        let asks = match &state {
            crate::machine::RunState::AwaitingInput { batch, .. }
            | crate::machine::RunState::CallingTools { batch, .. } => batch
                .slots
                .iter()
                .filter_map(|s| {
                    answers(&s.status).map(|how| (s.call_id.clone(), s.tool.clone(), how))
                })
                .collect(),
            _ => Vec::new(),
        };
        out.push(Waiting {
            run: below.run,
            asks,
        });
    }
    Ok(out)
}

/// Among `runs`, those resting on a descendant that waits for a person: a run not ended and
/// not waiting itself, with a child (or a child's child) of the listed runs whose status is
/// `awaiting_input`. `ls` shows them as `awaiting child`.
pub fn waiting_in(runs: &[RunView]) -> std::collections::BTreeSet<RunId> {
    use crate::store::RunStatus;
    let by_id: BTreeMap<&RunId, &RunView> = runs.iter().map(|r| (&r.id, r)).collect();
    let mut out = std::collections::BTreeSet::new();
    for r in runs
        .iter()
        .filter(|r| r.stored_status == RunStatus::AwaitingInput)
    {
        let mut current = r.delegated_by.as_ref().map(|l| l.run.clone());
        let mut hops = 0;
        while let Some(parent) = current.and_then(|p| by_id.get(&p).copied()) {
            hops += 1;
            if hops > 64
                || parent.stored_status.is_terminal()
                || parent.stored_status == RunStatus::AwaitingInput
            {
                break;
            }
            out.insert(parent.id.clone());
            current = parent.delegated_by.as_ref().map(|l| l.run.clone());
        }
    }
    out
}
