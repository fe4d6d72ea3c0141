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
use crate::store::StoreError;
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

/// Takes the lease of the run a worker claims next for owner `$1`, `$2` ms long ([`runnable`]
/// from `$3`); returns its id, the new epoch, and whether another driver held the lease.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH pick AS ({} FOR UPDATE OF r SKIP LOCKED) \
         UPDATE runtape.runs SET lease_epoch = lease_epoch + 1, lease_owner = $1, \
         lease_expires_ms = runtape.now_ms() + $2, \
         control = CASE WHEN runtape.runs.control LIKE 'cancel%' THEN runtape.runs.control END \
         FROM pick WHERE runtape.runs.key = pick.key \
         RETURNING runtape.runs.id, runtape.runs.lease_epoch, pick.held_by IS NOT NULL",
        runnable("r.key, r.lease_owner AS held_by", 3)
    )
});

/// Takes the lease of run `$3` for owner `$1`, `$2` ms long, when it is `running` or waits
/// for a person, was started from a spec file in directory `$4`, and nobody live holds its
/// lease (`$5`: the dead owners on this host): how a worker claims a run whose timer is due.
/// Returns what [`CLAIM`] returns.
const CLAIM_DUE: &str = "WITH pick AS (SELECT r.key, r.lease_owner AS held_by \
     FROM runtape.runs r JOIN runtape.run_specs s ON s.run = r.key \
     WHERE r.id = $3 AND r.status IN ('running', 'awaiting_input') AND s.setup IS NOT NULL \
     AND (r.lease_owner IS NULL OR r.lease_expires_ms <= runtape.now_ms() \
          OR r.lease_owner = ANY($5)) \
     AND (s.setup::jsonb ->> 'spec_dir') = $4 \
     FOR UPDATE OF r SKIP LOCKED) \
     UPDATE runtape.runs SET lease_epoch = lease_epoch + 1, lease_owner = $1, \
     lease_expires_ms = runtape.now_ms() + $2, \
         control = CASE WHEN runtape.runs.control LIKE 'cancel%' THEN runtape.runs.control END \
     FROM pick WHERE runtape.runs.key = pick.key \
     RETURNING runtape.runs.id, runtape.runs.lease_epoch, pick.held_by IS NOT NULL";

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
        let (owner, spec_dir) = (owner.to_owned(), spec_dir.to_owned());
        let ttl_ms = ttl_ms.min(i64::MAX as u64) as i64;
        self.claim_by(CLAIM.as_str(), move |dead| {
            vec![
                Box::new(owner),
                Box::new(ttl_ms),
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
        let (owner, spec_dir, run) = (owner.to_owned(), spec_dir.to_owned(), run.to_string());
        let ttl_ms = ttl_ms.min(i64::MAX as u64) as i64;
        self.claim_by(CLAIM_DUE, move |dead| {
            vec![
                Box::new(owner),
                Box::new(ttl_ms),
                Box::new(run),
                Box::new(spec_dir),
                Box::new(dead),
            ]
        })
        .await
    }

    /// Runs the claim `sql` in a transaction of its own, its parameters made by `params` from
    /// the lease owners on this host whose process has exited; reads the claim it returns.
    async fn claim_by(
        &self,
        sql: &'static str,
        params: impl FnOnce(Vec<String>) -> Vec<Box<dyn ToSql + Sync + Send>> + Send + 'static,
    ) -> Result<Option<Claim>, StoreError> {
        let backend = self.backend.clone();
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
                conn.client().batch_execute("BEGIN").await.map_err(db)?;
                let claimed = async {
                    let row = conn.query_opt(sql, &refs).await?;
                    conn.client().batch_execute("COMMIT").await?;
                    Ok::<_, tokio_postgres::Error>(row)
                }
                .await;
                match claimed {
                    Ok(row) => row
                        .map(|r| {
                            Ok(Claim {
                                run: RunId::new(r.try_get::<_, String>(0)?),
                                epoch: r.try_get::<_, i64>(1)? as u64,
                                taken_over: r.try_get(2)?,
                            })
                        })
                        .transpose()
                        .map_err(db),
                    Err(e) => {
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
