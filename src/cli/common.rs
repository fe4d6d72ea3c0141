//! What every subcommand shares: finding the database, turning errors into one line and an
//! exit status, parsing `RUN@SEQ`, and formatting times, money and tables.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{EXIT_FAILED, EXIT_INTERNAL, EXIT_USAGE};
use crate::exec::EngineError;
use crate::history::HistoryError;
use crate::machine::{MachineError, RunId};
use crate::store::{Durability, SqliteStore, StoreError};

/// Writes a line to stdout; when the reader has gone away (`runtape log RUN | head`), exits
/// quietly like other command-line tools instead of failing.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}
pub(crate) use outln;

/// A command's failure: one line for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl CliError {
    /// Bad usage or input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// Internal or storage trouble (exit 3).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_INTERNAL,
            message: message.into(),
        }
    }

    /// A check that failed (exit 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UnknownRun(_)
            | StoreError::LeaseHeld { .. }
            | StoreError::DuplicateRun(_) => CliError::usage(e.to_string()),
            _ => CliError::internal(e.to_string()),
        }
    }
}

impl From<HistoryError> for CliError {
    fn from(e: HistoryError) -> Self {
        match e {
            HistoryError::Store(s) => s.into(),
            HistoryError::UnknownRun(_)
            | HistoryError::SeqOutOfRange { .. }
            | HistoryError::WrongKey(_) => CliError::usage(e.to_string()),
            HistoryError::Tampered { .. } => CliError::failed(e.to_string()),
            _ => CliError::internal(e.to_string()),
        }
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Store(s) => s.into(),
            EngineError::History(h) => h.into(),
            EngineError::Machine(
                MachineError::EditDoesNotApply(_)
                | MachineError::NotARaise { .. }
                | MachineError::UnknownAgent(_)
                | MachineError::InputMismatch { .. }
                | MachineError::InvalidTransition { .. }
                | MachineError::UnknownEffect { .. },
            )
            | EngineError::MissingProvider { .. }
            | EngineError::MissingTool(_)
            | EngineError::Finished { .. }
            | EngineError::NoInputExpected(_)
            | EngineError::AmbiguousInput { .. }
            | EngineError::Spec(_) => CliError::usage(e.to_string()),
            _ => CliError::internal(e.to_string()),
        }
    }
}

/// The database to use: `--db`, else `RUNTAPE_DB`, else `fallback` (the spec file's
/// `database`), else `./runtape.db`.
pub(crate) fn db_path(flag: Option<&Path>, fallback: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("RUNTAPE_DB")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| fallback.map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("runtape.db"))
}

/// Opens an existing database for a command that reads or changes runs.
pub(crate) fn open_existing(path: &Path) -> Result<Arc<SqliteStore>, CliError> {
    Ok(Arc::new(SqliteStore::open_existing(
        path,
        Durability::Full,
    )?))
}

/// `RUN` or `RUN@SEQ`.
pub(crate) fn parse_run_at(s: &str) -> Result<(RunId, Option<u64>), CliError> {
    let bad = |why: &str| {
        CliError::usage(format!(
            "malformed run reference `{s}`: {why}; write RUN or RUN@SEQ (e.g. 01k2x9w3f4mnq7rs@12)"
        ))
    };
    let (run, seq) = match s.split_once('@') {
        None => (s, None),
        Some((run, seq)) => {
            let seq: u64 = seq.parse().map_err(|_| bad("SEQ must be a whole number"))?;
            (run, Some(seq))
        }
    };
    if run.is_empty() {
        return Err(bad("the run id is empty"));
    }
    if run.chars().any(|c| c.is_whitespace() || c == '@') {
        return Err(bad("a run id has no spaces"));
    }
    Ok((RunId::new(run), seq))
}

/// Nanodollars as `$0.0123`.
pub(crate) fn usd(nanos: u64) -> String {
    format!("${:.4}", nanos as f64 / 1e9)
}

/// Unix milliseconds as `2026-11-21 14:03:22.123Z` (UTC).
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Unix milliseconds as RFC 3339 (`2026-11-21T14:03:22.123Z`).
pub(crate) fn rfc3339(ms: u64) -> String {
    utc(ms).replacen(' ', "T", 1)
}

/// How long ago `ms` was, roughly (`5s`, `3m`, `2h`, `4d`).
pub(crate) fn age(now_ms: u64, ms: u64) -> String {
    let s = now_ms.saturating_sub(ms) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

// Howard Hinnant's days-from-civil inverse (public-domain algorithm), for dates without a
// calendar crate.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// One JSON object on its own line.
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let line = serde_json::to_string(value)
        .map_err(|e| CliError::internal(format!("cannot encode output: {e}")))?;
    outln!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_references_parse_or_explain() {
        assert_eq!(
            parse_run_at("abc").ok().map(|(r, s)| (r.0, s)),
            Some(("abc".into(), None))
        );
        assert_eq!(
            parse_run_at("abc@12").ok().map(|(r, s)| (r.0, s)),
            Some(("abc".into(), Some(12)))
        );
        for bad in ["abc@", "abc@x", "@3", "a b@1", "abc@-1"] {
            let e = parse_run_at(bad).expect_err(bad);
            assert_eq!(e.code, EXIT_USAGE);
            assert!(
                e.message.contains("malformed run reference"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn times_and_money_format() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc(1_763_683_200_123), "2025-11-21 00:00:00.123Z");
        assert_eq!(usd(1_234_500), "$0.0012");
        assert_eq!(age(10_000, 4_000), "6s");
        assert_eq!(age(10_000_000, 0), "2h");
    }
}
