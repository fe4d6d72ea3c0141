//! The PostgreSQL store's writer: one task owns one connection and commits every queued write
//! of every run of this process in one transaction per batch (group commit). Nothing is
//! acknowledged before its transaction has committed.
//!
//! A batch first locks the rows of the runs it touches, in id order (so two processes' batches
//! never deadlock on each other), then applies each write: every check that can refuse a
//! write (the lease epoch, the seq, the head it replaces, an answered call) is made before it
//! changes anything, so a refused write is simply left out of the transaction. The writes of
//! different runs are applied at once, pipelined on the one connection (`lanes.rs`), so a
//! batch of many runs' commits costs about the round trips of one. A database
//! error aborts the whole transaction: it is rolled back and tried again without the write
//! that caused it. A connection lost mid-batch fails every write of the batch (if the `COMMIT`
//! itself was lost, its outcome is unknown: the drivers stop, and whoever takes their runs up
//! reads what was committed).
//!
//! Lease expiries are computed on the database's clock: a write carries the lease's length
//! (its expiry minus the writer's clock when it was queued), and the row gets
//! `runtape.now_ms()` plus that length.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::future::{BoxFuture, try_join_all};
use tokio::sync::{mpsc, oneshot};

use super::conn::{Backend, Conn};
use super::lanes::{apply_in_lanes, own_run};
use super::run_summary::NewSummary;
use super::schema::{classify, connection_lost, retryable};
use crate::format::packed_head::unpack_head;
use crate::machine::{Digest, RunId};
use crate::store::protocol;
use crate::store::{
    Commit, CommitStats, Control, Durable, NewRun, OutboxRecord, RunStatus, StoreError, Write,
    Written,
};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 512;

/// How often a batch is tried again after a deadlock or a serialisation failure.
const MAX_RETRIES: usize = 5;

/// A queued write, the writer's wall clock when it was queued, where its result goes, and who
/// is told when it is durable ([`crate::store::Store::submit_timed`]).
pub(super) type Job = (
    Write,
    u64,
    oneshot::Sender<Result<Written, StoreError>>,
    Option<Durable>,
);

/// Takes batches of queued writes until every sender is gone, committing each batch.
pub(super) async fn writer_loop(
    backend: Arc<Backend>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    stats: Arc<CommitStats>,
) {
    let mut conn: Option<Conn> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let results = apply_batch(&backend, &mut conn, &batch).await;
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let committed = crate::clock::stopwatch();
        for ((_, _, ack, durable), result) in batch.into_iter().zip(results) {
            if let (Some(durable), Ok(_)) = (durable, &result) {
                durable(committed);
            }
            let _ = ack.send(result);
        }
    }
}

/// Why one write was not applied.
pub(super) enum Fail {
    /// A check refused it; nothing of it was written.
    Refused(StoreError),
    /// The database failed; the transaction is aborted.
    Db(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Refused(e)
    }
}

/// How one transaction over the pending writes ended.
enum Attempt {
    /// Committed: each pending write's outcome.
    Committed(Vec<Result<Written, StoreError>>),
    /// Rolled back because write `index` made the database fail (or, with `None`, the
    /// transaction itself failed).
    Failed(Option<usize>, tokio_postgres::Error),
    /// Rolled back for a deadlock or serialisation failure: try everything again.
    Retry(tokio_postgres::Error),
    /// The connection is gone; with `true` while the `COMMIT` was on its way, so whether it
    /// happened is unknown.
    Lost(tokio_postgres::Error, bool),
}

