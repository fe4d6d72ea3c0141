//! The check every command makes before it acts on a stored run: nothing drives, forks,
//! answers or cancels a run whose record `verify` would reject, and a refusal is `verify`'s
//! own line, written before anything else is.
//!
//! # Who calls it
//!
//! Every path that acts on a stored run goes through [`check_continuable`]: the engine's
//! take-up (`resume`, answering a person, `cancel` of a run at rest, `apply`, a child run
//! taken up by its parent, and so every `serve` action and every worker, which drive runs
//! through it), checked before the lease is taken and again under it; a fork, before the fork
//! is created; a worker before it claims a run from the queue.
//!
//! # What it checks: what the command acts on, incrementally
//!
//! A command acting from the end of the history (`ActFrom::End`) acts on the state there, the
//! calls that state waits on, the outbox rows saying which of them started, the receipt chain
//! it goes on signing, and the run's row and head. The check covers exactly that, from the
//! newest stored snapshot at or before both the end and the step that emitted every call the
//! run still waits on (a snapshot every 64 steps, so usually under 64 steps back):
//!
//! - the head's seal (signed by this engine's receipt key, which must be the run's), the run's
//!   row against the head, nothing stored past the sealed end;
//! - the snapshot: its bytes hash to the state hash stored at its step, and that step's chain
//!   link covers its event and that hash;
//! - every step after it folded through the machine as `verify` folds it: event, time, edge,
//!   effects, state hash and chain link; the message and catalog blobs each appends; the
//!   snapshots due;
//! - the chain links from the snapshot on end at the head's sealed link, so the snapshot, and
//!   every step after it, is what the head sealed;
//! - the receipts of those steps rebuilt and checked, chained from the seal before them and
//!   ending at the head's receipt tip;
//! - every outbox row of a call emitted after the snapshot against the history (its key, and
//!   `done` / `started` / `pending` as the history and head say); rows of earlier calls are
//!   `done` (no call the run waits on was emitted before the snapshot).
//!
//! A fork at step `F` (`ActFrom::Step`) is made of every step through `F`: those are all
//! checked, from the first, as `verify` checks them, then the chain links after `F` are
//! recomputed from the stored bytes (hashed, not folded) up to the parent's sealed link. An
//! edit at or before the fork point is refused. An edit after it is refused when it breaks
//! those links (an event, a state hash, a chain link: the prefix is bound to the sealed head
//! only through them); other columns after the fork point (a seal, the effects, the outbox)
//! are not the fork's and are left to `verify` of the parent.
//!
//! "Incremental" means: the sealed head commits to the chain tip, so a snapshot and the steps
//! after it are proved by re-folding only those steps; nothing before the snapshot is re-read
//! to act from the end. The cost is the fold of at most 64 steps (more only while a call
//! emitted earlier is still awaited), a handful of row reads, and one signature check per
//! receipt in those steps — independent of the run's length. A fork pays for the steps it
//! shares.
//!
//! # What it leaves to `verify`
//!
//! Steps before that snapshot when acting from the end: an edit there does not change what is
//! acted on (the state comes from the snapshot, bound to the head by the chain), and `verify`
//! reports it. Conversation messages appended before it are content-addressed under the
//! Merkle heads the snapshot's state holds, and are checked against them whenever they are
//! read: a model call never sends an edited one. The global memory a run publishes to
//! (revision 5) is checked whole (its rows and removal records); the values the run loaded
//! and the publishes it applied are checked for the steps checked. A record written before
//! heads were sealed (runtape 0.1.0) is checked as the migration sealed it (trusted on first
//! use).

use super::HistoryError;
use super::audit;
use super::read::Rebuilt;
use super::read::record;
use super::verify::{Reach, verify_once};
use crate::machine::RunId;
use crate::receipt::{HeadOrigin, ReceiptSigner, RunHead, Seal};
use crate::store::{RunRecord, Store, StoreError};

/// Where a command acts on a run from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActFrom {
    /// The end of its history: resuming it, answering it, cancelling it at rest, a worker
    /// claiming it.
    End,
    /// Step `seq` of its history: a fork made there.
    Step(u64),
}

/// What [`check_continuable`] found to act on: what was checked is what is acted on.
#[derive(Clone, Debug)]
pub struct Continuable {
    /// The head to continue from.
    pub head: RunHead,
    /// The state where the command acts from (the end of the history, or the fork point) as
    /// the check folded it, with the chain link there.
    pub rebuilt: Rebuilt,
}

/// Checks, before a command acts on the stored run `rec` names from `from` (see the module
/// doc), that what it will act on is what `verify` accepts: signed with `signer`'s key when
/// the run is signed (which must then be that key), and unsigned when it is not. Reads the
/// stretch of history it acts on, not the whole of it; writes nothing. Returns the head to
/// continue from and the state the check folded to, for the command to act on.
///
/// A refusal is [`HistoryError::Tampered`] carrying `verify`'s own line, or
/// [`HistoryError::WrongKey`]. Everything is read afresh from one snapshot of the store, so a
/// run another process is driving is checked as it stood at one moment.
pub fn check_continuable(
    store: &dyn Store,
    rec: &RunRecord,
    signer: &ReceiptSigner,
    from: ActFrom,
) -> Result<Continuable, HistoryError> {
    on_a_view(store, &rec.id, |view| {
        continuable_on(view, rec, signer, from)
    })
}

