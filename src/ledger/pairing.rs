//! Which event answered which effect: the one place that pairs them.
//!
//! An effect emitted at `(seq, index)` is answered by a later event that names it
//! ([`answered`]): a model reply or failure, a tool result, a reconcile answer, a person's
//! input, or `EffectInDoubt`. Everything that reads a history by its answers — the driver
//! sealing a receipt, `verify` rebuilding the receipt chain and the outbox, the timeline, the
//! cassette export, a fork's tape — goes through [`Outstanding`] (one effect at a time) or
//! [`pairs`] (a whole stored history).
//!
//! A fork performs the calls it inherited outstanding under its own ids (and so its own
//! idempotency keys): an answer given in the fork is paired with the inherited effect as the
//! fork performed it ([`as_performed_by`]).

use std::collections::HashMap;

use super::HistoryError;
use super::codec::{decode_effects, decode_event};
use crate::machine::{Effect, EffectRef, Event, EventBody, RunId};
use crate::store::TransitionRecord;

/// The effect whose result (or answer) `body` carries.
pub fn answered(body: &EventBody) -> Option<EffectRef> {
    match body {
        EventBody::ModelReplied { effect, .. }
        | EventBody::ModelFailed { effect, .. }
        | EventBody::ToolReturned { effect, .. }
        | EventBody::Reconciled { effect, .. }
        | EventBody::InputProvided { effect, .. }
        | EventBody::ChildFinished { effect, .. }
        | EventBody::Retrieved { effect, .. }
        | EventBody::TimerFired { effect, .. }
        | EventBody::EffectInDoubt { effect } => Some(EffectRef {
            seq: effect.seq,
            index: effect.index,
        }),
        _ => None,
    }
}

/// `effect` as `run` performs it: unchanged when `run` emitted it, else (a fork performing
/// what its parent emitted) under `run`'s id for the same position.
pub fn as_performed_by(run: &RunId, effect: Effect) -> Effect {
    if effect.id().run == *run {
        return effect;
    }
    let id = effect.id();
    let at = EffectRef {
        seq: id.seq,
        index: id.index,
    };
    effect.with_id(at.in_run(run))
}

/// An effect issued and not yet answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Issued {
    /// The effect as emitted.
    pub effect: Effect,
    /// SHA-256 (hex) of the effect's bytes as stored, when the writer knows them; `None` means
    /// "encode the effect to hash it" (what a reader does).
    pub request_hash: Option<String>,
}

/// The effects of a run that have been issued and not yet answered, by position.
#[derive(Clone, Debug, Default)]
pub struct Outstanding {
    /// Boxed: a map allocates room for several entries at its first insert, and a driver keeps
    /// one of these for every run in flight, mostly holding one effect.
    issued: HashMap<EffectRef, Box<Issued>>,
}

impl Outstanding {
    /// Nothing outstanding.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `effects`, emitted by one transition, as issued (their stored bytes' SHA-256 is
    /// worked out when one is answered).
    pub fn issue(&mut self, effects: &[Effect]) {
        for e in effects {
            self.insert(e.clone(), None);
        }
    }

    /// [`issue`](Self::issue) with each effect's stored bytes' SHA-256 already known (from
    /// [`encode_effects`](super::codec::encode_effects)), in order.
    pub fn issue_hashed(&mut self, effects: &[Effect], hashes: Vec<String>) {
        let mut hashes = hashes.into_iter();
        for e in effects {
            self.insert(e.clone(), hashes.next());
        }
    }

    /// Records one effect as issued (an inherited or reloaded one, say).
    pub fn insert(&mut self, effect: Effect, request_hash: Option<String>) {
        let id = effect.id();
        let at = EffectRef {
            seq: id.seq,
            index: id.index,
        };
        self.issued.insert(
            at,
            Box::new(Issued {
                effect,
                request_hash,
            }),
        );
    }

    /// The effect at `at`, if it is outstanding.
    pub fn get(&self, at: &EffectRef) -> Option<&Issued> {
        self.issued.get(at).map(|b| &**b)
    }