async fn apply_batch(
    backend: &Backend,
    slot: &mut Option<Conn>,
    batch: &[Job],
) -> Vec<Result<Written, StoreError>> {
    let shown = backend.shown();
    let mut results: Vec<Option<Result<Written, StoreError>>> = vec![None; batch.len()];
    let mut retries = 0;
    let mut reconnected = false;
    loop {
        let pending: Vec<usize> = (0..batch.len()).filter(|i| results[*i].is_none()).collect();
        if pending.is_empty() {
            break;
        }
        if slot.as_ref().is_none_or(Conn::is_closed) {
            match backend.connect().await {
                Ok(c) => *slot = Some(c),
                Err(e) => {
                    fill(&mut results, &pending, &e);
                    break;
                }
            }
        }
        let Some(conn) = slot.as_ref() else { break };
        match attempt(conn, batch, &pending).await {
            Attempt::Committed(outcomes) => {
                for (i, r) in pending.into_iter().zip(outcomes) {
                    results[i] = Some(r);
                }
                break;
            }
            Attempt::Failed(Some(i), e) => results[i] = Some(Err(classify(shown, &e))),
            Attempt::Failed(None, e) => {
                fill(&mut results, &pending, &classify(shown, &e));
                break;
            }
            Attempt::Retry(e) => {
                retries += 1;
                if retries > MAX_RETRIES {
                    fill(&mut results, &pending, &classify(shown, &e));
                    break;
                }
            }
            Attempt::Lost(e, committing) => {
                *slot = None;
                // Nothing was committed unless the COMMIT itself was lost: try again once on
                // a new connection (the server restarted, or ended this connection).
                if committing || reconnected {
                    fill(&mut results, &pending, &classify(shown, &e));
                    break;
                }
                reconnected = true;
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or(Err(StoreError::Closed)))
        .collect()
}

fn fill(results: &mut [Option<Result<Written, StoreError>>], pending: &[usize], e: &StoreError) {
    for i in pending {
        results[*i] = Some(Err(e.clone()));
    }
}

/// One transaction over the writes at `pending`.
async fn attempt(conn: &Conn, batch: &[Job], pending: &[usize]) -> Attempt {
    let ended = |e: tokio_postgres::Error, index: Option<usize>| {
        if connection_lost(&e) {
            Attempt::Lost(e, false)
        } else if retryable(&e) {
            Attempt::Retry(e)
        } else {
            Attempt::Failed(index, e)
        }
    };
    let mut ids: Vec<&str> = pending
        .iter()
        .filter_map(|i| run_of(&batch[*i].0))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    // `BEGIN` and the locks travel together (one round trip): each is sent when first polled,
    // in this order.
    let (begun, locked) = tokio::join!(conn.client().batch_execute("BEGIN"), lock_runs(conn, &ids));
    if let Err(e) = begun {
        return ended(e, None);
    }
    let mut keys = match locked {
        Ok(keys) => keys,
        Err(e) => return rollback(conn, ended(e, None)).await,
    };
    let mut outcomes = Vec::with_capacity(pending.len());
    let mut at = 0;
    while at < pending.len() {
        // The writes of runs' own rows up to the next one that spans runs go in lanes, one
        // per run, at once; a write that spans runs is applied alone.
        let lanes = pending[at..]
            .iter()
            .take_while(|i| own_run(&batch[**i].0).is_some())
            .count();
        if lanes > 0 {
            match apply_in_lanes(conn, &mut keys, batch, &pending[at..at + lanes]).await {
                Ok(done) => outcomes.extend(done),
                Err((e, culprit)) => return rollback(conn, ended(e, culprit)).await,
            }
            at += lanes;
            continue;
        }
        let i = pending[at];
        let (write, queued_ms, _, _) = &batch[i];
        match apply(conn, &mut keys, write, *queued_ms).await {
            Ok(w) => outcomes.push(Ok(w)),
            Err(Fail::Refused(e)) => outcomes.push(Err(e)),
            Err(Fail::Db(e)) => return rollback(conn, ended(e, Some(i))).await,
        }
        at += 1;
    }
    match conn.client().batch_execute("COMMIT").await {
        Ok(()) => Attempt::Committed(outcomes),
        Err(e) if connection_lost(&e) => Attempt::Lost(e, true),
        Err(e) => ended(e, None),
    }
}

async fn rollback(conn: &Conn, outcome: Attempt) -> Attempt {
    if !matches!(outcome, Attempt::Lost(..))
        && let Err(e) = conn.client().batch_execute("ROLLBACK").await
    {
        return Attempt::Lost(e, false);
    }
    outcome
}

/// The run a write changes.
fn run_of(write: &Write) -> Option<&str> {
    Some(match write {
        Write::CreateRun(_) => return None,
        Write::Commit(c) => c.run.as_str(),
        Write::Commits(cs) => cs.first()?.run.as_str(),
        Write::MarkStarted { run, .. }
        | Write::RenewLease { run, .. }
        | Write::AcquireLease { run, .. }
        | Write::ReleaseLease { run, .. }
        | Write::SetControl { run, .. } => run.as_str(),
        Write::PublishMemory(p) => p.run.as_str(),
        Write::RemoveMemory(_) | Write::Prune(_) => return None,
        Write::Import(run) => run.record.id.as_str(),
    })
}

/// Locks the rows of `ids` (sorted) for this transaction; returns their keys.
async fn lock_runs(
    conn: &Conn,
    ids: &[&str],
) -> Result<HashMap<String, i64>, tokio_postgres::Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = conn
        .query(
            "SELECT id, key FROM runtape.runs WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// The run's key (its row locked), from the batch's locks or looked up now.
async fn key_of(conn: &Conn, keys: &mut HashMap<String, i64>, run: &RunId) -> Result<i64, Fail> {
    if let Some(k) = keys.get(run.as_str()) {
        return Ok(*k);
    }
    let row = conn
        .query_opt(
            "SELECT key FROM runtape.runs WHERE id = $1 FOR UPDATE",
            &[&run.as_str()],
        )
        .await?;
    let key: i64 = row
        .ok_or_else(|| StoreError::UnknownRun(run.to_string()))?
        .try_get(0)?;
    keys.insert(run.to_string(), key);
    Ok(key)
}

/// The facts of a run's row the protocol's rules ([`protocol`]) decide on, read in the
/// batch's transaction (the row is locked) in one statement.
struct Row {
    epoch: u64,
    seq: u64,
    owner: Option<String>,
    /// When the lease lapses, on the database's clock (ms).
    expires_ms: u64,
    /// The database's clock when the row was read (ms).
    now_ms: u64,
    status: RunStatus,
    control: Option<Control>,
    /// The digest of the stored head's body; read only when asked for (`None` otherwise).
    head: Option<Digest>,
}

impl Row {
    /// The lease and status, as [`protocol::take_up`] reads them.
    fn lease(&self) -> protocol::LeaseRow<'_> {
        protocol::LeaseRow {
            epoch: self.epoch,
            holder: self.owner.as_deref(),
            expires_ms: self.expires_ms,
            status: self.status,
        }
    }
}

/// Reads the run's row; with `with_head`, the stored head too (a write whose head names the
/// head it replaces needs it), in the same round trip.
async fn row(conn: &Conn, key: i64, run: &RunId, with_head: bool) -> Result<Row, Fail> {
    let r = conn
        .query_opt(
            "SELECT lease_epoch, seq, lease_owner, lease_expires_ms, runtape.now_ms(), status, \
             control, CASE WHEN $2 THEN head END FROM runtape.runs WHERE key = $1",
            &[&key, &with_head],
        )
        .await?
        .ok_or_else(|| StoreError::UnknownRun(run.to_string()))?;
    let status: String = r.try_get(5)?;
    let control: Option<String> = r.try_get(6)?;
    let head: Option<Vec<u8>> = r.try_get(7)?;
    let ms = |i: usize| -> Result<u64, tokio_postgres::Error> {
        Ok(r.try_get::<_, i64>(i)?.max(0) as u64)
    };
    Ok(Row {
        epoch: ms(0)?,
        seq: ms(1)?,
        owner: r.try_get(2)?,
        expires_ms: ms(3)?,
        now_ms: ms(4)?,
        status: RunStatus::parse(&status).ok_or_else(|| StoreError::Damaged {
            run: run.to_string(),
            detail: format!("runs.status `{status}` is not a status"),
        })?,
        control: control.as_deref().and_then(Control::from_column),
        head: head.as_deref().map(head_digest),
    })
}

/// The digest a stored head is known by. A head that does not unpack is digested as stored:
/// it matches no head a writer names, so the write is refused as stale rather than written
/// over it.
fn head_digest(stored: &[u8]) -> Digest {
    let body = unpack_head(stored).unwrap_or(std::borrow::Cow::Borrowed(stored));
    crate::receipt::head_body_digest(&body)
}

/// A lease length in ms, as a database parameter.
fn ttl(expires_ms: u64, from_ms: u64) -> i64 {
    expires_ms.saturating_sub(from_ms).min(i64::MAX as u64) as i64
}

/// Applies one write in the batch's transaction: every check that can refuse it first, then
/// its statements. Called for each write in queue order, a run's writes one after another
/// (other runs' writes may be applied at the same time: [`super::lanes`]).
pub(super) async fn apply(
    conn: &Conn,
    keys: &mut HashMap<String, i64>,
    write: &Write,
    queued_ms: u64,
) -> Result<Written, Fail> {
    match write {
        Write::CreateRun(new) => create_run(conn, keys, new).await,
        Write::Commit(c) => {
            let key = key_of(conn, keys, &c.run).await?;
            check_commits(conn, key, std::slice::from_ref(c)).await?;
            write_commit(conn, key, c).await?;
            Ok(Written::Done)
        }
        Write::Commits(cs) => {
            let Some(first) = cs.first() else {
                return Ok(Written::Done);
            };
            let key = key_of(conn, keys, &first.run).await?;
            check_commits(conn, key, cs).await?;
            for c in cs {
                write_commit(conn, key, c).await?;
            }
            Ok(Written::Done)
        }
        Write::MarkStarted {
            run,
            epoch,
            effects,
            expires_ms,
            head,
        } => {
            let key = key_of(conn, keys, run).await?;
            let replaces = head.as_ref().and_then(|h| h.replaces);
            let r = row(conn, key, run, replaces.is_some()).await?;
            protocol::fence(run, *epoch, r.epoch)?;
            protocol::may_start(run, first_answered(conn, key, effects).await?)?;
            protocol::head_follows(run, r.head, replaces)?;
            for o in effects {
                mark_started(conn, key, o).await?;
            }
            renew(conn, key, ttl(*expires_ms, queued_ms)).await?;
            put_head(conn, key, head.as_ref()).await?;
            Ok(Written::Done)
        }
        Write::PublishMemory(p) => {
            let key = key_of(conn, keys, &p.run).await?;
            protocol::fence(&p.run, p.epoch, row(conn, key, &p.run, false).await?.epoch)?;
            super::global_memory::publish(conn, p).await
        }
        Write::RemoveMemory(r) => super::global_memory::remove(conn, r).await,
        Write::Prune(p) => super::retention::prune(conn, p).await,
        Write::Import(run) => super::import::import(conn, run).await,
        Write::RenewLease {
            run,
            epoch,
            expires_ms,
        } => {
            let key = key_of(conn, keys, run).await?;
            protocol::fence(run, *epoch, row(conn, key, run, false).await?.epoch)?;
            renew(conn, key, ttl(*expires_ms, queued_ms)).await?;
            Ok(Written::Done)
        }
        Write::AcquireLease {
            run,
            owner,
            now_ms,
            expires_ms,
        } => {
            let key = key_of(conn, keys, run).await?;
            let r = row(conn, key, run, false).await?;
            // Judged on the database's clock, as the expiry was written.
            let next = protocol::take_up(run, &r.lease(), owner, r.now_ms, |holder| {
                crate::store::owner_is_dead(holder)
            })?;
            let control = protocol::control_after_take_up(r.control);
            conn.execute(
                "UPDATE runtape.runs SET lease_epoch = $2, lease_owner = $3, \
                 lease_expires_ms = runtape.now_ms() + $4, control = $5, status = 'running' \
                 WHERE key = $1",
                &[
                    &key,
                    &(next as i64),
                    owner,
                    &ttl(*expires_ms, *now_ms),
                    &control.as_ref().map(Control::to_column),
                ],
            )
            .await?;
            Ok(Written::Lease(next))
        }
        Write::ReleaseLease {
            run,
            epoch,
            status,
            head,
        } => {
            let key = key_of(conn, keys, run).await?;
            let replaces = head.as_ref().and_then(|h| h.replaces);
            let r = row(conn, key, run, replaces.is_some()).await?;
            protocol::fence(run, *epoch, r.epoch)?;
            if r.owner.is_none() {
                // Released already: a second release writes nothing.
                return Ok(Written::Done);
            }
            protocol::head_follows(run, r.head, replaces)?;
            conn.execute(
                "UPDATE runtape.runs SET lease_owner = NULL, lease_expires_ms = 0, status = $2 \
                 WHERE key = $1",
                &[
                    &key,
                    &protocol::status_on_release(r.status, *status).as_str(),
                ],
            )
            .await?;
            put_head(conn, key, head.as_ref()).await?;
            Ok(Written::Done)
        }
        Write::SetControl { run, control } => {
            let key = key_of(conn, keys, run).await?;
            if control.is_some() {
                // Clearing a request is always allowed: only a request needs the status.
                let r = row(conn, key, run, false).await?;
                protocol::may_request(run, r.status, control.as_ref())?;
            }
            let value = control.as_ref().map(Control::to_column);
            conn.execute(
                "UPDATE runtape.runs SET control = $2 WHERE key = $1",
                &[&key, &value],
            )
            .await?;
            Ok(Written::Done)
        }
    }
}

/// The first of `effects` (in their order) whose call the outbox holds as answered, `(seq,
/// index)`, read in one statement.
async fn first_answered(
    conn: &Conn,
    key: i64,
    effects: &[OutboxRecord],
) -> Result<Option<(u64, u32)>, Fail> {
    if effects.is_empty() {
        return Ok(None);
    }
    let seqs: Vec<i64> = effects.iter().map(|o| o.effect.seq as i64).collect();
    let idxs: Vec<i64> = effects.iter().map(|o| i64::from(o.effect.index)).collect();
    let done = conn
        .query(
            "SELECT o.seq, o.idx FROM runtape.outbox o \
             JOIN unnest($2::int8[], $3::int8[]) AS e(seq, idx) ON o.seq = e.seq AND o.idx = e.idx \
             WHERE o.run = $1 AND o.status = 'done'",
            &[&key, &seqs, &idxs],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get::<_, i64>(0)?, r.try_get::<_, i64>(1)?)))
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    Ok(effects
        .iter()
        .map(|o| (o.effect.seq, o.effect.index))
        .find(|(seq, idx)| done.contains(&(*seq as i64, i64::from(*idx)))))
}

