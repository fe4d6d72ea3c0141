//! Finding the runs whose timers are due, for the processes that wake them: `runtape worker`
//! on a SQLite file, `runtape serve`, and (for runs resting on a deadline) `runtape worker` on
//! PostgreSQL.
//!
//! A scan reads the runs' rows, and for each run another process may take up — `running` or
//! waiting for a person, its lease free (never taken, given back, expired, or its owner's
//! process gone), started from a spec file (its setup stored) — the earliest timer its latest
//! state waits on ([`wake::next_wake`], pure). That is read once per step of the run (cached
//! by seq), so a scan of runs that did not move reads only their rows. The run's clock says how
//! long until each due instant, and [`wake::plan`] (pure) says which runs are due and how long
//! to wait before scanning again. The caller takes each due run up as `runtape resume` does:
//! under the run's lease, a compare-and-swap, so two processes racing for a run take it once,
//! and the machine accepts one firing of each timer besides.
//!
//! A run `paused` (by `runtape pause`, or a process's graceful stop) is left for a person to
//! resume or wake.
//!
//! A scan made by [`DueScan::driving_every_run`] (`runtape worker` on a SQLite file) also
//! finds the `running` runs that no process drives and that are not only asleep: a run a
//! worker's drain handed back, or one whose process died mid-step. Such a run is due at once
//! (its take-up performs or reports in doubt what was in flight), so a run a worker took
//! responsibility for is never stranded until a person resumes it. A delegated child is left
//! to its parent's take-up, which drives its children.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::ledger::{self, HistoryError};
use crate::machine::wake::{self, WakePlan};
use crate::machine::{Hlc, RunId};
use crate::store::{RunRecord, RunStatus, Store};

/// Remembers, by run, the earliest timer of the step a scan last read, so the next scan reads
/// the state only of the runs that moved since.
#[derive(Debug, Default)]
pub struct DueScan {
    /// By run: the seq read, and what its state at that seq waits on.
    read: HashMap<RunId, (u64, Waits)>,
    /// Whether undriven `running` runs are due at once (see the module docs).
    every_run: bool,
}

/// What a run's state at one step waits on, as a scan needs it.
#[derive(Clone, Copy, Debug, Default)]
struct Waits {
    /// Its earliest timer ([`wake::next_wake`]).
    next: Option<Hlc>,
    /// The instant it sleeps until, when it only sleeps ([`wake::sleeps_until`]).
    asleep: Option<Hlc>,
    /// Whether it is never due at once even when undriven: a delegated child (its parent's
    /// take-up drives it), or a run whose state could not be read (its take-up would be
    /// refused the same way).
    left_alone: bool,
}

/// Whether another process may take `rec` up to fire a timer (see the module docs), judged at
/// wall-clock `now_ms`; `statuses` are the statuses the caller wakes.
pub fn may_take_up(rec: &RunRecord, now_ms: u64, statuses: &[RunStatus]) -> bool {
    statuses.contains(&rec.status)
        && rec.setup.is_some()
        && rec.lease_owner.as_deref().is_none_or(|owner| {
            rec.lease_expires_ms <= now_ms || crate::store::owner_is_dead(owner)
        })
}

/// Whether `rec` was started from a spec file in `spec_dir` (absolute, canonical), as its
/// setup records; every run when `spec_dir` is `None`.
fn in_spec_dir(rec: &RunRecord, spec_dir: Option<&str>) -> bool {
    let Some(dir) = spec_dir else {
        return true;
    };
    rec.setup
        .as_deref()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .is_some_and(|setup| setup["spec_dir"].as_str() == Some(dir))
}

/// What a scan found.
#[derive(Debug)]
pub struct Scanned {
    /// The due runs, and how long to wait before scanning again.
    pub plan: WakePlan<RunId>,
    /// Runs whose latest state could not be read, with why (each said once per step).
    pub unreadable: Vec<(RunId, String)>,
}

