//! How each process of the model acts, one atomic step at a time: the driver, a resumer, the
//! canceller and the pauser, each against the database row, fenced as the code is.

use std::sync::LazyLock;

use super::*;
use crate::machine::RunId;
use crate::store::protocol::{self, LeaseRow, Numbered};
use crate::store::{Control, RunStatus, StoreError};

/// The modelled run, as the store's rules name it in a refusal.
static RUN: LazyLock<RunId> = LazyLock::new(|| RunId::new("run"));

/// Process `i`'s name as a lease holder.
const HOLDERS: [&str; 8] = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"];

impl Status {
    fn stored(self) -> RunStatus {
        match self {
            Status::Running => RunStatus::Running,
            Status::Paused => RunStatus::Paused,
            Status::Completed => RunStatus::Completed,
            Status::Failed => RunStatus::Failed,
            Status::Cancelled => RunStatus::Cancelled,
        }
    }

    fn from_stored(s: RunStatus) -> Status {
        match s {
            RunStatus::Paused => Status::Paused,
            RunStatus::Completed => Status::Completed,
            RunStatus::Failed => Status::Failed,
            RunStatus::Cancelled => Status::Cancelled,
            _ => Status::Running,
        }
    }
}

impl Ctl {
    fn stored(self) -> Control {
        match self {
            Ctl::Pause => Control::Pause,
            Ctl::Cancel => Control::Cancel(None),
        }
    }

    fn from_stored(c: Control) -> Ctl {
        match c {
            Control::Pause => Ctl::Pause,
            Control::Cancel(_) => Ctl::Cancel,
        }
    }
}

impl ProtocolModel {
    pub(super) fn proc(role: Role, pc: Pc) -> Proc {
        Proc {
            role,
            pc,
            epoch: 0,
            view: None,
            alive: true,
            frozen: false,
            slept_past_lease: false,
            draining: false,
            pause: false,
        }
    }

    pub(super) fn holds_lease(w: &World, i: usize) -> bool {
        w.db.owner == Some(i as u8) && w.db.epoch == w.procs[i].epoch
    }

