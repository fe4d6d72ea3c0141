//! Fallback with cooldown, in the pure machine: a route that gave up is cooled down (per
//! provider and model, in the run state), skipped while it cools, and the agent returns to
//! its primary route once the cooldown is over — each choice visible in the CallModel
//! effects. Retry waits never exceed the remaining wall-time budget, and a `Retry-After`
//! past the documented maximum is not waited for.

use crate::support;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

fn unavailable(retry_after_ms: Option<u64>) -> ModelFailure {
    ModelFailure {
        retry_after_ms,
        status: Some(503),
        ..ModelFailure::new(ProviderErrorClass::ProviderUnavailable, "down")
    }
}

/// The route index of the outstanding CallModel.
fn called_route(h: &Harness) -> (u32, String) {
    match h.history.last().and_then(|(_, t)| t.effects.first()) {
        Some(Effect::CallModel { request, .. }) => (request.route, request.provider.clone()),
        other => panic!("no CallModel emitted: {other:?}"),
    }
}

fn cooling_spec(cooldown_ms: u64) -> RunSpec {
    solo_with(|s| {
        s.agents[0].routes[0].max_attempts = 1;
        s.agents[0].routes[0].cooldown_ms = cooldown_ms;
    })
}

#[test]
fn a_failed_route_cools_down_and_the_primary_returns_after_its_cooldown() {
    let mut h = Harness::new(cooling_spec(5 * TICK_MS));
    h.start("Find it.");
    h.proceed();
    assert_eq!(called_route(&h), (0, "primary".into()));
    h.fail(unavailable(None));
    assert_eq!(h.last_edge(), "generating.failed.fallback");
    assert_eq!(called_route(&h), (1, "fallback".into()));
    let until = h.state.data().unwrap().cooldowns["primary/model-a"];
    assert!(until.ms() > h.clock, "the primary cools down until later");

    // Next turn, still cooling: the fallback is used again.
    h.reply(ModelReply::tools(vec![call(
        "c1",
        "lookup",
        json!({"q": "a"}),
    )]));
    h.tool_ok("c1", json!("a"));
    h.proceed();
    assert_eq!(
        called_route(&h),
        (1, "fallback".into()),
        "the primary is skipped while cooling"
    );

    // Later turns, once the cooldown is over: back to the primary, and the cooldown is gone.
    h.reply(ModelReply::tools(vec![call(
        "c2",
        "lookup",
        json!({"q": "b"}),
    )]));
    h.tool_ok("c2", json!("b"));
    while h.clock <= until.ms() {
        h.raise(
            Scope::Agent("solo".into()),
            BudgetKey::Turns,
            1000 + h.clock,
        );
    }
    let t = h.proceed().clone();
    assert_eq!(
        called_route(&h),
        (0, "primary".into()),
        "the agent returned to its primary"
    );
    assert!(
        noted(&t, |n| matches!(n, Note::RouteRestored { route: 0, .. })),
        "{:?}",
        t.notes
    );
    assert!(h.state.data().unwrap().cooldowns.is_empty());
}

#[test]
fn a_cooling_fallback_is_skipped_and_all_cooling_fails_with_the_last_error() {
    let spec = solo_with(|s| {
        s.agents[0].routes[0].max_attempts = 1;
        s.agents[0].routes.push(Route {
            max_attempts: 1,
            ..Route::new("third", "model-c")
        });
    });
    let mut h = Harness::new(spec);
    h.start("Find it.");
    h.proceed();
    h.fail(unavailable(None));
    assert_eq!(called_route(&h), (1, "fallback".into()));
    h.fail(unavailable(None));
    assert_eq!(called_route(&h), (2, "third".into()));
    let cooled: Vec<&String> = h.state.data().unwrap().cooldowns.keys().collect();
    assert_eq!(cooled, ["fallback/model-b", "primary/model-a"]);
    h.fail(unavailable(None));
    let error = failure(&h.state);
    assert_eq!(error.class, ErrorClass::ProviderUnavailable);
}

#[test]
fn a_retry_never_waits_past_the_remaining_wall_budget() {
    let spec = solo_with(|s| {
        s.agents[0].limits.max_wall_ms = Some(4 * TICK_MS);
        s.agents[0].routes[0].backoff = Backoff {
            initial_ms: 100_000,
            max_ms: 100_000,
        };
    });
    let mut h = Harness::new(spec);
    h.start("Find it.");
    h.proceed();
    let at = h.clock + TICK_MS;
    h.fail(unavailable(Some(90_000)));
    let t = &h.history.last().unwrap().1;
    assert_eq!(t.edge, "generating.failed.retry");
    let Some(Effect::CallModel {
        not_before: Some(nb),
        attempt: 2,
        ..
    }) = t.effects.first()
    else {
        panic!("a retry with a wait: {:?}", t.effects);
    };
    let left = 4 * TICK_MS - (at - T0_MS - TICK_MS);
    assert_eq!(
        nb.ms() - at,
        left,
        "the wait is cut to what is left of the budget"
    );
}

#[test]
fn a_retry_after_beyond_the_maximum_is_not_waited_for() {
    let mut h = Harness::new(solo());
    h.start("Find it.");
    h.proceed();
    h.fail(unavailable(Some(MAX_RETRY_AFTER_MS + 1)));
    let t = &h.history.last().unwrap().1;
    assert_eq!(
        t.edge, "generating.failed.fallback",
        "no retry was scheduled"
    );
    let until = h.state.data().unwrap().cooldowns["primary/model-a"];
    assert!(
        until.ms() >= h.clock + MAX_RETRY_AFTER_MS,
        "the route cools down for as long as the provider asked"
    );
    // Within the maximum, the provider's wait is honoured.
    let mut h = Harness::new(solo());
    h.start("Find it.");
    h.proceed();
    h.fail(unavailable(Some(MAX_RETRY_AFTER_MS)));
    let t = &h.history.last().unwrap().1;
    assert_eq!(t.edge, "generating.failed.retry");
    let Some(Effect::CallModel {
        not_before: Some(nb),
        ..
    }) = t.effects.first()
    else {
        panic!("a retry with a wait");
    };
    assert_eq!(nb.ms() - h.clock, MAX_RETRY_AFTER_MS);
}
