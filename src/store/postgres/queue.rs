//! What `runtape worker` needs of the database besides the [`Store`](crate::store::Store)
//! trait: claiming runnable runs (`FOR UPDATE SKIP LOCKED`, leases on the database's clock),
//! and the `workers` table (each worker's heartbeat, for `runtape ls --workers`).
//!
//! A run is **runnable** when its status is `running`, it was started from a spec file (its
//! setup is stored), its spec file's directory is the worker's `--spec-dir`, and nobody holds
//! its lease: none was ever taken since it was queued (`run --detach`), it was released, it
//! expired on the database's clock (its driver died or was cut off), or its owner is a process
//! on this host that no longer exists.

use std::sync::{Arc, LazyLock};

use super::PostgresStore;
use super::conn::Backend;
use super::schema::classify;
use crate::machine::RunId;
use crate::store::{Control, RunStatus, StoreError, protocol};
use tokio_postgres::types::ToSql;

/// A run a worker claimed: the lease is its own at `epoch`, until the database's clock passes
/// the lease's length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The run.
    pub run: RunId,
    /// The lease epoch the claim took.
    pub epoch: u64,
    /// The lease was another driver's, not given back: it expired (its worker died or was
    /// cut off) or its process on this host was gone. False for a run queued or handed back.
    pub taken_over: bool,
}

/// A worker as it registers itself.
#[derive(Clone, Debug)]
pub struct WorkerInfo {
    /// Its id (`host:pid:nonce`, like a lease owner).
    pub id: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The spec directory it serves.
    pub spec_dir: String,
    /// Runs it drives at once at most.
    pub concurrency: usize,
    /// When it started, its own wall clock, ms.
    pub started_ms: u64,
}

/// A worker as `runtape ls --workers` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerRecord {
    /// Its id (`host:pid:nonce`).
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The spec directory it serves.
    pub spec_dir: String,
    /// Runs it drives at once at most.
    pub concurrency: u64,
    /// When it started, its own wall clock, ms.
    pub started_ms: u64,
    /// Milliseconds since its last heartbeat, on the database's clock.
    pub heartbeat_age_ms: u64,
    /// False once its heartbeat has expired (it died, or is cut off from the database).
    pub alive: bool,
    /// It got SIGTERM and is finishing what it drives.
    pub draining: bool,
}

/// The query for the runnable run (see the module docs) a worker may claim next, oldest
/// first, selecting `columns` of it (`r` is its row in `runtape.runs`), its parameters
/// numbered from `$p`: the lease owners on this host whose process has exited, the spec
/// directory the worker serves, the ids it skips, and (when not null) the one id it may take.
fn runnable(columns: &str, p: usize) -> String {
    let (dead, dir, skip, only) = (p, p + 1, p + 2, p + 3);
    format!(
        "SELECT {columns} FROM runtape.runs r \
         JOIN runtape.run_specs s ON s.run = r.key \
         WHERE r.status = 'running' AND s.setup IS NOT NULL \
         AND (r.lease_owner IS NULL OR r.lease_expires_ms <= runtape.now_ms() \
              OR r.lease_owner = ANY(${dead})) \
         AND (s.setup::jsonb ->> 'spec_dir') = ${dir} \
         AND r.id <> ALL(${skip}) \
         AND (${only}::text IS NULL OR r.id = ${only}) \
         ORDER BY r.key LIMIT 1"
    )
}

/// The id of the run a worker would claim next ([`runnable`] from `$1`).
static NEXT: LazyLock<String> = LazyLock::new(|| runnable("r.id", 1));

/// The columns a claim reads of the run it picks (`r`): what [`protocol::take_up`] and
/// [`protocol::control_after_take_up`] decide on, on the database's clock.
const PICKED: &str = "r.key, r.id, r.lease_epoch, r.lease_owner, r.lease_expires_ms, \
     runtape.now_ms(), r.status, r.control";

/// Picks and locks the run a worker claims next ([`runnable`] from `$1`); reads [`PICKED`].
/// Rows other transactions have locked are skipped.
static CLAIM: LazyLock<String> =
    LazyLock::new(|| format!("{} FOR UPDATE OF r SKIP LOCKED", runnable(PICKED, 1)));

