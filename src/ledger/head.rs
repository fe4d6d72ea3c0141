//! A run's sealed head on the engine's side: the first head of a new run, and how each write
//! moves it on ([`HeadKeeper`]). The head itself — its fields and seal — is
//! [`crate::receipt::RunHead`]; what `verify` recomputes of it is in `audit`; the check made
//! before a stored run is acted on is [`super::check_continuable`].
//!
//! Every write that changes what the head records carries the new sealed head, so it lands in
//! the same transaction: `CreateRun`, each `Commit`, `MarkStarted` (a non-idempotent call is
//! about to run) and `ReleaseLease` (the status the run rests in). One [`HeadKeeper`] per
//! driver seals and submits them under one lock, so the store applies heads in the order they
//! were sealed.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::format::packed_head::PackedHead;
use crate::machine::{Digest, RunId};
use crate::receipt::{
    ChainTip, HEAD_FORMAT, HeadOrigin, HeadParent, HeadTip, ReceiptSigner, RunHead, Seal,
    head_body_digest, text_digest,
};
use crate::store::{Ack, Commit, HeadRecord, NewRun, OutboxRecord, RunStatus, Store, Write};

/// The head of a run about to be created by `new`: seq 0 for a new run, with `Created`'s state
/// hash and a zero chain link (what `verify` expects of a run whose first commit never
/// landed); for a fork, the parent's state hash, chain link and receipt tip at the fork seq.
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
        unpriced_turns: 0,
        updated_ms: new.now_ms,
    }
}

/// Seals `head` with `signer` for storage, as the replacement of the stored head whose body
/// has digest `replaces` (`None` for a new run's first head).
pub fn seal(signer: &ReceiptSigner, head: &RunHead, replaces: Option<Digest>) -> HeadRecord {
    let (body, seal, digest) = signer.seal_head_stored(head);
    let mut record = HeadRecord::new(body, seal, replaces);
    record.digest = Some(digest);
    record
}

/// [`seal`], and packed too when `store` keeps heads packed ([`Store::packs_heads`]): packing
/// from the fields at hand costs a fraction of what the store would spend parsing the JSON.
fn seal_for(
    store: &dyn Store,
    signer: &ReceiptSigner,
    head: &RunHead,
    replaces: Option<Digest>,
) -> HeadRecord {
    let mut record = seal(signer, head, replaces);
    if store.packs_heads() {
        record.packed = Some(PackedHead::of(head));
    }
    record
}

/// Moves `head` on past `commits` (consecutive, in order): where the history ends and how it
/// stands are the last commit's; the receipt tip is the last seal among them; every call one of
/// them answered leaves the started list.
fn advance(head: &mut RunHead, commits: &[Commit]) {
    for c in commits {
        if let Some(r) = c.resolves {
            head.started.retain(|s| *s != (r.seq, r.index));
        }
    }
    if let Some((seq, seal)) = commits
        .iter()
        .rev()
        .find_map(|c| Some((c.seq, Seal::from_bytes(c.seal.as_deref()?)?)))
    {
        head.receipt_tip = Some(HeadTip {
            link: seal.link(),
            seq,
        });
    }
    let Some(c) = commits.last() else { return };
    head.seq = c.seq;
    head.state = c.state_kind.as_str().into();
    head.state_hash = c.state_hash.to_hex();
    head.chain = c.chain.to_hex();
    head.status = c.status.as_str().into();
    head.outcome = c.outcome.as_deref().map(text_digest);
    head.tokens = c.tokens;
    head.cost_nanos = c.cost_nanos;
    head.unpriced_turns = c.unpriced_turns;
    head.updated_ms = c.now_ms;
}

/// Keeps one run's head while a driver writes it, and submits every write that changes it
/// with the head sealed after it. Shared (in an `Arc`) with the tasks that mark calls started.
///
/// Each head it writes names the digest of the head it replaces, and the store refuses a
/// write whose head replaces another than the one stored: a driver whose view went stale (a
/// commit of its was refused, another process moved the run on) writes nothing more.
#[derive(Debug)]
pub struct HeadKeeper {
    /// The head as last sealed, and the digest of the body that is (or is about to be) stored.
    head: Mutex<(RunHead, Digest)>,
    signer: Arc<ReceiptSigner>,
}

