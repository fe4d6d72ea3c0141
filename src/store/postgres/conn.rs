//! Connections to PostgreSQL: the database URL and how it is shown, the store's own runtime
//! (the [`Store`](crate::store::Store) trait's reads are blocking calls made from the caller's
//! tokio tasks, so the async driver runs on threads of its own), and a small pool.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::config::{Host, SslNegotiation};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row, Statement};

use super::reconnect::{self, Backoff, ConnectFailure};
use super::schema::classify;
use super::tls::{self, SslMode};
use super::tls_connect::{self, Failed, Tls};
use crate::store::StoreError;

/// True when `db` names a PostgreSQL database (`postgres://…` or `postgresql://…`) rather
/// than a SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// `url` as messages show it: `postgres://user@host:port/db`, never its password or options.
pub fn display_url(url: &str) -> String {
    tls::split_url(url)
        .ok()
        .and_then(|(rest, _)| Config::from_str(&rest).ok())
        .map_or_else(|| "the PostgreSQL URL given".to_owned(), |c| show(&c))
}

/// A parsed database URL: the driver's config and the URL as messages show it (without its
/// password).
#[derive(Clone)]
pub(super) struct Target {
    pub(super) config: Config,
    pub(super) shown: String,
    /// TLS as the URL and libpq's variables ask (see [`tls`]).
    tls: Tls,
}

impl Target {
    /// Parses `url`. The password may be in the URL or in `$PGPASSWORD`; either way it is
    /// registered as a secret, so no message or output ever shows it. TLS follows libpq's
    /// `sslmode`, `sslrootcert`, `sslcert` and `sslkey`, from the URL or else from `PGSSLMODE`,
    /// `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` (see [`tls`]); the files they name are read
    /// here, so a missing one is an error before anything connects.
    pub(super) fn parse(url: &str) -> Result<Target, StoreError> {
        let malformed = |e: &dyn std::fmt::Display| {
            StoreError::Io(format!(
                "the database URL is malformed ({e}); write postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            ))
        };
        let (rest, params) = tls::split_url(url).map_err(|e| malformed(&e))?;
        let mut config = Config::from_str(&rest).map_err(|e| malformed(&e))?;
        if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
            && !password.is_empty()
        {
            config.password(password);
        }
        if let Some(password) = config.get_password()
            && let Ok(text) = std::str::from_utf8(password)
        {
            crate::secrets::register("database password", text);
        }
        let shown = show(&config);
        if config.get_hosts().is_empty() {
            config.host("localhost");
        }
        let over_tcp = !config.get_hostaddrs().is_empty()
            || config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)));
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let tls = tls::plan(
            &params.or_env(|var| std::env::var(var).ok()),
            home.as_deref(),
            |p| p.exists(),
            over_tcp,
        )
        .and_then(|plan| Tls::load(&plan))
        .map_err(|e| StoreError::Io(format!("{shown}: {e}")))?;
        if config.get_ssl_negotiation() == SslNegotiation::Direct
            && !matches!(
                tls.mode(),
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
            )
        {
            return Err(StoreError::Io(format!(
                "{shown}: sslnegotiation=direct needs sslmode=require, verify-ca or verify-full (sslmode={})",
                tls.mode().name()
            )));
        }
        if config.get_user().is_none() {
            return Err(StoreError::Io(format!(
                "{shown}: the URL names no user; write postgres://USER@HOST/DATABASE"
            )));
        }
        if config.get_application_name().is_none() {
            // `runtape:PID` lets an operator find (and end) one process's connections.
            config.application_name(format!("runtape:{}", std::process::id()));
        }
        config
            .connect_timeout(Duration::from_secs(10))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3);
        Ok(Target { config, shown, tls })
    }
}

/// `postgres://user@host:port/db`: the URL without its password or options.
fn show(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = config.get_ports().get(i).or(config.get_ports().first());
            let name = match h {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            match port {
                Some(p) => format!("{name}:{p}"),
                None => name,
            }
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or_default(),
        hosts.join(","),
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or_default()
    )
}

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 16;

