//! Firing schedules from `runtape worker` on PostgreSQL: every few seconds, and at the next
//! instant a schedule fires at, a worker takes a turn over the schedules whose spec file is in
//! its `--spec-dir`. A due instant is claimed by moving the schedule's cursor in a transaction
//! that locks its row and inserts the instant under the key (schedule, instant), so however
//! many workers look, one claims it; its run (named after the schedule and the instant, so a
//! second creation is refused) is handed to the queue, and whichever worker claims it drives
//! it, fenced by its lease epoch like any queued run.
//!
//! What a turn does is the operations layer's (`ops::schedule_fire`, above this one): the
//! worker is handed it as a [`ScheduleTurns`] ([`WorkerOptions::schedules`]) and calls it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{LogLine, WorkerOptions};
use crate::store::{Store, WorkerInfo};

/// What a turn over the schedules gives back: its log lines (`schedule.fired`,
/// `schedule.skipped`, `schedule.error`, …) and how long until the next turn.
pub type TurnDone = (Vec<LogLine>, Duration);

/// Fires the schedules a worker serves, one turn per call (`ops::schedule_fire`'s
/// `QueuedSchedules` is the one `runtape worker` is given).
pub trait ScheduleTurns: Send + Sync + std::fmt::Debug {
    /// One turn over the schedules in `store`: claims the instants that came due and queues
    /// their runs. `idle`: the worker drives no run (on the stepped clock, schedule time
    /// moves only then). Never fails: a trouble is a log line, and the next turn tries again.
    fn turn(
        &self,
        store: Arc<dyn Store>,
        idle: bool,
    ) -> Pin<Box<dyn Future<Output = TurnDone> + Send + '_>>;
}

/// One turn of `opts.schedules` (none: nothing to do, look again in `opts.poll`), its lines
/// logged with this worker's id. Returns how long until the next turn.
pub(super) async fn fire(
    store: &Arc<dyn Store>,
    info: &WorkerInfo,
    opts: &WorkerOptions,
    idle: bool,
    log: &impl Fn(LogLine),
) -> Duration {
    let Some(schedules) = &opts.schedules else {
        return opts.poll;
    };
    let (lines, wait) = schedules.turn(store.clone(), idle).await;
    for mut line in lines {
        line["worker"] = json!(info.id);
        log(line);
    }
    wait
}
