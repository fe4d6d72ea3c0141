//! Who wakes a run, decided here: which timers a run's state waits on, when the earliest comes
//! due, whether the run has nothing else to do until then, the event that fires a timer (on
//! time, or early when a person asks: `runtape wake`), and how long a process that wakes runs
//! (`runtape worker`, `runtape serve`) may wait before it looks again.
//!
//! Everything here reads a state or numbers it is given; the callers do the I/O: they read
//! each run's latest state, ask its clock how long until each due instant
//! ([`Clock::until`](crate::clock::Clock::until), zero on `--stepped-clock`), and take the
//! due runs up as `runtape resume` does — under the run's lease, so a timer two processes race
//! for fires once (the machine refuses a second firing besides).

use std::time::Duration;

use super::event::EventBody;
use super::ids::{EffectRef, Hlc, RunId};
use super::state::{Batch, RunState, SlotStatus};

/// What a pending timer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// A `sleep_for`/`sleep_until` call's sleep.
    Sleep,
    /// The deadline of a call waiting for a person (`[timers.deadlines]`).
    Deadline,
}

/// A timer a run waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingTimer {
    /// Its `StartTimer` effect.
    pub effect: EffectRef,
    /// When it comes due.
    pub due: Hlc,
    /// A sleep or a deadline.
    pub kind: TimerKind,
}

/// The calls of `state` still in progress, when it is taking tool calls.
fn batch_of(state: &RunState) -> Option<&Batch> {
    match state {
        RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. } => Some(batch),
        _ => None,
    }
}

/// Every timer `state` waits on, earliest first: the sleeping calls and the deadlines of calls
/// still waiting for a person (a deadline whose call was answered waits on nothing). Changes
/// with every transition that starts, fires or answers one.
pub fn pending_timers(state: &RunState) -> Vec<PendingTimer> {
    let Some(batch) = batch_of(state) else {
        return Vec::new();
    };
    let mut timers: Vec<PendingTimer> = batch
        .slots
        .iter()
        .filter_map(|slot| match (&slot.status, slot.deadline) {
            (SlotStatus::Sleeping { effect, due }, _) => Some(PendingTimer {
                effect: *effect,
                due: *due,
                kind: TimerKind::Sleep,
            }),
            (SlotStatus::Approval { .. } | SlotStatus::Question { .. }, Some(d)) => {
                Some(PendingTimer {
                    effect: d.effect,
                    due: d.due,
                    kind: TimerKind::Deadline,
                })
            }
            _ => None,
        })
        .collect();
    timers.sort_by_key(|t| (t.due, t.effect.seq, t.effect.index));
    timers
}

/// Who the calls of `state` still waiting for a person were escalated to, in call order
/// (see [`escalation`](super::escalation)); empty when none was.
pub fn escalated_to(state: &RunState) -> Vec<String> {
    batch_of(state)
        .map(|batch| {
            batch
                .slots
                .iter()
                .filter(|s| {
                    matches!(
                        s.status,
                        SlotStatus::Approval { .. } | SlotStatus::Question { .. }
                    )
                })
                .filter_map(|s| s.escalated.as_ref().map(|e| e.to.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a run of `spec` can ever wait on a timer: only a spec with `[timers]` offers the
/// sleep tools or puts deadlines on calls. Readers that look for wake times (`ls`, the wake
/// scans) skip the state of a run for which this is false.
pub fn may_wait_on_timers(spec: &super::Spec) -> bool {
    spec.timers.is_some()
}

/// The earliest instant a timer of `state` comes due: when a process that wakes runs should
/// take the run up. `None` when it waits on no timer.
pub fn next_wake(state: &RunState) -> Option<Hlc> {
    pending_timers(state).first().map(|t| t.due)
}

/// When the run only sleeps — every call not yet finished is asleep, so nothing happens
/// before the earliest wakes — that instant; `None` when something else is in progress or
/// waits (a call running, a person to answer) or nothing sleeps. `ls` shows such a run as
/// sleeping, and `resume` before that instant takes nothing up.
pub fn sleeps_until(state: &RunState) -> Option<Hlc> {
    let batch = batch_of(state)?;
    let mut earliest: Option<Hlc> = None;
    for slot in &batch.slots {
        match slot.status {
            SlotStatus::Sleeping { due, .. } => {
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
            }
            SlotStatus::Finished { .. } => {}
            _ => return None,
        }
    }
    earliest
}

/// The event that fires `timer` of run `run`: on time, or `early` when a person fires it
/// before its due instant (`runtape wake`), which the machine accepts from a person only.
pub fn firing(run: &RunId, timer: &PendingTimer, early: bool) -> EventBody {
    EventBody::TimerFired {
        effect: timer.effect.in_run(run),
        due: timer.due,
        early,
    }
}

/// The longest a process that wakes runs waits before it looks again, whatever it expects: a
/// run put to sleep by another process since is noticed within this.
pub const MAX_WAKE_POLL: Duration = Duration::from_secs(5);

/// What a process that wakes runs does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WakePlan<K> {
    /// The runs whose earliest timer is due now, in the order given.
    pub due: Vec<K>,
    /// How long to wait before looking again: until the earliest timer not yet due, capped
    /// at `cap`.
    pub wait: Duration,
}

/// Plans a waking process's next turn from `candidates`, each a run it may take up with how
/// long until its earliest timer comes due (zero: due now), as its clock said.
pub fn plan<K: Clone>(candidates: &[(K, Duration)], cap: Duration) -> WakePlan<K> {
    let due = candidates
        .iter()
        .filter(|(_, until)| until.is_zero())
        .map(|(k, _)| k.clone())
        .collect();
    let wait = candidates
        .iter()
        .map(|(_, until)| *until)
        .filter(|until| !until.is_zero())
        .min()
        .map_or(cap, |until| until.min(cap));
    WakePlan { due, wait }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_takes_due_runs_and_waits_for_the_earliest_other_capped() {
        let ms = Duration::from_millis;
        let cap = ms(5_000);
        let p = plan(&[("a", ms(300)), ("b", ms(0)), ("c", ms(90))], cap);
        assert_eq!(p.due, vec!["b"]);
        assert_eq!(p.wait, ms(90));
        let p = plan(&[("a", ms(60_000))], cap);
        assert!(p.due.is_empty());
        assert_eq!(p.wait, cap, "a far timer is looked at again within the cap");
        let p: WakePlan<&str> = plan(&[], cap);
        assert_eq!(p.wait, cap);
    }

    #[test]
    fn only_a_spec_with_timers_can_wait_on_one() {
        let mut spec = crate::machine::Spec::default();
        assert!(!may_wait_on_timers(&spec));
        spec.timers = Some(crate::machine::timer::TimerSpec::default());
        assert!(may_wait_on_timers(&spec));
    }
}
