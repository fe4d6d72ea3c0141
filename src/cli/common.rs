//! What every subcommand shares: finding the database, turning errors into one line and an
//! exit status, parsing `RUN@SEQ`, and formatting times, money and tables.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use crate::text::utc;

use crate::machine::RunId;
use crate::store::{Durability, PostgresStore, SqliteStore, Store, is_postgres_url};
pub(crate) use crate::term::{CliError, Fault, one_line, outln, print_json};

/// Parses a count that must be at least 1 (`--runs`, `--reps`): clap reports the message as the
/// value's fault, in one line, before anything runs.
pub(crate) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The database to use: `--db`, else `RUNTAPE_DB`, else `fallback` (the spec file's
/// `database`), else `./runtape.db`. A `postgres://` URL is carried as it is (see
/// [`postgres_url`]).
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

/// The PostgreSQL URL `db` holds, when it is one rather than a SQLite file's path.
pub(crate) fn postgres_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| is_postgres_url(s))
}

/// The database as messages show it: a file's path, or a URL without its password.
pub(crate) fn shown(db: &Path) -> String {
    match postgres_url(db) {
        Some(url) => crate::store::display_url(url),
        None => db.display().to_string(),
    }
}

/// Opens an existing database for a command that reads or changes runs: a SQLite file that
/// must exist, or a PostgreSQL database (its schema is created on first use).
pub(crate) fn open_existing(path: &Path) -> Result<Arc<dyn Store>, CliError> {
    Ok(match postgres_url(path) {
        Some(url) => Arc::new(PostgresStore::open(url)?),
        None => Arc::new(SqliteStore::open_existing(path, Durability::Full)?),
    })
}

/// The longest run id the command line accepts.
pub(crate) const MAX_RUN_ID_CHARS: usize = 128;

/// How much of a user's input an error message quotes.
pub(crate) const QUOTE_CHARS: usize = 80;

/// `RUN` or `RUN@SEQ`, checked by shape before anything is looked up: a run id is 1 to
/// [`MAX_RUN_ID_CHARS`] letters, digits, `-`, `_` or `.` (runtape's own ids are 16 lowercase
/// letters and digits).
pub(crate) fn parse_run_at(s: &str) -> Result<(RunId, Option<u64>), CliError> {
    let bad = |why: &str| {
        CliError::usage(format!(
            "malformed run reference `{}`: {why}; write RUN or RUN@SEQ (e.g. 01k2x9w3f4mnq7rs@12)",
            quoted(s)
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
    if run.chars().count() > MAX_RUN_ID_CHARS {
        return Err(bad(&format!(
            "a run id has at most {MAX_RUN_ID_CHARS} characters"
        )));
    }
    if !run
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad(
            "a run id is letters, digits, `-`, `_` and `.` only (no spaces)",
        ));
    }
    Ok((RunId::new(run), seq))
}

/// A whole run, `RUN`, for a command that acts on all of it. `RUN@SEQ` is refused rather than
/// read as `RUN`, so nobody resumes, cancels or diffs a whole run believing they named a step:
/// `what` says what the command does with a run, and the refusal points at the commands that
/// take a step.
pub(crate) fn parse_whole_run(s: &str, what: &str) -> Result<RunId, CliError> {
    match parse_run_at(s)? {
        (run, None) => Ok(run),
        (run, Some(seq)) => Err(CliError::usage(format!(
            "`{}` names step {seq}, but {what}: write the run id alone, `{run}` (`runtape show {run}@{seq}` shows the step; `runtape fork {run}@{seq}` runs on from it)",
            quoted(s)
        ))),
    }
}

/// User input as an error message quotes it: on one line (control characters escaped as
/// `\\n`, `\\t`, `\\u{..}`) and at most [`QUOTE_CHARS`] characters, `…` marking a cut.
pub(crate) fn quoted(input: &str) -> String {
    crate::text::one_line(input, QUOTE_CHARS)
}

/// Nanodollars as `$0.0123`.
pub(crate) fn usd(nanos: u64) -> String {
    format!("${:.4}", nanos as f64 / 1e9)
}

/// A run's cost for people: `$0.0123` when every turn had a price; `cost unknown` when none
/// had; `$0.0123 + unknown` when some turns had no price (the known part is a floor).
pub(crate) fn cost_text(nanos: u64, unpriced_turns: u64) -> String {
    match (nanos, unpriced_turns) {
        (n, 0) => usd(n),
        (0, _) => "cost unknown".to_owned(),
        (n, _) => format!("{} + unknown", usd(n)),
    }
}

/// A `u64` for JSON output: a number up to 2^53, a string above (readers that parse numbers
/// as doubles would round it).
pub(crate) fn json_u64(n: u64) -> serde_json::Value {
    if n > (1u64 << 53) {
        serde_json::Value::String(n.to_string())
    } else {
        serde_json::Value::from(n)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::{EXIT_USAGE, MAX_ERROR_CHARS};

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
        for bad in ["abc@", "abc@x", "@3", "a b@1", "abc@-1", "a\nb", "a/b", "é"] {
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
    fn hostile_input_is_quoted_short_and_on_one_line() {
        let long = "x".repeat(100_000);
        let e = parse_run_at(&long).expect_err("too long");
        assert!(e.message.len() < 300, "{}", e.message.len());
        assert!(
            e.message
                .contains(&format!("`{}…`", "x".repeat(QUOTE_CHARS)))
        );
        let e = parse_run_at("a\nb\r\u{7}c").expect_err("newline");
        assert!(e.message.contains("`a\\nb\\r\\u{7}c`"), "{}", e.message);
        assert_eq!(one_line("two\nlines\n"), "two\\nlines");
        assert_eq!(
            one_line(&"y".repeat(5000)).chars().count(),
            MAX_ERROR_CHARS + 1
        );
        let ok = "a".repeat(MAX_RUN_ID_CHARS);
        assert!(parse_run_at(&format!("{ok}@3")).is_ok());
        assert!(parse_run_at("run-1.b_c").is_ok());
    }

    #[test]
    fn times_and_money_format() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc(1_763_683_200_123), "2025-11-21 00:00:00.123Z");
        assert_eq!(usd(1_234_500), "$0.0012");
        assert_eq!(cost_text(1_234_500, 0), "$0.0012");
        assert_eq!(cost_text(0, 3), "cost unknown");
        assert_eq!(cost_text(1_234_500, 1), "$0.0012 + unknown");
        assert_eq!(
            json_u64(1 << 53),
            serde_json::json!(9_007_199_254_740_992u64)
        );
        assert_eq!(
            json_u64((1 << 53) + 1),
            serde_json::json!("9007199254740993")
        );
        assert_eq!(age(10_000, 4_000), "6s");
        assert_eq!(age(10_000_000, 0), "2h");
    }
}
