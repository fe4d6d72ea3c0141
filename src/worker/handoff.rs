//! Handing runs to the workers: queueing a new run without driving it (`runtape run
//! --detach`), and giving a run a worker stopped back to the queue.

use std::sync::Arc;

use crate::exec::{Engine, EngineError};
use crate::ledger::{HeadKeeper, first_head};
use crate::machine::{Digest, RunId, RunSpec, RunState};
use crate::receipt::ReceiptSigner;
use crate::store::{self, NewRun, RunStatus, Store, StoreError, Write, Written};

/// Creates run `id` of `spec` toward `goal` with `setup` (how any process rebuilds its
/// providers and tools) and leaves it queued: status `running`, no lease held, nothing
/// committed yet. A worker serving the spec's directory takes it up (`Start` is its first
/// step); so does `runtape resume`. Its head is sealed with `signer`, which every process
/// continuing it must share.
pub async fn enqueue(
    store: &dyn Store,
    signer: Arc<ReceiptSigner>,
    id: RunId,
    spec: &RunSpec,
    goal: &str,
    setup: String,
) -> Result<RunId, EngineError> {
    enqueue_in_session(store, signer, id, spec, goal, setup, None).await
}

/// [`enqueue`], as the next run of `session` when one is given (revision 5): its place in the
/// session is taken now, refused as [`crate::exec::StartRun::in_session`] refuses it.
pub async fn enqueue_in_session(
    store: &dyn Store,
    signer: Arc<ReceiptSigner>,
    id: RunId,
    spec: &RunSpec,
    goal: &str,
    setup: String,
    session: Option<(String, crate::exec::SessionSettings)>,
) -> Result<RunId, EngineError> {
    let (spec, link) = match &session {
        Some((name, settings)) => {
            let (spec, link) = crate::exec::session::next_run(store, spec, name, settings)?;
            (spec, Some(link))
        }
        None => (spec.clone(), None),
    };
    let spec = &spec;
    let spec_json = serde_json::to_string(spec).map_err(|e| EngineError::Unencodable {
        what: "spec",
        reason: e.to_string(),
    })?;
    let now = crate::clock::wall_ms();
    let mut nonce = [0u8; 8];
    // Without OS randomness the nonce only tells this process's owners apart, which the pid
    // already does.
    let _ = getrandom::fill(&mut nonce);
    let mut new = NewRun {
        id: id.clone(),
        parent: None,
        spec: spec_json,
        setup: Some(setup),
        goal: goal.to_owned(),
        now_ms: now,
        owner: store::owner_id(u64::from_le_bytes(nonce)),
        lease_expires_ms: now + 60_000,
        head: Default::default(),
        session: link,
    };
    // Sealed as `verify` reads a run with no transition yet: `Created`'s hash.
    let created = RunState::Created.state_hash(spec.history_hash());
    let keeper = HeadKeeper::new(first_head(&new, created, Digest::ZERO, None), signer);
    new.head = keeper.sealed(store);
    let epoch = match store::write(store, Write::CreateRun(new)).await? {
        Written::Lease(e) => e,
        Written::Done | Written::MemoryOverCap(_) | Written::Pruned(_) => 1,
    };
    let release = keeper.submit_release(store, id.clone(), epoch, RunStatus::Running);
    release.await.unwrap_or(Err(StoreError::Closed))?;
    Ok(id)
}

/// What [`requeue`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requeued {
    /// The run is queued again (status `running`, no lease).
    Queued,
    /// Nothing to do: the run ended, waits for a person or a budget, or another process
    /// holds it.
    Left(String),
}

/// Gives a run that `engine`'s driver stopped (a graceful stop, a lost connection, a lease it
/// could no longer be sure of) back to the queue, so another worker continues it: takes its
/// lease (a compare-and-swap, refused while another live process holds it) and releases it
/// as `running`. A run that has ended or rests waiting for a person or a budget is left as it
/// is. The head is not resealed: a `running` row over an unfinished head is a run in hand,
/// which `verify` accepts.
pub async fn requeue(engine: &Engine, run: &RunId) -> Result<Requeued, EngineError> {
    let store = engine.store().as_ref();
    let rec = crate::history::record(store, run)?;
    if rec.status != RunStatus::Paused && rec.status != RunStatus::Running {
        return Ok(Requeued::Left(format!("it rests {}", rec.status)));
    }
    let now = engine.clock().wall_ms();
    let acquire = Write::AcquireLease {
        run: run.clone(),
        owner: engine.owner().to_owned(),
        now_ms: now,
        expires_ms: now + 30_000,
    };
    let epoch = match store::write(store, acquire).await {
        Ok(Written::Lease(e)) => e,
        Ok(Written::Done | Written::MemoryOverCap(_) | Written::Pruned(_)) => {
            return Ok(Requeued::Left("no lease was granted".into()));
        }
        Err(e @ (StoreError::LeaseHeld { .. } | StoreError::Finished { .. })) => {
            return Ok(Requeued::Left(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    let release = Write::ReleaseLease {
        run: run.clone(),
        epoch,
        status: RunStatus::Running,
        head: None,
    };
    store::write(store, release).await?;
    Ok(Requeued::Queued)
}
