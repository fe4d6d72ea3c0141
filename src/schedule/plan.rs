//! What a schedule does now, decided without a clock or a database: which of its instants are
//! due given the last one it considered, the time now and its catch-up policy ([`due`]), and
//! what a due instant does given the overlap policy and the schedule's previous run
//! ([`on_overlap`]). The callers (`runtape worker`, `runtape serve`, `runtape schedule`) read
//! the time from the engine's clock and the rows from the store, and claim what this decides
//! by a compare-and-swap, so a decision two processes make at once is carried out once.

use super::cron::Timetable;

/// What a schedule does about instants that passed while nothing could fire them (every
/// worker down, the schedule paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// Fire none of them: the next run is at the next instant. An instant found within
    /// [`ON_TIME_MS`] of its time is not missed and fires.
    None,
    /// Fire the latest of them once.
    Last,
    /// Fire each of them, oldest first (at most [`MAX_CATCH_UP`] per look, the rest at the
    /// next).
    All,
}

/// What a due instant does while the schedule's previous run has not ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// Nothing: the instant is recorded as skipped.
    Skip,
    /// Its run starts once the previous one ends.
    Queue,
    /// The previous run is cancelled and its run starts.
    CancelPrevious,
}

impl CatchUp {
    /// Reads `none`, `last` or `all`.
    pub fn parse(s: &str) -> Option<CatchUp> {
        match s {
            "none" => Some(CatchUp::None),
            "last" => Some(CatchUp::Last),
            "all" => Some(CatchUp::All),
            _ => None,
        }
    }

    /// Its name, as [`CatchUp::parse`] reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Last => "last",
            CatchUp::All => "all",
        }
    }
}

impl Overlap {
    /// Reads `skip`, `queue` or `cancel-previous`.
    pub fn parse(s: &str) -> Option<Overlap> {
        match s {
            "skip" => Some(Overlap::Skip),
            "queue" => Some(Overlap::Queue),
            "cancel-previous" => Some(Overlap::CancelPrevious),
            _ => None,
        }
    }

    /// Its name, as [`Overlap::parse`] reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
            Overlap::CancelPrevious => "cancel-previous",
        }
    }
}

/// How late an instant may be found and still count as on time under [`CatchUp::None`]: a
/// worker looks at least every 5 s, so an instant later than this was missed.
pub const ON_TIME_MS: u64 = 60_000;

/// The most instants [`CatchUp::All`] fires in one look; the rest are due at the next.
pub const MAX_CATCH_UP: usize = 100;

/// What [`due`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// The instants to fire now, oldest first (Unix milliseconds).
    pub fire: Vec<u64>,
    /// The last instant considered once these are claimed: the schedule's new cursor. Equal
    /// to the old one when nothing came due.
    pub cursor: u64,
}

/// The instants of `timetable` due at `now_ms` for a schedule that considered every instant
/// up to `cursor_ms` (its last fired or passed-over instant, or when it was added), under
/// `catch_up`. Changes when time passes an instant or the cursor moves.
pub fn due(timetable: &Timetable, cursor_ms: u64, now_ms: u64, catch_up: CatchUp) -> Due {
    let nothing = Due {
        fire: Vec::new(),
        cursor: cursor_ms,
    };
    match catch_up {
        CatchUp::All => {
            let mut fire = Vec::new();
            let mut at = cursor_ms;
            while fire.len() < MAX_CATCH_UP {
                match timetable.next_after(at) {
                    Some(next) if next <= now_ms => {
                        fire.push(next);
                        at = next;
                    }
                    _ => break,
                }
            }
            Due { fire, cursor: at }
        }
        CatchUp::Last | CatchUp::None => {
            let Some(latest) = timetable
                .latest_at_or_before(now_ms)
                .filter(|latest| *latest > cursor_ms)
            else {
                return nothing;
            };
            let on_time = now_ms - latest <= ON_TIME_MS;
            let fire = if catch_up == CatchUp::Last || on_time {
                vec![latest]
            } else {
                Vec::new()
            };
            Due {
                fire,
                cursor: latest,
            }
        }
    }
}

/// The next instant the schedule fires at after `cursor_ms` and `now_ms`: when a process that
/// fires schedules should look again.
pub fn next_fire(timetable: &Timetable, cursor_ms: u64, now_ms: u64) -> Option<u64> {
    timetable.next_after(cursor_ms.max(now_ms))
}

/// Where the schedule's previous run stands, as its row says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Previous {
    /// The schedule started no run yet (or its run is gone).
    None,
    /// Its run has not ended (running, paused, waiting for a person or a budget).
    Live,
    /// Its instant is marked started but its run's row is not written yet: another process
    /// is creating it (or died doing so, and the instant is started again later).
    Starting,
    /// Its run completed, failed or was cancelled.
    Ended,
}

