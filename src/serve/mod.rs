//! `runtape serve`: an HTTP API and a web page to watch and steer runs, and OpenTelemetry
//! export of the runs it drives.
//!
//! The server is a thin layer: each route does what a `runtape` command does, through the same
//! operations ([`crate::ops`]), and answers with what that command's `--json` prints (the
//! operations' views). It has no rules of its own about runs, and imports nothing from the
//! command line.
//!
//! - [`routes`]: every route in one table, `/openapi.json` documents it; the reads.
//! - [`actions`]: start, resume, approve, reject, answer, raise, pause, cancel, fork.
//! - [`sse`] and [`watch`]: a run's events as Server-Sent Events, resumable, whoever drives it.
//! - [`security`]: loopback by default, a token for anything else, same-origin writes, no CORS
//!   unless asked, capped bodies.
//! - [`limits`]: every connection bounded: at most so many at once, headers and bodies within
//!   their timeouts.
//! - [`ui`]: the page, embedded in the binary; [`statechart`]: its diagram.
//! - [`otel`](crate::otel): spans and counters of the runs the server drives, over OTLP/HTTP.
//! - [`ops::json`](crate::ops::json): integers past 2^53 as strings in everything written for
//!   other programs.
//!
//! The server stops on the first Ctrl-C, SIGTERM or SIGHUP like `runtape run` does: streams
//! end, the runs it drives get the grace period to finish their calls and rest paused, and it
//! exits 0; a second signal leaves at once (130).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::ops::{db_path, quoted};
use crate::term::CliError;

mod actions;
mod error;
mod experiments;
pub(crate) mod limits;
mod routes;
mod security;
mod sse;
mod state;
mod statechart;
mod stats;
mod ui;
mod waker;
mod watch;

/// The variable the bearer token is read from unless `--token-env` names another.
pub(crate) const DEFAULT_TOKEN_ENV: &str = "RUNTAPE_SERVE_TOKEN";

/// Where the server listens unless told otherwise.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:7777";

/// How often a watched run's row is read for changes other processes made.
const POLL: Duration = Duration::from_millis(250);

/// What `runtape serve` was asked for.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// `--db`, if given (else `$RUNTAPE_DB`, else `./runtape.db`).
    pub(crate) db: Option<PathBuf>,
    /// `HOST:PORT` to listen on (port 0: any free port, printed).
    pub(crate) addr: String,
    /// The environment variable holding the bearer token.
    pub(crate) token_env: String,
    /// More `Host` names this server answers to (without a token).
    pub(crate) allow_hosts: Vec<String>,
    /// Origins whose pages may call the API (CORS).
    pub(crate) cors_origins: Vec<String>,
    /// Where an uploaded spec's relative paths start (default: the current directory).
    pub(crate) spec_dir: Option<PathBuf>,
    /// Where `runtape eval`'s reports are read from (default: the current directory).
    pub(crate) experiments_dir: Option<PathBuf>,
    /// Receipt key file for the runs the server drives (else `$RUNTAPE_RECEIPT_KEY`).
    pub(crate) receipt_key: Option<PathBuf>,
    /// Grace period of a graceful stop, ms.
    pub(crate) grace_ms: u64,
    /// OTLP/HTTP endpoint (base URL); `None` also checks `$OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub(crate) otlp_endpoint: Option<String>,
    /// Export prompts, completions, tool arguments and results too.
    pub(crate) otlp_content: bool,
    /// What bounds every connection.
    pub(crate) limits: limits::Limits,
}

/// Runs the server until a stop signal; returns the exit status.
pub(crate) fn run(opts: Options) -> Result<u8, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    let exporter = crate::otel::Exporter::from_options(
        opts.otlp_endpoint.as_deref(),
        opts.otlp_content,
        crate::term::note,
    )
    .map_err(CliError::usage)?;
    let code = runtime.block_on(serve(opts, exporter.clone()));
    if let Some(x) = exporter {
        // Off the runtime: the exporter's HTTP client blocks.
        x.shutdown();
    }
    code
}

