//! How each process of the publish model acts, one atomic step at a time, each step named
//! after the code it stands for.

use super::*;

impl PublishModel {
    pub(super) fn proc(role: Role, run: u8, pc: Pc) -> Proc {
        Proc {
            role,
            run,
            pc,
            alive: true,
            epoch: 0,
            seq: 0,
            local: None,
            over_cap: false,
        }
    }

    pub(super) fn holds_lease(w: &World, i: usize) -> bool {
        let p = &w.procs[i];
        let row = &w.runs[p.run as usize];
        row.owner == Some(i as u8) && row.epoch == p.epoch
    }

    /// Whether `AcquireLease` would take run `run`'s lease now: free, its holder killed or
    /// gone, or expired.
    fn lease_free(w: &World, run: u8) -> bool {
        let row = &w.runs[run as usize];
        row.expired
            || row.owner.is_none_or(|o| {
                let p = &w.procs[o as usize];
                !p.alive || matches!(p.pc, Pc::Exit(_))
            })
    }

    /// Whether process `i` can take a step: a resumer waits while another holds the lease
    /// (it is run again until the lease is free), everything else always can.
    pub(super) fn can_step(&self, w: &World, i: usize) -> bool {
        let p = &w.procs[i];
        match (p.role, p.pc) {
            (Role::Resumer, Pc::Acquire) => {
                w.runs[p.run as usize].machine.ended() || Self::lease_free(w, p.run)
            }
            _ => true,
        }
    }

    /// Where a driver goes from the machine state it holds.
    fn next_pc(m: &Machine) -> Pc {
        match m.phase {
            Phase::Done(_) => Pc::Exit(Why::Ended),
            Phase::Preparing if m.view.is_none() => Pc::ReadMemory,
            Phase::Preparing => Pc::Turn,
            Phase::Publishing { .. } => Pc::PublishWrite,
        }
    }

    /// Whether run `run`'s agent increments key `k`.
    pub(super) fn writes(&self, run: u8, k: usize) -> bool {
        !self.own_keys || usize::from(run) % usize::from(self.keys) == k
    }

    /// The bytes of the memory as `seen`: every key's value.
    fn bytes(seen: impl Iterator<Item = Option<u8>>) -> u32 {
        seen.map(|v| u32::from(v.unwrap_or(0))).sum()
    }

    /// The latest version of each key (`load_entries`, `memory_rows(name, true)`).
    pub(super) fn latest(w: &World) -> Vec<Seen> {
        w.memory
            .iter()
            .map(|rows| (rows.len() as u8, rows.last().and_then(|r| r.value)))
            .collect()
    }