impl HeadKeeper {
    /// A keeper starting from `head` — the first head of a new run, or the stored head
    /// [`check_continuable`](super::check_continuable) returned — sealing with `signer`.
    pub fn new(mut head: RunHead, signer: Arc<ReceiptSigner>) -> HeadKeeper {
        let stored = head_body_digest(&head.canonical_bytes());
        // From its next write on, the head is the engine's (a head trusted on first use is
        // sealed again like any other).
        head.origin = HeadOrigin::Engine;
        HeadKeeper {
            head: Mutex::new((head, stored)),
            signer,
        }
    }

    /// The head as last sealed (or as given, before any write).
    pub fn current(&self) -> RunHead {
        self.lock().0.clone()
    }

    /// Seals the current head as a new run's first, for its `CreateRun` write to `store`
    /// (packed too when `store` keeps heads packed).
    pub fn sealed(&self, store: &dyn Store) -> HeadRecord {
        let mut guard = self.lock();
        let record = seal_for(store, &self.signer, &guard.0, None);
        guard.1 = record.body_digest();
        record
    }

    fn lock(&self) -> MutexGuard<'_, (RunHead, Digest)> {
        // The head is replaced whole under the lock; a panic elsewhere cannot leave it torn.
        self.head.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seals the head in `guard` as the replacement of the one stored, and records it as
    /// stored.
    fn reseal(&self, store: &dyn Store, guard: &mut (RunHead, Digest)) -> HeadRecord {
        let record = seal_for(store, &self.signer, &guard.0, Some(guard.1));
        guard.1 = record.body_digest();
        record
    }

