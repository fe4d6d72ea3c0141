//! A run's sealed head on the engine's side: the first head of a new run, how each write moves
//! it on ([`HeadKeeper`]), and the check made before a stored run is continued
//! ([`check_continuable`]). The head itself — its fields and seal — is
//! [`crate::receipt::RunHead`]; what `verify` recomputes of it is in `audit`.
//!
//! Every write that changes what the head records carries the new sealed head, so it lands in
//! the same transaction: `CreateRun`, each `Commit`, `MarkStarted` (a non-idempotent call is
//! about to run) and `ReleaseLease` (the status the run rests in). One [`HeadKeeper`] per
//! driver seals and submits them under one lock, so the store applies heads in the order they
//! were sealed.

use std::sync::{Arc, Mutex, MutexGuard};

use super::audit;
use super::{HistoryError, ancestry_through};
use crate::machine::{Digest, RunId};
use crate::receipt::{
    ChainTip, HEAD_FORMAT, HeadOrigin, HeadParent, HeadTip, ReceiptSigner, RunHead, Seal,
    check_head_seal, text_digest,
};
use crate::store::{
    Ack, Commit, HeadRecord, NewRun, OutboxRecord, OutboxStatus, RunRecord, RunStatus, Store, Write,
};

/// The head of a run about to be created by `new`: seq 0 for a new run; for a fork, the
/// parent's state hash, chain link and receipt tip at the fork seq.
pub fn first_head(
    new: &NewRun,
    state_hash: Digest,
    chain: Digest,
    tip: Option<&ChainTip>,
) -> RunHead {
    RunHead {
        chain: chain.to_hex(),
        cost_nanos: 0,
        created_ms: new.now_ms,
        format: HEAD_FORMAT.into(),
        goal: text_digest(&new.goal),
        origin: HeadOrigin::Engine,
        outcome: None,
        parent: new.parent.as_ref().map(|(run, seq)| HeadParent {
            run: run.clone(),
            seq: *seq,
        }),
        receipt_tip: tip.map(|t| HeadTip {
            link: t.seal.link(),
            seq: t.seq,
        }),
        run: new.id.clone(),
        seq: new.parent.as_ref().map_or(0, |(_, seq)| *seq),
        setup: new.setup.as_deref().map(text_digest),
        spec: text_digest(&new.spec),
        started: Vec::new(),
        state: if new.parent.is_some() {
            "preparing"
        } else {
            "created"
        }
        .into(),
        state_hash: state_hash.to_hex(),
        status: RunStatus::Running.as_str().into(),
        tokens: 0,
        updated_ms: new.now_ms,
    }
}

/// Seals `head` with `signer` for storage.
pub fn seal(signer: &ReceiptSigner, head: &RunHead) -> HeadRecord {
    let (body, seal) = signer.seal_head(head);
    HeadRecord {
        body,
        // A seal made by the signer always encodes: its hex fields have the right lengths by
        // construction.
        seal: seal.to_bytes().unwrap_or_default(),
    }
}

/// Moves `head` on past `commit`.
fn advance(head: &mut RunHead, c: &Commit) {
    head.seq = c.seq;
    head.state = c.state_kind.as_str().into();
    head.state_hash = c.state_hash.to_hex();
    head.chain = c.chain.to_hex();
    head.status = c.status.as_str().into();
    head.outcome = c.outcome.as_deref().map(text_digest);
    head.tokens = c.tokens;
    head.cost_nanos = c.cost_nanos;
    head.updated_ms = c.now_ms;
    if let Some(seal) = c.seal.as_deref().and_then(Seal::from_bytes) {
        head.receipt_tip = Some(HeadTip {
            link: seal.link(),
            seq: c.seq,
        });
    }
    if let Some(r) = c.resolves {
        head.started.retain(|s| *s != (r.seq, r.index));
    }
}

/// Keeps one run's head while a driver writes it, and submits every write that changes it
/// with the head sealed after it. Shared (in an `Arc`) with the tasks that mark calls started.
#[derive(Debug)]
pub struct HeadKeeper {
    head: Mutex<RunHead>,
    signer: Arc<ReceiptSigner>,
}

impl HeadKeeper {
    /// A keeper starting from `head` (the first head of a new run, or the head
    /// [`check_continuable`] returned), sealing with `signer`.
    pub fn new(mut head: RunHead, signer: Arc<ReceiptSigner>) -> HeadKeeper {
        // From its next write on, the head is the engine's (a head trusted on first use is
        // sealed again like any other).
        head.origin = HeadOrigin::Engine;
        HeadKeeper {
            head: Mutex::new(head),
            signer,
        }
    }

    /// The head as last sealed (or as given, before any write).
    pub fn current(&self) -> RunHead {
        self.lock().clone()
    }