/// How long one connection attempt may take in all — the TCP connection, TLS, the startup and
/// authentication — before it counts as the server not answering. (The driver's own
/// `connect_timeout` covers the TCP connection only: a server that accepts and then says
/// nothing, as behind a broken network, would hold the attempt for ever.)
const ATTEMPT_WITHIN: Duration = Duration::from_secs(15);

/// One connection and its prepared statements (each SQL text is prepared once per
/// connection, so a query is one round trip).
pub(super) struct Conn {
    client: Client,
    stmts: Mutex<HashMap<&'static str, Statement>>,
}

/// Parameters of a query.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Conn {
    /// The driver's client, for statements run once (migrations, `BEGIN`).
    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    /// True once the connection is gone (the server ended it, the network failed).
    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    async fn stmt(&self, sql: &'static str) -> Result<Statement, tokio_postgres::Error> {
        let cached = self
            .stmts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sql)
            .cloned();
        if let Some(s) = cached {
            return Ok(s);
        }
        let s = self.client.prepare(sql).await?;
        self.stmts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sql, s.clone());
        Ok(s)
    }

    /// Every row `sql` returns.
    pub(super) async fn query(
        &self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let s = self.stmt(sql).await?;
        self.client.query(&s, params).await
    }

    /// The row `sql` returns, if any.
    pub(super) async fn query_opt(
        &self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let s = self.stmt(sql).await?;
        self.client.query_opt(&s, params).await
    }

    /// The number of rows `sql` changed.
    pub(super) async fn execute(
        &self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        let s = self.stmt(sql).await?;
        self.client.execute(&s, params).await
    }
}

/// Connections to one database and the runtime they live on. Shared by the store, its
/// read-only views and its writer.
pub(super) struct Backend {
    pub(super) target: Target,
    handle: Handle,
    idle: Mutex<Vec<Conn>>,
    /// Bounds the connections used for reads at once (the writer has its own).
    permits: Arc<Semaphore>,
    /// How many reads `permits` lets run at once ([`Backend::allow_reads`]); as many idle
    /// connections are kept (at least [`MAX_IDLE`]).
    reads: AtomicUsize,
    /// How long, in ms, a connection attempt that finds the server unreachable is tried again
    /// before it fails (0: never; see [`reconnect`]).
    patience_ms: AtomicU64,
}

/// A pooled connection; goes back to the pool when dropped, unless it was closed. A view that
/// holds a transaction open ([`Pooled::in_transaction`]) is rolled back first.
pub(super) struct Pooled {
    conn: Option<Conn>,
    backend: Arc<Backend>,
    in_transaction: bool,
    /// A read's place among the reads at once; a read-only view holds none (it would hold it
    /// for as long as it lives, and its user may read through the store meanwhile).
    _permit: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for Pooled {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        // Present from creation until drop.
        self.conn
            .as_ref()
            .expect("a pooled connection until dropped")
    }
}

impl Pooled {
    /// Marks the connection as holding an open transaction, to be rolled back before reuse.
    pub(super) fn in_transaction(&mut self) {
        self.in_transaction = true;
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if conn.is_closed() {
            return;
        }
        if !self.in_transaction {
            self.backend.put(conn);
            return;
        }
        let backend = self.backend.clone();
        self.backend.handle.spawn(async move {
            if conn.client.batch_execute("ROLLBACK").await.is_ok() {
                backend.put(conn);
            }
        });
    }
}

