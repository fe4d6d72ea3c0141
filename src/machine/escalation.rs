//! Escalating a call nobody answered: a deadline whose policy is
//! `{ escalate = { to = "NAME", after_ms = N, then = … } }` hands the call on to the approver
//! (or answerer) NAME instead of deciding it, with a new deadline `after_ms` after the
//! escalation, and `then` deciding what happens when that one passes too — another escalation
//! or a final policy (`reject`, `approve`, `fail`, `{ input = … }`).
//!
//! ```toml
//! [timers.deadlines]
//! deploy = { after_ms = 3600000, then = { escalate = { to = "oncall-lead", after_ms = 1800000, then = "reject" } } }
//! ```
//!
//! The escalation is a transition of the pure machine, like the deadline's other policies:
//! the `TimerFired` of the passed deadline re-addresses the call's slot
//! ([`Slot::escalated`](super::Slot::escalated) names who it now waits for and how many times
//! it was handed on) and arms its next deadline (a new `StartTimer`, whose due instant the
//! slot keeps). The call's request to a person stays the one it was: its arguments, its
//! reason, its effect id, so an answer is given exactly as before. Whoever answers first wins
//! — the new approver, or anyone else: runtape does not authenticate people, so the name is
//! who the call is addressed to (shown by `show`, `ls`, the resume hint and `serve`), not a
//! check on who answers it.
//!
//! A chain is bounded: at most [`MAX_ESCALATIONS`] hand-ons, each to a different name, each
//! waiting 1 ms to a year, and it ends in a final policy. `verify`, forks and replays fold the
//! same events through the same spec, so they reproduce every escalation.

use serde::{Deserialize, Serialize};

use super::deadline::OnDeadline;
use super::ids::AgentId;
use super::spec::SpecError;
use super::state::Slot;
use super::step::Cx;
use super::timer::HARD_MAX_SLEEP_MS;

/// The most times one call may be handed on before its chain's final policy decides it.
pub const MAX_ESCALATIONS: u32 = 5;

/// The longest name a call may be escalated to.
pub const MAX_NAME_CHARS: usize = 64;

/// A deadline policy that hands the call on (`{ escalate = { … } }`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Escalation {
    /// Who the call waits for from then on: an approver's (or answerer's) name, as the
    /// people who answer it know it.
    pub to: String,
    /// Milliseconds from the escalation until its own deadline passes (at most a year).
    pub after_ms: u64,
    /// What that deadline decides: a final policy, or another escalation.
    pub then: OnDeadline,
}

/// Where a call that was escalated stands: kept in its slot, so `show`, `ls` and `serve`
/// say who it waits for, and the next firing knows which link of the chain decides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalated {
    /// Who the call now waits for (the latest escalation's `to`).
    pub to: String,
    /// How many times it was handed on (1 after the first escalation).
    pub times: u32,
}

/// The policy that decides `slot`'s current deadline when it passes: the deadline's own
/// `then`, or the `then` of the escalation the slot was last handed on by. `None` when the
/// chain is shorter than the slot says (a spec not the one that escalated it).
pub fn policy_now<'a>(then: &'a OnDeadline, slot: &Slot) -> Option<&'a OnDeadline> {
    let times = slot.escalated.as_ref().map_or(0, |e| e.times);
    let mut policy = then;
    for _ in 0..times {
        match policy {
            OnDeadline::Escalate(e) => policy = &e.then,
            _ => return None,
        }
    }
    Some(policy)
}

