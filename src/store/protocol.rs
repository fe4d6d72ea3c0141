//! The store protocol's rules, as one pure function per write: who may take a run up, which
//! commits are in sequence under which lease, whether a call may be started, what a release
//! and a control request leave. Every backend (SQLite's writer, PostgreSQL's, the in-memory
//! store) reads the row inside its own transaction, asks the rule here, and writes what it
//! decides; the stateright model of the protocol (`exec::protocol_model`) asks the same rules,
//! so what the checker explores is what the stores do.
//!
//! Nothing here reads a clock or a database: the caller passes the row as it read it and the
//! time it was given, and a refusal is the [`StoreError`] the caller returns unchanged (a
//! refused write changes nothing).

use super::{Control, RunStatus, StoreError};
use crate::machine::{Digest, RunId};

/// A run's lease and status as its row holds them, read inside the transaction that writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseRow<'a> {
    /// The lease epoch: bumped by every take-up; every later write carries it.
    pub(crate) epoch: u64,
    /// The process holding the lease, if one does.
    pub(crate) holder: Option<&'a str>,
    /// When the holder's lease lapses (milliseconds, the database's clock for PostgreSQL).
    pub(crate) expires_ms: u64,
    /// The run's status.
    pub(crate) status: RunStatus,
}

/// Whether `owner` may take `run` up at `now_ms` (`AcquireLease`): not when the run has ended,
/// nor while another live process holds an unexpired lease (`holder_is_dead` says whether the
/// holder's process is known to be gone, as [`super::owner_is_dead`] does on this host).
/// Returns the new epoch; every write of the old holder is fenced from then on.
pub(crate) fn take_up(
    run: &RunId,
    row: &LeaseRow<'_>,
    owner: &str,
    now_ms: u64,
    holder_is_dead: impl FnOnce(&str) -> bool,
) -> Result<u64, StoreError> {
    if row.status.is_terminal() {
        return Err(StoreError::Finished {
            run: run.to_string(),
            status: row.status,
        });
    }
    if let Some(holder) = row.holder.filter(|h| *h != owner)
        && row.expires_ms > now_ms
        && !holder_is_dead(holder)
    {
        return Err(StoreError::LeaseHeld {
            run: run.to_string(),
            owner: holder.to_owned(),
        });
    }
    Ok(row.epoch + 1)
}

/// The control request a take-up leaves on the row: a pause was meant for the driver that held
/// the run and goes; a cancel stands until a driver acts on it.
pub(crate) fn control_after_take_up(control: Option<Control>) -> Option<Control> {
    control.filter(|c| matches!(c, Control::Cancel(_)))
}

/// Refuses a write under lease `ours` when the row's epoch is `current`: another process has
/// taken the run up since (`Fenced`).
pub(crate) fn fence(run: &RunId, ours: u64, current: u64) -> Result<(), StoreError> {
    if ours == current {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            run: run.to_string(),
            ours,
            current,
        })
    }
}

/// One commit as the sequence rule sees it: whose, under which lease, at which seq.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Numbered<'a> {
    /// The run it is for.
    pub(crate) run: &'a RunId,
    /// The lease epoch it was written under.
    pub(crate) epoch: u64,
    /// Its transition's seq.
    pub(crate) seq: u64,
}

/// Checks one write's commits of `run` (whose row holds `epoch` and latest seq `latest`): every
/// one is `run`'s, written under the current lease, and they follow the latest seq one by one.
/// Returns the seq the run's row moves to. Checked before anything is written.
pub(crate) fn in_sequence<'a>(
    run: &RunId,
    epoch: u64,
    latest: u64,
    commits: impl IntoIterator<Item = Numbered<'a>>,
) -> Result<u64, StoreError> {
    let mut at = latest;
    for c in commits {
        if c.run != run {
            // One write is one run's: a mixed one is a bug in the caller, refused whole.
            return Err(StoreError::OutOfSequence {
                run: c.run.to_string(),
                latest: at,
                got: c.seq,
            });
        }
        fence(run, c.epoch, epoch)?;
        if c.seq != at + 1 {
            return Err(StoreError::OutOfSequence {
                run: run.to_string(),
                latest: at,
                got: c.seq,
            });
        }
        at = c.seq;
    }
    Ok(at)
}

