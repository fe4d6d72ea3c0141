//! `runtape schedule add|ls|pause|resume|rm|trigger`: managing the database's schedules
//! ([`crate::schedule`]). Every check is made before anything is written: a bad cron
//! expression, an unknown time zone or policy, a spec file that does not load, or a name
//! taken is refused with one line and the database is left as it was. Firing them is
//! [`super::schedule_fire`]'s.

use serde::Serialize;

use super::OpsError;
use crate::machine::RunId;
use crate::schedule::cron::rfc3339;
use crate::schedule::{CatchUp, Overlap, Timetable, plan};
use crate::store::Store;
use crate::store::schedules::{FireRecord, FireState, ScheduleBook, ScheduleRecord};

/// What `runtape schedule add` asks for.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    /// Its name: letters, digits, `-`, `_`, at most 64.
    pub name: String,
    /// The spec file each run starts from.
    pub spec: std::path::PathBuf,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone (`UTC` by default).
    pub tz: String,
    /// Each run's goal; the spec file's when `None`.
    pub goal: Option<String>,
    /// `skip` (default), `queue` or `cancel-previous`.
    pub overlap: String,
    /// `none` (default), `last` or `all`.
    pub catch_up: String,
    /// Instants after this (Unix ms) are its to fire; now when `None`.
    pub since_ms: Option<u64>,
}

/// A schedule as `runtape schedule ls` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleView {
    /// Its name.
    pub name: String,
    /// The spec file.
    pub spec: String,
    /// The cron expression.
    pub cron: String,
    /// The time zone.
    pub tz: String,
    /// Each run's goal, when it sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The overlap policy.
    pub overlap: String,
    /// The catch-up policy.
    pub catch_up: String,
    /// `active` or `paused`.
    pub status: &'static str,
    /// The next instant it fires at (RFC 3339), none while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The next instant, Unix ms (what a countdown counts to), none while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_ms: Option<u64>,
    /// The next instant as local time in its zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_local: Option<String>,
    /// Instants fired so far.
    pub fired: usize,
    /// The last instant fired, with its run and what became of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<FireView>,
}

/// A fired instant as `runtape schedule ls` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct FireView {
    /// The instant (RFC 3339).
    pub instant: String,
    /// The run it starts.
    pub run: RunId,
    /// `pending`, `started` or `skipped`.
    pub state: &'static str,
    /// Fired by `runtape schedule trigger`.
    pub manual: bool,
}

impl From<&FireRecord> for FireView {
    fn from(f: &FireRecord) -> Self {
        FireView {
            instant: rfc3339(f.instant_ms),
            run: f.run.clone(),
            state: f.state.as_str(),
            manual: f.manual,
        }
    }
}

/// The schedules of `store`, or why there are none to manage there.
pub fn book(store: &dyn Store) -> Result<Box<dyn ScheduleBook>, OpsError> {
    store.schedules().ok_or_else(|| {
        OpsError::BadSetting(
            "this database keeps no schedules (schedules need a SQLite file or a PostgreSQL database: --db)".into(),
        )
    })
}

/// The run a schedule's instant starts: `NAME-YYYYMMDDTHHMMSSZ`, so a second start of the
/// same instant finds the run's id taken.
pub fn run_id_of(name: &str, instant_ms: u64) -> RunId {
    let stamp: String = rfc3339(instant_ms)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    RunId::new(format!("{name}-{stamp}"))
}

fn check_name(name: &str) -> Result<(), OpsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(OpsError::BadSetting(format!(
            "bad schedule name {name:?}: use 1 to 64 letters, digits, '-' or '_'"
        )))
    }
}

/// Reads a stored or given overlap policy.
pub fn overlap_of(s: &str) -> Result<Overlap, OpsError> {
    Overlap::parse(s).ok_or_else(|| {
        OpsError::BadSetting(format!(
            "unknown overlap policy {s:?}: use skip, queue or cancel-previous"
        ))
    })
}

/// Reads a stored or given catch-up policy.
pub fn catch_up_of(s: &str) -> Result<CatchUp, OpsError> {
    CatchUp::parse(s).ok_or_else(|| {
        OpsError::BadSetting(format!(
            "unknown catch-up policy {s:?}: use none, last or all"
        ))
    })
}

/// A stored schedule's timetable.
pub fn timetable_of(s: &ScheduleRecord) -> Result<Timetable, OpsError> {
    Timetable::parse(&s.cron, &s.tz).map_err(|e| OpsError::BadSetting(e.to_string()))
}

