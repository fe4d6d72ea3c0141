//! The run loop: take the next event, step it, record it, start its effects once durable;
//! stop at rest, on a pause, on a graceful stop, or at the end.

use futures_util::{FutureExt, StreamExt};

use super::{Driver, timers};
use crate::exec::handle::RunEnd;
use crate::exec::takeup::rest_status;
use crate::exec::tape::{Cue, TapeEnd};
use crate::exec::trace::Trace;
use crate::exec::{Ctl, EngineError, status_of};
use crate::machine::{Event, EventBody, Hlc, MachineError, step};
use crate::store::{RunStatus, StoreError};

// Built once per step and matched immediately; boxing the event would cost more than it saves.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// Step this event; with a time when it replays a recorded one.
    Event(EventBody, Option<Hlc>),
    Stop(RunStatus),
}

impl Driver {
    pub(super) async fn step_until_rest(&mut self) -> Result<RunEnd, EngineError> {
        loop {
            let next = self.next().await?;
            // Boxed: what settling holds across its awaits (the transition, the event) lives in
            // an allocation of its own while it runs, instead of in every run's task for as
            // long as the run waits for its next event (see `size_tests`).
            if let Some(end) = Box::pin(self.settle(next)).await? {
                return Ok(end);
            }
        }
    }

    /// Steps, records and acts on what [`next`](Self::next) gave: an event is stepped and
    /// committed, and its effects are started once durable; a stop is flushed and released.
    /// Returns how the run ended, or `None` to take the next event.
    async fn settle(&mut self, next: Next) -> Result<Option<RunEnd>, EngineError> {
        let (body, replayed_at) = match next {
            Next::Event(body, at) => (body, at),
            Next::Stop(status) => {
                self.flush().await?;
                self.release(status).await?;
                self.emit(Some(self.state.seq()), || Trace::RunPaused { status });
                return Ok(Some(self.end(status)));
            }
        };
        let at = match replayed_at {
            Some(at) => at.max(self.last_at),
            // A timer's firing is stamped no earlier than its due instant: the machine
            // refuses it before (and a clock whose time is not the wall's did not wait).
            None => self.shared.config.clock.stamp(
                self.state.seq() + 1,
                timers::not_before(&body, self.last_at),
            ),
        };
        let event = Event::new(&self.run, at, body);
        let mut t = match step(&self.state, &event, &self.spec) {
            Ok(t) => t,
            Err(e @ MachineError::EdgeMismatch { .. }) => return Err(e.into()),
            // The messages came from this run's own store and were refused: asking again
            // would get the same answer, so stop rather than loop.
            Err(e) if matches!(event.body, EventBody::ConversationSupplied { .. }) => {
                return Err(EngineError::ConversationMismatch {
                    run: self.run.to_string(),
                    reason: e,
                });
            }
            Err(e) => {
                // A stale result (its call was replaced by a retry or a cancel) or input
                // that no longer fits: nothing changes.
                tracing::debug!(run = %self.run, error = %e, "event refused");
                return Ok(None);
            }
        };
        self.commit(&event, &mut t)?;
        if !t.effects.is_empty() || t.next.is_done() {
            self.flush().await?;
        }
        let done = t.next.is_done();
        // Child runs the run still waited on when it ended (cancelled, or stopped by the
        // transition cap) end with it.
        let orphans = if done {
            self.children_running()
        } else {
            Vec::new()
        };
        self.state = t.next;
        match &mut self.tape {
            Some(tape) => tape.suppress(t.effects),
            // Stopping: the effects are committed and stay outstanding; `resume` performs
            // them.
            None if self.draining.is_some() => {}
            None => {
                for effect in t.effects {
                    // Boxed here and below: a branch's future is laid out inside every
                    // run's task otherwise, whether or not it ever runs (see `size_tests`).
                    Box::pin(self.perform(effect)).await;
                }
            }
        }
        if done {
            if !orphans.is_empty() {
                let why = format!("its parent run {} ended", self.run);
                Box::pin(crate::exec::child_run::end_children(
                    &self.shared,
                    orphans,
                    why,
                ))
                .await;
            }
            let status = status_of(&self.state);
            self.release(status).await?;
            return Ok(Some(self.end(status)));
        }
        Ok(None)
    }

