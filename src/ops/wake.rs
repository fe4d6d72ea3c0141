//! Timers a person acts on: whether a run only sleeps (what `runtape resume` says instead of
//! taking it up before its time), and `runtape wake RUN`, which fires its earliest timer now.
//! What is due, and the event that fires a timer, are decided by the pure
//! [`machine::wake`](crate::machine::wake); this module reads and writes.

use std::time::Duration;

use super::OpsError;
use super::start::install_stored;
use crate::exec::{Engine, RunHandle};
use crate::history;
use crate::machine::wake::{self, PendingTimer};
use crate::machine::{Hlc, RunId, StateKind};
use crate::store::RunStatus;

/// A run that only sleeps, and how long until it wakes on the engine's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asleep {
    /// When its earliest sleep comes due.
    pub due: Hlc,
    /// How long from now, on the engine's clock (never zero: a due run is not asleep).
    pub wait: Duration,
}

/// `Some` when `run` does nothing but sleep until an instant that has not come on `engine`'s
/// clock (see [`wake::sleeps_until`]): `runtape resume` then takes nothing up and says when it
/// wakes. Reads the run's row, and its state only when the row says it is calling tools.
pub fn asleep(engine: &Engine, run: &RunId) -> Result<Option<Asleep>, OpsError> {
    let store = engine.store().as_ref();
    let rec = history::row(store, run)?;
    if rec.status != RunStatus::Running || rec.state_kind != StateKind::CallingTools {
        return Ok(None);
    }
    let spec = history::spec_of(&rec)?;
    let state = crate::ledger::state_at(store, run, &spec, rec.seq)?.state;
    Ok(wake::sleeps_until(&state).and_then(|due| {
        let wait = engine.clock().until(due);
        (!wait.is_zero()).then_some(Asleep { due, wait })
    }))
}

/// What [`wake()`] fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Woken {
    /// The timer.
    pub timer: PendingTimer,
    /// Fired before its due instant (a `TimerFired` with `early` set); false when it was due
    /// already and the run was simply taken up, which fires it.
    pub early: bool,
}

/// `runtape wake RUN`: takes `run` up and fires its earliest timer now — a sleep or the
/// deadline of a call waiting for a person — then drives it on as `runtape resume` does.
/// Before its due instant the firing is committed as an early wake (`TimerFired` with
/// `early`, stamped now; the model is told a person woke it), at or after it as the timer's
/// own firing. Refused ([`OpsError::NoTimer`]) when the run waits on no timer; nothing is
/// written then. The run's history is checked once, before anything is written, and that
/// check is handed to the take-up (as [`resume`](fn@super::resume) does).
pub async fn wake(engine: &Engine, run: &RunId) -> Result<(RunHandle, Woken), OpsError> {
    let rec = install_stored(engine, run)?;
    let store = engine.store().clone();
    let end = crate::ledger::ActFrom::End;
    let checked =
        crate::ledger::check_continuable(store.as_ref(), &rec, engine.receipt_signer(), end)?;
    let timer = wake::pending_timers(&checked.rebuilt.state)
        .into_iter()
        .next()
        .ok_or_else(|| OpsError::NoTimer {
            run: run.clone(),
            status: rec.status,
        })?;
    let early = !engine.clock().until(timer.due).is_zero();
    // Due already: taken up with no event, the timer fires at once, stamped at its instant
    // or later. Either way the check above stands for the take-up's own while nothing was
    // written to the run since (it checks again otherwise).
    let first = if early {
        vec![wake::firing(run, &timer, true)]
    } else {
        Vec::new()
    };
    let handle = engine.resume_checked(run, checked, first).await?;
    Ok((handle, Woken { timer, early }))
}
