//! `runtape serve`: the options, handed to [`crate::serve`].

use std::path::PathBuf;

use clap::Args;

use super::common::CliError;

/// Options of `runtape serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen, HOST:PORT (port 0: any free port). Anything but loopback needs a token.
    #[arg(long, value_name = "ADDR", default_value = crate::serve::DEFAULT_ADDR)]
    pub(crate) addr: String,
    /// The environment variable holding the bearer token every API request must then carry
    /// (at least 16 characters). Required to listen on anything but loopback.
    #[arg(long, value_name = "NAME", default_value = crate::serve::DEFAULT_TOKEN_ENV)]
    pub(crate) token_env: String,
    /// Another host name this server answers to without a token (e.g. a name in /etc/hosts
    /// for 127.0.0.1). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub(crate) allow_host: Vec<String>,
    /// Let pages from this origin (scheme://host[:port]) call the API. Repeatable; none by
    /// default.
    #[arg(long, value_name = "ORIGIN")]
    pub(crate) cors_origin: Vec<String>,
    /// Where the relative paths of a spec uploaded as text start (default: the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) spec_dir: Option<PathBuf>,
    /// Where the page finds the reports `runtape eval` wrote, to show experiments (default:
    /// the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) experiments: Option<PathBuf>,
    /// Sign the receipts of the runs this server drives with this key file (default:
    /// $RUNTAPE_RECEIPT_KEY).
    #[arg(long, value_name = "FILE")]
    pub(crate) receipt_key: Option<PathBuf>,
    /// On Ctrl-C, SIGTERM or SIGHUP: how long the calls of the runs driven here may take to
    /// finish before they pause (default: $RUNTAPE_STOP_GRACE_MS, else 5000).
    #[arg(long, value_name = "MS")]
    pub(crate) grace_ms: Option<u64>,
    /// Export spans and counters of the runs driven here over OTLP/HTTP to this base URL
    /// (default: $OTEL_EXPORTER_OTLP_ENDPOINT; neither: no export).
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Also export prompts, completions, tool arguments and results (off by default).
    #[arg(long)]
    pub(crate) otlp_content: bool,
    /// Close a connection whose request line and headers have not all arrived within this
    /// many milliseconds; a kept-alive connection that sends no next request within it is
    /// closed too. Event streams being sent are not cut.
    #[arg(long, value_name = "MS", default_value_t = crate::serve::limits::Limits::HEADER_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) header_timeout_ms: u64,
    /// Answer 408 and close the connection when a request's body has not arrived in full
    /// within this many milliseconds of its headers.
    #[arg(long, value_name = "MS", default_value_t = crate::serve::limits::Limits::BODY_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) body_timeout_ms: u64,
    /// Serve at most this many connections at once (each page following a run holds one);
    /// more wait to be accepted until one closes.
    #[arg(long, value_name = "N", default_value_t = crate::serve::limits::Limits::MAX_CONNECTIONS, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) max_connections: u64,
}

/// `runtape serve`.
pub(crate) fn serve(db: Option<PathBuf>, args: ServeArgs) -> Result<u8, CliError> {
    let grace_ms =
        match args.grace_ms {
            Some(ms) => ms,
            None => crate::ops::env_ms("RUNTAPE_STOP_GRACE_MS", super::DEFAULT_GRACE_MS, 0)?
                .as_millis() as u64,
        };
    crate::serve::run(crate::serve::Options {
        db,
        addr: args.addr,
        token_env: args.token_env,
        allow_hosts: args.allow_host,
        cors_origins: args.cors_origin,
        spec_dir: args.spec_dir,
        experiments_dir: args.experiments,
        receipt_key: args.receipt_key,
        grace_ms,
        otlp_endpoint: args.otlp_endpoint,
        otlp_content: args.otlp_content,
        limits: crate::serve::limits::Limits {
            header_timeout: std::time::Duration::from_millis(args.header_timeout_ms),
            body_timeout: std::time::Duration::from_millis(args.body_timeout_ms),
            // At most 1,000,000 (the flag's range): fits any usize.
            max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        },
    })
}
