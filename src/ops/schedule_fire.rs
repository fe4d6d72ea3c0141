//! Firing schedules, for the processes that stay up (`runtape worker` on a SQLite file,
//! `runtape serve`): each turn, [`turn`] claims the instants that came due
//! ([`crate::schedule::plan::due`], pure) by moving each schedule's cursor with a
//! compare-and-swap ([`ScheduleBook::claim`]), then starts the runs of the pending instants,
//! oldest first, as the overlap policy decides ([`plan::on_overlap`], pure) against the
//! schedule's previous run.
//!
//! Nothing fires twice and nothing is lost: an instant's row is inserted once under the key
//! (schedule, instant); its run is named after both ([`run_id_of`]), so a second start of it
//! finds the id taken and writes nothing; and the row is marked started before the run is
//! created, so a process killed in between leaves a started instant with no run, which the
//! next turn (of any process) starts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::OpsError;
use super::schedules::{catch_up_of, overlap_of, run_id_of, timetable_of};
use crate::config::ScheduledBy;
use crate::exec::{Engine, RunHandle};
use crate::machine::RunId;
use crate::schedule::cron::rfc3339;
use crate::schedule::plan::{self, Action, Previous};
use crate::store::Store;
use crate::store::schedules::{CursorMove, FireRecord, FireState, ScheduleBook, ScheduleRecord};

/// How long after its claim an instant marked started but with no run is taken for one
/// whose starter died, and started again (its run's id refuses a second creation anyway).
const RECOVER_AFTER_MS: u64 = 60_000;

/// A run a turn started, for the caller to drive.
pub struct Fired {
    /// The run.
    pub run: RunId,
    /// The engine it runs in.
    pub engine: Engine,
    /// Its handle.
    pub handle: RunHandle,
}

/// What a turn did.
#[derive(Default)]
pub struct Turn {
    /// The runs it started.
    pub started: Vec<Fired>,
    /// How long until the earliest next instant of an active schedule, when there is one.
    pub wait: Option<Duration>,
    /// One structured log line per thing it did or could not do (`schedule.fired`,
    /// `schedule.skipped`, `schedule.waiting`, `schedule.error`).
    pub lines: Vec<Value>,
}

/// What one schedule has to do this turn, decided off tokio's threads.
enum Step {
    Start(FireRecord, Option<RunId>),
    Skip(FireRecord),
    Wait,
}

/// Makes the engine a fired run is started in (on the caller's store, clock and signer).
pub type MakeEngine<'a> = &'a (dyn Fn() -> Result<Engine, OpsError> + Sync);

/// One turn over `store`'s schedules at `now_ms` (the wall time of the caller's clock):
/// claims what came due, starts what may start (each in an engine `make` gives, driven by
/// the caller). A store that keeps no schedules has nothing to do. Fails only when the
/// database cannot be read.
pub async fn turn(
    store: Arc<dyn Store>,
    now_ms: u64,
    make: MakeEngine<'_>,
) -> Result<Turn, OpsError> {
    let reading = store.clone();
    let decided = tokio::task::spawn_blocking(move || decide(reading.as_ref(), now_ms))
        .await
        .map_err(|e| OpsError::BadSetting(format!("the schedule scan stopped: {e}")))??;
    let Some((book_steps, wait, mut lines)) = decided else {
        return Ok(Turn::default());
    };
    let mut started = Vec::new();
    for (schedule, step) in book_steps {
        match step {
            Step::Skip(f) => lines.push(line("schedule.skipped", &f, None)),
            Step::Wait => {}
            Step::Start(f, cancel) => {
                if let Some(previous) = cancel {
                    let engine = make()?;
                    let reason = Some(format!("schedule {} fired again", schedule.name));
                    if let Err(e) = super::cancel(&engine, &previous, reason).await {
                        lines.push(json!({"event": "schedule.error", "schedule": schedule.name,
                            "run": previous, "error": e.to_string()}));
                    }
                }
                match start(&store, make, &schedule, &f).await {
                    Ok(Some(fired)) => {
                        lines.push(line("schedule.fired", &f, None));
                        started.push(fired);
                    }
                    Ok(None) => {}
                    Err(e) => lines.push(line("schedule.error", &f, Some(&e))),
                }
            }
        }
    }
    Ok(Turn {
        started,
        wait,
        lines,
    })
}

fn line(event: &str, f: &FireRecord, error: Option<&OpsError>) -> Value {
    let mut v = json!({"event": event, "schedule": f.schedule, "instant": rfc3339(f.instant_ms),
        "run": f.run, "manual": f.manual});
    if let Some(e) = error {
        v["code"] = json!(e.code());
        v["error"] = json!(e.to_string());
    }
    v
}

type Decided = (Vec<(ScheduleRecord, Step)>, Option<Duration>, Vec<Value>);