/// Checks the escalation chain of deadline `path` starting at `then`: at most
/// [`MAX_ESCALATIONS`] links, each to a distinct, non-empty, printable name of at most
/// [`MAX_NAME_CHARS`] characters, each waiting 1 ms to a year. Returns the chain's final
/// policy for the caller's own checks (approving a question).
pub(crate) fn validate<'a>(path: &str, then: &'a OnDeadline) -> Result<&'a OnDeadline, SpecError> {
    let mut seen: Vec<&str> = Vec::new();
    let mut policy = then;
    let mut at = format!("{path}.then");
    while let OnDeadline::Escalate(e) = policy {
        at.push_str(".escalate");
        let bad = |reason: String| SpecError::OutOfRange {
            path: at.clone(),
            reason,
        };
        if seen.len() as u32 == MAX_ESCALATIONS {
            return Err(bad(format!(
                "a call may be escalated at most {MAX_ESCALATIONS} times: end the chain with \"reject\", \"approve\", \"fail\" or {{ input = \"…\" }}"
            )));
        }
        let name = e.to.trim();
        if name.is_empty()
            || name != e.to
            || e.to.chars().count() > MAX_NAME_CHARS
            || e.to.chars().any(char::is_control)
        {
            return Err(bad(format!(
                "`to` must name who the call is escalated to: 1 to {MAX_NAME_CHARS} printable characters, no surrounding spaces"
            )));
        }
        if seen.contains(&name) {
            return Err(bad(format!(
                "the call is escalated to `{name}` twice: each escalation must hand it to someone else"
            )));
        }
        if !(1..=HARD_MAX_SLEEP_MS).contains(&e.after_ms) {
            return Err(bad(format!(
                "after_ms must be between 1 and {HARD_MAX_SLEEP_MS} (a year), got {}",
                e.after_ms
            )));
        }
        seen.push(name);
        at.push_str(".then");
        policy = &e.then;
    }
    Ok(policy)
}

/// Hands `slot` (whose deadline just passed) on under `e`: arms its next deadline,
/// `e.after_ms` after this transition (a `StartTimer` for `agent`, the agent whose call it
/// is), and records who it now waits for.
pub(crate) fn hand_on(cx: &mut Cx<'_>, agent: &AgentId, slot: &mut Slot, e: &Escalation) {
    super::deadline::arm_in(cx, agent, slot, e.after_ms);
    let times = slot.escalated.as_ref().map_or(0, |x| x.times) + 1;
    slot.escalated = Some(Escalated {
        to: e.to.clone(),
        times,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(names: &[&str], last: OnDeadline) -> OnDeadline {
        names.iter().rev().fold(last, |then, to| {
            OnDeadline::Escalate(Box::new(Escalation {
                to: (*to).to_owned(),
                after_ms: 1_000,
                then,
            }))
        })
    }

    fn slot(times: u32) -> Slot {
        Slot {
            call_id: "c".into(),
            tool: "t".into(),
            args: serde_json::Value::Null,
            status: super::super::SlotStatus::Approval {
                effect: super::super::ids::EffectRef { seq: 1, index: 0 },
            },
            origin: None,
            deadline: None,
            escalated: (times > 0).then(|| Escalated {
                to: "x".into(),
                times,
            }),
            hidden_seen: 0,
            files: Vec::new(),
        }
    }

    #[test]
    fn the_policy_now_follows_the_chain_as_far_as_the_slot_was_handed_on() {
        let then = chain(&["lead", "cto"], OnDeadline::Reject);
        assert!(
            matches!(policy_now(&then, &slot(0)), Some(OnDeadline::Escalate(e)) if e.to == "lead")
        );
        assert!(
            matches!(policy_now(&then, &slot(1)), Some(OnDeadline::Escalate(e)) if e.to == "cto")
        );
        assert_eq!(policy_now(&then, &slot(2)), Some(&OnDeadline::Reject));
        assert_eq!(policy_now(&then, &slot(3)), None);
    }

    #[test]
    fn a_chain_is_bounded_named_and_distinct() {
        let ok = chain(&["a", "b", "c", "d", "e"], OnDeadline::Fail);
        assert_eq!(validate("p", &ok), Ok(&OnDeadline::Fail));
        let reason = |then: &OnDeadline| match validate("p", then) {
            Err(SpecError::OutOfRange { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        let long = chain(&["a", "b", "c", "d", "e", "f"], OnDeadline::Fail);
        assert!(reason(&long).contains("at most 5 times"));
        assert!(reason(&chain(&["a", "a"], OnDeadline::Fail)).contains("`a` twice"));
        assert!(reason(&chain(&[""], OnDeadline::Fail)).contains("`to` must name"));
        assert!(reason(&chain(&[" a"], OnDeadline::Fail)).contains("`to` must name"));
        let mut slow = chain(&["a"], OnDeadline::Fail);
        if let OnDeadline::Escalate(e) = &mut slow {
            e.after_ms = 0;
        }
        assert!(reason(&slow).contains("after_ms"));
    }
}
