//! Edge cases of durable timers: a `sleep_for` call woken by `TimerFired`, and deadlines on
//! calls waiting for a person (see `../edges.rs`).

use super::*;

pub(super) fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("calling_tools.timer.wait", || {
            let h = with_reply(sleepy(), vec![nap("n1", 0), lookup("l1")]);
            let body = fired(&h, "n1");
            (h, body)
        }),
        ("calling_tools.timer.input", || {
            let h = with_reply(sleepy(), vec![nap("n1", 0), deploy("d1")]);
            let body = fired(&h, "n1");
            (h, body)
        }),
        ("calling_tools.timer.done", || {
            let h = with_reply(sleepy(), vec![nap("n1", 0)]);
            let body = fired(&h, "n1");
            (h, body)
        }),
        ("calling_tools.deadline", || {
            let spec = with_deadline("deploy", OnDeadline::Reject);
            let h = with_reply(spec, vec![lookup("l1"), deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("calling_tools.deadline.fail", || {
            let spec = with_deadline("deploy", OnDeadline::Fail);
            let h = with_reply(spec, vec![lookup("l1"), deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("calling_tools.deadline.escalate", || {
            let spec = with_deadline("deploy", escalate("lead", OnDeadline::Reject));
            let h = with_reply(spec, vec![lookup("l1"), deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("awaiting_input.deadline.escalate", || {
            let spec = with_deadline("deploy", escalate("lead", OnDeadline::Reject));
            let h = with_reply(spec, vec![deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("awaiting_input.deadline.wait", || {
            let spec = with_deadline("deploy", OnDeadline::Reject);
            let h = with_reply(spec, vec![deploy("d1"), deploy("d2")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("awaiting_input.deadline.run", || {
            let spec = with_deadline("deploy", OnDeadline::Approve);
            let h = with_reply(spec, vec![deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
        ("awaiting_input.deadline.done", || {
            let spec = with_deadline("ask_human", OnDeadline::Input("no answer".into()));
            let question = call("q1", "ask_human", json!({"question": "which region?"}));
            let h = with_reply(spec, vec![question]);
            let body = deadline_fired(&h, "q1");
            (h, body)
        }),
        ("awaiting_input.deadline.fail", || {
            let spec = with_deadline("deploy", OnDeadline::Fail);
            let h = with_reply(spec, vec![deploy("d1")]);
            let body = deadline_fired(&h, "d1");
            (h, body)
        }),
    ]
}
