//! Taking results in. Parallel calls finish in whatever order the world makes them finish, and
//! the driver normally commits each result as it arrives (a finished call is durable as soon
//! as possible). Under a deterministic clock ([`Clock::deterministic`](crate::exec::Clock)),
//! the history must not depend on timing: a result is then held until every call started
//! before it has answered, so results are committed in the order the calls were made, and a
//! replay reproduces every state hash.

use std::collections::{BTreeMap, BTreeSet};

use super::Driver;
use crate::exec::EngineError;
use crate::exec::perform::Completion;
use crate::ledger::answered;
use crate::machine::{Effect, EffectRef, EventBody};

/// The calls in flight and the results held back, when results are taken in call order.
#[derive(Debug, Default)]
pub(super) struct CallOrder {
    /// Off: results are taken as they arrive.
    on: bool,
    /// Calls started and not yet answered, by position (call order).
    started: BTreeSet<EffectRef>,
    /// Results that arrived before an earlier call's.
    held: BTreeMap<EffectRef, EventBody>,
}

impl CallOrder {
    pub(super) fn new(on: bool) -> Self {
        CallOrder {
            on,
            ..CallOrder::default()
        }
    }

    /// Notes that `effect` was started (a call whose result will arrive).
    pub(super) fn started(&mut self, effect: &Effect) {
        if !self.on || matches!(effect, Effect::RequestInput { .. }) {
            return;
        }
        let id = effect.id();
        self.started.insert(EffectRef {
            seq: id.seq,
            index: id.index,
        });
    }

    /// Every call was abandoned: nothing is in flight or held.
    pub(super) fn clear(&mut self) {
        self.started.clear();
        self.held.clear();
    }

    /// Takes `body` (a result) in and returns the results that may now be committed, in call
    /// order.
    pub(super) fn arrived(&mut self, body: EventBody) -> Vec<EventBody> {
        let at = answered(&body);
        match at {
            Some(at) if self.on && self.started.contains(&at) => {
                self.held.insert(at, body);
            }
            _ => return vec![body],
        }
        let mut ready = Vec::new();
        while let Some(first) = self.started.first().copied() {
            let Some(body) = self.held.remove(&first) else {
                break;
            };
            self.started.remove(&first);
            ready.push(body);
        }
        ready
    }
}

impl Driver {
    /// Takes a finished effect in: its result is queued to be stepped (in call order when the
    /// clock asks for it); a fatal one stops the driver.
    pub(super) fn completed(&mut self, done: Completion) -> Result<(), EngineError> {
        match done {
            Completion::Event(body) if !self.order.on => {
                self.queue.push_back(body);
                Ok(())
            }
            Completion::Event(body) => {
                let ready = self.order.arrived(body);
                self.queue.extend(ready);
                Ok(())
            }
            Completion::EventWithFiles { body, files } => {
                for bytes in files {
                    self.files.insert(crate::machine::Digest::of(&bytes), bytes);
                }
                self.completed(Completion::Event(body))
            }
            Completion::Abandoned => Ok(()),
            Completion::ChildWaiting(child) => {
                self.children_waiting.push(child);
                Ok(())
            }
            Completion::Fatal(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{AgentId, RunId, ToolOutcome};

    fn call(index: u32) -> Effect {
        let id = EffectRef { seq: 4, index }.in_run(&RunId::new("r"));
        Effect::CallTool {
            idempotency_key: id.idempotency_key(),
            id,
            agent: AgentId::from("a"),
            call_id: format!("c{index}"),
            tool: "t".into(),
            args: serde_json::json!({}),
        }
    }

    fn result(index: u32) -> EventBody {
        EventBody::ToolReturned {
            effect: EffectRef { seq: 4, index }.in_run(&RunId::new("r")),
            outcome: ToolOutcome::ok(serde_json::json!(index)),
        }
    }

    #[test]
    fn in_call_order_a_later_result_waits_for_the_earlier_ones() {
        let mut order = CallOrder::new(true);
        for i in 0..3 {
            order.started(&call(i));
        }
        assert!(order.arrived(result(2)).is_empty());
        assert!(order.arrived(result(1)).is_empty());
        assert_eq!(
            order.arrived(result(0)),
            vec![result(0), result(1), result(2)]
        );
    }

    #[test]
    fn otherwise_results_are_taken_as_they_arrive() {
        let mut order = CallOrder::new(false);
        for i in 0..3 {
            order.started(&call(i));
        }
        assert_eq!(order.arrived(result(2)), vec![result(2)]);
    }
}