/// Picks and locks run `$1` when it is `running` or waits for a person, was started from a
/// spec file in directory `$2`, and nobody live holds its lease (`$3`: the dead owners on this
/// host): how a worker claims a run whose timer is due. Reads [`PICKED`].
static CLAIM_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {PICKED} FROM runtape.runs r JOIN runtape.run_specs s ON s.run = r.key \
         WHERE r.id = $1 AND r.status IN ('running', 'awaiting_input') AND s.setup IS NOT NULL \
         AND (r.lease_owner IS NULL OR r.lease_expires_ms <= runtape.now_ms() \
              OR r.lease_owner = ANY($3)) \
         AND (s.setup::jsonb ->> 'spec_dir') = $2 \
         FOR UPDATE OF r SKIP LOCKED"
    )
});

/// Takes the lease of the picked run `$1` at epoch `$2` for owner `$3`, `$4` ms long on the
/// database's clock, leaving control request `$5`. Its status stays as it was.
const TAKE: &str = "UPDATE runtape.runs SET lease_epoch = $2, lease_owner = $3, \
     lease_expires_ms = runtape.now_ms() + $4, control = $5 WHERE key = $1";

/// What a claim decides for the run it picked (a row of [`PICKED`]): the new epoch and the
/// control request the row keeps, by the rules every take-up follows; `None` when the rules
/// refuse it (the pick only offers runs they allow, so this is a guard, not a path).
fn decide(row: &tokio_postgres::Row, owner: &str) -> Result<Option<Taken>, tokio_postgres::Error> {
    let run = RunId::new(row.try_get::<_, String>(1)?);
    let holder: Option<String> = row.try_get(3)?;
    let ms = |i: usize| -> Result<u64, tokio_postgres::Error> {
        Ok(row.try_get::<_, i64>(i)?.max(0) as u64)
    };
    let status: String = row.try_get(6)?;
    let Some(status) = RunStatus::parse(&status) else {
        return Ok(None);
    };
    let lease = protocol::LeaseRow {
        epoch: ms(2)?,
        holder: holder.as_deref(),
        expires_ms: ms(4)?,
        status,
    };
    let Ok(epoch) = protocol::take_up(&run, &lease, owner, ms(5)?, |h| {
        crate::store::owner_is_dead(h)
    }) else {
        return Ok(None);
    };
    let control: Option<String> = row.try_get(7)?;
    let control =
        protocol::control_after_take_up(control.as_deref().and_then(Control::from_column));
    Ok(Some(Taken {
        key: row.try_get(0)?,
        claim: Claim {
            run,
            epoch,
            taken_over: holder.is_some(),
        },
        control: control.as_ref().map(Control::to_column),
    }))
}

/// A claim decided, before it is written.
struct Taken {
    key: i64,
    claim: Claim,
    /// The control column the row keeps.
    control: Option<String>,
}

/// The lease owners on this host whose process has exited: their leases are free now.
async fn dead_owners(conn: &super::conn::Conn, shown: &str) -> Result<Vec<String>, StoreError> {
    let prefix = format!("{}:%", crate::store::owner_host());
    let live_here = conn
        .query(
            "SELECT DISTINCT lease_owner FROM runtape.runs WHERE status = 'running' \
             AND lease_owner LIKE $1 AND lease_expires_ms > runtape.now_ms()",
            &[&prefix],
        )
        .await
        .map_err(|e| classify(shown, &e))?;
    Ok(live_here
        .iter()
        .filter_map(|r| r.try_get::<_, String>(0).ok())
        .filter(|o| crate::store::owner_is_dead(o))
        .collect())
}

impl PostgresStore {
    /// The run [`claim`](Self::claim) would take now, read without taking it (nothing is
    /// written): a worker checks what it would act on before it claims the run. Like `claim`,
    /// never waits for an unreachable database.
    pub async fn next_runnable(
        &self,
        spec_dir: &str,
        skip: &[RunId],
    ) -> Result<Option<RunId>, StoreError> {
        let backend = self.backend.clone();
        let spec_dir = spec_dir.to_owned();
        let skip: Vec<String> = skip.iter().map(|r| r.to_string()).collect();
        self.backend
            .run(async move {
                let conn = backend.get_now().await?;
                let shown = backend.shown().to_owned();
                let dead = dead_owners(&conn, &shown).await?;
                let only: Option<String> = None;
                let row = conn
                    .query_opt(NEXT.as_str(), &[&dead, &spec_dir, &skip, &only])
                    .await
                    .map_err(|e| classify(&shown, &e))?;
                row.map(|r| r.try_get::<_, String>(0).map(RunId::new))
                    .transpose()
                    .map_err(|e| classify(&shown, &e))
            })
            .await
    }