/// Claims the due instants and decides each schedule's next step (blocking: reads and writes
/// the database). `None` when the store keeps no schedules.
fn decide(store: &dyn Store, now_ms: u64) -> Result<Option<Decided>, OpsError> {
    let Some(book) = store.schedules() else {
        return Ok(None);
    };
    let mut steps = Vec::new();
    let mut lines = Vec::new();
    let mut next: Option<u64> = None;
    for schedule in book.all()? {
        if schedule.paused {
            continue;
        }
        match decide_one(book.as_ref(), store, &schedule, now_ms) {
            Ok((step, upcoming)) => {
                if let Some(upcoming) = upcoming {
                    next = Some(next.map_or(upcoming, |n| n.min(upcoming)));
                }
                if let Some(step) = step {
                    steps.push((schedule, step));
                }
            }
            Err(e) => lines.push(json!({"event": "schedule.error", "schedule": schedule.name,
                "code": e.code(), "error": e.to_string()})),
        }
    }
    let wait = next.map(|n| Duration::from_millis(n.saturating_sub(now_ms)));
    Ok(Some((steps, wait, lines)))
}

/// Claims `schedule`'s due instants, then picks the step for its oldest unsettled one; also
/// returns its next instant.
fn decide_one(
    book: &dyn ScheduleBook,
    store: &dyn Store,
    schedule: &ScheduleRecord,
    now_ms: u64,
) -> Result<(Option<Step>, Option<u64>), OpsError> {
    let timetable = timetable_of(schedule)?;
    let overlap = overlap_of(&schedule.overlap)?;
    let due = plan::due(
        &timetable,
        schedule.cursor_ms,
        now_ms,
        catch_up_of(&schedule.catch_up)?,
    );
    let mut cursor = schedule.cursor_ms;
    if due.cursor != schedule.cursor_ms {
        let fires: Vec<FireRecord> = due
            .fire
            .iter()
            .map(|&instant_ms| FireRecord {
                schedule: schedule.name.clone(),
                instant_ms,
                run: run_id_of(&schedule.name, instant_ms),
                state: FireState::Pending,
                manual: false,
                fired_ms: now_ms,
            })
            .collect();
        let moved = CursorMove {
            from: schedule.cursor_ms,
            to: due.cursor,
        };
        // Lost to another process: it claimed these instants, and starts them.
        if book.claim(&schedule.name, Some(moved), &fires)? {
            cursor = due.cursor;
        }
    }
    let upcoming = plan::next_fire(&timetable, cursor, now_ms);
    let fires = book.fires(&schedule.name)?;
    // A started instant whose run is still missing a while after it was claimed (its starter
    // was killed in between) first.
    for f in fires.iter().rev().take(8) {
        if f.state == FireState::Started
            && now_ms.saturating_sub(f.fired_ms) > RECOVER_AFTER_MS
            && store.run(&f.run)?.is_none()
        {
            return Ok((Some(Step::Start(f.clone(), None)), upcoming));
        }
    }
    let mut pending_fires = fires.iter().filter(|f| f.state == FireState::Pending);
    let Some(pending) = pending_fires.next() else {
        return Ok((None, upcoming));
    };
    let more = pending_fires.next().is_some();
    let next_after_wait = plan::next_fire(&timetable, cursor, now_ms);
    let previous_run = fires
        .iter()
        .rev()
        .find(|f| f.state == FireState::Started)
        .map(|f| f.run.clone());
    let previous = match &previous_run {
        None => Previous::None,
        Some(run) => match store.run(run)? {
            // Started, its row not written yet: on its way.
            None => Previous::Live,
            Some(rec) if rec.status.is_terminal() => Previous::Ended,
            Some(_) => Previous::Live,
        },
    };
    // Another instant to settle after this one: look again at once rather than at the next
    // instant (a waiting one is looked at again when a run ends, or at the next poll).
    let upcoming = if more { Some(now_ms) } else { upcoming };
    let step = match plan::on_overlap(overlap, previous) {
        Action::Wait => return Ok((Some(Step::Wait), next_after_wait)),
        Action::Skip => {
            if !book.settle(&schedule.name, pending.instant_ms, FireState::Skipped)? {
                return Ok((None, upcoming));
            }
            Step::Skip(pending.clone())
        }
        action => {
            // Settled before the run exists: whoever settles it starts it.
            if !book.settle(&schedule.name, pending.instant_ms, FireState::Started)? {
                return Ok((None, upcoming));
            }
            let cancel = (action == Action::CancelPreviousThenStart)
                .then_some(previous_run)
                .flatten();
            Step::Start(pending.clone(), cancel)
        }
    };
    Ok((Some(step), upcoming))
}

/// Starts the run of instant `f` from `schedule`'s spec file, its setup recording the
/// schedule and the instant. `None` when the run exists already (another process started
/// it).
async fn start(
    store: &Arc<dyn Store>,
    make: MakeEngine<'_>,
    schedule: &ScheduleRecord,
    f: &FireRecord,
) -> Result<Option<Fired>, OpsError> {
    if store.run(&f.run)?.is_some() {
        return Ok(None);
    }
    let mut file = super::load(Path::new(&schedule.spec_path), None)?;
    file.setup.schedule = Some(ScheduledBy {
        name: schedule.name.clone(),
        instant_ms: f.instant_ms,
        manual: f.manual,
    });
    let (file, goal) = super::prepare(file, schedule.goal.clone(), super::trace_warning).await?;
    let engine = make()?;
    file.install(&engine)?;
    match super::start(&engine, f.run.clone(), &file, &goal, None).await {
        Ok(handle) => Ok(Some(Fired {
            run: f.run.clone(),
            engine,
            handle,
        })),
        // Created by another process between the check and here.
        Err(_) if store.run(&f.run)?.is_some() => Ok(None),
        Err(e) => Err(e),
    }
}
