//! Writes of different runs applied at once within one transaction of the writer
//! ([`super::writer`]).
//!
//! The writes of a batch that each change only their own run's rows ([`own_run`]) are split
//! into one lane per run. A lane applies its run's writes one after another, in the order they
//! were queued; the lanes run together on the writer's one connection, so their statements
//! travel pipelined (tokio-postgres sends a query as soon as it is polled, without waiting for
//! the answer to the one before). A batch of commits of N runs then waits for the round trips
//! of one run's commit, not N times that: what made one process's commits queue behind each
//! other.
//!
//! Nothing about a single write changes: each is checked (lease epoch, seq, the head it
//! replaces, an answered call) against its own run's row, locked by the batch, before it
//! changes anything, so a refused write is left out alone — a run whose lease was taken over
//! has its commit refused while the other runs' commits of the batch are written. A database
//! error aborts the whole transaction: the write whose statement failed first is named (every
//! statement after it fails with `in_failed_sql_transaction`), and the writer tries the batch
//! again without it, as it does for writes applied one at a time.

use std::collections::{BTreeMap, HashMap};

use futures_util::future::join_all;
use tokio_postgres::error::SqlState;

use super::conn::Conn;
use super::writer::{Fail, Job, apply};
use crate::store::{StoreError, Write, Written};

/// The run whose rows alone `write` changes, when it may go in a lane: commits, outbox marks
/// and the lease and control writes. `None` for writes that touch rows another run's write in
/// the same batch may touch too (a new run locks its fork parent and takes a place in a
/// session; global memory, pruning and imports span runs): those are applied alone, in queue
/// order, between the lanes.
pub(super) fn own_run(write: &Write) -> Option<&str> {
    match write {
        Write::Commit(c) => Some(c.run.as_str()),
        Write::Commits(cs) => cs.first().map(|c| c.run.as_str()),
        Write::MarkStarted { run, .. }
        | Write::RenewLease { run, .. }
        | Write::AcquireLease { run, .. }
        | Write::ReleaseLease { run, .. }
        | Write::SetControl { run, .. } => Some(run.as_str()),
        Write::CreateRun(_)
        | Write::PublishMemory(_)
        | Write::RemoveMemory(_)
        | Write::Prune(_)
        | Write::Import(_) => None,
    }
}

/// The database error that aborted a transaction, and the index in the batch of the write
/// whose statement it was (`None` when no statement can be named: the connection was lost,
/// or every error seen came after the abort).
pub(super) type Aborted = (tokio_postgres::Error, Option<usize>);

/// Applies the writes at `indices` of `batch` (each with an [`own_run`]) in one lane per run,
/// the lanes at once; returns each write's outcome in the order of `indices`, or the error
/// that aborted the transaction. `keys` holds the keys of the runs the batch locked; a lane
/// adds the key of a run it looked up.
pub(super) async fn apply_in_lanes(
    conn: &Conn,
    keys: &mut HashMap<String, i64>,
    batch: &[Job],
    indices: &[usize],
) -> Result<Vec<Result<Written, StoreError>>, Aborted> {
    let mut by_run: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (position, i) in indices.iter().enumerate() {
        let run = own_run(&batch[*i].0).unwrap_or_default();
        by_run.entry(run).or_default().push(position);
    }
    let lanes = by_run.into_iter().map(|(run, positions)| {
        let mut lane_keys: HashMap<String, i64> = keys
            .get(run)
            .map(|k| (run.to_owned(), *k))
            .into_iter()
            .collect();
        async move {
            let mut outcomes = Vec::with_capacity(positions.len());
            for position in positions {
                let (write, queued_ms, _, _) = &batch[indices[position]];
                let outcome = apply(conn, &mut lane_keys, write, *queued_ms).await;
                let aborted = matches!(outcome, Err(Fail::Db(_)));
                outcomes.push((position, outcome));
                if aborted {
                    break;
                }
            }
            (lane_keys, outcomes)
        }
    });
    let mut results: Vec<Option<Result<Written, StoreError>>> = vec![None; indices.len()];
    let mut aborted: Option<Aborted> = None;
    for (lane_keys, outcomes) in join_all(lanes).await {
        keys.extend(lane_keys);
        for (position, outcome) in outcomes {
            match outcome {
                Ok(written) => results[position] = Some(Ok(written)),
                Err(Fail::Refused(e)) => results[position] = Some(Err(e)),
                Err(Fail::Db(e)) => {
                    let first = e.code() != Some(&SqlState::IN_FAILED_SQL_TRANSACTION);
                    let named = first.then_some(indices[position]);
                    if aborted.as_ref().is_none_or(|(_, at)| at.is_none() && first) {
                        aborted = Some((e, named));
                    }
                }
            }
        }
    }
    if let Some(aborted) = aborted {
        return Err(aborted);
    }
    // Every write of every lane has its outcome unless the transaction was aborted.
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or(Err(StoreError::Closed)))
        .collect())
}
