//! The schedules a database holds and the instants they fired ([`crate::schedule`]), behind
//! [`ScheduleBook`], which a store hands out with [`Store::schedules`](super::Store::schedules)
//! (SQLite now; `None` from a store that keeps none).
//!
//! An instant is fired by [`ScheduleBook::claim`]: one transaction that moves the schedule's
//! cursor from the value the caller read to the last instant it decided on (a
//! compare-and-swap) and inserts a row per fired instant under the key (schedule, instant). A
//! second process deciding the same thing at once finds the cursor moved, or the key taken,
//! and claims nothing; so each instant fires once however many workers look.

use super::StoreError;
use crate::machine::RunId;

/// A stored schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRecord {
    /// Its name, unique in the database.
    pub name: String,
    /// The spec file each run starts from (absolute).
    pub spec_path: String,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone it is read in.
    pub tz: String,
    /// The goal of each run; the spec file's when `None`.
    pub goal: Option<String>,
    /// `skip`, `queue` or `cancel-previous` ([`crate::schedule::Overlap`]).
    pub overlap: String,
    /// `none`, `last` or `all` ([`crate::schedule::CatchUp`]).
    pub catch_up: String,
    /// Paused: fires nothing until resumed.
    pub paused: bool,
    /// The last instant considered (fired or passed over), Unix ms; when it was added (or
    /// its `--since`) before any.
    pub cursor_ms: u64,
    /// When it was added, Unix ms.
    pub created_ms: u64,
}

/// What became of a fired instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FireState {
    /// Claimed; its run is not started yet (waiting for the previous run under `queue`, or
    /// being started).
    Pending,
    /// Its run was started.
    Started,
    /// Its run was not started: the previous one had not ended (`skip`).
    Skipped,
}

impl FireState {
    /// Its stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            FireState::Pending => "pending",
            FireState::Started => "started",
            FireState::Skipped => "skipped",
        }
    }

    /// Reads a stored name.
    pub fn parse(s: &str) -> Option<FireState> {
        match s {
            "pending" => Some(FireState::Pending),
            "started" => Some(FireState::Started),
            "skipped" => Some(FireState::Skipped),
            _ => None,
        }
    }
}

/// One fired instant of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FireRecord {
    /// The schedule's name.
    pub schedule: String,
    /// The instant, Unix ms: a cron instant, or the moment of `runtape schedule trigger`.
    pub instant_ms: u64,
    /// The run it starts (named after the schedule and the instant).
    pub run: RunId,
    /// What became of it.
    pub state: FireState,
    /// Fired by `runtape schedule trigger`, not by the timetable.
    pub manual: bool,
    /// When it was claimed, Unix ms.
    pub fired_ms: u64,
}

/// The cursor move a claim makes: from the value read to the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorMove {
    /// The cursor as the caller read it.
    pub from: u64,
    /// The cursor once the claim commits.
    pub to: u64,
}

/// The schedules of one database. Blocking: async callers call it off tokio's worker threads.
pub trait ScheduleBook: Send + Sync {
    /// Adds `schedule`; `false` (and nothing written) when one of that name exists.
    fn add(&self, schedule: &ScheduleRecord) -> Result<bool, StoreError>;

    /// Every schedule, by name.
    fn all(&self) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// Pauses or resumes schedule `name`; `false` when there is none.
    fn set_paused(&self, name: &str, paused: bool) -> Result<bool, StoreError>;

    /// Removes schedule `name` and its fired instants (the runs stay); `false` when there is
    /// none.
    fn remove(&self, name: &str) -> Result<bool, StoreError>;

    /// In one transaction: moves the cursor of schedule `name` as `cursor` says, only if it
    /// still reads `cursor.from` and the schedule is not paused (`None`: leaves it), and
    /// inserts `fires`. `false`, and nothing written, when the cursor moved, the schedule is
    /// gone or paused, or an instant of `fires` was claimed already.
    fn claim(
        &self,
        name: &str,
        cursor: Option<CursorMove>,
        fires: &[FireRecord],
    ) -> Result<bool, StoreError>;

    /// Every fired instant of schedule `name`, oldest first.
    fn fires(&self, name: &str) -> Result<Vec<FireRecord>, StoreError>;

    /// Marks instant `instant_ms` of `name` as `state` if it is still pending; `false` when
    /// it is not (another process settled it).
    fn settle(&self, name: &str, instant_ms: u64, state: FireState) -> Result<bool, StoreError>;
}
