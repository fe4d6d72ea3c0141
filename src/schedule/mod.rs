//! Schedules: a spec file started on a cron timetable (`runtape schedule add NAME SPEC --cron
//! "0 9 * * 1-5" --tz Europe/Paris`), stored in the database and fired by `runtape worker`
//! and `runtape serve`.
//!
//! - [`cron`]: the timetable, a cron expression in an IANA time zone (pure).
//! - [`plan`]: which instants are due and what overlap does (pure, no clock).
//!
//! The store keeps each schedule with its cursor (the last instant it considered) and one row
//! per fired instant, keyed by (schedule, instant): a process fires an instant only by moving
//! the cursor from the value it read (a compare-and-swap) and inserting that row in one
//! transaction, so however many workers look at once, each instant fires once
//! ([`crate::ops::schedules`] carries it out). Each run a schedule starts is named after the
//! schedule and the instant, and its setup — sealed in the run's head, so `verify` checks it —
//! records both.

pub mod cron;
pub mod plan;

pub use cron::{Timetable, TimetableError};
pub use plan::{Action, CatchUp, Due, Overlap, Previous};