    /// One atomic step of process `i`.
    pub(super) fn step(&self, w: &mut World, i: usize) {
        let p = w.procs[i].clone();
        let run = p.run as usize;
        match p.pc {
            Pc::Acquire if p.role == Role::Remover => {
                // `runtape memory rm` (`global_memory::remove`): a version without a value, or
                // `NoMemoryKey` when the key holds no value.
                let rows = &mut w.memory[0];
                if let Some(last) = rows.last()
                    && last.value.is_some()
                {
                    let base = rows.len() as u8;
                    rows.push(Row {
                        value: None,
                        base,
                        by: Writer::Removal,
                    });
                }
                w.procs[i].pc = Pc::Exit(Why::Ended);
            }
            Pc::Acquire => {
                // `takeup::resume`: an ended run is refused; `Engine::cancel` asks a live
                // driver through the control column; else `AcquireLease` and the committed
                // state read under it.
                if w.runs[run].machine.ended() {
                    w.procs[i].pc = Pc::Exit(Why::Refused);
                    return;
                }
                if !Self::lease_free(w, p.run) {
                    // Only the canceller gets here (a resumer waits).
                    w.runs[run].cancel_requested = true;
                    w.procs[i].pc = Pc::Exit(Why::Ended);
                    return;
                }
                let row = &mut w.runs[run];
                row.epoch += 1;
                row.owner = Some(i as u8);
                row.expired = false;
                let machine = row.machine.clone();
                let cancelling = p.role == Role::Canceller || row.cancel_requested;
                let proc = &mut w.procs[i];
                proc.epoch = row.epoch;
                proc.seq = row.seq;
                proc.pc = if cancelling && !machine.cancel_pending {
                    Pc::CommitCancel
                } else {
                    Self::next_pc(&machine)
                };
                proc.local = Some(machine);
            }
            Pc::ReadMemory => {
                // `Driver::load_global_memory` reads every key's latest version, and the driver
                // commits it (`MemoryLoaded`, `publish::on_loaded`). One step: what others do
                // between the read and the commit commutes with the commit (it touches only
                // this run's row, which only a takeover changes, and a takeover fences the
                // commit whenever it comes).
                let mut next = p.local.clone().expect("a driver holds its state");
                next.view = Some(Self::latest(w));
                self.commit(w, i, next);
            }
            Pc::Turn => {
                // The agent's turn, up to `Handoff --Proceed--> Publishing` (`publish::complete`):
                // it increments each key it has not staged, based on the version it read; a
                // turn after `retries` conflicts runs out (the run fails).
                let mut next = p.local.clone().expect("a driver holds its state");
                if next.gave_up {
                    // Told the memory is full, the agent answers without writing: nothing
                    // staged, the run completes (`publish::complete` without a publish).
                    next.phase = Phase::Done(End::Completed);
                    self.commit(w, i, next);
                    return;
                }
                if next.conflicts > self.retries {
                    next.phase = Phase::Done(End::Failed);
                    self.commit(w, i, next);
                    return;
                }
                let view = next.view.clone().expect("a turn follows the load");
                for (k, staged) in next.staged.iter_mut().enumerate() {
                    if staged.is_none() && self.writes(p.run, k) {
                        let (version, value) = view[k];
                        *staged = Some((version, value.unwrap_or(0) + 1));
                    }
                }
                // The `remember` tool holds the cap against the run's view.
                let after = next
                    .staged
                    .iter()
                    .zip(&view)
                    .map(|(s, (_, v))| s.map_or(*v, |(_, value)| Some(value)));
                if self
                    .cap
                    .is_some_and(|cap| Self::bytes(after) > u32::from(cap))
                {
                    next.staged = vec![None; self.keys as usize];
                    next.phase = Phase::Done(End::Completed);
                    next.gave_up = true;
                    self.commit(w, i, next);
                    return;
                }
                let effect = p.seq + 1;
                next.phase = Phase::Publishing { effect };
                let keys = next.staged.iter().map(Option::is_some).collect();
                if self.commit(w, i, next) {
                    w.emitted.push((p.run, effect, keys));
                }
            }
            Pc::PublishWrite => self.publish(w, i),
            Pc::PublishRead => {
                // `publish_outcome`, then the driver commits `MemoryPublished`. One step, as
                // for the load: the crash that matters, between the write and its answer, is
                // between `PublishWrite` and this step.
                if std::mem::take(&mut w.procs[i].over_cap) {
                    self.commit_outcome(w, i, Answer::OverCap);
                    return;
                }
                match self.publish_outcome(w, i) {
                    Some(answer) => self.commit_outcome(w, i, answer),
                    None => w.procs[i].pc = Pc::Exit(Why::Damaged),
                }
            }
            Pc::CommitCancel => self.commit_cancel(w, i),
            Pc::Exit(_) => {}
        }
    }

    /// `CancelRequested`: in `Publishing` the cancel waits for the publish's answer
    /// (`publish::on_cancel`); elsewhere the run is cancelled.
    pub(super) fn commit_cancel(&self, w: &mut World, i: usize) {
        let mut next = w.procs[i].local.clone().expect("a driver holds its state");
        match next.phase {
            Phase::Publishing { .. } => next.cancel_pending = true,
            Phase::Preparing => next.phase = Phase::Done(End::Cancelled),
            Phase::Done(_) => {}
        }
        let run = w.procs[i].run as usize;
        if self.commit(w, i, next) {
            w.runs[run].cancel_requested = false;
        }
    }

    /// `Write::PublishMemory` in the writer's transaction: `check_epoch`, then
    /// `global_memory::publish` (sqlite; postgres and the memory store alike).
    fn publish(&self, w: &mut World, i: usize) {
        let pr = self.protocol;
        let p = w.procs[i].clone();
        let m = p.local.clone().expect("a driver holds its state");
        let Phase::Publishing { effect } = m.phase else {
            unreachable!("a publish is performed in Publishing")
        };
        if !pr.unfenced && w.runs[p.run as usize].epoch != p.epoch {
            // `StoreError::Fenced`: the driver's future ends `Completion::Fatal`.
            w.procs[i].pc = Pc::Exit(Why::Fenced);
            return;
        }
        w.procs[i].pc = Pc::PublishRead;
        let done = (0..self.keys as usize).any(|k| w.rows_of(k, p.run, Some(effect)) > 0);
        if done && !pr.no_applied_check {
            w.reperformed_found_rows = true;
            return;
        }
        let at_base = |w: &World, k: usize, base: u8| w.memory[k].len() as u8 == base;
        let all_at_base = m
            .staged
            .iter()
            .enumerate()
            .all(|(k, s)| s.is_none_or(|(base, _)| at_base(w, k, base)));
        if !all_at_base && !pr.no_version_check && !pr.per_key {
            return;
        }
        // The cap, checked after the versions (`Publication::over_cap`): refused when the
        // writes take the memory past it and grow it.
        if let Some(cap) = self.cap
            && !pr.no_cap_at_publish
        {
            let latest = Self::latest(w);
            let holds = Self::bytes(latest.iter().map(|(_, v)| *v));
            let after = m
                .staged
                .iter()
                .zip(&latest)
                .map(|(s, (_, v))| s.map_or(*v, |(_, value)| Some(value)));
            let would_hold = Self::bytes(after);
            if would_hold > u32::from(cap) && would_hold > holds {
                w.procs[i].over_cap = true;
                w.refused_over_cap = true;
                return;
            }
        }
        for (k, s) in m.staged.iter().enumerate() {
            let Some((base, value)) = *s else { continue };
            if pr.per_key && !at_base(w, k, base) {
                continue;
            }
            // Without the version check, the write lands as the key's next version, still
            // saying the base it was computed from.
            w.memory[k].push(Row {
                value: Some(value),
                base,
                by: Writer::Publish { run: p.run, effect },
            });
        }
    }

