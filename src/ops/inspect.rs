//! The read-only operations: list the runs (`ls`), a run's timeline (`log`), a step in full
//! (`show`), where two runs differ (`diff`), whether a run (and the runs below it) verify
//! (`verify`), a run's delegation tree and forks. Each reads the store and writes nothing.

use super::OpsError;
use super::views::{
    DiffView, EntryView, RunAt, RunView, StepDetailView, TreeDiffView, TreeNodeView, VerifyView,
};
use crate::history;
use crate::machine::RunId;
use crate::receipt::VerifyingKey;
use crate::store::Store;

/// Every run in the database, newest first, as `runtape ls --json` lists them. A fork whose
/// edit rewrote a user message shows that message as its goal (one more read per such fork).
pub fn runs(store: &dyn Store) -> Result<Vec<RunView>, OpsError> {
    store
        .runs()?
        .iter()
        .map(|r| Ok(RunView::listed(store, r)?))
        .collect()
}

/// `run`'s timeline, one entry per step, as `runtape log RUN --json` prints it.
pub fn timeline(store: &dyn Store, run: &RunId) -> Result<Vec<EntryView>, OpsError> {
    Ok(history::timeline(store, run)?
        .into_iter()
        .map(EntryView::from)
        .collect())
}

/// The last `count` entries of `run`'s timeline, as `runtape log RUN --tail K --json` prints
/// them: reads those steps and a fixed lead-in before them, not the whole history
/// ([`history::timeline_tail`]).
pub fn timeline_tail(
    store: &dyn Store,
    run: &RunId,
    count: u64,
) -> Result<Vec<EntryView>, OpsError> {
    Ok(history::timeline_tail(store, run, count)?
        .into_iter()
        .map(EntryView::from)
        .collect())
}

/// Step `seq` of `run` in full (`None`: its latest step) — the state, the event, the effects
/// and the exact model request — as `runtape show RUN@SEQ --json` prints it.
/// With the run's tags, read from its row.
pub fn show(store: &dyn Store, run: &RunId, seq: Option<u64>) -> Result<StepDetailView, OpsError> {
    let mut view: StepDetailView = history::show(store, run, seq)?.into();
    view.tags = history::row(store, run)?.tags();
    Ok(view)
}

/// Where runs `a` and `b` first differ (a run and its fork, two child runs), times and ids set
/// aside, as `runtape diff A B --json` prints it.
pub fn diff(store: &dyn Store, a: &RunId, b: &RunId) -> Result<DiffView, OpsError> {
    Ok(history::diff_runs(store, a, b)?.into())
}

/// [`diff`] of `a` and `b` and of the runs below them, paired by their place in the tree
/// (`runtape diff A B --recursive --json`).
pub fn diff_tree(store: &dyn Store, a: &RunId, b: &RunId) -> Result<TreeDiffView, OpsError> {
    Ok(history::diff_trees(store, a, b)?.into())
}

/// Checks everything stored about `run` (`runtape verify RUN`): its sealed head, every
/// transition replayed through the current machine, blobs, snapshots, outbox rows and
/// receipts; with `key`, the head's and receipts' signatures against it. A run that does not
/// verify is a view with `ok: false` naming the first problem, not an error
/// ([`VerifyView::check`] makes it one); an error means it could not be checked.
pub fn verify(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
) -> Result<VerifyView, OpsError> {
    // Only a run with no row at all may be a pruned one; a row that cannot be read is the
    // check's to report (a damaged row is a tamper, as `history::verify` says).
    if matches!(store.run_without_setup(run), Ok(None))
        && let Some(t) = super::retention::tombstone_of(store, run)?
    {
        return Err(OpsError::Pruned(Box::new(t)));
    }
    let result = history::verify(store, run, key)?;
    Ok(VerifyView {
        run: run.clone(),
        result,
    })
}

/// `runtape verify RUN --recursive`: `root`, then every child run it started (and theirs),
/// each checked against the parent effect that started it ([`super::descendants`]), and each
/// run's named children against what its history says of them (see `verify_below`), one view
/// per run. The iteration stops after the first run that does not verify (its view is the
/// last item) or the first error; the children are looked up only once `root` verified.
pub fn verify_tree<'a>(
    store: &'a dyn Store,
    root: &RunId,
    key: Option<&'a VerifyingKey>,
) -> VerifyTree<'a> {
    VerifyTree {
        store,
        key,
        stage: Stage::Root(root.clone()),
    }
}

/// [`verify`], and — once `run` verifies — every child run its history names with where its
/// record ends (revision 5 on: its `ChildFinished` results) is stored and ends there
/// ([`crate::ledger::check_named`]): a child removed from the database, or replaced by another
/// run under its id, makes `run` itself fail, naming the child. A revision-4 run names none.
fn verify_below(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
) -> Result<VerifyView, OpsError> {
    let mut view = verify(store, run, key)?;
    if view.ok() {
        for named in crate::ledger::named_children(store, run)? {
            if let Some(d) = crate::ledger::check_named(store, &named)? {
                view.result = Err(d);
                break;
            }
        }
    }
    Ok(view)
}

/// The iterator [`verify_tree`] returns.
pub struct VerifyTree<'a> {
    store: &'a dyn Store,
    key: Option<&'a VerifyingKey>,
    stage: Stage,
}

/// Where a [`VerifyTree`] is.
enum Stage {
    /// The root is next.
    Root(RunId),
    /// The root verified; its descendants are to be looked up.
    Children(RunId),
    /// The descendants not verified yet.
    Each(std::vec::IntoIter<RunId>),
    /// A run did not verify, or an error was given, or every run verified.
    Done,
}

impl Iterator for VerifyTree<'_> {
    type Item = Result<VerifyView, OpsError>;

    fn next(&mut self) -> Option<Self::Item> {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Root(root) => {
                let view = verify_below(self.store, &root, self.key);
                if matches!(&view, Ok(v) if v.ok()) {
                    self.stage = Stage::Children(root);
                }
                Some(view)
            }
            Stage::Children(root) => match super::descendants(self.store, &root) {
                Ok(list) => {
                    self.stage = Stage::Each(list.into_iter());
                    self.next()
                }
                Err(e) => Some(Err(e)),
            },
            Stage::Each(mut rest) => {
                let run = rest.next()?;
                let view = verify_below(self.store, &run, self.key);
                if matches!(&view, Ok(v) if v.ok()) {
                    self.stage = Stage::Each(rest);
                }
                Some(view)
            }
            Stage::Done => None,
        }
    }
}

/// `root`'s delegation tree: `root` and every run below it, in tree order, each with its path
/// (`3.0`: the child started by effect 0 of step 3, …) and depth.
pub fn tree(store: &dyn Store, root: &RunId) -> Result<Vec<TreeNodeView>, OpsError> {
    Ok(crate::ledger::tree(store, root)?
        .into_iter()
        .map(|t| TreeNodeView {
            run: t.run,
            path: t.path,
            depth: t.depth,
        })
        .collect())
}

/// The forks of `run`: each fork and the step of `run` it was forked from, newest first.
pub fn forks_of(store: &dyn Store, run: &RunId) -> Result<Vec<RunAt>, OpsError> {
    Ok(store
        .runs()?
        .into_iter()
        .filter_map(|r| match r.parent {
            Some((p, seq)) if p == *run => Some(RunAt { run: r.id, seq }),
            _ => None,
        })
        .collect())
}
