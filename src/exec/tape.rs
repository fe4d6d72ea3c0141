//! Tape mode for forks: instead of performing effects, feed the parent's recorded events in
//! order for as long as the fork asks for exactly what the parent asked for. The first time it
//! asks for something else, the tape ends and the fork goes live (or stops, if asked to).
//!
//! With no edit, the fork receives the parent's events with the parent's timestamps and so
//! reaches the parent's state hashes step for step. An edit is one extra transition at the fork
//! point; the parent's later effect positions are then shifted by one seq when compared.

use std::collections::VecDeque;

use crate::ledger::{Outstanding, answered};
use crate::machine::{Effect, EffectId, EffectRef, Event, EventBody, Hlc, RunId};

/// What a fork does when it stops matching its parent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TapeEnd {
    /// Go on live: perform what the fork asks for.
    #[default]
    GoLive,
    /// Stop (the run rests as paused; `resume` continues it live).
    Stop,
}

/// The parent's recorded events after the fork point, and what the fork has asked for.
pub(crate) struct Tape {
    /// The parent's events after the fork point, each with the effects its transition emitted.
    pub(crate) events: VecDeque<(Event, Vec<Effect>)>,
    /// The parent's effects not yet answered on the tape (emitted at or before the fork
    /// point, or replayed), by the parent's positions.
    pub(crate) parent_effects: Outstanding,
    /// Effects the fork emitted (or inherited) and did not perform because the tape answers
    /// them, by the fork's positions.
    pub(crate) suppressed: Outstanding,
    /// The fork point.
    pub(crate) fork_seq: u64,
    /// Extra transitions the fork has before the parent's (1 after an edit).
    pub(crate) shift: u64,
    /// What to do on divergence.
    pub(crate) on_end: TapeEnd,
}

/// The next thing the tape says.
// Returned once per step and matched at once; boxing the event would cost more than it saves.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Cue {
    /// Feed this event, stamped with this time.
    Feed(EventBody, Hlc),
    /// The tape is over or no longer matches.
    End,
}

impl Tape {
    /// The fork's position for a parent position.
    fn fork_ref(&self, r: EffectRef) -> EffectRef {
        if r.seq > self.fork_seq {
            EffectRef {
                seq: r.seq + self.shift,
                index: r.index,
            }
        } else {
            r
        }
    }

    /// Records the effects of a fork transition (not performed while the tape plays).
    pub(crate) fn suppress(&mut self, effects: Vec<Effect>) {
        for e in effects {
            self.suppressed.insert(e, None);
        }
    }

    /// The next event to feed to the fork in a state with `wants_proceed` that waits for the
    /// conversation `wants` (revision 5), if the tape still matches; `run` is the fork.
    pub(crate) fn next(
        &mut self,
        run: &RunId,
        wants_proceed: bool,
        wants: Option<crate::machine::ConversationRef>,
    ) -> Cue {
        let Some((event, _)) = self.events.front() else {
            return Cue::End;
        };
        let body = match &event.body {
            EventBody::CancelRequested { .. } => return Cue::End,
            EventBody::Proceed if !wants_proceed => return Cue::End,
            // The parent handed over a conversation: the same one, or the fork goes live and
            // supplies its own.
            EventBody::ConversationSupplied { messages, .. } => {
                let same = wants.is_some_and(|c| {
                    c.len as usize == messages.len() && crate::machine::head_of(messages) == c.head
                });
                if !same {
                    return Cue::End;
                }
                event.body.clone()
            }
            EventBody::Proceed
            | EventBody::BudgetRaised { .. }
            | EventBody::Edited { .. }
            | EventBody::ToolsListed { .. }
            | EventBody::MemoryLoaded { .. } => event.body.clone(),
            EventBody::Start { .. } | EventBody::SessionStart { .. } => event.body.clone(),
            other => {
                let Some(parent_at) = answered(other) else {
                    return Cue::End;
                };
                let ours = self.fork_ref(parent_at);
                let (Some(mine), Some(theirs)) = (
                    self.suppressed.get(&ours),
                    self.parent_effects.get(&parent_at),
                ) else {
                    return Cue::End;
                };
                if !same_request(&mine.effect, &theirs.effect) {
                    return Cue::End;
                }
                retarget(other, ours.in_run(run))
            }
        };
        let Some((parent_event, effects)) = self.events.pop_front() else {
            return Cue::End;
        };
        self.parent_effects.answer(&parent_event);
        self.parent_effects.issue(&effects);
        if let Some(ours) = answered(&body) {
            self.suppressed.remove(&ours);
        }
        Cue::Feed(body, parent_event.at)
    }
}

/// The same event answering `effect` instead.
fn retarget(body: &EventBody, effect: EffectId) -> EventBody {
    let mut b = body.clone();
    match &mut b {
        EventBody::ModelReplied { effect: e, .. }
        | EventBody::ModelFailed { effect: e, .. }
        | EventBody::ToolReturned { effect: e, .. }
        | EventBody::Reconciled { effect: e, .. }
        | EventBody::InputProvided { effect: e, .. }
        | EventBody::ChildFinished { effect: e, .. }
        | EventBody::Retrieved { effect: e, .. }
        | EventBody::EffectInDoubt { effect: e } => *e = effect,
        _ => {}
    }
    b
}

/// Whether two effects ask for the same thing (ids, keys and remaining budget aside).
fn same_request(a: &Effect, b: &Effect) -> bool {
    match (a, b) {
        (
            Effect::CallModel {
                agent: a1,
                request: r1,
                attempt: t1,
                ..
            },
            Effect::CallModel {
                agent: a2,
                request: r2,
                attempt: t2,
                ..
            },
        ) => {
            a1 == a2
                && t1 == t2
                && r1.provider == r2.provider
                && r1.model == r2.model
                && r1.conversation == r2.conversation
                && r1.tools == r2.tools
                && r1.summary == r2.summary
        }
        (
            Effect::CallTool {
                agent: a1,
                call_id: c1,
                tool: t1,
                args: x1,
                ..
            },
            Effect::CallTool {
                agent: a2,
                call_id: c2,
                tool: t2,
                args: x2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && t1 == t2 && x1 == x2,
        (
            Effect::Reconcile {
                agent: a1,
                call_id: c1,
                tool: t1,
                args: x1,
                ..
            },
            Effect::Reconcile {
                agent: a2,
                call_id: c2,
                tool: t2,
                args: x2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && t1 == t2 && x1 == x2,
        (
            Effect::RequestInput {
                agent: a1,
                call_id: c1,
                request: r1,
                ..
            },
            Effect::RequestInput {
                agent: a2,
                call_id: c2,
                request: r2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && r1 == r2,
        (
            Effect::RunChild {
                agent: a1,
                call_id: c1,
                delegate: d1,
                task: t1,
                depth: n1,
                ..
            },
            Effect::RunChild {
                agent: a2,
                call_id: c2,
                delegate: d2,
                task: t2,
                depth: n2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && d1 == d2 && t1 == t2 && n1 == n2,
        (
            Effect::Retrieve {
                agent: a1,
                conversation: c1,
                turn: t1,
                ..
            },
            Effect::Retrieve {
                agent: a2,
                conversation: c2,
                turn: t2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && t1 == t2,
        (
            Effect::StartTimer {
                agent: a1,
                call_id: c1,
                due: d1,
                ..
            },
            Effect::StartTimer {
                agent: a2,
                call_id: c2,
                due: d2,
                ..
            },
        ) => a1 == a2 && c1 == c2 && d1 == d2,
        _ => false,
    }
}