    async fn next(&mut self) -> Result<Next, EngineError> {
        loop {
            self.take_controls();
            if let Some(current) = self.fenced {
                return Err(StoreError::Fenced {
                    run: self.run.to_string(),
                    ours: self.epoch(),
                    current,
                }
                .into());
            }
            if let Some(body) = self.queue.pop_front() {
                return Ok(Next::Event(body, None));
            }
            if let Some(deadline) = self.draining {
                if self.inflight.is_empty() {
                    return Ok(Next::Stop(rest_status(&self.state)));
                }
                if self.shared.config.clock.now() >= deadline {
                    self.abandon_inflight_and_wait().await;
                    return Ok(Next::Stop(rest_status(&self.state)));
                }
            }
            if self.pause && self.state.wants_proceed() {
                return Ok(Next::Stop(RunStatus::Paused));
            }
            if self.pause && self.only_children_running() {
                // The parent stops waiting once its children have paused; performing the
                // effects again on resume picks them up where they stopped.
                let children = self.children_running();
                self.abandon_inflight();
                Box::pin(crate::exec::child_run::pause_children(
                    &self.shared,
                    children,
                ))
                .await;
                return Ok(Next::Stop(RunStatus::Paused));
            }
            if let Some(tape) = &mut self.tape {
                let wants = self.state.wants_conversation().map(|(_, c)| c);
                match tape.next(&self.run, self.state.wants_proceed(), wants) {
                    Cue::Feed(body, at) => return Ok(Next::Event(body, Some(at))),
                    Cue::End => {
                        if let Some(stop) = Box::pin(self.end_tape()).await {
                            return Ok(Next::Stop(stop));
                        }
                        continue;
                    }
                }
            }
            if let Some((agent, conversation)) = self.state.wants_conversation() {
                let agent = agent.clone();
                let messages = Box::pin(self.supply_conversation(&agent, conversation)).await?;
                let body = EventBody::ConversationSupplied { agent, messages };
                return Ok(Next::Event(body, None));
            }
            if self.state.wants_proceed() {
                if Box::pin(self.load_global_memory()).await? {
                    continue;
                }
                if Box::pin(self.refresh_tool_lists()).await {
                    continue;
                }
                return Ok(Next::Event(EventBody::Proceed, None));
            }
            if self.inflight.is_empty() && !self.children_waiting.is_empty() {
                // Only children waiting for a person are left: rest until someone answers
                // (`runtape resume` reaches the child) rather than wait on them for ever.
                self.children_waiting.clear();
                return Ok(Next::Stop(RunStatus::Paused));
            }
            if self.inflight.is_empty() {
                return match status_of(&self.state) {
                    s @ (RunStatus::AwaitingInput | RunStatus::BudgetExhausted) => {
                        Ok(Next::Stop(s))
                    }
                    _ => Err(EngineError::Stalled {
                        run: self.run.to_string(),
                        state: self.state.kind().to_string(),
                    }),
                };
            }
            // A result may be ready already (a fast tool, a scripted model): take it without
            // arming a timer, and without sending the unsent commits on their own.
            if let Some(Some(done)) = self.inflight.next().now_or_never() {
                self.completed(done)?;
                continue;
            }
            // About to wait on the world: what is committed so far should become durable now,
            // not when the next effect needs it.
            self.submit_unsent().await;
            let clock = self.shared.config.clock.clone();
            let stop_by = self.draining;
            let grace_over = async move {
                match stop_by {
                    Some(deadline) => clock.sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(done) = self.inflight.next() => self.completed(done)?,
                Some(ctl) = self.ctl_rx.recv() => self.control(ctl),
                Ok(()) = self.stop_rx.changed() => self.take_stop(),
                () = grace_over => {}
            }
        }
    }

    /// The messages of `agent`'s conversation `wanted` (revision 5: a transfer's sender's), from
    /// the driver's copy when it holds them, else from the store (each node checked against
    /// its digest). The machine checks them against `wanted` again when they are stepped.
    async fn supply_conversation(
        &mut self,
        agent: &crate::machine::AgentId,
        wanted: crate::machine::ConversationRef,
    ) -> Result<Vec<crate::machine::Message>, EngineError> {
        Ok(self.messages_of(agent, &wanted).await?.as_ref().clone())
    }

    /// Takes every control request waiting, and a graceful stop if one was asked for.
    pub(super) fn take_controls(&mut self) {
        while let Ok(ctl) = self.ctl_rx.try_recv() {
            self.control(ctl);
        }
        if self.stop_rx.has_changed().unwrap_or(false) {
            self.take_stop();
        }
    }

    /// The engine asked for a graceful stop: drain until its deadline.
    fn take_stop(&mut self) {
        if let Some(deadline) = *self.stop_rx.borrow_and_update() {
            self.draining = Some(self.draining.map_or(deadline, |d| d.min(deadline)));
        }
    }

    /// The tape stopped matching (or ran out): go live, performing what is outstanding, or
    /// stop when the fork asked to.
    async fn end_tape(&mut self) -> Option<RunStatus> {
        let tape = self.tape.take()?;
        self.emit(Some(self.state.seq()), || Trace::TapeEnded {
            live: tape.on_end == TapeEnd::GoLive,
        });
        if tape.on_end == TapeEnd::Stop {
            return Some(RunStatus::Paused);
        }
        let mut suppressed = tape.suppressed;
        for at in self.state.outstanding() {
            if let Some(issued) = suppressed.remove(&at) {
                self.perform(issued.effect).await;
            }
        }
        None
    }

    /// The child runs the current state waits on (revision 4), by their derived ids.
    fn children_running(&self) -> Vec<crate::machine::RunId> {
        let crate::machine::RunState::CallingTools { run, batch } = &self.state else {
            return Vec::new();
        };
        batch
            .slots
            .iter()
            .filter(|s| self.spec.is_delegate_call(&run.active, &s.tool))
            .filter_map(|s| match &s.status {
                crate::machine::SlotStatus::Running { effect } => {
                    Some(effect.in_run(&self.run).child_run_id())
                }
                _ => None,
            })
            .collect()
    }

    /// True when everything the run waits on is a child run (revision 4).
    fn only_children_running(&self) -> bool {
        let crate::machine::RunState::CallingTools { run, batch } = &self.state else {
            return false;
        };
        batch.slots.iter().all(|s| match &s.status {
            crate::machine::SlotStatus::Running { .. } => {
                self.spec.is_delegate_call(&run.active, &s.tool)
            }
            crate::machine::SlotStatus::Finished { .. } => true,
            _ => false,
        })
    }

    fn control(&mut self, ctl: Ctl) {
        match ctl {
            Ctl::Pause => self.pause = true,
            Ctl::Cancel(reason) => self.cancel_inflight(reason),
            Ctl::Event(body) => self.queue.push_back(*body),
            Ctl::Attach(tx) => self.waiters.push(tx),
            Ctl::Fenced(current) => self.fenced = Some(current),
        }
    }

    /// A cancel: the calls in flight are abandoned and `CancelRequested` is stepped next. A
    /// run publishing its global memory keeps its publish in flight (revision 5): the publish
    /// may already be applied, so only its answer can say whether the cancel still takes
    /// effect. A run compensating keeps its undo in flight too: the cancel changes nothing
    /// there (see [`saga`](crate::machine::saga)), and an undo abandoned halfway would be in
    /// doubt.
    fn cancel_inflight(&mut self, reason: Option<String>) {
        if !matches!(
            self.state,
            crate::machine::RunState::Publishing { .. }
                | crate::machine::RunState::Compensating { .. }
        ) {
            self.abandon_inflight();
        }
        self.queue
            .retain(|b| matches!(b, EventBody::CancelRequested { .. }));
        self.queue.push_front(EventBody::CancelRequested { reason });
    }
}
