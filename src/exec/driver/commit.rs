//! Committing: each transition is recorded by the ledger, handed to the store (consecutive
//! transitions in one write), made durable before anything it asked for is performed, and its
//! trace published once it is. The lease is given back the same way.

use std::sync::Arc;

use super::Driver;
use crate::exec::transition_traces::transition_traces;
use crate::exec::{EngineError, Shared, read_lock};
use crate::ledger::{CommitTimes, chain_tip};
use crate::machine::{Effect, Event, RunId, Transition};
use crate::store::{RunStatus, Write};

impl Driver {
    /// Records the transition for the store; it is durable once [`flush`](Self::flush)
    /// returns. The messages it appended move into the driver's conversations (`t.appended`
    /// is empty afterwards).
    pub(in crate::exec) fn commit(
        &mut self,
        event: &Event,
        t: &mut Transition,
    ) -> Result<(), EngineError> {
        let now = self.shared.config.clock.wall_ms();
        let times = CommitTimes {
            now_ms: now,
            lease_expires_ms: now + self.shared.config.lease_ttl.as_millis() as u64,
        };
        let tools = read_lock(&self.shared.tools);
        let non_idempotent = |name: &str| !tools.get(name).is_some_and(|t| t.idempotent());
        let mut commit = self
            .recorder
            .record(event, t, &non_idempotent, times)
            .map_err(EngineError::Record)?;
        drop(tools);
        if let crate::machine::EventBody::ToolsListed { catalog, .. } = &event.body
            && let Some(blob) = self.catalog_blobs.remove(catalog)
        {
            commit.blobs.push((*catalog, blob));
        }
        if !self.files.is_empty() {
            let returned = event.body.files();
            let appended = t.appended.iter().flat_map(|a| &a.message.attachments);
            for a in returned.iter().chain(appended) {
                if let Some(bytes) = self.files.remove(&a.digest) {
                    commit.blobs.push((a.digest, bytes));
                }
            }
        }
        self.unsent.push(commit);
        self.last_at = event.at;
        if self.shared.trace.receiver_count() > 0 {
            let traces = transition_traces(&self.run, &self.spec, &self.state, event, t);
            self.traces.extend(traces);
        }
        for a in std::mem::take(&mut t.appended) {
            // A conversation not loaded yet is read from the store when first needed (its new
            // messages are durable by then).
            if self.lazy_convs && !self.convs.contains_key(&a.agent) {
                continue;
            }
            let list = Arc::make_mut(self.convs.entry(a.agent).or_default());
            list.truncate(a.index as usize);
            list.push(a.message);
        }
        Ok(())
    }

    /// Records `effects` as issued and not yet answered (what a taken-up run or a fork waits
    /// on, as it will perform them), so their answers get receipts.
    pub(in crate::exec) fn inherit(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for e in effects {
            self.recorder.inherit(e);
        }
    }

    /// Hands the transitions not yet sent to the store (one write, one transaction), with the
    /// head they lead to sealed once for all of them.
    pub(in crate::exec) async fn submit_unsent(&mut self) {
        if self.unsent.is_empty() {
            return;
        }
        let commits = std::mem::take(&mut self.unsent);
        let head = self.head.clone();
        let pending = self
            .shared
            .writes
            .submit_with(|store| head.submit_commits(store, commits))
            .await;
        self.acks.push(pending);
    }

    /// Waits until every transition so far is durable, then publishes their traces.
    pub(in crate::exec) async fn flush(&mut self) -> Result<(), EngineError> {
        self.submit_unsent().await;
        for pending in self.acks.drain(..) {
            pending.done().await?;
        }
        if self.shared.trace.receiver_count() > 0 {
            for e in self.traces.drain(..) {
                let _ = self.shared.trace.send(e);
            }
        } else {
            self.traces.clear();
        }
        Ok(())
    }

    /// Gives the lease back, recording `status` with the head that records it.
    pub(super) async fn release(&mut self, status: RunStatus) -> Result<(), EngineError> {
        let (head, run, epoch) = (self.head.clone(), self.run.clone(), self.epoch());
        let pending = self
            .shared
            .writes
            .submit_with(|store| head.submit_release(store, run, epoch, status))
            .await;
        pending.done().await?;
        Ok(())
    }

    /// Gives the lease back as `paused` after an error, leaving the head as the last commit
    /// sealed it (verify accepts a `paused` row over a running head): the smallest write there
    /// is, so it still fits when the disk is full.
    pub(super) async fn release_unsealed(&mut self) -> Result<(), EngineError> {
        let release = Write::ReleaseLease {
            run: self.run.clone(),
            epoch: self.epoch(),
            status: RunStatus::Paused,
            head: None,
        };
        self.shared.writes.write(release).await?;
        Ok(())
    }
}

/// The tip of `run`'s receipt chain at or before `seq`, checked to be one this engine's
/// signer can continue (same mode, same key). Reads one row, not the chain.
pub(in crate::exec) fn receipt_tip(
    shared: &Shared,
    store: &dyn crate::store::Store,
    run: &RunId,
    seq: u64,
) -> Result<Option<crate::receipt::ChainTip>, EngineError> {
    let tip = chain_tip(store, run, seq)?;
    let signer = &shared.config.receipts;
    if let Some(tip) = &tip
        && tip.seal.key_id() != signer.key_id()
    {
        let want = tip
            .seal
            .key_id()
            .map_or("no key (unsigned receipts)".to_owned(), |k| {
                format!("the key {k}")
            });
        return Err(EngineError::ReceiptKeyMismatch {
            run: run.to_string(),
            sealed_with: want,
        });
    }
    Ok(tip)
}