/// Checks everything about `new` that needs no database: its name, timetable, policies, and
/// that its spec file loads and gives a goal (or `new` does).
pub fn check(new: &NewSchedule) -> Result<Timetable, OpsError> {
    check_name(&new.name)?;
    let timetable =
        Timetable::parse(&new.cron, &new.tz).map_err(|e| OpsError::BadSetting(e.to_string()))?;
    overlap_of(&new.overlap)?;
    catch_up_of(&new.catch_up)?;
    let file = super::load(&new.spec, None)?;
    if new.goal.is_none() && file.goal.is_none() {
        return Err(OpsError::NoGoal {
            spec: file.path.clone(),
            detach: true,
        });
    }
    Ok(timetable)
}

/// Adds a schedule to `store` after checking everything ([`check`]); `now_ms` is the wall
/// time of the clock seam. A name taken is refused. Returns it as `ls` shows it.
pub fn add(store: &dyn Store, new: NewSchedule, now_ms: u64) -> Result<ScheduleView, OpsError> {
    let timetable = check(&new)?;
    let spec_path = std::fs::canonicalize(&new.spec)
        .map_err(|e| OpsError::BadSetting(format!("{}: {e}", new.spec.display())))?;
    let record = ScheduleRecord {
        name: new.name.clone(),
        spec_path: spec_path.display().to_string(),
        cron: new.cron,
        tz: new.tz,
        goal: new.goal,
        overlap: new.overlap,
        catch_up: new.catch_up,
        paused: false,
        cursor_ms: new.since_ms.unwrap_or(now_ms),
        created_ms: now_ms,
    };
    let book = book(store)?;
    if !book.add(&record)? {
        return Err(OpsError::BadSetting(format!(
            "a schedule named {} exists already; `runtape schedule rm {}` removes it",
            new.name, new.name
        )));
    }
    Ok(view(&record, &timetable, &[], now_ms))
}

fn view(s: &ScheduleRecord, t: &Timetable, fires: &[FireRecord], now_ms: u64) -> ScheduleView {
    let next = (!s.paused)
        .then(|| plan::next_fire(t, s.cursor_ms, now_ms))
        .flatten();
    ScheduleView {
        name: s.name.clone(),
        spec: s.spec_path.clone(),
        cron: s.cron.clone(),
        tz: s.tz.clone(),
        goal: s.goal.clone(),
        overlap: s.overlap.clone(),
        catch_up: s.catch_up.clone(),
        status: if s.paused { "paused" } else { "active" },
        next: next.map(rfc3339),
        next_ms: next,
        next_local: next.map(|n| t.local(n)),
        fired: fires.len(),
        last: fires.last().map(FireView::from),
    }
}

/// Every schedule of `store` with its next fire time at `now_ms`, by name.
pub fn list(store: &dyn Store, now_ms: u64) -> Result<Vec<ScheduleView>, OpsError> {
    let book = book(store)?;
    let mut out = Vec::new();
    for s in book.all()? {
        let t = timetable_of(&s)?;
        let fires = book.fires(&s.name)?;
        out.push(view(&s, &t, &fires, now_ms));
    }
    Ok(out)
}

fn unknown(name: &str) -> OpsError {
    OpsError::BadSetting(format!(
        "no schedule named {name}; `runtape schedule ls` lists them"
    ))
}

/// The schedules of `store`, once schedule `name` is shown to be one of them (read only, so a
/// refusal writes nothing).
fn known(store: &dyn Store, name: &str) -> Result<Box<dyn ScheduleBook>, OpsError> {
    let book = book(store)?;
    if book.all()?.iter().any(|s| s.name == name) {
        Ok(book)
    } else {
        Err(unknown(name))
    }
}

/// Pauses (`paused`) or resumes schedule `name`. A resumed schedule's missed instants follow
/// its catch-up policy.
pub fn set_paused(store: &dyn Store, name: &str, paused: bool) -> Result<(), OpsError> {
    let book = known(store, name)?;
    if book.set_paused(name, paused)? {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

/// Removes schedule `name` and the record of its fired instants; its runs stay.
pub fn remove(store: &dyn Store, name: &str) -> Result<(), OpsError> {
    let book = known(store, name)?;
    if book.remove(name)? {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

/// Fires schedule `name` now (`now_ms`, to the second): records a pending instant that the
/// next `runtape worker` or `serve` turn starts, under the schedule's overlap policy. Returns
/// it. A trigger in the same second as another is refused.
pub fn trigger(store: &dyn Store, name: &str, now_ms: u64) -> Result<FireView, OpsError> {
    let book = known(store, name)?;
    let instant_ms = now_ms - now_ms % 1000;
    let fire = FireRecord {
        schedule: name.to_owned(),
        instant_ms,
        run: run_id_of(name, instant_ms),
        state: FireState::Pending,
        manual: true,
        fired_ms: now_ms,
    };
    if !book.claim(name, None, std::slice::from_ref(&fire))? {
        return Err(OpsError::BadSetting(format!(
            "schedule {name} fired at {} already; nothing was changed",
            rfc3339(instant_ms)
        )));
    }
    Ok(FireView::from(&fire))
}