async fn create_run(
    conn: &Conn,
    keys: &mut HashMap<String, i64>,
    new: &NewRun,
) -> Result<Written, Fail> {
    let (parent, fork_seq) = match &new.parent {
        Some((p, s)) => (Some(p.as_str()), Some(*s as i64)),
        None => (None, None),
    };
    let kind = if new.parent.is_some() {
        "preparing"
    } else {
        "created"
    };
    // A fork's history starts in its parent's: the parent's row is locked until this commits,
    // so a prune either sees the fork or removed the parent first (and the fork is refused).
    if let Some(p) = parent
        && conn
            .query_opt("SELECT 1 FROM runtape.runs WHERE id = $1 FOR SHARE", &[&p])
            .await?
            .is_none()
    {
        return Err(Fail::Refused(StoreError::UnknownRun(p.to_owned())));
    }
    if let Some(link) = &new.session {
        super::sessions::check_next(conn, link).await??;
    }
    let row = conn
        .query_opt(
            "INSERT INTO runtape.runs (id, status, state_kind, seq, lease_epoch, lease_owner, \
             lease_expires_ms, control, updated_ms, cost_nanos, tokens, head, seal) \
             VALUES ($1, 'running', $2, $3, 1, $4, runtape.now_ms() + $5, NULL, $6, 0, 0, $7, $8) \
             ON CONFLICT (id) DO NOTHING RETURNING key",
            &[
                &new.id.as_str(),
                &kind,
                &fork_seq.unwrap_or(0),
                &new.owner,
                &ttl(new.lease_expires_ms, new.now_ms),
                &(new.now_ms as i64),
                &new.head.body,
                &new.head.seal,
            ],
        )
        .await?;
    let Some(row) = row else {
        return Err(Fail::Refused(StoreError::DuplicateRun(new.id.to_string())));
    };
    let key: i64 = row.try_get(0)?;
    // The run-list row goes out with the spec's, in one round trip.
    let created_ms = new.now_ms as i64;
    let specs_row: [&P<'_>; 7] = [
        &key,
        &parent,
        &fork_seq,
        &new.spec,
        &new.setup,
        &new.goal,
        &created_ms,
    ];
    let specs = conn.execute(
        "INSERT INTO runtape.run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
        &specs_row,
    );
    let summary = super::run_summary::insert(
        conn,
        NewSummary {
            key,
            spec: &new.spec,
            fork_of: parent,
            goal: &new.goal,
            created_ms,
            outcome: None,
        },
    );
    futures_util::future::try_join(specs, summary).await?;
    if let Some(link) = &new.session {
        super::sessions::place(conn, key, link).await?;
    }
    keys.insert(new.id.to_string(), key);
    Ok(Written::Lease(1))
}

