//! `runtape prune`: removing finished run trees in bounded batches, each its own short write,
//! and reading back the tombstones they leave (for `verify` and `ls --all`). What may go is
//! decided by [`crate::store::retention::plan`]; the store checks it again under each write.

use serde::Serialize;

use super::OpsError;
use crate::machine::{Digest, RunId};
use crate::store::retention::{self, BlobsFreed, Group, Prune, PruneRun, Tombstone};
use crate::store::{RunStatus, Store, StoreError, Write, Written};

/// Runs removed per write at most (a group is never split, so one larger group is one write).
pub const PRUNE_BATCH_RUNS: usize = 64;

/// What `runtape prune` is asked to do.
#[derive(Clone, Debug)]
pub struct PruneRequest {
    /// Remove runs that last changed longer ago than this, ms.
    pub older_than_ms: u64,
    /// The ended statuses that may go.
    pub statuses: Vec<RunStatus>,
    /// Only say what would go.
    pub dry_run: bool,
    /// Wall-clock ms now.
    pub now_ms: u64,
    /// Who prunes (recorded in the tombstones).
    pub by: String,
}

/// One group of runs and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PrunedGroup {
    /// Its runs, in id order.
    pub runs: Vec<RunId>,
    /// `pruned`, `would_prune` (a dry run) or `refused`.
    pub outcome: &'static str,
    /// For a refused group: the store's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What a prune did (or, dry, would do).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// The groups that went (or would), and those the store refused.
    pub groups: Vec<PrunedGroup>,
    /// Runs removed (or that would be).
    pub runs: usize,
    /// Runs kept because their group is live, leased or recent.
    pub kept: usize,
    /// Writes made.
    pub batches: usize,
    /// Blobs removed with the runs (or that would be): those no kept run refers to.
    pub blobs: u64,
    /// Their bytes as stored.
    pub blob_bytes: u64,
}

impl PruneReport {
    fn freed(&mut self, written: Written) {
        if let Written::Pruned(f) = written {
            self.blobs += f.blobs;
            self.blob_bytes += f.bytes;
        }
    }
}

/// Removes every group of runs [`retention::plan`] lets go, [`PRUNE_BATCH_RUNS`] runs a write
/// (a write the store refuses is retried group by group, and a group still refused is reported
/// and kept). With `dry_run` nothing is written.
pub async fn prune(store: &dyn Store, req: &PruneRequest) -> Result<PruneReport, OpsError> {
    let runs = store.runs()?;
    let mut links = Vec::new();
    for s in store.sessions()? {
        let members = store.session_runs(&s.name)?;
        for pair in members.windows(2) {
            links.push((pair[0].1.clone(), pair[1].1.clone()));
        }
    }
    let cutoff = req.now_ms.saturating_sub(req.older_than_ms);
    let planned = retention::plan(&runs, &links, &req.statuses, cutoff, req.now_ms);
    let kept = planned
        .iter()
        .filter(|g| g.kept.is_some())
        .map(|g| g.runs.len())
        .sum();
    let going: Vec<Group> = planned.into_iter().filter(|g| g.kept.is_none()).collect();
    let mut report = PruneReport {
        groups: Vec::new(),
        runs: 0,
        kept,
        batches: 0,
        blobs: 0,
        blob_bytes: 0,
    };
    if req.dry_run {
        let all: Vec<RunId> = going.iter().flat_map(|g| g.runs.iter().cloned()).collect();
        let BlobsFreed { blobs, bytes } = store.blobs_only_of(&all)?;
        (report.blobs, report.blob_bytes) = (blobs, bytes);
        for g in going {
            report.runs += g.runs.len();
            report.groups.push(PrunedGroup {
                runs: g.runs,
                outcome: "would_prune",
                why: None,
            });
        }
        return Ok(report);
    }
    let mut batch: Vec<Group> = Vec::new();
    let mut size = 0;
    for g in going {
        size += g.runs.len();
        batch.push(g);
        if size >= PRUNE_BATCH_RUNS {
            write_batch(store, req, std::mem::take(&mut batch), &mut report).await?;
            size = 0;
        }
    }
    if !batch.is_empty() {
        write_batch(store, req, batch, &mut report).await?;
    }
    Ok(report)
}