impl DueScan {
    /// A scan for a process that drives every run in hand (`runtape worker` on a SQLite
    /// file): besides the due timers, the undriven `running` runs not only asleep are due at
    /// once (see the module docs). [`DueScan::default`] finds due timers only (`serve`).
    pub fn driving_every_run() -> Self {
        DueScan {
            every_run: true,
            ..DueScan::default()
        }
    }

    /// Scans `store` (see the module docs): the runs in `statuses` whose earliest timer is due
    /// on `clock`, and how long to wait (at most `cap`) before the next one comes due. Skips
    /// the runs in `skip` (driven here already, or left alone for a while). Blocking: reads
    /// the database. Fails only when the database cannot be read.
    pub fn scan(
        &mut self,
        store: &dyn Store,
        clock: &dyn Clock,
        spec_dir: Option<&str>,
        statuses: &[RunStatus],
        skip: &HashSet<RunId>,
        cap: Duration,
    ) -> Result<Scanned, HistoryError> {
        let now_ms = clock.wall_ms();
        let mut candidates = Vec::new();
        let mut seen = HashSet::new();
        let mut unreadable = Vec::new();
        for rec in store.runs()? {
            seen.insert(rec.id.clone());
            if skip.contains(&rec.id)
                || !may_take_up(&rec, now_ms, statuses)
                || !in_spec_dir(&rec, spec_dir)
            {
                continue;
            }
            let waits = match self.read.get(&rec.id) {
                Some((seq, waits)) if *seq == rec.seq => *waits,
                _ => {
                    let read = ledger::spec_of(&rec).and_then(|spec| {
                        let child = spec.spec().delegated_by.is_some();
                        if !wake::may_wait_on_timers(spec.spec()) {
                            return Ok(Waits {
                                left_alone: child,
                                ..Waits::default()
                            });
                        }
                        ledger::state_at(store, &rec.id, &spec, rec.seq).map(|rebuilt| Waits {
                            next: wake::next_wake(&rebuilt.state),
                            asleep: wake::sleeps_until(&rebuilt.state),
                            left_alone: child,
                        })
                    });
                    // A run whose state cannot be read is not woken (its take-up would be
                    // refused the same way); it is read again once it moves.
                    let waits = match read {
                        Ok(waits) => waits,
                        Err(HistoryError::Store(e)) => return Err(HistoryError::Store(e)),
                        Err(e) => {
                            unreadable.push((rec.id.clone(), e.to_string()));
                            let waits = Waits {
                                left_alone: true,
                                ..Waits::default()
                            };
                            self.read.insert(rec.id.clone(), (rec.seq, waits));
                            continue;
                        }
                    };
                    self.read.insert(rec.id.clone(), (rec.seq, waits));
                    waits
                }
            };
            let due = if self.every_run && rec.status == RunStatus::Running && !waits.left_alone {
                Some(waits.asleep.map_or(Duration::ZERO, |t| clock.until(t)))
            } else {
                waits.next.map(|t| clock.until(t))
            };
            if let Some(due) = due {
                candidates.push((rec.id, due));
            }
        }
        self.read.retain(|run, _| seen.contains(run));
        Ok(Scanned {
            plan: wake::plan(&candidates, cap),
            unreadable,
        })
    }

    /// [`DueScan::scan`] on tokio's blocking threads, for the loops that wake runs (`runtape
    /// worker` on SQLite, `runtape serve`): the scan comes back with what it found. `Err` when
    /// the scanning thread panicked.
    pub async fn scan_blocking(
        mut self,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        spec_dir: Option<String>,
        statuses: &'static [RunStatus],
        skip: HashSet<RunId>,
        cap: Duration,
    ) -> Result<(DueScan, Result<Scanned, HistoryError>), tokio::task::JoinError> {
        tokio::task::spawn_blocking(move || {
            let found = self.scan(
                store.as_ref(),
                clock.as_ref(),
                spec_dir.as_deref(),
                statuses,
                &skip,
                cap,
            );
            (self, found)
        })
        .await
    }
}
