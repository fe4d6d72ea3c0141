//! What every subcommand shares: finding the database and parsing `RUN@SEQ` (from
//! [`crate::ops`]), turning errors into one line and an exit status (from [`crate::term`]),
//! and formatting times, money and tables.

pub(crate) use crate::text::utc;

pub(crate) use crate::ops::{
    db_path, open_existing, parse_run_at, parse_whole_run, postgres_url, quoted, shown,
};
pub(crate) use crate::term::{CliError, one_line, outln, print_json};

/// Parses a count that must be at least 1 (`--runs`, `--reps`): clap reports the message as the
/// value's fault, in one line, before anything runs.
pub(crate) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
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
