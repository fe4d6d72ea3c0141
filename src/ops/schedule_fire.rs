//! Firing schedules, for the processes that stay up (`runtape worker` on a SQLite file or a
//! PostgreSQL database, `runtape serve`): each turn, [`turn`] claims the instants that came due
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
//!
//! On the stepped clock (`--stepped-clock`) schedule time does not wait for the wall: a
//! worker that drives no run judges its turn at the next instant ([`At::NextInstant`]), so
//! the instants fire one after another, each run ending before the next instant comes.

use std::future::Future;
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

/// How soon an instant waiting for a previous run that another process is creating
/// ([`Previous::Starting`]) is looked at again.
const STARTING_LOOK_MS: u64 = 250;

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
    /// The runs it started, for the caller to drive.
    pub started: Vec<Fired>,
    /// The runs it handed to the queue ([`Look::queue`]).
    pub queued: Vec<RunId>,
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

/// When a turn looks at the schedules: the time its due instants are judged at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// The wall time of the caller's clock, Unix ms.
    Wall(u64),
    /// The earliest next instant of the schedules looked at (the wall time, given, when none
    /// has one): schedule time jumps to it, so every instant fires in turn without waiting
    /// real time. For the stepped clock (`--stepped-clock`), when the caller drives no run:
    /// the same schedules fire the same instants, in the same order, on every machine.
    NextInstant(u64),
}

/// When a worker on `clock` that drives runs unless `idle` looks at the schedules: at the
/// wall's time; on a deterministic clock (the stepped one), at the next instant when it has
/// nothing in hand and not at all otherwise (`None`: schedule time stands still while a run
/// it started goes on, so no instant is passed over or skipped for the wall's sake).
pub fn at(clock: &dyn crate::clock::Clock, idle: bool) -> Option<At> {
    match (clock.deterministic(), idle) {
        (false, _) => Some(At::Wall(clock.wall_ms())),
        (true, true) => Some(At::NextInstant(clock.wall_ms())),
        (true, false) => None,
    }
}

/// How a turn looks at the schedules and what it does with the runs they start.
#[derive(Clone, Copy)]
pub struct Look<'a> {
    /// The time its due instants are judged at.
    pub at: At,
    /// Only the schedules whose spec file is in this directory (absolute, canonical); all
    /// when `None`. A worker fires only the schedules of the spec directory it was deployed
    /// with, as it takes up only those runs.
    pub spec_dir: Option<&'a str>,
    /// Hand each run to the queue instead of starting it here: created `running` with no
    /// lease, its head sealed with this signer, for whichever worker serving its spec
    /// directory claims it (`runtape worker` on PostgreSQL: the run is claimed, fenced and
    /// counted against `--concurrency` like any queued run). `None`: started in an engine
    /// the caller's `make` gives, and driven by the caller.
    pub queue: Option<&'a Arc<crate::receipt::ReceiptSigner>>,
}

impl Look<'_> {
    /// A look at every schedule at wall time `now_ms`, starting their runs here (`serve`).
    pub fn wall(now_ms: u64) -> Look<'static> {
        Look {
            at: At::Wall(now_ms),
            spec_dir: None,
            queue: None,
        }
    }
}