async fn serve(opts: Options, exporter: Option<crate::otel::Exporter>) -> Result<u8, CliError> {
    let token = std::env::var(&opts.token_env)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    if let Some(t) = &token {
        crate::secrets::register(&opts.token_env, t);
    }
    let addr: SocketAddr = parse_addr(&opts.addr)?;
    security::check_bind(addr, token.as_deref(), &opts.token_env).map_err(CliError::usage)?;
    for o in &opts.cors_origins {
        if !(o.starts_with("http://") || o.starts_with("https://")) || o.ends_with('/') {
            return Err(CliError::usage(format!(
                "--cors-origin `{}` is not an origin; write scheme://host[:port], e.g. http://localhost:3000",
                quoted(o)
            )));
        }
    }
    let db = db_path(opts.db.as_deref(), None);
    // A SQLite file or a PostgreSQL database, as for every command.
    let store = crate::ops::open_store(&db, true)?;
    raise_open_files_limit();
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        CliError::usage(format!(
            "cannot listen on {addr}: {e}; pick another address with --addr"
        ))
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::internal(format!("cannot read the bound address: {e}")))?;
    let spec_dir = match opts.spec_dir {
        Some(d) => d,
        None => std::env::current_dir()
            .map_err(|e| CliError::internal(format!("cannot read the current directory: {e}")))?,
    };
    let experiments_dir = opts.experiments_dir.unwrap_or_else(|| spec_dir.clone());
    let app = state::App::new(state::Settings {
        store,
        db: db.clone(),
        spec_dir,
        experiments_dir,
        receipt_key: opts.receipt_key,
        grace: Duration::from_millis(opts.grace_ms),
        policy: security::Policy {
            token,
            hosts: security::host_names(bound, &opts.allow_hosts),
            cors: opts.cors_origins,
        },
        poll: POLL,
    });
    if let Some(x) = &exporter {
        x.observe(app.hub.subscribe(), app.store.clone());
    }
    let mut signals = crate::term::StopSignals::install()?;
    let shown = if bound.ip().is_unspecified() {
        format!("http://127.0.0.1:{}/", bound.port())
    } else {
        format!("http://{bound}/")
    };
    crate::term::say!("listening on {shown} (database {})", db.display());
    // Due timers are woken while the server is up (a run its server's stop paused stays
    // paused: a person resumes or wakes it).
    tokio::spawn(waker::run(app.clone()));
    let stopping = app.clone();
    let grace = app.grace;
    let stop = async move {
        let first = signals.next().await;
        crate::term::note(&format!(
            "{first}: stopping: runs driven here get up to {} ms to finish their calls, then pause (a second signal leaves at once)",
            grace.as_millis()
        ));
        tokio::spawn(async move {
            let second = signals.next().await;
            crate::term::note(&format!("{second}: leaving now"));
            std::process::exit(i32::from(crate::term::EXIT_INTERRUPTED));
        });
        stopping.shutdown.cancel();
        stopping.stop_runs().await;
    };
    let router = routes::router(app, limits::BodyTimeout(opts.limits.body_timeout));
    limits::serve(listener, router, opts.limits, stop).await;
    if let Some(x) = &exporter {
        x.finish().await;
    }
    crate::tool::mcp::McpHub::global().shutdown().await;
    Ok(crate::term::EXIT_OK)
}

/// `HOST:PORT`, with `localhost` as loopback.
fn parse_addr(s: &str) -> Result<SocketAddr, CliError> {
    let s2 = s.replacen("localhost:", "127.0.0.1:", 1);
    s2.parse().map_err(|_| {
        CliError::usage(format!(
            "--addr `{}` is not HOST:PORT; write e.g. 127.0.0.1:7777, [::1]:7777 or 0.0.0.0:7777",
            quoted(s)
        ))
    })
}

/// Lifts the soft limit on open files to the hard one: every stream subscriber holds a
/// socket, and the default soft limit (often 1024) is below what a busy page set needs.
fn raise_open_files_limit() {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if limit.current < limit.maximum {
            limit.current = limit.maximum;
            let _ = setrlimit(Resource::Nofile, limit);
        }
    }
}