impl Backend {
    /// A backend whose reads use at most `max_reads` connections at once, on `handle`.
    pub(super) fn new(target: Target, handle: Handle, max_reads: usize) -> Backend {
        Backend {
            target,
            handle,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max_reads.max(1))),
            reads: AtomicUsize::new(max_reads.max(1)),
            patience_ms: AtomicU64::new(0),
        }
    }

    /// From now on, a connection attempt that finds the server unreachable is tried again,
    /// with backoff, for up to `patience` before it fails (zero: it fails at once).
    pub(super) fn set_patience(&self, patience: Duration) {
        let ms = patience.as_millis().min(u128::from(u64::MAX)) as u64;
        self.patience_ms.store(ms, Ordering::Relaxed);
    }

    /// How long a connection attempt waits for an unreachable server
    /// ([`set_patience`](Self::set_patience)).
    pub(super) fn patience(&self) -> Duration {
        Duration::from_millis(self.patience_ms.load(Ordering::Relaxed))
    }

    /// The URL as messages show it.
    pub(super) fn shown(&self) -> &str {
        &self.target.shown
    }

    /// A new connection (not pooled). Its driver task runs on the store's runtime. While the
    /// server cannot be reached, attempts are made again with backoff for as long as the
    /// store's patience allows ([`set_patience`](Self::set_patience); none by default).
    pub(super) async fn connect(&self) -> Result<Conn, StoreError> {
        let patience = self.patience();
        let began = crate::clock::stopwatch();
        let mut backoff = Backoff::default();
        loop {
            match self.connect_once().await {
                Ok(conn) => return Ok(conn),
                Err(f) if f.unreachable => {
                    let wait = backoff.next_wait();
                    if began.elapsed() + wait > patience {
                        return Err(f.error);
                    }
                    crate::clock::system().sleep(wait).await;
                }
                Err(f) => return Err(f.error),
            }
        }
    }

    /// One connection attempt: a new connection, or why there is none and whether the server
    /// could not be reached.
    pub(super) async fn connect_once(&self) -> Result<Conn, ConnectFailure> {
        // The connection's driver task ends when the connection does; its errors reach the
        // queries that were waiting.
        let attempt = tls_connect::connect(&self.target.config, &self.target.tls, &self.handle);
        let client = match crate::clock::within(
            crate::clock::system().as_ref(),
            ATTEMPT_WITHIN,
            attempt,
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(f)) => {
                return Err(ConnectFailure {
                    error: connect_error(&self.target, &f),
                    // A TLS failure is the server's certificate or this client's settings.
                    unreachable: tls_connect::describe(&f, &self.target.tls).is_none()
                        && reconnect::unreachable(&f.error),
                });
            }
            Err(_) => {
                return Err(ConnectFailure {
                    error: StoreError::Io(format!(
                        "cannot connect to {}: the server did not answer within {} s; check that the server is up and the network to it works",
                        self.target.shown,
                        ATTEMPT_WITHIN.as_secs()
                    )),
                    unreachable: true,
                });
            }
        };
        Ok(Conn {
            client,
            stmts: Mutex::new(HashMap::new()),
        })
    }

    /// Lets `n` reads run at once from now on (more than before, never fewer), and keeps as
    /// many idle connections for them.
    pub(super) fn allow_reads(&self, n: usize) {
        let before = self.reads.fetch_max(n, Ordering::Relaxed);
        if n > before {
            self.permits.add_permits(n - before);
        }
    }

    /// A connection from the pool for one read, connecting when none is idle; waits while
    /// the most reads allowed at once are being made.
    pub(super) async fn get(self: &Arc<Self>) -> Result<Pooled, StoreError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        self.take(Some(permit)).await
    }

    /// A connection for a read-only view: from the pool, but not counted among the reads.
    pub(super) async fn get_for_view(self: &Arc<Self>) -> Result<Pooled, StoreError> {
        self.take(None).await
    }

    /// A connection from the pool, or a new one from a single attempt (never waiting for an
    /// unreachable server): for calls that must not stall their caller (the worker's
    /// heartbeat and claims, which run in its main loop).
    pub(super) async fn get_now(self: &Arc<Self>) -> Result<Pooled, StoreError> {
        if let Some(conn) = self.idle_conn() {
            return Ok(self.pooled(conn, None));
        }
        let conn = self.connect_once().await.map_err(|f| f.error)?;
        Ok(self.pooled(conn, None))
    }

    fn pooled(self: &Arc<Self>, conn: Conn, permit: Option<OwnedSemaphorePermit>) -> Pooled {
        Pooled {
            conn: Some(conn),
            backend: self.clone(),
            in_transaction: false,
            _permit: permit,
        }
    }

    /// An idle connection that is not known to be closed, if any.
    fn idle_conn(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match idle.pop() {
                Some(c) if c.is_closed() => continue,
                other => return other,
            }
        }
    }

    async fn take(
        self: &Arc<Self>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Pooled, StoreError> {
        let conn = match self.idle_conn() {
            Some(c) => c,
            None => self.connect().await?,
        };
        Ok(self.pooled(conn, permit))
    }

    /// Keeps `conn` for reuse (at most [`MAX_IDLE`], or as many as reads may run at once; the
    /// rest are closed).
    fn put(&self, conn: Conn) {
        let kept = MAX_IDLE.max(self.reads.load(Ordering::Relaxed));
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < kept {
            idle.push(conn);
        }
    }

    /// Runs `work` on the store's runtime; for async callers (the worker).
    pub(super) async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.handle.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Runs `work` on the store's runtime and waits for it on this thread: how the
    /// [`Store`](crate::store::Store) trait's blocking reads are made from inside another tokio
    /// runtime (the caller's thread blocks for one query, as a SQLite read does).
    pub(super) fn block_on<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }
}

