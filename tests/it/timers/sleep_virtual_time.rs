//! The executor waits for a sleep on the engine's clock and nowhere else: a run that sleeps
//! an hour, driven on virtual time ([`VirtualClock`] under tokio's paused clock), waits
//! exactly that hour once, and the model is called again only when the hour has passed on
//! the engine's clock. No real time is waited.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtape::exec::Clock;
use runtape::machine::{AgentSpec, ModelReply, RunSpec, Spec, TimerSpec, ToolCallRequest};
use runtape::provider::{ScriptOutcome, ScriptedProvider};
use runtape::store::RunStatus;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn an_hours_sleep_is_waited_once_on_the_engines_clock() {
    let (clock, engine) = crate::support::clock::virtual_engine();
    // Each model call records when (on the engine's clock) it was made.
    let calls: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (seen, model_clock) = (calls.clone(), clock.clone());
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", move |_| {
            let mut seen = seen.lock().expect("not poisoned");
            seen.push(model_clock.wall_ms());
            ScriptOutcome::reply(if seen.len() == 1 {
                ModelReply::tools(vec![ToolCallRequest::new(
                    "c1",
                    "sleep_for",
                    json!({"seconds": 3600}),
                )])
            } else {
                ModelReply::text("awake")
            })
        })),
    );
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec::new("napper", "p", "m")],
        timers: Some(TimerSpec {
            max_sleep_ms: Some(2 * 3_600_000),
            ..TimerSpec::default()
        }),
        ..Spec::default()
    })
    .expect("valid");

    let end = engine
        .start(spec, "Check back in an hour.")
        .await
        .expect("starts")
        .wait()
        .await
        .expect("runs");
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(
        clock.waits(),
        [Duration::from_secs(3600)],
        "the hour, waited once on the engine's clock"
    );
    let calls = calls.lock().expect("not poisoned").clone();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[1] - calls[0] >= 3_600_000,
        "the model is called again only after the hour: {calls:?}"
    );
}
