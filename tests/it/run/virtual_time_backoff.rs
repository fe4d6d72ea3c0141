//! The executor's clock is the only clock it reads or waits on: a run whose model fails twice
//! with a retryable error, driven on virtual time ([`VirtualClock`] under tokio's paused
//! clock), waits exactly its backoff before each retry — 500 ms, then 1,000 ms — and the model
//! is called again only once that time has passed on the engine's clock. No real time is
//! waited.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtape::exec::{Clock, Trace};
use runtape::machine::{AgentSpec, ModelReply, ProviderErrorClass, RunSpec, Spec};
use runtape::provider::{ProviderError, ScriptOutcome, ScriptedProvider};
use runtape::store::RunStatus;

#[tokio::test(start_paused = true)]
async fn retries_wait_their_backoff_on_the_engines_clock() {
    let (clock, engine) = crate::support::clock::virtual_engine();
    // Each call records when (on the engine's clock) it was made, and which attempt it was.
    let calls: Arc<Mutex<Vec<(u32, u64)>>> = Arc::default();
    let (seen, model_clock) = (calls.clone(), clock.clone());
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", move |req| {
            seen.lock()
                .expect("not poisoned")
                .push((req.attempt, model_clock.wall_ms()));
            if req.attempt < 3 {
                ScriptOutcome::fail(ProviderError::new(
                    "p",
                    ProviderErrorClass::ProviderRateLimit,
                    "slow down",
                ))
            } else {
                ScriptOutcome::reply(ModelReply::text("done"))
            }
        })),
    );
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec::new("solo", "p", "m")],
        ..Spec::default()
    })
    .expect("valid");

    let mut retries = Vec::new();
    let end = engine
        .start(spec, "Try until it works.")
        .await
        .expect("starts")
        .wait_with(|e| {
            if let Trace::ModelRetry { detail, .. } = &e.kind {
                retries.push(detail.clone());
            }
        })
        .await
        .expect("runs");
    assert_eq!(end.status, RunStatus::Completed);

    assert_eq!(
        clock.waits(),
        [Duration::from_millis(500), Duration::from_millis(1_000)],
        "the backoff of attempts 2 and 3, waited on the engine's clock"
    );
    let calls = calls.lock().expect("not poisoned").clone();
    let attempts: Vec<u32> = calls.iter().map(|(a, _)| *a).collect();
    assert_eq!(attempts, [1, 2, 3]);
    let first = calls[0].1;
    let offsets: Vec<u64> = calls.iter().map(|(_, at)| at - first).collect();
    assert_eq!(
        offsets,
        [0, 500, 1_500],
        "each retry is sent once its backoff has passed, not before"
    );
    assert_eq!(
        retries,
        ["attempt 2 after 500 ms", "attempt 3 after 1000 ms"],
        "the machine scheduled exactly the delays that were waited"
    );
}