    /// `publish_outcome`: the rows naming the effect, else each written key that moved (none
    /// moved: `StoreError::Damaged`, here `None`).
    fn publish_outcome(&self, w: &World, i: usize) -> Option<Answer> {
        let p = &w.procs[i];
        let m = p.local.as_ref().expect("a driver holds its state");
        let Phase::Publishing { effect } = m.phase else {
            unreachable!("a publish is read back in Publishing")
        };
        let mine = (0..self.keys as usize).any(|k| w.rows_of(k, p.run, Some(effect)) > 0);
        if mine && !self.protocol.outcome_ignores_own_rows {
            return Some(Answer::Published);
        }
        let latest = Self::latest(w);
        let moved: Vec<Option<Seen>> = m
            .staged
            .iter()
            .zip(&latest)
            .map(|(s, now)| s.filter(|(base, _)| *base != now.0).map(|_| *now))
            .collect();
        moved
            .iter()
            .any(Option::is_some)
            .then_some(Answer::Conflict(moved))
    }

    /// `MemoryPublished` (`publish::on_published`).
    fn commit_outcome(&self, w: &mut World, i: usize, answer: Answer) {
        let p = w.procs[i].clone();
        let mut next = p.local.clone().expect("a driver holds its state");
        let Phase::Publishing { effect } = next.phase else {
            unreachable!("an outcome is committed in Publishing")
        };
        let view = next.view.as_mut().expect("a publish follows the load");
        match &answer {
            Answer::Published => {
                let written: Vec<bool> = (0..self.keys as usize)
                    .map(|k| w.rows_of(k, p.run, Some(effect)) > 0)
                    .collect();
                if next.staged.iter().map(Option::is_some).collect::<Vec<_>>() != written {
                    // "the published keys are not the staged ones": the machine refuses.
                    w.procs[i].pc = Pc::Exit(Why::Damaged);
                    return;
                }
                for (k, s) in std::mem::take(&mut next.staged).into_iter().enumerate() {
                    if let Some((base, value)) = s {
                        view[k] = (base + 1, Some(value));
                    }
                }
                next.staged = vec![None; self.keys as usize];
                next.phase = Phase::Done(End::Completed);
            }
            Answer::OverCap => {
                // `on_published`: the writer's sets are dropped and it is told; a waiting
                // cancel takes effect instead.
                next.staged = vec![None; self.keys as usize];
                next.gave_up = true;
                next.phase = if next.cancel_pending {
                    Phase::Done(End::Cancelled)
                } else {
                    Phase::Preparing
                };
            }
            Answer::Conflict(moved) => {
                for (k, now) in moved.iter().enumerate() {
                    if let Some(now) = now {
                        view[k] = *now;
                        next.staged[k] = None;
                    }
                }
                next.conflicts += 1;
                next.phase = if next.cancel_pending {
                    Phase::Done(End::Cancelled)
                } else {
                    Phase::Preparing
                };
            }
        }
        let next_cancelled = next.phase == Phase::Done(End::Cancelled);
        if self.commit(w, i, next) && answer != Answer::Published {
            w.refused.push((p.run, effect));
            if next_cancelled {
                w.cancel_waited_for_publish = true;
            }
            if let Answer::Conflict(moved) = answer
                && moved.iter().flatten().any(|(_, value)| value.is_none())
            {
                w.conflict_with_removal = true;
            }
        }
    }

    /// A fenced, in-sequence commit of `next` (`Write::Commit`: `check_epoch`, then the
    /// sequence); a run that ends releases its lease. Returns whether it was committed.
    fn commit(&self, w: &mut World, i: usize, next: Machine) -> bool {
        let p = &w.procs[i];
        let row = &mut w.runs[p.run as usize];
        if row.epoch != p.epoch {
            w.procs[i].pc = Pc::Exit(Why::Fenced);
            return false;
        }
        if row.seq != p.seq {
            w.procs[i].pc = Pc::Exit(Why::OutOfSequence);
            return false;
        }
        row.seq += 1;
        row.machine = next.clone();
        if next.ended() {
            row.owner = None;
        }
        let proc = &mut w.procs[i];
        proc.seq += 1;
        proc.pc = Self::next_pc(&next);
        proc.local = Some(next);
        true
    }
}