/// What to do with a due instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start its run now.
    Start,
    /// Start no run; the instant is recorded as skipped.
    Skip,
    /// Keep it until the previous run ends, then start its run.
    Wait,
    /// Cancel the previous run, then start this one.
    CancelPreviousThenStart,
}

/// What a due instant does under `overlap` when the schedule's previous run is `previous`. An
/// instant kept waiting ([`Action::Wait`]) is asked again each look, until it starts.
pub fn on_overlap(overlap: Overlap, previous: Previous) -> Action {
    match (previous, overlap) {
        (Previous::None | Previous::Ended, _) => Action::Start,
        (Previous::Live, Overlap::Skip) => Action::Skip,
        (Previous::Live, Overlap::Queue) => Action::Wait,
        (Previous::Live, Overlap::CancelPrevious) => Action::CancelPreviousThenStart,
        // Live, but not there to cancel yet: asked again once its row is written.
        (Previous::Starting, Overlap::Skip) => Action::Skip,
        (Previous::Starting, Overlap::Queue | Overlap::CancelPrevious) => Action::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::super::cron::{parse_instant, rfc3339};
    use super::*;

    fn ms(s: &str) -> u64 {
        parse_instant(s).expect("an instant")
    }

    fn shown(v: &[u64]) -> Vec<String> {
        v.iter().map(|m| rfc3339(*m)).collect()
    }

    fn paris(expr: &str) -> Timetable {
        Timetable::parse(expr, "Europe/Paris").expect("valid")
    }

    const MIN: u64 = 60_000;
    const HOUR: u64 = 3_600_000;

    #[test]
    fn on_time_an_instant_fires_once_and_moves_the_cursor() {
        let t = paris("0 9 * * 1-5");
        let nine = ms("2026-11-30T08:00:00Z"); // Monday 09:00 CET
        for policy in [CatchUp::None, CatchUp::Last, CatchUp::All] {
            let d = due(&t, nine - HOUR, nine + 2_000, policy);
            assert_eq!(d.fire, vec![nine], "{policy:?}");
            assert_eq!(d.cursor, nine);
            let again = due(&t, d.cursor, nine + 4_000, policy);
            assert!(again.fire.is_empty(), "{policy:?}: fired twice");
            assert_eq!(again.cursor, nine);
        }
        assert_eq!(
            due(&t, nine - HOUR, nine - 1, CatchUp::All).fire,
            Vec::<u64>::new(),
            "not before its instant"
        );
    }

    #[test]
    fn after_downtime_catch_up_fires_none_the_last_or_all_of_the_missed_instants() {
        let t = paris("0 * * * *");
        // Down from 09:30 to 13:20 Paris time (08:30Z..12:20Z): 10:00, 11:00, 12:00, 13:00
        // local passed.
        let down = ms("2026-11-30T08:30:00Z");
        let up = ms("2026-11-30T12:20:00Z");
        let all = due(&t, down, up, CatchUp::All);
        assert_eq!(
            shown(&all.fire),
            [
                "2026-11-30T09:00:00Z",
                "2026-11-30T10:00:00Z",
                "2026-11-30T11:00:00Z",
                "2026-11-30T12:00:00Z"
            ]
        );
        assert_eq!(rfc3339(all.cursor), "2026-11-30T12:00:00Z");
        let last = due(&t, down, up, CatchUp::Last);
        assert_eq!(shown(&last.fire), ["2026-11-30T12:00:00Z"]);
        assert_eq!(last.cursor, all.cursor);
        let none = due(&t, down, up, CatchUp::None);
        assert!(none.fire.is_empty(), "20 minutes late is missed");
        assert_eq!(
            none.cursor, all.cursor,
            "the missed instants are passed over"
        );
        assert_eq!(
            rfc3339(next_fire(&t, none.cursor, up).expect("next")),
            "2026-11-30T13:00:00Z"
        );
        // Up again 30 s after 13:00 local: on time even under `none`.
        let late = due(&t, down, ms("2026-11-30T12:00:30Z"), CatchUp::None);
        assert_eq!(shown(&late.fire), ["2026-11-30T12:00:00Z"]);
    }

    #[test]
    fn catch_up_all_fires_at_most_its_cap_per_look_and_the_rest_next() {
        let t = paris("* * * * *");
        let from = ms("2026-11-30T00:00:00Z");
        let now = from + 250 * MIN;
        let first = due(&t, from, now, CatchUp::All);
        assert_eq!(first.fire.len(), MAX_CATCH_UP);
        let second = due(&t, first.cursor, now, CatchUp::All);
        assert_eq!(second.fire.len(), MAX_CATCH_UP);
        assert_eq!(
            second.fire[0],
            first.cursor + MIN,
            "nothing skipped, nothing twice"
        );
        let third = due(&t, second.cursor, now, CatchUp::All);
        assert_eq!(third.fire.len(), 50);
        assert_eq!(third.cursor, now);
    }

    #[test]
    fn spring_forward_a_time_in_the_gap_fires_once_just_after_it() {
        // Europe/Paris, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z). 02:30 never
        // happens locally; the daily 02:30 run fires at 03:00 CEST, once.
        let t = paris("30 2 * * *");
        let before = ms("2026-03-28T12:00:00Z");
        let after = ms("2026-03-29T12:00:00Z");
        let d = due(&t, before, after, CatchUp::All);
        assert_eq!(shown(&d.fire), ["2026-03-29T01:00:00Z"]);
        assert_eq!(t.local(d.fire[0]), "2026-03-29 03:00 CEST");
        // The day before and after, at 02:30 local as usual.
        assert_eq!(
            rfc3339(t.next_after(ms("2026-03-27T12:00:00Z")).expect("next")),
            "2026-03-28T01:30:00Z"
        );
        assert_eq!(
            rfc3339(t.next_after(after).expect("next")),
            "2026-03-30T00:30:00Z"
        );
        // An hourly schedule has 23 instants that day, none twice.
        let hourly = paris("0 * * * *");
        let day = due(
            &hourly,
            ms("2026-03-28T23:00:00Z") - 1,
            ms("2026-03-29T21:59:00Z"),
            CatchUp::All,
        );
        assert_eq!(day.fire.len(), 23);
    }

    #[test]
    fn fall_back_a_repeated_time_fires_once_and_an_interval_fires_on_both() {
        // Europe/Paris, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30
        // happens twice (00:30Z and 01:30Z).
        let t = paris("30 2 * * *");
        let d = due(
            &t,
            ms("2026-10-24T12:00:00Z"),
            ms("2026-10-25T12:00:00Z"),
            CatchUp::All,
        );
        assert_eq!(
            shown(&d.fire),
            ["2026-10-25T00:30:00Z"],
            "the first 02:30 only"
        );
        let last = due(
            &t,
            ms("2026-10-24T12:00:00Z"),
            ms("2026-10-25T12:00:00Z"),
            CatchUp::Last,
        );
        assert_eq!(
            last.fire, d.fire,
            "looking back finds the same single instant"
        );
        // An hourly schedule has 25 instants that day: both 02:00s are real hours.
        let hourly = paris("0 * * * *");
        let day = due(
            &hourly,
            ms("2026-10-24T22:00:00Z") - 1,
            ms("2026-10-25T22:59:00Z"),
            CatchUp::All,
        );
        assert_eq!(day.fire.len(), 25);
        let mut sorted = day.fire.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 25, "no instant twice");
    }

    #[test]
    fn overlap_decides_by_the_previous_runs_standing() {
        for o in [Overlap::Skip, Overlap::Queue, Overlap::CancelPrevious] {
            assert_eq!(on_overlap(o, Previous::None), Action::Start);
            assert_eq!(on_overlap(o, Previous::Ended), Action::Start);
        }
        assert_eq!(on_overlap(Overlap::Skip, Previous::Live), Action::Skip);
        assert_eq!(on_overlap(Overlap::Queue, Previous::Live), Action::Wait);
        assert_eq!(
            on_overlap(Overlap::CancelPrevious, Previous::Live),
            Action::CancelPreviousThenStart
        );
        // A previous run still being created is live, but cannot be cancelled before it
        // exists: the instant waits for it rather than start beside it.
        assert_eq!(on_overlap(Overlap::Skip, Previous::Starting), Action::Skip);
        assert_eq!(on_overlap(Overlap::Queue, Previous::Starting), Action::Wait);
        assert_eq!(
            on_overlap(Overlap::CancelPrevious, Previous::Starting),
            Action::Wait
        );
    }

    #[test]
    fn policies_read_and_print_their_names() {
        for p in [CatchUp::None, CatchUp::Last, CatchUp::All] {
            assert_eq!(CatchUp::parse(p.as_str()), Some(p));
        }
        for o in [Overlap::Skip, Overlap::Queue, Overlap::CancelPrevious] {
            assert_eq!(Overlap::parse(o.as_str()), Some(o));
        }
        assert_eq!(Overlap::parse("cancel"), None);
        assert_eq!(CatchUp::parse("some"), None);
    }
}