    /// Submits consecutive transitions of the run as one write, the last carrying the head
    /// they lead to. Call it where the commits would otherwise be submitted.
    pub fn submit_commits(&self, store: &dyn Store, mut commits: Vec<Commit>) -> Ack {
        let mut guard = self.lock();
        advance(&mut guard.0, &commits);
        let sealed = self.reseal(store, &mut guard);
        if let Some(last) = commits.last_mut() {
            last.head = Some(sealed);
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
        expires_ms: u64,
    ) -> Ack {
        let mut guard = self.lock();
        for e in &effects {
            let at = (e.effect.seq, e.effect.index);
            if let Err(i) = guard.0.started.binary_search(&at) {
                guard.0.started.insert(i, at);
            }
        }
        let sealed = self.reseal(store, &mut guard);
        store.submit(Write::MarkStarted {
            run,
            epoch,
            effects,
            expires_ms,
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
        let mut guard = self.lock();
        guard.0.status = status.as_str().into();
        let sealed = self.reseal(store, &mut guard);
        store.submit(Write::ReleaseLease {
            run,
            epoch,
            status,
            head: Some(sealed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{EffectRef, Hlc, StateKind};
    use crate::receipt::{SigningKey, check_head_seal};
    use crate::store::{MemoryStore, NewRun, OutboxRecord, OutboxStatus, Written};

    fn new_run() -> NewRun {
        NewRun {
            id: RunId::new("01headtest"),
            parent: None,
            spec: "{\"spec\":1}".into(),
            setup: Some("{\"setup\":1}".into()),
            goal: "a goal".into(),
            now_ms: 1_700_000_000_000,
            owner: "me".into(),
            lease_expires_ms: u64::MAX,
            head: HeadRecord::default(),
            session: None,
        }
    }

    fn commit(seq: u64, resolves: Option<EffectRef>) -> Commit {
        Commit {
            run: RunId::new("01headtest"),
            epoch: 1,
            seq,
            at: Hlc::new(1_700_000_000_000 + seq, 0),
            event: b"{}".to_vec(),
            edge: crate::machine::EdgeId::CreatedStart,
            effects: Vec::new(),
            outbox: Vec::new(),
            resolves,
            state_kind: StateKind::Generating,
            state_hash: Digest::of(&seq.to_le_bytes()),
            chain: Digest::of(&[seq as u8]),
            blobs: Vec::new(),
            snapshot: None,
            status: RunStatus::Running,
            cost_nanos: 7 * seq,
            tokens: 11 * seq,
            unpriced_turns: 0,
            outcome: None,
            seal: None,
            now_ms: 1_700_000_000_000 + seq,
            lease_expires_ms: u64::MAX,
            head: None,
        }
    }

    fn stored(store: &MemoryStore) -> RunHead {
        let h = store
            .head(&RunId::new("01headtest"))
            .expect("reads")
            .expect("a head");
        RunHead::from_bytes(&h.body).expect("decodes")
    }

    #[test]
    fn each_write_carries_the_head_it_leads_to_sealed_by_the_run_key() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let signer = Arc::new(ReceiptSigner::from_signing_key(key.clone()));
        let store = MemoryStore::new();
        let mut new = new_run();
        let keeper = HeadKeeper::new(
            first_head(&new, Digest::ZERO, Digest::ZERO, None),
            signer.clone(),
        );
        new.head = keeper.sealed(&store);
        let created = store.submit(Write::CreateRun(new));
        assert_eq!(
            created.blocking_recv().expect("acked"),
            Ok(Written::Lease(1))
        );
        assert_eq!(stored(&store).seq, 0);

        let ack = keeper.submit_commits(&store, vec![commit(1, None), commit(2, None)]);
        assert!(ack.blocking_recv().expect("acked").is_ok());
        let head = stored(&store);
        assert_eq!((head.seq, head.tokens, head.cost_nanos), (2, 22, 14));
        assert_eq!(head.chain, Digest::of(&[2]).to_hex());

        let started = |seq, index| OutboxRecord {
            effect: EffectRef { seq, index },
            status: OutboxStatus::Started,
            idempotency_key: Some(format!("k{seq}{index}")),
        };
        let run = RunId::new("01headtest");
        for (s, i) in [(2, 1), (2, 0), (2, 1)] {
            let ack =
                keeper.submit_mark_started(&store, run.clone(), 1, vec![started(s, i)], u64::MAX);
            assert!(ack.blocking_recv().expect("acked").is_ok());
        }
        assert_eq!(
            stored(&store).started,
            vec![(2, 0), (2, 1)],
            "sorted, once each"
        );

        let ack = keeper.submit_commits(
            &store,
            vec![commit(3, Some(EffectRef { seq: 2, index: 0 }))],
        );
        assert!(ack.blocking_recv().expect("acked").is_ok());
        assert_eq!(
            stored(&store).started,
            vec![(2, 1)],
            "the answered call left the list"
        );

        let ack = keeper.submit_release(&store, run.clone(), 1, RunStatus::Paused);
        assert!(ack.blocking_recv().expect("acked").is_ok());
        assert_eq!(stored(&store).status, "paused");
        // A release by a writer that lost the lease is fenced and changes nothing, head
        // included.
        let ack = keeper.submit_release(&store, run.clone(), 99, RunStatus::Failed);
        assert!(matches!(
            ack.blocking_recv().expect("acked"),
            Err(crate::store::StoreError::Fenced { .. })
        ));
        assert_eq!(stored(&store).status, "paused");

        let h = store.head(&run).expect("reads").expect("a head");
        let seal = Seal::from_bytes(&h.seal).expect("a seal");
        let (body, expected) = signer.seal_head(&stored(&store));
        assert_eq!((body, Some(expected)), (h.body.clone(), Some(seal.clone())));
        assert!(check_head_seal(&h.body, &seal, Some(&key.verifying_key())).is_ok());
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        assert!(check_head_seal(&h.body, &seal, Some(&other)).is_err());
    }

    #[test]
    fn a_sealed_head_carries_its_bodys_digest_which_stores_name_it_by() {
        let signer = ReceiptSigner::unsigned();
        let head = first_head(&new_run(), Digest::ZERO, Digest::ZERO, None);
        let sealed = seal(&signer, &head, None);
        assert_eq!(sealed.body_digest(), head_body_digest(&sealed.body));
        // Unsigned, the digest is the one the seal carries (the body is hashed once); signed,
        // it is the same function of the body, so a store names a head the same either way.
        assert_eq!(&sealed.seal[1..], &sealed.body_digest().0[..]);
        let signed = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[7; 32]));
        let by_key = seal(&signed, &head, None);
        assert_eq!(by_key.body, sealed.body);
        assert_eq!(by_key.body_digest(), sealed.body_digest());
        // A record read back (no digest carried) is the same record, and names the same head.
        let read = HeadRecord::new(sealed.body.clone(), sealed.seal.clone(), None);
        assert_eq!(read, sealed);
        assert_eq!(read.body_digest(), sealed.body_digest());
        let mut moved = head.clone();
        moved.seq += 1;
        assert_ne!(
            seal(&signer, &moved, None).body_digest(),
            sealed.body_digest(),
            "another head, another digest"
        );
    }

    #[test]
    fn a_store_that_keeps_heads_packed_gets_them_packed_as_they_are_sealed() {
        let signer = ReceiptSigner::unsigned();
        let head = first_head(&new_run(), Digest::ZERO, Digest::ZERO, None);
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite: Arc<dyn Store> = Arc::new(
            crate::store::SqliteStore::open(
                &dir.path().join("h.db"),
                crate::store::Durability::Normal,
            )
            .expect("opens"),
        );
        // Through a wrapper too, as the engine's bench and workers wrap their store.
        let timed = crate::store::TimedStore::new(sqlite.clone());
        for store in [&*sqlite, &timed as &dyn Store] {
            assert!(store.packs_heads());
            let sealed = seal_for(store, &signer, &head, None);
            assert_eq!(
                sealed.packed,
                crate::format::packed_head::pack_head(&sealed.body),
                "packed from the fields as the store would from the JSON"
            );
        }
        let memory = MemoryStore::new();
        assert!(!memory.packs_heads());
        assert_eq!(seal_for(&memory, &signer, &head, None).packed, None);
    }

    #[test]
    fn a_keeper_whose_view_went_stale_writes_nothing_more() {
        let signer = Arc::new(ReceiptSigner::unsigned());
        let store = MemoryStore::new();
        let mut new = new_run();
        let first = first_head(&new, Digest::ZERO, Digest::ZERO, None);
        let keeper = HeadKeeper::new(first.clone(), signer.clone());
        new.head = keeper.sealed(&store);
        drop(store.submit(Write::CreateRun(new)));
        // Two drivers that read the same head: the first to write moves it on; the other's
        // writes — a commit, a release over a run that moved on — are refused, head untouched.
        let stale = HeadKeeper::new(first, signer);
        let ack = keeper.submit_commits(&store, vec![commit(1, None)]);
        assert!(ack.blocking_recv().expect("acked").is_ok());
        let before = store.head(&RunId::new("01headtest")).expect("reads");
        let run = RunId::new("01headtest");
        let refused = stale.submit_release(&store, run.clone(), 1, RunStatus::Paused);
        assert!(matches!(
            refused.blocking_recv().expect("acked"),
            Err(crate::store::StoreError::StaleHead { .. })
        ));
        assert_eq!(store.head(&run).expect("reads"), before);
        let rec = store.run(&run).expect("reads").expect("the run");
        assert_eq!(
            rec.status,
            RunStatus::Running,
            "the status was not overwritten"
        );
        // The keeper that wrote goes on.
        let ack = keeper.submit_commits(&store, vec![commit(2, None)]);
        assert!(ack.blocking_recv().expect("acked").is_ok());
        assert_eq!(stored(&store).seq, 2);
    }
}
