//! Edge cases of durable timers: a `sleep_for` call woken by `TimerFired` (see `../edges.rs`).

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
    ]
}