    /// One atomic step of process `i`'s program.
    pub(super) fn step(&self, w: &mut World, i: usize) {
        let pr = self.protocol;
        let pc = w.procs[i].pc;
        let me = i as u8;
        let fenced = |w: &World| w.db.epoch != w.procs[i].epoch;
        match pc {
            Pc::Start => {
                let role = w.procs[i].role;
                if role == Role::Pauser {
                    w.procs[i].pc = Pc::SetControl(Ctl::Pause);
                    return;
                }
                if role == Role::Canceller && w.db.status.terminal() {
                    // `Engine::cancel` reads the run first: an ended run is refused.
                    w.procs[i].pc = Pc::Exit;
                    return;
                }
                if pr.read_before_lease {
                    w.procs[i].view = Some(View {
                        seq: w.seq(),
                        phase: w.phase(),
                        outbox: None,
                    });
                }
                w.procs[i].pc = Pc::Acquire;
            }
            Pc::Acquire => {
                // The store's own rule decides; the old protocol's defect skipped its check
                // of an ended run.
                let status = match w.db.status {
                    s if pr.acquire_finished && s.terminal() => Status::Running,
                    s => s,
                };
                let row = LeaseRow {
                    epoch: u64::from(w.db.epoch),
                    holder: w.db.owner.map(|o| HOLDERS[o as usize]),
                    // Time stands at 0 in the model: a lease lapses only by `Expire`.
                    expires_ms: u64::from(!w.db.expired),
                    status: status.stored(),
                };
                let dead = |holder: &str| {
                    // Every holder is one of HOLDERS, named by its index above.
                    let p = &w.procs[HOLDERS.iter().position(|h| *h == holder).unwrap_or(0)];
                    !p.alive || p.pc == Pc::Exit
                };
                match protocol::take_up(&RUN, &row, HOLDERS[i], 0, dead) {
                    Ok(epoch) => w.db.epoch = epoch as u8,
                    Err(StoreError::LeaseHeld { .. }) if w.procs[i].role == Role::Canceller => {
                        w.procs[i].pc = Pc::SetControl(Ctl::Cancel);
                        return;
                    }
                    Err(_) => {
                        w.procs[i].pc = Pc::Exit;
                        return;
                    }
                }
                if w.db.expired {
                    w.taken_over_after_expiry = true;
                }
                w.db.owner = Some(me);
                w.db.expired = false;
                w.db.control = protocol::control_after_take_up(w.db.control.map(Ctl::stored))
                    .map(Ctl::from_stored);
                if !w.db.status.terminal() {
                    w.db.status = Status::Running;
                }
                w.procs[i].epoch = w.db.epoch;
                w.procs[i].pc = Pc::Load;
            }
            Pc::Load => {
                let mut view = match w.procs[i].view {
                    Some(v) if pr.read_before_lease => v,
                    _ => View {
                        seq: w.seq(),
                        phase: w.phase(),
                        outbox: None,
                    },
                };
                // The outbox is read under the lease in both variants (for the call the view
                // says is outstanding).
                if let Phase::Calling(c) = view.phase {
                    view.outbox = w.db.outbox[c as usize];
                }
                w.procs[i].view = Some(view);
                // Deciding what to do is local to the process: same step.
                w.procs[i].pc = match (w.procs[i].role, view.phase) {
                    (Role::Canceller, _) => Pc::CommitCancel,
                    // "in state done with nothing in flight": the driver errors out.
                    (_, Phase::Done(_)) => Pc::ErrorRelease,
                    _ if w.procs[i].draining => Pc::Release(Status::Paused),
                    (_, Phase::Calling(c)) if view.outbox == Some(Ob::Started) => {
                        Pc::CommitInDoubt(c)
                    }
                    // Pending, or (read before the lease) a row already done: "not open".
                    (_, Phase::Calling(c)) => Pc::Mark(c),
                };
            }
            Pc::Mark(c) => {
                if fenced(w) {
                    w.procs[i].pc = Pc::Exit;
                    return;
                }
                let answered = w.db.outbox[c as usize] == Some(Ob::Done);
                let answered = answered.then_some((u64::from(c), 0));
                if !pr.mark_answered && protocol::may_start(&RUN, answered).is_err() {
                    w.procs[i].pc = Pc::ErrorRelease;
                    return;
                }
                if w.db.outbox[c as usize] != Some(Ob::Done) {
                    w.db.outbox[c as usize] = Some(Ob::Started);
                }
                w.db.expired = false;
                w.procs[i].slept_past_lease = false;
                w.procs[i].pc = Pc::Check(c);
            }
            Pc::Check(c) => {
                w.procs[i].pc = if !pr.no_lease_check && w.procs[i].slept_past_lease {
                    Pc::ErrorRelease
                } else {
                    Pc::Perform(c)
                };
            }
            Pc::Perform(c) => {
                w.performed[c as usize] += 1;
                w.procs[i].pc = Pc::Commit(c);
            }
            Pc::Commit(c) => {
                let next = if c + 1 < self.calls {
                    Phase::Calling(c + 1)
                } else {
                    Phase::Done(End::Completed)
                };
                if let Some(after) = self.commit(w, i, next) {
                    w.db.outbox[c as usize] = Some(Ob::Done);
                    w.procs[i].pc = match after {
                        Phase::Calling(n) => {
                            w.db.outbox[n as usize] = Some(Ob::Pending);
                            if w.procs[i].draining || w.procs[i].pause {
                                Pc::Release(Status::Paused)
                            } else {
                                Pc::Mark(n)
                            }
                        }
                        Phase::Done(_) => Pc::Release(Status::Completed),
                    };
                }
            }
            Pc::CommitInDoubt(c) => {
                if self.commit(w, i, Phase::Done(End::InDoubt)).is_some() {
                    w.db.outbox[c as usize] = Some(Ob::Done);
                    w.procs[i].pc = Pc::Release(Status::Failed);
                }
            }
            Pc::CommitCancel => {
                if self.commit(w, i, Phase::Done(End::Cancelled)).is_some() {
                    w.procs[i].pc = Pc::Release(Status::Cancelled);
                }
            }
            Pc::Release(status) => {
                self.release(w, i, status);
                w.procs[i].pc = Pc::Exit;
            }
            Pc::ErrorRelease => {
                let status = if pr.unfenced_release {
                    Status::Running
                } else {
                    Status::Paused
                };
                self.release(w, i, status);
                w.procs[i].pc = Pc::Exit;
            }
            Pc::SetControl(ctl) => {
                let asked = Some(ctl.stored());
                if pr.acquire_finished
                    || protocol::may_request(&RUN, w.db.status.stored(), asked.as_ref()).is_ok()
                {
                    w.db.control = Some(ctl);
                }
                w.procs[i].pc = Pc::Exit;
            }
            Pc::Exit => {}
        }
    }

    /// A fenced, in-sequence commit of `next` with the status it implies; returns it, or
    /// moves the process to where a refused commit leads (fenced: stop; out of sequence: the
    /// error path).
    pub(super) fn commit(&self, w: &mut World, i: usize, next: Phase) -> Option<Phase> {
        let view_seq = w.procs[i].view.map_or(1, |v| v.seq);
        let commit = Numbered {
            run: &RUN,
            epoch: u64::from(w.procs[i].epoch),
            seq: u64::from(view_seq) + 1,
        };
        match protocol::in_sequence(&RUN, w.db.epoch.into(), w.seq().into(), [commit]) {
            Ok(_) => {}
            Err(StoreError::Fenced { .. }) => {
                w.procs[i].pc = Pc::Exit;
                return None;
            }
            Err(_) => {
                w.procs[i].pc = Pc::ErrorRelease;
                return None;
            }
        }
        w.db.history.push(next);
        w.db.status = match next {
            Phase::Calling(_) => Status::Running,
            Phase::Done(End::Completed) => Status::Completed,
            Phase::Done(End::InDoubt) => Status::Failed,
            Phase::Done(End::Cancelled) => Status::Cancelled,
        };
        w.db.expired = false;
        let seq = w.seq();
        w.acked.push((seq, next));
        w.procs[i].view = Some(View {
            seq,
            phase: next,
            outbox: None,
        });
        Some(next)
    }

    pub(super) fn release(&self, w: &mut World, i: usize, status: Status) {
        if self.protocol.unfenced_release {
            if w.db.epoch == w.procs[i].epoch {
                w.db.owner = None;
                w.db.status = status;
            }
            return;
        }
        let current = u64::from(w.db.epoch);
        if protocol::fence(&RUN, w.procs[i].epoch.into(), current).is_ok() && w.db.owner.is_some() {
            w.db.owner = None;
            let left = protocol::status_on_release(w.db.status.stored(), status.stored());
            w.db.status = Status::from_stored(left);
        }
    }
}