/// Refuses a sealed head that replaces another than the one stored (`StaleHead`); a write
/// without a head, or a head that names none it replaces, passes.
pub(crate) fn head_follows(
    run: &RunId,
    stored: Option<Digest>,
    replaces: Option<Digest>,
) -> Result<(), StoreError> {
    match replaces {
        Some(expected) if stored != Some(expected) => Err(StoreError::StaleHead {
            run: run.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Refuses to start a call whose result is already committed (`AlreadyAnswered`): the
/// driver's view is older than the outbox. `answered` is the first of the calls to start that
/// the outbox holds as done, `(seq, index)`.
pub(crate) fn may_start(run: &RunId, answered: Option<(u64, u32)>) -> Result<(), StoreError> {
    match answered {
        Some((seq, index)) => Err(StoreError::AlreadyAnswered {
            run: run.to_string(),
            seq,
            index,
        }),
        None => Ok(()),
    }
}

/// The status a release (under the current lease, of a lease still held) leaves: the one the
/// driver asks for, unless the run has already ended, which no release undoes.
pub(crate) fn status_on_release(current: RunStatus, asked: RunStatus) -> RunStatus {
    if current.is_terminal() {
        current
    } else {
        asked
    }
}

/// Refuses a pause or cancel request for a run that has ended (`Finished`); clearing the
/// request is always allowed.
pub(crate) fn may_request(
    run: &RunId,
    status: RunStatus,
    control: Option<&Control>,
) -> Result<(), StoreError> {
    if control.is_some() && status.is_terminal() {
        return Err(StoreError::Finished {
            run: run.to_string(),
            status,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(holder: Option<&str>, expires_ms: u64, status: RunStatus) -> LeaseRow<'_> {
        LeaseRow {
            epoch: 4,
            holder,
            expires_ms,
            status,
        }
    }

    #[test]
    fn a_take_up_bumps_the_epoch_unless_the_run_ended_or_a_live_holder_has_time_left() {
        let run = RunId::new("r");
        let alive = |_: &str| false;
        let free = row(None, 0, RunStatus::Paused);
        assert_eq!(take_up(&run, &free, "me", 10, alive).ok(), Some(5));
        let held = row(Some("other"), 11, RunStatus::Running);
        assert!(matches!(
            take_up(&run, &held, "me", 10, alive),
            Err(StoreError::LeaseHeld { owner, .. }) if owner == "other"
        ));
        // Lapsed, dead, or our own: taken.
        assert_eq!(take_up(&run, &held, "me", 11, alive).ok(), Some(5));
        assert_eq!(take_up(&run, &held, "me", 10, |_| true).ok(), Some(5));
        assert_eq!(take_up(&run, &held, "other", 10, alive).ok(), Some(5));
        let ended = row(None, 0, RunStatus::Completed);
        assert!(matches!(
            take_up(&run, &ended, "me", 10, alive),
            Err(StoreError::Finished { .. })
        ));
    }

    #[test]
    fn a_take_up_keeps_a_cancel_and_drops_a_pause() {
        let cancel = Some(Control::Cancel(Some("why".into())));
        assert_eq!(control_after_take_up(cancel.clone()), cancel);
        assert_eq!(control_after_take_up(Some(Control::Pause)), None);
        assert_eq!(control_after_take_up(None), None);
    }

    #[test]
    fn commits_follow_the_latest_seq_under_the_current_lease() {
        let (r, s) = (RunId::new("r"), RunId::new("s"));
        let n = |run, epoch, seq| Numbered { run, epoch, seq };
        assert_eq!(
            in_sequence(&r, 2, 7, [n(&r, 2, 8), n(&r, 2, 9)]).ok(),
            Some(9)
        );
        assert_eq!(in_sequence(&r, 2, 7, []).ok(), Some(7));
        assert!(matches!(
            in_sequence(&r, 2, 7, [n(&r, 1, 8)]),
            Err(StoreError::Fenced {
                ours: 1,
                current: 2,
                ..
            })
        ));
        assert!(matches!(
            in_sequence(&r, 2, 7, [n(&r, 2, 8), n(&r, 2, 10)]),
            Err(StoreError::OutOfSequence {
                latest: 8,
                got: 10,
                ..
            })
        ));
        assert!(matches!(
            in_sequence(&r, 2, 7, [n(&r, 2, 8), n(&s, 2, 9)]),
            Err(StoreError::OutOfSequence { run, .. }) if run == "s"
        ));
    }

    #[test]
    fn heads_starts_releases_and_requests_follow_the_row() {
        let r = RunId::new("r");
        let (a, b) = (Digest([1; 32]), Digest([2; 32]));
        assert!(head_follows(&r, Some(a), Some(a)).is_ok());
        assert!(head_follows(&r, Some(a), None).is_ok());
        assert!(matches!(
            head_follows(&r, Some(a), Some(b)),
            Err(StoreError::StaleHead { .. })
        ));
        assert!(head_follows(&r, None, Some(b)).is_err());
        assert!(may_start(&r, None).is_ok());
        assert!(matches!(
            may_start(&r, Some((3, 1))),
            Err(StoreError::AlreadyAnswered {
                seq: 3,
                index: 1,
                ..
            })
        ));
        assert_eq!(
            status_on_release(RunStatus::Running, RunStatus::Paused),
            RunStatus::Paused
        );
        assert_eq!(
            status_on_release(RunStatus::Cancelled, RunStatus::Paused),
            RunStatus::Cancelled
        );
        assert!(may_request(&r, RunStatus::Failed, None).is_ok());
        assert!(may_request(&r, RunStatus::Failed, Some(&Control::Pause)).is_err());
        assert!(may_request(&r, RunStatus::Paused, Some(&Control::Pause)).is_ok());
    }
}