/// One turn over `store`'s schedules as `look` says: claims what came due, starts what may
/// start (each in an engine `make` gives, driven by the caller) or queues it. A store that
/// keeps no schedules has nothing to do. Fails only when the database cannot be read.
pub async fn turn(
    store: Arc<dyn Store>,
    look: Look<'_>,
    make: MakeEngine<'_>,
) -> Result<Turn, OpsError> {
    let reading = store.clone();
    let (at, dir) = (look.at, look.spec_dir.map(str::to_owned));
    let decided = tokio::task::spawn_blocking(move || decide(reading.as_ref(), at, dir.as_deref()))
        .await
        .map_err(|e| OpsError::BadSetting(format!("the schedule scan stopped: {e}")))??;
    let Some((book_steps, mut wait, mut lines)) = decided else {
        return Ok(Turn::default());
    };
    let mut skipped = false;
    let mut started = Vec::new();
    let mut queued = Vec::new();
    for (schedule, step) in book_steps {
        match step {
            Step::Skip(f) => {
                skipped = true;
                lines.push(line("schedule.skipped", &f, None));
            }
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
                match start(&store, make, look.queue, &schedule, &f).await {
                    Ok(Some(Launched::Here(fired))) => {
                        lines.push(line("schedule.fired", &f, None));
                        started.push(*fired);
                    }
                    Ok(Some(Launched::Queued(run))) => {
                        lines.push(line("schedule.fired", &f, None));
                        queued.push(run);
                    }
                    Ok(None) => {}
                    Err(e) => lines.push(line("schedule.error", &f, Some(&e))),
                }
            }
        }
    }
    // On jumping schedule time, the next instant is due as soon as this one is settled (not
    // after a turn that only failed, which would fail again at once).
    let progressed = skipped || !started.is_empty() || !queued.is_empty();
    if matches!(at, At::NextInstant(_)) && progressed && wait.is_some() {
        wait = Some(Duration::ZERO);
    }
    Ok(Turn {
        started,
        queued,
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

/// Whether schedule `s` starts its runs from a spec file in `spec_dir` (all when `None`).
fn in_spec_dir(s: &ScheduleRecord, spec_dir: Option<&str>) -> bool {
    spec_dir.is_none_or(|dir| Path::new(&s.spec_path).parent() == Some(Path::new(dir)))
}

/// The time a turn judges due instants at ([`At`]): the earliest next instant of `schedules`
/// when schedule time jumps, else the wall's.
fn judged_at(at: At, schedules: &[ScheduleRecord]) -> u64 {
    match at {
        At::Wall(now_ms) => now_ms,
        At::NextInstant(wall_ms) => schedules
            .iter()
            .filter_map(|s| {
                let t = timetable_of(s).ok()?;
                plan::next_fire(&t, s.cursor_ms, s.cursor_ms)
            })
            .min()
            .unwrap_or(wall_ms),
    }
}

/// Claims the due instants and decides each schedule's next step (blocking: reads and writes
/// the database). `None` when the store keeps no schedules.
fn decide(store: &dyn Store, at: At, spec_dir: Option<&str>) -> Result<Option<Decided>, OpsError> {
    let Some(book) = store.schedules() else {
        return Ok(None);
    };
    let mut steps = Vec::new();
    let mut lines = Vec::new();
    let mut next: Option<u64> = None;
    let schedules: Vec<ScheduleRecord> = book
        .all()?
        .into_iter()
        .filter(|s| !s.paused && in_spec_dir(s, spec_dir))
        .collect();
    let now_ms = judged_at(at, &schedules);
    for schedule in schedules {
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
            // Started, its row not written yet: on its way (another process creates it).
            None => Previous::Starting,
            Some(rec) if rec.status.is_terminal() => Previous::Ended,
            Some(_) => Previous::Live,
        },
    };
    // Another instant to settle after this one: look again at once rather than at the next
    // instant (a waiting one is looked at again when a run ends, or at the next poll).
    let upcoming = if more { Some(now_ms) } else { upcoming };
    let step = match plan::on_overlap(overlap, previous) {
        // Waiting for a previous run another process is creating: its row is written in a
        // moment, so look again soon rather than at the next poll.
        Action::Wait if previous == Previous::Starting => {
            return Ok((Some(Step::Wait), Some(now_ms + STARTING_LOOK_MS)));
        }
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

/// How [`start`] launched a fired instant's run.
enum Launched {
    /// Started in an engine of the caller's, to drive.
    Here(Box<Fired>),
    /// Handed to the queue.
    Queued(RunId),
}

/// Starts the run of instant `f` from `schedule`'s spec file, its setup recording the
/// schedule and the instant, or queues it when `queue` gives the signer to seal it with.
/// `None` when the run exists already (another process started it).
async fn start(
    store: &Arc<dyn Store>,
    make: MakeEngine<'_>,
    queue: Option<&Arc<crate::receipt::ReceiptSigner>>,
    schedule: &ScheduleRecord,
    f: &FireRecord,
) -> Result<Option<Launched>, OpsError> {
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
    let launched = match queue {
        Some(signer) => {
            let setup = file.setup.to_json()?;
            let (id, spec) = (f.run.clone(), &file.spec);
            crate::worker::enqueue(store.as_ref(), signer.clone(), id, spec, &goal, setup)
                .await
                .map(Launched::Queued)
                .map_err(OpsError::from)
        }
        None => {
            let engine = make()?;
            file.install(&engine)?;
            super::start(&engine, f.run.clone(), &file, &goal, None)
                .await
                .map(|handle| {
                    Launched::Here(Box::new(Fired {
                        run: f.run.clone(),
                        engine,
                        handle,
                    }))
                })
        }
    };
    match launched {
        Ok(launched) => Ok(Some(launched)),
        // Created by another process between the check and here.
        Err(_) if store.run(&f.run)?.is_some() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The schedule turns of `runtape worker` on PostgreSQL
/// ([`crate::worker::schedules::ScheduleTurns`]): the schedules of its spec directory, judged
/// on its engine's clock ([`at`]), each fired instant's run queued and sealed with its signer.
#[derive(Debug)]
pub struct QueuedSchedules {
    /// The worker's spec directory (absolute, canonical).
    pub spec_dir: String,
    /// Its engines' settings: the clock, and the signer each queued run is sealed with.
    pub engine: crate::exec::EngineConfig,
}

impl crate::worker::schedules::ScheduleTurns for QueuedSchedules {
    fn turn(
        &self,
        store: Arc<dyn Store>,
        idle: bool,
    ) -> std::pin::Pin<Box<dyn Future<Output = crate::worker::schedules::TurnDone> + Send + '_>>
    {
        Box::pin(async move {
            let poll = crate::machine::wake::MAX_WAKE_POLL;
            let Some(at) = at(self.engine.clock.as_ref(), idle) else {
                return (Vec::new(), poll);
            };
            let look = Look {
                at,
                spec_dir: Some(&self.spec_dir),
                queue: Some(&self.engine.receipts),
            };
            // Used only to cancel a previous run under `cancel-previous`: fired runs are queued.
            let make = || Ok(Engine::with_store(store.clone(), self.engine.clone()));
            match turn(store.clone(), look, &make).await {
                Ok(turn) => (turn.lines, turn.wait.map_or(poll, |w| w.min(poll))),
                Err(e) => {
                    let line = json!({"event": "worker.error", "code": e.code(),
                        "error": e.to_string()});
                    (vec![line], poll)
                }
            }
        })
    }
}