/// Everything that could refuse consecutive commits of one run, checked before any is
/// written ([`protocol::in_sequence`]: the same run and epoch throughout, in sequence after
/// the latest seq; [`protocol::head_follows`]: each head replaces the stored head, or the one
/// an earlier commit of the list wrote). The row and the stored head are read in one
/// statement.
async fn check_commits(conn: &Conn, key: i64, cs: &[Commit]) -> Result<(), Fail> {
    let Some(first) = cs.first() else {
        return Ok(());
    };
    let names_a_head = cs
        .iter()
        .any(|c| c.head.as_ref().is_some_and(|h| h.replaces.is_some()));
    let r = row(conn, key, &first.run, names_a_head).await?;
    let numbered = cs.iter().map(|c| protocol::Numbered {
        run: &c.run,
        epoch: c.epoch,
        seq: c.seq,
    });
    protocol::in_sequence(&first.run, r.epoch, r.seq, numbered)?;
    let mut stored = r.head;
    for c in cs {
        let Some(h) = &c.head else { continue };
        protocol::head_follows(&c.run, stored, h.replaces)?;
        stored = Some(h.body_digest());
    }
    Ok(())
}

async fn put_head(
    conn: &Conn,
    key: i64,
    head: Option<&crate::store::HeadRecord>,
) -> Result<(), Fail> {
    let Some(h) = head else { return Ok(()) };
    conn.execute(
        "UPDATE runtape.runs SET head = $2, seal = $3 WHERE key = $1",
        &[&key, &h.body, &h.seal],
    )
    .await?;
    Ok(())
}