/// A failed connection attempt, as one line.
fn connect_error(target: &Target, failed: &Failed) -> StoreError {
    let shown = &target.shown;
    if let Some(what) = tls_connect::describe(failed, &target.tls) {
        return StoreError::Io(format!("cannot connect to {shown}: {what}"));
    }
    let e = &failed.error;
    if e.as_db_error().is_some() {
        return classify(shown, e);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    StoreError::Io(format!(
        "cannot connect to {shown} ({text}); check that the server is up, and the host, port and database in the URL"
    ))
}

/// Starts the store's runtime on a thread of its own, running `main` (the writer) until it
/// returns; then the runtime is dropped on that thread. Returns the runtime's handle.
pub(super) fn start_runtime<F>(main: impl FnOnce(Handle) -> F) -> Result<Handle, StoreError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("runtape-pg")
        .enable_all()
        .build()
        .map_err(|e| StoreError::Io(format!("cannot start the database runtime: {e}")))?;
    let handle = rt.handle().clone();
    let main = main(handle.clone());
    std::thread::Builder::new()
        .name("runtape-pg-writer".into())
        .spawn(move || {
            rt.block_on(main);
            rt.shutdown_timeout(Duration::from_secs(1));
        })
        .map_err(|e| StoreError::Io(format!("cannot start the database thread: {e}")))?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A port whose every connection is accepted and closed at once (a server going away);
    /// the counter tells how many attempts were made.
    fn closing_port() -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let port = listener.local_addr().expect("address").port();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        (port, attempts)
    }

    #[tokio::test]
    async fn an_unreachable_server_is_tried_again_only_as_long_as_the_store_waits() {
        let (port, attempts) = closing_port();
        let target = Target::parse(&format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable"))
            .expect("parses");
        let backend = Backend::new(target, Handle::current(), 1);
        let e = backend.connect().await.err().expect("fails");
        assert!(
            e.to_string()
                .contains("cannot connect to postgres://u@127.0.0.1:"),
            "{e}"
        );
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            1,
            "no patience: one attempt"
        );

        backend.set_patience(Duration::from_millis(700));
        let e = backend.connect().await.err().expect("fails in the end");
        assert!(e.to_string().contains("cannot connect"), "{e}");
        // Waits of 100, 200, 400 ms: the third would end past 700 ms, so two or three
        // attempts (two only if an attempt took most of a second).
        let again = attempts.load(Ordering::SeqCst) - 1;
        assert!(
            (2..=3).contains(&again),
            "tried again with backoff: {again}"
        );
    }

    #[test]
    fn a_url_with_tls_parameters_is_shown_without_them_or_its_password() {
        assert_eq!(
            display_url(
                "postgres://me:hunter2@db.example.com:5433/app?sslmode=verify-full&sslrootcert=%2Fca.pem&application_name=x"
            ),
            "postgres://me@db.example.com:5433/app"
        );
        assert_eq!(
            display_url("postgres://me:hunter2@h/app?sslmode=on&bogus=1"),
            "the PostgreSQL URL given"
        );
    }
}
