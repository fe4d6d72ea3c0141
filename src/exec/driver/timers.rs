//! Waking a sleeping run: performing `StartTimer` waits on the engine's clock until the due
//! instant the machine recorded, then feeds `TimerFired`. A deadline on a call that waits for
//! a person (`[timers.deadlines]`) is not waited for: the run rests as any run waiting for a
//! person does, and its deadline fires when the run is taken up (`resume`) at or after the
//! due instant — at once on a clock that does not wait.
//!
//! The wait is an ordinary call in flight: a cancel or a graceful stop drops it, and it is
//! performed again when the run is resumed — after its due instant it fires at once, before
//! it the run goes on waiting. However often it is performed, only one firing can be
//! committed: the machine refuses a second one, since the call woke with the first. Under a
//! clock whose time is not the wall's (`--stepped-clock`) nothing is waited for, and the
//! firing is stamped at the due instant, so a run that sleeps an hour finishes at once with
//! the same history every time.

use super::Driver;
use crate::exec::perform::Completion;
use crate::exec::trace::Trace;
use crate::machine::{AgentId, EffectId, EventBody, Hlc};

/// The time the next transition may not be stamped before: the due instant for a timer's
/// firing on time (the machine refuses it earlier), else — an early wake by a person
/// included — the last transition's time.
pub(super) fn not_before(body: &EventBody, last_at: Hlc) -> Hlc {
    match body {
        EventBody::TimerFired {
            due, early: false, ..
        } => last_at.max(*due),
        _ => last_at,
    }
}

impl Driver {
    /// Performs `StartTimer`: a call in flight that completes with `TimerFired` once the
    /// engine's clock reaches `due` (at once when it has passed, or on a clock that does not
    /// wait); nothing, for a deadline not yet due on a call that waits for a person.
    pub(super) fn start_timer(&mut self, id: EffectId, agent: AgentId, call_id: String, due: Hlc) {
        self.emit(Some(id.seq), || Trace::TimerStarted {
            agent,
            call_id,
            due_ms: due.ms(),
        });
        let clock = self.shared.config.clock.clone();
        let wait = clock.until(due);
        if !wait.is_zero() && crate::machine::deadline::is_pending_deadline(&self.state, &id) {
            // A call waiting for a person: the run rests (its lease free for whoever answers)
            // rather than wait here; the deadline fires when the run is next taken up at or
            // after its due instant.
            return;
        }
        let cancel = self.cancel.child_token();
        self.inflight.push(Box::pin(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => Completion::Abandoned,
                () = clock.sleep(wait) => Completion::Event(EventBody::TimerFired { effect: id, due, early: false }),
            }
        }));
    }
}
