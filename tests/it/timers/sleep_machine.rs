//! The pure machine decides when a sleeping call may wake: its due instant is computed from
//! the event that took the call and kept in the state; a firing stamped before it, or naming
//! another instant, is refused and changes nothing; once the call woke, a second firing of
//! the same timer is refused, so a timer performed by two processes wakes the run once.

use runtape::machine::*;

use crate::support::machine::{Harness, TICK_MS, fired, nap, sleepy};

/// A harness whose run slept on call `n1` for `seconds`.
fn asleep(seconds: u64) -> Harness {
    let mut h = Harness::new(sleepy());
    h.start("Check back later.");
    h.proceed();
    h.reply(ModelReply::tools(vec![nap("n1", seconds)]));
    h
}

#[test]
fn the_due_instant_is_the_calls_event_time_plus_its_duration() {
    let h = asleep(90);
    let (took_at, t) = h.history.last().expect("the reply");
    let Effect::StartTimer { due, .. } = &t.effects[0] else {
        panic!("{:?}", t.effects)
    };
    assert_eq!(*due, took_at.at.plus_ms(90_000));
    let EventBody::TimerFired { due: slot_due, .. } = fired(&h, "n1") else {
        unreachable!()
    };
    assert_eq!(
        slot_due, *due,
        "the state keeps the instant the effect carries"
    );
}

#[test]
fn a_firing_before_the_due_instant_is_refused_and_changes_nothing() {
    // The harness stamps each event TICK_MS after the last: a sleep of one second is due
    // long after the next event's time.
    let mut h = asleep(1);
    const { assert!(TICK_MS < 1_000) };
    let body = fired(&h, "n1");
    super::refused_early(&mut h, body);
}

#[test]
fn a_firing_naming_another_instant_is_refused() {
    let mut h = asleep(0);
    let EventBody::TimerFired { effect, due, .. } = fired(&h, "n1") else {
        unreachable!()
    };
    let other = Hlc::from_ms(due.ms().saturating_sub(1));
    super::refused_early(
        &mut h,
        EventBody::TimerFired {
            effect,
            due: other,
            early: false,
        },
    );
}

#[test]
fn a_timer_wakes_its_call_once() {
    let mut h = asleep(0);
    let body = fired(&h, "n1");
    h.send(body.clone());
    assert_eq!(h.state.kind(), StateKind::Preparing);
    let refused = h.try_send(body);
    assert!(refused.is_err(), "a second firing: {refused:?}");
}

/// A person may fire a sleep before its instant (`runtape wake`): the firing marked early is
/// taken, stamped when it happened, and the timer is spent — its firing on time is refused afterwards. What is due, and the event that fires
/// it, are the pure `wake` module's.
#[test]
fn an_early_wake_by_a_person_is_taken_once_and_says_so() {
    let mut h = asleep(3600);
    let timers = wake::pending_timers(&h.state);
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].kind, wake::TimerKind::Sleep);
    assert_eq!(wake::sleeps_until(&h.state), Some(timers[0].due));
    assert_eq!(wake::next_wake(&h.state), Some(timers[0].due));
    let on_time = fired(&h, "n1");
    h.send(wake::firing(&h.run, &timers[0], true));
    assert_eq!(h.state.kind(), StateKind::Preparing, "woke");
    assert_eq!(wake::next_wake(&h.state), None, "nothing left to wake");
    assert!(h.try_send(on_time).is_err(), "the timer is spent");
}