    /// Claims one runnable run for `owner` (see the module docs) with a lease of `ttl_ms` on
    /// the database's clock, skipping runs in `skip` (and, with `only`, every other run: the
    /// run [`next_runnable`](Self::next_runnable) named, once checked). Rows other processes
    /// have locked are skipped, never waited for, so any number of workers claim at once
    /// without blocking each other or taking the same run. The claimed run's status stays
    /// `running`. Never waits for an unreachable database (one connection attempt), so the
    /// worker's loop goes on answering signals.
    pub async fn claim(
        &self,
        owner: &str,
        spec_dir: &str,
        ttl_ms: u64,
        skip: &[RunId],
        only: Option<&RunId>,
    ) -> Result<Option<Claim>, StoreError> {
        let skip: Vec<String> = skip.iter().map(|r| r.to_string()).collect();
        let only: Option<String> = only.map(|r| r.to_string());
        let spec_dir = spec_dir.to_owned();
        self.claim_by(owner, ttl_ms, CLAIM.as_str(), move |dead| {
            vec![
                Box::new(dead),
                Box::new(spec_dir),
                Box::new(skip),
                Box::new(only),
            ]
        })
        .await
    }

    /// Claims `run` for `owner` as [`claim`](Self::claim) does, to fire a timer that is due
    /// (the worker read its state): also when it waits for a person (a deadline), as long as
    /// it is `running` or `awaiting_input`, its spec file is in `spec_dir`, and nobody live
    /// holds its lease. `None` when another worker took it first or it moved on. Never waits
    /// for a locked row or an unreachable database.
    pub async fn claim_due(
        &self,
        owner: &str,
        spec_dir: &str,
        ttl_ms: u64,
        run: &RunId,
    ) -> Result<Option<Claim>, StoreError> {
        let (spec_dir, run) = (spec_dir.to_owned(), run.to_string());
        self.claim_by(owner, ttl_ms, CLAIM_DUE.as_str(), move |dead| {
            vec![Box::new(run), Box::new(spec_dir), Box::new(dead)]
        })
        .await
    }

    /// Claims for `owner` with a lease of `ttl_ms` the run the pick `sql` ([`CLAIM`] or
    /// [`CLAIM_DUE`]) locks, its parameters made by `params` from the lease owners on this
    /// host whose process has exited, in a transaction of its own: the pick offers a run, the
    /// store's take-up rules ([`decide`]) say what its row becomes, and [`TAKE`] writes it.
    /// `BEGIN` travels with the pick.
    async fn claim_by(
        &self,
        owner: &str,
        ttl_ms: u64,
        sql: &'static str,
        params: impl FnOnce(Vec<String>) -> Vec<Box<dyn ToSql + Sync + Send>> + Send + 'static,
    ) -> Result<Option<Claim>, StoreError> {
        let backend = self.backend.clone();
        let owner = owner.to_owned();
        let ttl_ms = ttl_ms.min(i64::MAX as u64) as i64;
        self.backend
            .run(async move {
                let conn = backend.get_now().await?;
                let shown = backend.shown().to_owned();
                let db = |e: tokio_postgres::Error| classify(&shown, &e);
                let dead = dead_owners(&conn, &shown).await?;
                let params = params(dead);
                let refs: Vec<&(dyn ToSql + Sync)> = params
                    .iter()
                    .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                let claimed = async {
                    let (begun, picked) = tokio::join!(
                        conn.client().batch_execute("BEGIN"),
                        conn.query_opt(sql, &refs)
                    );
                    begun?;
                    let taken = picked?
                        .map(|row| decide(&row, &owner))
                        .transpose()?
                        .flatten();
                    let Some(t) = taken else {
                        conn.client().batch_execute("COMMIT").await?;
                        return Ok(None);
                    };
                    let epoch = t.claim.epoch as i64;
                    let take: [&(dyn ToSql + Sync); 5] =
                        [&t.key, &epoch, &owner, &ttl_ms, &t.control];
                    // Not pipelined with the COMMIT: the statement is prepared first (a round
                    // trip), so a COMMIT sent along would end the transaction before it runs.
                    conn.execute(TAKE, &take).await?;
                    conn.client().batch_execute("COMMIT").await?;
                    Ok::<_, tokio_postgres::Error>(Some(t.claim))
                }
                .await;
                match claimed {
                    Ok(claim) => Ok(claim),
                    Err(e) => {
                        // A failed statement leaves the transaction aborted: end it.
                        let _ = conn.client().batch_execute("ROLLBACK").await;
                        Err(db(e))
                    }
                }
            })
            .await
    }

