//! `log` says where the time went: each step that answers an effect (a model reply, a tool
//! result) shows how long after the step that issued it it was committed, in the text
//! (`(152 ms)`) and as `took_ms` in `--json`; other steps carry none.

use crate::support::cli::{json_lines, ok, run_id, runtape, slow_tick_spec, temp_db};

#[test]
fn log_times_each_answered_call_from_the_step_that_issued_it() {
    let (dir, db) = temp_db();
    // Two model turns of 150 ms each (the scripted model's latency), one `cat` tool call.
    let spec = slow_tick_spec(dir.path(), 1);
    let started = runtape(&db, &["run", spec.to_str().expect("utf-8 path")]);
    assert!(started.status.success(), "{started:?}");
    let id = run_id(&started);
    let steps = json_lines(&runtape(&db, &["log", &id, "--json"]));
    let took = |event: &str| -> Vec<Option<u64>> {
        steps
            .iter()
            .filter(|s| s["event"] == event)
            .map(|s| s["took_ms"].as_u64())
            .collect()
    };
    let replies = took("model_replied");
    assert_eq!(replies.len(), 2, "{steps:?}");
    for ms in &replies {
        assert!(
            ms.is_some_and(|ms| ms >= 150),
            "a reply that took the model 150 ms is timed at least that: {replies:?}"
        );
    }
    assert!(
        took("tool_returned").iter().all(Option::is_some),
        "tool results are timed: {steps:?}"
    );
    assert!(
        took("start")
            .iter()
            .chain(&took("proceed"))
            .all(Option::is_none),
        "steps that answer nothing carry no time: {steps:?}"
    );
    let text = ok(&db, &["log", &id]);
    let reply_line = text
        .lines()
        .find(|l| l.contains("model_replied"))
        .expect("a reply line");
    assert!(
        reply_line.ends_with(" ms)"),
        "the text log shows the time: {reply_line}"
    );
}
