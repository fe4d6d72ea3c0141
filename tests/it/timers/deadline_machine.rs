//! The pure machine decides a deadline: a firing before the due instant its call recorded is
//! refused and changes nothing; once a person answered, the deadline's firing is refused; and
//! the deadline effect is outstanding (performed again on resume) only while its call waits.

use runtape::machine::*;
use serde_json::json;

use crate::support::machine::{Harness, call, deadline_fired, solo_with};

/// A run whose `deploy` call `d1` waits for an approval, with a deadline `after_ms` away that
/// rejects it.
fn waiting(after_ms: u64) -> Harness {
    let spec = solo_with(|s| {
        let deadline = Deadline {
            after_ms,
            then: OnDeadline::Reject,
        };
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
