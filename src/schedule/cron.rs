//! A schedule's timetable: a cron expression read in a time zone, and the instants it names.
//!
//! Parsing and stepping are pure (no clock): croner finds the next local time the expression
//! matches, jiff (with its bundled IANA database, the same on every machine) turns local
//! times into instants. Daylight saving follows croner's rules: a fixed time that falls in the
//! spring-forward gap (02:30 on the last Sunday of March in Europe/Paris) runs at the first
//! instant after the gap; a fixed time that happens twice in the fall-back hour runs once, at
//! its first occurrence; an interval (`*/15 * * * *`) runs at every real instant it matches.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A cron expression in a time zone, checked: [`Timetable::parse`].
#[derive(Clone, Debug)]
pub struct Timetable {
    cron: Cron,
    tz: TimeZone,
}

/// Why a cron expression or a time zone was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimetableError {
    /// The expression is not a five-field cron expression croner reads.
    #[error(
        "bad cron expression {expr:?}: {why} (five fields: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\")"
    )]
    Cron {
        /// The expression as given.
        expr: String,
        /// croner's words.
        why: String,
    },
    /// The zone is not in the IANA time-zone database.
    #[error("unknown time zone {0:?} (an IANA name such as Europe/Paris, America/New_York or UTC)")]
    Zone(String),
}

impl Timetable {
    /// Reads `expr` (five fields, minute first; `@daily`-style nicknames too) in the zone named
    /// `tz` (IANA, e.g. `Europe/Paris`; `UTC`). Refuses seconds fields: a schedule fires at most
    /// once a minute.
    pub fn parse(expr: &str, tz: &str) -> Result<Timetable, TimetableError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| TimetableError::Cron {
                expr: expr.to_owned(),
                why: e.to_string(),
            })?;
        // An empty name would otherwise read as the system's zone in some lookups.
        let tz = (!tz.trim().is_empty())
            .then(|| jiff::tz::db().get(tz).ok())
            .flatten()
            .ok_or_else(|| TimetableError::Zone(tz.to_owned()))?;
        Ok(Timetable { cron, tz })
    }

    /// Whether `expr` is valid, without a zone (for messages that name one mistake at a time).
    pub fn check_expr(expr: &str) -> Result<(), TimetableError> {
        Self::parse(expr, "UTC").map(|_| ())
    }

    /// The first instant strictly after `after_ms` (Unix milliseconds) the expression names,
    /// in Unix milliseconds; `None` when there is none (a date that never comes, or past the
    /// year 9999).
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let ms = i64::try_from(after_ms).ok()?;
        let from = Timestamp::from_millisecond(ms)
            .ok()?
            .to_zoned(self.tz.clone());
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        u64::try_from(next.timestamp().as_millisecond()).ok()
    }

    /// The latest instant at or before `at_ms` the expression names; `None` when there is
    /// none.
    pub fn latest_at_or_before(&self, at_ms: u64) -> Option<u64> {
        let ms = i64::try_from(at_ms).ok()?;
        let from = Timestamp::from_millisecond(ms)
            .ok()?
            .to_zoned(self.tz.clone());
        let prev = self.cron.find_previous_occurrence(&from, true).ok()?;
        u64::try_from(prev.timestamp().as_millisecond()).ok()
    }

    /// `ms` as local time in the schedule's zone, e.g. `2026-03-29 03:00 CEST`, for messages.
    pub fn local(&self, ms: u64) -> String {
        i64::try_from(ms)
            .ok()
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
            .map(|t| {
                t.to_zoned(self.tz.clone())
                    .strftime("%Y-%m-%d %H:%M %Z")
                    .to_string()
            })
            .unwrap_or_else(|| ms.to_string())
    }
}

/// An instant in Unix milliseconds as RFC 3339 UTC, e.g. `2026-11-30T08:00:00Z`.
pub fn rfc3339(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| ms.to_string(), |t| t.to_string())
}

/// Reads an RFC 3339 instant (`2026-11-30T08:00:00Z`, or with an offset) as Unix milliseconds.
pub fn parse_instant(s: &str) -> Option<u64> {
    let t: Timestamp = s.parse().ok()?;
    u64::try_from(t.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> u64 {
        parse_instant(s).expect("an instant")
    }

    #[test]
    fn weekday_mornings_in_paris_skip_the_weekend_and_follow_summer_time() {
        let t = Timetable::parse("0 9 * * 1-5", "Europe/Paris").expect("valid");
        // Friday 2026-03-27 09:00 CET is 08:00Z; the next is Monday 30th 09:00 CEST, 07:00Z.
        let fri = ms("2026-03-27T08:00:00Z");
        assert_eq!(t.next_after(fri - 1), Some(fri));
        assert_eq!(t.next_after(fri), Some(ms("2026-03-30T07:00:00Z")));
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_with_their_reason() {
        assert!(matches!(
            Timetable::parse("0 9 * *", "UTC"),
            Err(TimetableError::Cron { .. })
        ));
        assert!(matches!(
            Timetable::parse("61 9 * * *", "UTC"),
            Err(TimetableError::Cron { .. })
        ));
        assert!(matches!(
            Timetable::parse("0 0 9 * * *", "UTC"),
            Err(TimetableError::Cron { .. })
        ));
        assert_eq!(
            Timetable::parse("0 9 * * *", "Europe/Pariss").map(|_| ()),
            Err(TimetableError::Zone("Europe/Pariss".into()))
        );
        assert!(Timetable::parse("0 9 * * *", "").is_err());
    }

    #[test]
    fn instants_read_and_print_as_rfc3339() {
        let at = ms("2026-11-30T08:00:00Z");
        assert_eq!(rfc3339(at), "2026-11-30T08:00:00Z");
        assert_eq!(parse_instant("2026-11-30T09:00:00+01:00"), Some(at));
        assert_eq!(parse_instant("yesterday"), None);
    }
}
