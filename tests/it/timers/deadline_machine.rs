//! The pure machine decides a deadline: a firing before the due instant its call recorded is
//! refused and changes nothing; once a person answered, the deadline's firing is refused; and
//! the deadline effect is outstanding (performed again on resume) only while its call waits.
//! An escalation replaces the call's deadline: the passed one cannot fire again, the new one
//! not before its own instant, and then the chain's final policy decides.

use runtape::machine::*;
use serde_json::json;

use crate::support::machine::{Harness, call, deadline_fired, escalate, solo_with};

/// A run whose `deploy` call `d1` waits for an approval, with a deadline `after_ms` away that
/// rejects it.
fn waiting(after_ms: u64) -> Harness {
    waiting_then(after_ms, OnDeadline::Reject)
}

/// [`waiting`] with the deadline's policy `then`.
fn waiting_then(after_ms: u64, then: OnDeadline) -> Harness {
    let spec = solo_with(|s| {
        let deadline = Deadline { after_ms, then };
        s.timers = Some(TimerSpec {
            deadlines: [("deploy".to_owned(), deadline)].into_iter().collect(),
            ..TimerSpec::default()
        });
    });
    let mut h = Harness::new(spec);
    h.start("Deploy.");
    h.proceed();
    h.reply(ModelReply::tools(vec![call(
        "d1",
        "deploy",
        json!({"target": "prod"}),
    )]));
    h
}

#[test]
fn a_deadline_does_not_pass_early() {
    let mut h = waiting(60_000);
    let body = deadline_fired(&h, "d1");
    super::refused_early(&mut h, body);
}

#[test]
fn a_person_who_answered_first_makes_the_deadline_moot() {
    let mut h = waiting(1);
    let body = deadline_fired(&h, "d1");
    assert_eq!(
        h.state.outstanding().len(),
        2,
        "the request and its deadline"
    );
    h.input("d1", HumanInput::Approve);
    assert!(
        h.state.outstanding().len() == 1,
        "only the approved call is outstanding now, not its deadline: {:?}",
        h.state.outstanding()
    );
    let refused = h.try_send(body);
    assert!(
        matches!(refused, Err(MachineError::UnknownEffect { .. })),
        "{refused:?}"
    );
}

#[test]
fn an_escalation_replaces_the_deadline_and_the_final_policy_decides_at_the_new_one() {
    let then = OnDeadline::Escalate(Box::new(Escalation {
        to: "lead".into(),
        after_ms: 60_000,
        then: OnDeadline::Reject,
    }));
    let mut h = waiting_then(1, then);
    let first = deadline_fired(&h, "d1");
    h.send(first.clone());
    assert_eq!(h.last_edge(), "awaiting_input.deadline.escalate");
    let RunState::AwaitingInput { batch, .. } = &h.state else {
        panic!("still waits: {}", h.state.kind());
    };
    let slot = &batch.slots[0];
    assert_eq!(
        slot.escalated,
        Some(Escalated {
            to: "lead".into(),
            times: 1
        })
    );
    assert!(
        matches!(slot.status, SlotStatus::Approval { .. }),
        "the same request waits"
    );
    let at = h.history.last().expect("sent").0.at;
    let timer = slot.deadline.expect("a new deadline");
    assert_eq!(timer.due, at.plus_ms(60_000));
    let arms = |e: &Effect| matches!(e, Effect::StartTimer { due, .. } if *due == timer.due);
    assert!(
        h.history.last().expect("sent").1.effects.iter().any(arms),
        "its StartTimer is emitted"
    );
    assert_eq!(
        h.state.outstanding().len(),
        2,
        "the request and the new deadline"
    );
    // The passed deadline cannot fire again, nor the new one early.
    let refused = h.try_send(first);
    assert!(
        matches!(refused, Err(MachineError::UnknownEffect { .. })),
        "{refused:?}"
    );
    let second = deadline_fired(&h, "d1");
    super::refused_early(&mut h, second.clone());
    h.clock = timer.due.ms();
    h.send(second);
    assert_eq!(h.last_edge(), "awaiting_input.deadline.done");
}

#[test]
fn a_person_who_answers_an_escalated_call_makes_its_deadline_moot() {
    let mut h = waiting_then(1, escalate("lead", OnDeadline::Fail));
    let first = deadline_fired(&h, "d1");
    h.send(first);
    let second = deadline_fired(&h, "d1");
    h.input("d1", HumanInput::Approve);
    let refused = h.try_send(second);
    assert!(
        matches!(refused, Err(MachineError::UnknownEffect { .. })),
        "{refused:?}"
    );
}