    /// Seals the current head (for the `CreateRun` write that starts the run).
    pub fn sealed(&self) -> HeadRecord {
        seal(&self.signer, &self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, RunHead> {
        // The head is replaced whole under the lock; a panic elsewhere cannot leave it torn.
        self.head.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits consecutive transitions of the run as one write, the last carrying the head
    /// they lead to. Call it where the commits would otherwise be submitted.
    pub fn submit_commits(&self, store: &dyn Store, mut commits: Vec<Commit>) -> Ack {
        let mut head = self.lock();
        for c in &commits {
            advance(&mut head, c);
        }
        if let Some(last) = commits.last_mut() {
            last.head = Some(seal(&self.signer, &head));
        }
        let write = if commits.len() == 1 {
            // Just checked: exactly one element.
            Write::Commit(Box::new(commits.pop().expect("one commit")))
        } else {
            Write::Commits(commits)
        };
        store.submit(write)
    }

    /// Submits `MarkStarted` for `effects` (non-idempotent calls about to run) with the head
    /// that lists them as started.
    pub fn submit_mark_started(
        &self,
        store: &dyn Store,
        run: RunId,
        epoch: u64,
        effects: Vec<OutboxRecord>,
    ) -> Ack {
        let mut head = self.lock();
        for e in &effects {
            let at = (e.effect.seq, e.effect.index);
            if let Err(i) = head.started.binary_search(&at) {
                head.started.insert(i, at);
            }
        }
        let sealed = seal(&self.signer, &head);
        store.submit(Write::MarkStarted {
            run,
            epoch,
            effects,
            head: Some(sealed),
        })
    }

    /// Submits `ReleaseLease` recording `status`, with the head that records it too.
    pub fn submit_release(
        &self,
        store: &dyn Store,
        run: RunId,
        epoch: u64,
        status: RunStatus,
    ) -> Ack {
        let mut head = self.lock();
        head.status = status.as_str().into();
        let sealed = seal(&self.signer, &head);
        store.submit(Write::ReleaseLease {
            run,
            epoch,
            status,
            head: Some(sealed),
        })
    }
}

/// Checks, before a stored run is continued (resumed, answered, cancelled at rest or forked),
/// that what will be executed and shown is what its head sealed: the head's seal (against
/// `signer`'s key when the head is signed, which must be that key), the run's row (spec,
/// setup, goal, parent, seq, status, ...), the last transition (its chain link and state hash),
/// nothing stored past it, and the outbox rows marked started. Reads a handful of rows, not
/// the history; writes nothing. Returns the head to continue from.
pub fn check_continuable(
    store: &dyn Store,
    rec: &RunRecord,
    signer: &ReceiptSigner,
) -> Result<RunHead, HistoryError> {
    let run = &rec.id;
    let refuse = |detail: String| HistoryError::Tampered {
        run: run.to_string(),
        detail,
    };
    let stored = store
        .head(run)?
        .ok_or_else(|| refuse("it has no sealed head (heads row missing)".into()))?;
    let (head, seal) = audit::open_head(&stored).map_err(|d| refuse(d.to_string()))?;
    match (&seal, head.origin, signer.key_id()) {
        (Seal::Ed25519 { key_id, .. }, _, Some(mine)) if key_id == mine => {}
        (Seal::Ed25519 { key_id, .. }, _, _) => {
            return Err(HistoryError::WrongKey(format!(
                "run {run}'s head is signed with the key {key_id}; continue it with the same receipt key (RUNTAPE_RECEIPT_KEY or --receipt-key)"
            )));
        }
        (Seal::Unsigned { .. }, HeadOrigin::Engine, Some(_)) => {
            return Err(HistoryError::WrongKey(format!(
                "run {run} was run without a receipt key (its head is unsigned); continue it without one"
            )));
        }
        (Seal::Unsigned { .. }, _, _) => {}
    }
    check_head_seal(&stored.body, &seal, signer.verifying_key().as_ref())
        .map_err(|e| refuse(format!("heads.seal: {e}")))?;
    audit::row_against_head(rec, &head).map_err(|d| refuse(d.to_string()))?;
    if head.seq > 0 {
        let segments = ancestry_through(store, run, head.seq)?;
        let last = segments
            .last()
            .filter(|s| s.to == head.seq)
            .map(|s| store.transitions(&s.run, head.seq, head.seq))
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .ok_or_else(|| refuse(format!("seq {}: the last transition is missing", head.seq)))?;
        if last.chain.to_hex() != head.chain || last.state_hash.to_hex() != head.state_hash {
            return Err(refuse(format!(
                "seq {}: the last transition is not the one the head sealed",
                head.seq
            )));
        }
    }
    if let Some(extra) = store
        .transitions(run, head.seq + 1, u64::from(u32::MAX))?
        .first()
    {
        return Err(refuse(format!(
            "seq {}: a transition is stored past the sealed end of the history",
            extra.seq
        )));
    }
    let started: Vec<(u64, u32)> = store
        .outbox(run)?
        .into_iter()
        .filter(|o| o.status == OutboxStatus::Started)
        .map(|o| (o.effect.seq, o.effect.index))
        .collect();
    if started != head.started {
        return Err(refuse(format!(
            "outbox.status: calls marked started are {}, the head sealed {}",
            audit::list(&started),
            audit::list(&head.started)
        )));
    }
    Ok(head)
}