async fn renew(conn: &Conn, key: i64, ttl_ms: i64) -> Result<(), Fail> {
    conn.execute(
        "UPDATE runtape.runs SET lease_expires_ms = runtape.now_ms() + $2 \
         WHERE key = $1 AND lease_owner IS NOT NULL",
        &[&key, &ttl_ms],
    )
    .await?;
    Ok(())
}

async fn mark_started(conn: &Conn, key: i64, o: &OutboxRecord) -> Result<(), Fail> {
    conn.execute(
        "INSERT INTO runtape.outbox (run, seq, idx, status, idempotency_key) VALUES ($1, $2, $3, 'started', $4) \
         ON CONFLICT (run, seq, idx) DO UPDATE SET status = 'started' WHERE runtape.outbox.status = 'pending'",
        &[&key, &(o.effect.seq as i64), &i64::from(o.effect.index), &o.idempotency_key],
    )
    .await?;
    Ok(())
}

/// A statement parameter.
type P<'a> = dyn tokio_postgres::types::ToSql + Sync + 'a;

/// Writes one checked commit: its statements are sent together (pipelined) and awaited as
/// one.
async fn write_commit(conn: &Conn, key: i64, c: &Commit) -> Result<(), Fail> {
    let id = crate::store::schema::row_id(key, c.seq);
    let at = c.at.0 as i64;
    let seq = c.seq as i64;
    let hash = &c.state_hash.0[..];
    let chain = &c.chain.0[..];
    let ttl_ms = ttl(c.lease_expires_ms, c.now_ms);
    let (cost, tokens, unpriced, now) = (
        c.cost_nanos as i64,
        c.tokens as i64,
        c.unpriced_turns as i64,
        c.now_ms as i64,
    );
    let blob_hashes: Vec<&[u8]> = c.blobs.iter().map(|(d, _)| &d.0[..]).collect();
    let blob_bytes: Vec<&[u8]> = c.blobs.iter().map(|(_, b)| b.as_slice()).collect();
    let outbox: Vec<(i64, i64, &str, Option<&str>)> = c
        .outbox
        .iter()
        .map(|o| {
            (
                o.effect.seq as i64,
                i64::from(o.effect.index),
                o.status.as_str(),
                o.idempotency_key.as_deref(),
            )
        })
        .collect();
    let resolves = c.resolves.map(|e| (e.seq as i64, i64::from(e.index)));
    let status = c.status.as_str();
    let kind = c.state_kind.as_str();
    let transition: [&P<'_>; 8] = [
        &id,
        &at,
        &c.event,
        &c.edge.as_str(),
        &c.effects,
        &hash,
        &chain,
        &c.seal,
    ];
    let head_body = c.head.as_ref().map(|h| &h.body);
    let head_seal = c.head.as_ref().map(|h| &h.seal);
    let run_row: [&P<'_>; 11] = [
        &key, &seq, &status, &kind, &now, &cost, &tokens, &ttl_ms, &unpriced, &head_body,
        &head_seal,
    ];
    let outcome_row: Option<[&P<'_>; 2]> = c.outcome.as_ref().map(|o| -> [&P<'_>; 2] { [&key, o] });
    let ended = crate::store::run_facts::outcome_text(c.outcome.as_deref());
    let ended_row: [&P<'_>; 2] = [&key, &ended];
    let blob_rows: [&P<'_>; 2] = [&blob_hashes, &blob_bytes];
    let blob_refs: [&P<'_>; 2] = [&blob_hashes, &key];
    let snapshot_row: Option<[&P<'_>; 2]> =
        c.snapshot.as_ref().map(|s| -> [&P<'_>; 2] { [&id, s] });
    let outbox_rows: Vec<[&P<'_>; 5]> = outbox
        .iter()
        .map(|(seq, idx, status, text)| -> [&P<'_>; 5] { [&key, seq, idx, status, text] })
        .collect();
    let resolved_row: Option<[&P<'_>; 3]> = resolves
        .as_ref()
        .map(|(seq, idx)| -> [&P<'_>; 3] { [&key, seq, idx] });
    let mut work: Vec<BoxFuture<'_, Result<u64, tokio_postgres::Error>>> = vec![
        Box::pin(conn.execute(
            "INSERT INTO runtape.transitions (id, at, event, edge, effects, state_hash, chain, seal) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &transition,
        )),
        Box::pin(conn.execute(
            "UPDATE runtape.runs SET seq = $2, status = $3, state_kind = $4, updated_ms = $5, \
             cost_nanos = $6, tokens = $7, lease_expires_ms = runtape.now_ms() + $8, \
             unpriced_turns = $9, head = coalesce($10, head), seal = coalesce($11, seal) WHERE key = $1",
            &run_row,
        )),
    ];
    if let Some(params) = &outcome_row {
        // Written once, by the commit that ends the run (nothing leaves `Done`).
        work.push(Box::pin(conn.execute(
            "UPDATE runtape.run_specs SET outcome = $2 WHERE run = $1",
            params,
        )));
        // How it ended, for the run list, in the same round trip.
        work.push(Box::pin(
            conn.execute(super::run_summary::ENDED, &ended_row),
        ));
    }
    if !c.blobs.is_empty() {
        work.push(Box::pin(conn.execute(
            "INSERT INTO runtape.blobs (hash, bytes) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
             ON CONFLICT (hash) DO NOTHING",
            &blob_rows,
        )));
        // Which runs refer to each blob, for `runtape prune` (store::retention): this insert's
        // table lock is the one a prune waits on.
        work.push(Box::pin(conn.execute(
            "INSERT INTO runtape.blob_refs (hash, run) SELECT unnest($1::bytea[]), $2 \
             ON CONFLICT DO NOTHING",
            &blob_refs,
        )));
    }
    if let Some(params) = &snapshot_row {
        work.push(Box::pin(conn.execute(
            "INSERT INTO runtape.snapshots (id, state) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET state = excluded.state",
            params,
        )));
    }
    for params in &outbox_rows {
        work.push(Box::pin(conn.execute(
            "INSERT INTO runtape.outbox (run, seq, idx, status, idempotency_key) VALUES ($1, $2, $3, $4, $5)",
            params,
        )));
    }
    if let Some(params) = &resolved_row {
        work.push(Box::pin(conn.execute(
            "UPDATE runtape.outbox SET status = 'done' WHERE run = $1 AND seq = $2 AND idx = $3",
            params,
        )));
    }
    try_join_all(work).await?;
    Ok(())
}