    /// Registers `worker` (or refreshes it) with a heartbeat good for `ttl_ms` on the
    /// database's clock; `draining` says it is finishing up after SIGTERM. Like
    /// [`claim`](Self::claim), never waits for an unreachable database.
    pub async fn heartbeat(
        &self,
        worker: &WorkerInfo,
        ttl_ms: u64,
        draining: bool,
    ) -> Result<(), StoreError> {
        let backend = self.backend.clone();
        let w = worker.clone();
        let ttl_ms = ttl_ms.min(i64::MAX as u64) as i64;
        self.backend
            .run(async move {
                let conn = backend.get_now().await?;
                conn.execute(
                    "INSERT INTO runtape.workers (id, host, pid, spec_dir, concurrency, started_ms, \
                     heartbeat_ms, expires_ms, draining) \
                     VALUES ($1, $2, $3, $4, $5, $6, runtape.now_ms(), runtape.now_ms() + $7, $8) \
                     ON CONFLICT (id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms, \
                     expires_ms = excluded.expires_ms, draining = excluded.draining",
                    &[
                        &w.id,
                        &w.host,
                        &i64::from(w.pid),
                        &w.spec_dir,
                        &(w.concurrency as i64),
                        &(w.started_ms as i64),
                        &ttl_ms,
                        &draining,
                    ],
                )
                .await
                .map_err(|e| classify(backend.shown(), &e))?;
                // Workers that stopped heartbeating an hour ago are forgotten.
                conn.execute(
                    "DELETE FROM runtape.workers WHERE expires_ms < runtape.now_ms() - 3600000",
                    &[],
                )
                .await
                .map_err(|e| classify(backend.shown(), &e))?;
                Ok(())
            })
            .await
    }

    /// Removes `worker` from the table (it exited cleanly).
    pub async fn deregister(&self, worker: &str) -> Result<(), StoreError> {
        let backend = self.backend.clone();
        let id = worker.to_owned();
        self.backend
            .run(async move {
                let conn = backend.get_now().await?;
                conn.execute("DELETE FROM runtape.workers WHERE id = $1", &[&id])
                    .await
                    .map_err(|e| classify(backend.shown(), &e))?;
                Ok(())
            })
            .await
    }

    /// Every worker registered (live ones first, then by id).
    pub fn workers(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        let backend: Arc<Backend> = self.backend.clone();
        self.backend.block_on(async move {
            let conn = backend.get().await?;
            let rows = conn
                .query(
                    "SELECT id, host, pid, spec_dir, concurrency, started_ms, \
                     greatest(runtape.now_ms() - heartbeat_ms, 0), expires_ms > runtape.now_ms(), draining \
                     FROM runtape.workers ORDER BY expires_ms > runtape.now_ms() DESC, id",
                    &[],
                )
                .await
                .map_err(|e| classify(backend.shown(), &e))?;
            rows.iter()
                .map(|r| {
                    Ok(WorkerRecord {
                        id: r.try_get(0)?,
                        host: r.try_get(1)?,
                        pid: r.try_get::<_, i64>(2)? as u32,
                        spec_dir: r.try_get(3)?,
                        concurrency: r.try_get::<_, i64>(4)? as u64,
                        started_ms: r.try_get::<_, i64>(5)? as u64,
                        heartbeat_age_ms: r.try_get::<_, i64>(6)? as u64,
                        alive: r.try_get(7)?,
                        draining: r.try_get(8)?,
                    })
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(|e| classify(backend.shown(), &e))
        })
    }
}