/// Writes one batch of groups; if the store refuses it, each group alone.
async fn write_batch(
    store: &dyn Store,
    req: &PruneRequest,
    batch: Vec<Group>,
    report: &mut PruneReport,
) -> Result<(), OpsError> {
    match try_prune(store, req, &batch, report).await? {
        Ok(written) => {
            report.freed(written);
            for g in batch {
                report.runs += g.runs.len();
                report.groups.push(pruned(g));
            }
            return Ok(());
        }
        Err(StoreError::PruneRefused { .. }) if batch.len() > 1 => {}
        Err(StoreError::PruneRefused { run, why }) => {
            report.groups.push(refused(
                batch.into_iter().flat_map(|g| g.runs).collect(),
                run,
                why,
            ));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    for g in batch {
        match try_prune(store, req, std::slice::from_ref(&g), report).await? {
            Ok(written) => {
                report.freed(written);
                report.runs += g.runs.len();
                report.groups.push(pruned(g));
            }
            Err(StoreError::PruneRefused { run, why }) => {
                report.groups.push(refused(g.runs, run, why));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes the prune of `groups`: the store's answer, or a refusal without a write when one of
/// the runs is no longer stored (another prune, running at the same time, removed it).
async fn try_prune(
    store: &dyn Store,
    req: &PruneRequest,
    groups: &[Group],
    report: &mut PruneReport,
) -> Result<Result<Written, StoreError>, OpsError> {
    let mut runs = Vec::new();
    for id in groups.iter().flat_map(|g| &g.runs) {
        match prune_run(store, id)? {
            Some(r) => runs.push(r),
            None => {
                return Ok(Err(StoreError::PruneRefused {
                    run: id.to_string(),
                    why: "it is no longer stored (another prune removed it)".into(),
                }));
            }
        }
    }
    report.batches += 1;
    let prune = Prune {
        runs,
        now_ms: req.now_ms,
        by: req.by.clone(),
    };
    Ok(crate::store::write(store, Write::Prune(prune)).await)
}

fn pruned(g: Group) -> PrunedGroup {
    PrunedGroup {
        runs: g.runs,
        outcome: "pruned",
        why: None,
    }
}

fn refused(runs: Vec<RunId>, run: String, why: String) -> PrunedGroup {
    PrunedGroup {
        runs,
        outcome: "refused",
        why: Some(format!("run {run}: {why}")),
    }
}

/// What the store checks of `run` before it removes it, and what its tombstone keeps; `None`
/// when it is no longer stored (a read that fails because another prune removed the run
/// meanwhile is that too).
fn prune_run(store: &dyn Store, run: &RunId) -> Result<Option<PruneRun>, OpsError> {
    let read = || -> Result<Option<PruneRun>, OpsError> {
        let Some(rec) = store.run_without_setup(run)? else {
            return Ok(None);
        };
        let head = store
            .head(run)?
            .map_or(Digest::ZERO, |h| Digest::of(&h.body));
        Ok(Some(PruneRun {
            run: run.clone(),
            parent: rec.parent,
            status: rec.status,
            seq: rec.seq,
            proof: crate::ledger::child_proof(store, run)?,
            head,
        }))
    };
    match read() {
        Err(_) if store.run_without_setup(run)?.is_none() => Ok(None),
        read => read,
    }
}

/// The tombstone of `run`, once the chain of every tombstone is checked: `Ok(None)` when it
/// was not pruned, [`OpsError::TombstonesTampered`] when the chain does not hold.
pub fn tombstone_of(store: &dyn Store, run: &RunId) -> Result<Option<Tombstone>, OpsError> {
    let records = store.tombstones()?;
    if let Some(fault) = retention::chain_fault(&records) {
        return Err(OpsError::TombstonesTampered(fault));
    }
    Ok(records
        .iter()
        .find(|r| &r.run == run)
        .and_then(|r| r.decode()))
}

/// Every tombstone, checked as [`tombstone_of`] checks them, oldest first.
pub fn tombstones(store: &dyn Store) -> Result<Vec<Tombstone>, OpsError> {
    let records = store.tombstones()?;
    if let Some(fault) = retention::chain_fault(&records) {
        return Err(OpsError::TombstonesTampered(fault));
    }
    Ok(records.iter().filter_map(|r| r.decode()).collect())
}