    /// Takes the effect `event` answers out of the outstanding set, as `event`'s run
    /// performed it (see [`as_performed_by`]). `None` for an event that answers nothing, or
    /// an answer to an effect not outstanding (a stale one).
    pub fn answer(&mut self, event: &Event) -> Option<Issued> {
        let at = answered(&event.body)?;
        let issued = *self.issued.remove(&at)?;
        if issued.effect.id().run == event.run {
            return Some(issued);
        }
        // Performed under another id: the stored bytes' hash is not this effect's.
        Some(Issued {
            effect: as_performed_by(&event.run, issued.effect),
            request_hash: None,
        })
    }

    /// Takes the effect at `at` out of the outstanding set.
    pub fn remove(&mut self, at: &EffectRef) -> Option<Issued> {
        self.issued.remove(at).map(|b| *b)
    }

    /// How many effects are outstanding.
    pub fn len(&self) -> usize {
        self.issued.len()
    }

    /// True when nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.issued.is_empty()
    }
}

/// One stored transition decoded, with the effect its event answered.
#[derive(Clone, Debug)]
pub struct Paired<'a> {
    /// The stored row.
    pub row: &'a TransitionRecord,
    /// Its event.
    pub event: Event,
    /// The effects it emitted.
    pub effects: Vec<Effect>,
    /// The effect the event answered, as the event's run performed it.
    pub answers: Option<Issued>,
}

/// Decodes `rows` (a history read by [`transitions`](super::read::transitions), in order) of
/// `run`, pairing each event with the effect it answered.
pub fn pairs<'a>(
    run: &'a RunId,
    rows: &'a [TransitionRecord],
) -> impl Iterator<Item = Result<Paired<'a>, HistoryError>> + 'a {
    let mut outstanding = Outstanding::new();
    rows.iter().map(move |row| {
        let event = decode_event(run, row.seq, &row.event)?;
        let effects = decode_effects(run, row.seq, &row.effects)?;
        let answers = outstanding.answer(&event);
        outstanding.issue(&effects);
        Ok(Paired {
            row,
            event,
            effects,
            answers,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{AgentId, Hlc, ToolOutcome};

    fn call(run: &RunId, seq: u64, index: u32) -> Effect {
        let id = EffectRef { seq, index }.in_run(run);
        Effect::CallTool {
            idempotency_key: id.idempotency_key(),
            id,
            agent: AgentId::from("a"),
            call_id: format!("c{index}"),
            tool: "t".into(),
            args: serde_json::json!({}),
        }
    }

    fn returned(run: &RunId, seq: u64, index: u32) -> Event {
        Event::new(
            run,
            Hlc::default(),
            EventBody::ToolReturned {
                effect: EffectRef { seq, index }.in_run(run),
                outcome: ToolOutcome::ok(serde_json::json!(1)),
            },
        )
    }

    #[test]
    fn each_answer_takes_its_effect_once() {
        let run = RunId::new("r");
        let mut o = Outstanding::new();
        o.issue_hashed(
            &[call(&run, 2, 0), call(&run, 2, 1)],
            vec!["h0".into(), "h1".into()],
        );
        let second = o.answer(&returned(&run, 2, 1)).expect("answers");
        assert_eq!(second.effect, call(&run, 2, 1));
        assert_eq!(second.request_hash.as_deref(), Some("h1"));
        assert!(o.answer(&returned(&run, 2, 1)).is_none(), "only once");
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn a_fork_answers_an_inherited_effect_as_it_performed_it() {
        let (parent, fork) = (RunId::new("p"), RunId::new("f"));
        let mut o = Outstanding::new();
        o.issue_hashed(&[call(&parent, 2, 0)], vec!["parent's bytes".into()]);
        let answered = o.answer(&returned(&fork, 2, 0)).expect("answers");
        assert_eq!(answered.effect, call(&fork, 2, 0));
        assert_eq!(
            answered.request_hash, None,
            "hashed as the fork performed it"
        );
    }
}
