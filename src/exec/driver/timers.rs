//! Waking a sleeping run: performing `StartTimer` waits on the engine's clock until the due
//! instant the machine recorded, then feeds `TimerFired`.
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
/// firing (the machine refuses it earlier), else the last transition's time.
pub(super) fn not_before(body: &EventBody, last_at: Hlc) -> Hlc {
    match body {
        EventBody::TimerFired { due, .. } => last_at.max(*due),
        _ => last_at,
    }
}

impl Driver {
    /// Performs `StartTimer`: a call in flight that completes with `TimerFired` once the
    /// engine's clock reaches `due` (at once when it has passed, or on a clock that does not
    /// wait).
    pub(super) fn start_timer(&mut self, id: EffectId, agent: AgentId, call_id: String, due: Hlc) {
        self.emit(Some(id.seq), || Trace::TimerStarted {
            agent,
            call_id,
            due_ms: due.ms(),
        });
        let clock = self.shared.config.clock.clone();
        let cancel = self.cancel.child_token();
        self.inflight.push(Box::pin(async move {
            let wait = clock.until(due);
            tokio::select! {
                biased;
                () = cancel.cancelled() => Completion::Abandoned,
                () = clock.sleep(wait) => Completion::Event(EventBody::TimerFired { effect: id, due }),
            }
        }));
    }
}