/// [`check_continuable`] on `store`, a view of the database.
fn continuable_on(
    store: &dyn Store,
    rec: &RunRecord,
    signer: &ReceiptSigner,
    from: ActFrom,
) -> Result<Continuable, HistoryError> {
    let run = &rec.id;
    let refuse = |detail: String| HistoryError::Tampered {
        run: run.to_string(),
        detail,
    };
    let stored = match store.head(run) {
        Ok(stored) => stored,
        Err(StoreError::Damaged { detail, .. }) => return Err(refuse(detail)),
        Err(e) => return Err(e.into()),
    };
    let opened = stored.as_ref().map(audit::open_head).transpose();
    if let Ok(Some((head, seal))) = &opened {
        // A head that is not this run's is tampering, whatever key it was sealed with.
        if let Err(d) = audit::identity(&record(store, run)?, head) {
            return Err(refuse(d.to_string()));
        }
        same_key(run.as_str(), head, seal, signer)?;
    }
    let reach = match from {
        ActFrom::End => Reach::Tail,
        ActFrom::Step(seq) => Reach::Through(seq),
    };
    let key = signer.verifying_key();
    let held = match verify_once(store, run, key.as_ref(), stored, reach)? {
        Ok(held) => held,
        Err(d) => return Err(refuse(d.to_string())),
    };
    let rebuilt = Rebuilt {
        state: held.state,
        chain: held.chain,
    };
    match opened {
        Ok(Some((head, _))) => Ok(Continuable { head, rebuilt }),
        // The check above refuses a head that is missing or does not open.
        Ok(None) => Err(refuse("runs.head: none".into())),
        Err(d) => Err(refuse(d.to_string())),
    }
}

/// What a process needs to trust before it builds anything from a stored run's setup
/// (providers, tools), without reading its history: the head's seal (with `signer`'s key,
/// which must be the run's), and that the run's row is the one the head sealed — its id,
/// parent, spec, setup, goal and creation time. [`check_continuable`] checks this and the
/// history the command acts on; call this where only the setup is used, then act only through
/// a path that makes the whole check (the engine's take-up, a fork's plan). Writes nothing.
pub fn check_identity(
    store: &dyn Store,
    rec: &RunRecord,
    signer: &ReceiptSigner,
) -> Result<RunHead, HistoryError> {
    on_a_view(store, &rec.id, |view| identity_on(view, rec, signer))
}

/// [`check_identity`] on `store`, a view of the database.
fn identity_on(
    store: &dyn Store,
    rec: &RunRecord,
    signer: &ReceiptSigner,
) -> Result<RunHead, HistoryError> {
    let run = &rec.id;
    let refuse = |detail: String| HistoryError::Tampered {
        run: run.to_string(),
        detail,
    };
    let stored = match store.head(run) {
        Ok(Some(stored)) => stored,
        Ok(None) => {
            return Err(refuse(
                "runs.head: sealed head: expected the run's head, found none".into(),
            ));
        }
        Err(StoreError::Damaged { detail, .. }) => return Err(refuse(detail)),
        Err(e) => return Err(e.into()),
    };
    let (head, seal) = audit::open_head(&stored).map_err(|d| refuse(d.to_string()))?;
    audit::identity(&record(store, run)?, &head).map_err(|d| refuse(d.to_string()))?;
    same_key(run.as_str(), &head, &seal, signer)?;
    let key = signer.verifying_key();
    super::verify::head_seal(&stored, &head, &seal, key.as_ref())
        .map_err(|d| refuse(d.to_string()))?;
    Ok(head)
}

/// How many views a check is made on before a database that keeps dropping the connection is
/// reported as a failure to read the run.
const VIEW_ATTEMPTS: usize = 5;

/// Runs `check` on a view of `store` ([`Store::snapshot`]; on `store` itself when it has
/// none). A view whose connection was lost during the check ([`Store::view_lost`]: the
/// database restarted or went away) proves nothing either way — not even a refusal, as its
/// reads failed — so the check is made again on a new view, and opening that one waits for the
/// database as the store's reads do (a `runtape worker`'s store waits out a restart; others
/// fail at once). After [`VIEW_ATTEMPTS`] lost views, the failure to read `run` is returned.
fn on_a_view<T>(
    store: &dyn Store,
    run: &RunId,
    check: impl Fn(&dyn Store) -> Result<T, HistoryError>,
) -> Result<T, HistoryError> {
    let mut attempts = 0;
    loop {
        let snapshot = store.snapshot()?;
        let result = check(snapshot.as_deref().unwrap_or(store));
        attempts += 1;
        let lost = snapshot.as_ref().is_some_and(|view| view.view_lost());
        match result {
            Err(_) if lost && attempts < VIEW_ATTEMPTS => continue,
            Err(HistoryError::Store(e)) if lost => return Err(e.into()),
            Err(_) if lost => {
                return Err(StoreError::Io(format!(
                    "the connection to the database was lost while run {run} was checked, {attempts} times; check that the server is up and reachable"
                ))
                .into());
            }
            other => return other,
        }
    }
}

/// A run signed with a key is continued only with that key, and an unsigned one only without
/// (a head trusted on first use excepted), so the receipts it goes on with are sealed like
/// those before.
fn same_key(
    run: &str,
    head: &RunHead,
    seal: &Seal,
    signer: &ReceiptSigner,
) -> Result<(), HistoryError> {
    match (seal, head.origin, signer.key_id()) {
        (Seal::Ed25519 { key_id, .. }, _, Some(mine)) if key_id == mine => Ok(()),
        (Seal::Ed25519 { key_id, .. }, _, _) => Err(HistoryError::WrongKey(format!(
            "run {run}'s head is signed with the key {key_id}; continue it with the same receipt key (RUNTAPE_RECEIPT_KEY or --receipt-key)"
        ))),
        (Seal::Unsigned { .. }, HeadOrigin::Engine, Some(_)) => {
            Err(HistoryError::WrongKey(format!(
                "run {run} was run without a receipt key (its head is unsigned); continue it without one"
            )))
        }
        (Seal::Unsigned { .. }, _, _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ledger::{HeadKeeper, first_head};
    use crate::machine::{Digest, RunId};
    use crate::receipt::SigningKey;
    use crate::store::{HeadRecord, MemoryStore, NewRun, Write};

    fn created(store: &MemoryStore, signer: Arc<ReceiptSigner>) -> RunRecord {
        created_with(store, signer, None)
    }

    /// A run created and not started, its first head sealed with `state_hash` (Created's when
    /// `None`, as the engine seals it now).
    fn created_with(
        store: &MemoryStore,
        signer: Arc<ReceiptSigner>,
        state_hash: Option<Digest>,
    ) -> RunRecord {
        let spec = crate::machine::RunSpec::build(crate::machine::Spec {
            agents: vec![crate::machine::AgentSpec::new("a", "p", "m")],
            ..crate::machine::Spec::default()
        })
        .expect("valid");
        let mut new = NewRun {
            id: RunId::new("01continuable"),
            parent: None,
            spec: serde_json::to_string(&spec).expect("serialises"),
            setup: None,
            goal: "a goal".into(),
            now_ms: 1_700_000_000_000,
            owner: "me".into(),
            lease_expires_ms: u64::MAX,
            head: HeadRecord::default(),
            session: None,
        };
        let created = state_hash
            .unwrap_or_else(|| crate::machine::RunState::Created.state_hash(spec.history_hash()));
        let keeper = HeadKeeper::new(first_head(&new, created, Digest::ZERO, None), signer);
        new.head = keeper.sealed(store);
        drop(store.submit(Write::CreateRun(new)));
        store
            .run(&RunId::new("01continuable"))
            .expect("reads")
            .expect("the run")
    }

    #[test]
    fn a_run_is_continued_only_with_its_own_key_or_none() {
        let store = MemoryStore::new();
        let rec = created(&store, Arc::new(ReceiptSigner::unsigned()));
        let unsigned = ReceiptSigner::unsigned();
        let r = check_continuable(&store, &rec, &unsigned, ActFrom::End);
        assert!(r.is_ok(), "{r:?}");
        let keyed = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[1; 32]));
        assert!(matches!(
            check_continuable(&store, &rec, &keyed, ActFrom::End),
            Err(HistoryError::WrongKey(_))
        ));

        let store = MemoryStore::new();
        let rec = created(&store, Arc::new(keyed));
        let same = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[1; 32]));
        assert!(check_continuable(&store, &rec, &same, ActFrom::End).is_ok());
        let other = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[2; 32]));
        for signer in [&other, &unsigned] {
            assert!(matches!(
                check_continuable(&store, &rec, signer, ActFrom::End),
                Err(HistoryError::WrongKey(_))
            ));
        }
    }

    #[test]
    fn a_run_queued_by_an_earlier_runtape_is_continued() {
        // Its first head was sealed with zeros for a state hash, not Created's.
        let store = MemoryStore::new();
        let signer = Arc::new(ReceiptSigner::unsigned());
        let rec = created_with(&store, signer, Some(Digest::ZERO));
        let r = check_continuable(&store, &rec, &ReceiptSigner::unsigned(), ActFrom::End);
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn a_fork_point_past_the_sealed_end_is_out_of_range() {
        let store = MemoryStore::new();
        let rec = created(&store, Arc::new(ReceiptSigner::unsigned()));
        let refused = check_continuable(&store, &rec, &ReceiptSigner::unsigned(), ActFrom::Step(3));
        assert!(
            matches!(refused, Err(HistoryError::SeqOutOfRange { seq: 3, .. })),
            "{refused:?}"
        );
    }
}
