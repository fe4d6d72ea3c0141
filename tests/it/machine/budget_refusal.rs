//! A model call the provider refused because it would pass a budget (`ModelFailure::budget`,
//! from `machine::allowance`) ends where a spent budget ends: `BudgetExhausted`, charged to
//! the scope whose cap binds, resting or not by that scope's policy; raising the cap lets the
//! call be asked for again.

use crate::support;

use runtape::machine::*;
use support::machine::*;

const CENT: u64 = 10_000_000;

fn refused(key: BudgetKey) -> ModelFailure {
    ModelFailure {
        retryable: false,
        budget: Some(key),
        ..ModelFailure::new(ProviderErrorClass::BadRequest, "not called")
    }
}

fn exhausted(h: &Harness) -> (Scope, BudgetKey, bool) {
    match &h.state {
        RunState::BudgetExhausted {
            scope,
            key,
            resting,
            ..
        } => (scope.clone(), *key, *resting),
        other => panic!("expected BudgetExhausted, got {:?}", other.kind()),
    }
}

#[test]
fn a_refusal_under_the_runs_cap_fails_the_run_on_that_budget() {
    let mut h = Harness::new(solo_with(|s| s.limits.max_cost_nanos = Some(5 * CENT)));
    h.start("Go.");
    h.proceed();
    h.fail(refused(BudgetKey::Cost));
    assert_eq!(exhausted(&h), (Scope::Run, BudgetKey::Cost, false));
    h.proceed();
    match h.state.outcome() {
        Some(Outcome::Failed { error }) => {
            assert_eq!(error.class, ErrorClass::for_budget(BudgetKey::Cost))
        }
        other => panic!("the run fails on its cost budget, got {other:?}"),
    }
}

#[test]
fn the_tighter_agent_cap_takes_the_refusal_and_its_pause_policy() {
    let mut h = Harness::new(solo_with(|s| {
        s.limits.max_cost_nanos = Some(50 * CENT);
        s.agents[0].limits.max_cost_nanos = Some(5 * CENT);
        s.agents[0].on_exhausted = OnExhausted::Pause;
    }));
    h.start("Go.");
    h.proceed();
    h.fail(refused(BudgetKey::Cost));
    let agent = Scope::Agent(h.state.data().expect("started").active.clone());
    assert_eq!(exhausted(&h), (agent.clone(), BudgetKey::Cost, true));
    // Nothing is spent, so raising the agent's cap leaves BudgetExhausted and asks again.
    h.raise(agent, BudgetKey::Cost, 10 * CENT);
    assert_eq!(h.state.kind(), StateKind::Preparing);
    h.proceed();
    assert_eq!(h.state.kind(), StateKind::Generating);
}

#[test]
fn a_failure_without_a_budget_is_still_a_provider_failure() {
    let mut h = Harness::new(solo_with(|s| s.limits.max_cost_nanos = Some(5 * CENT)));
    h.start("Go.");
    h.proceed();
    h.fail(ModelFailure {
        budget: None,
        ..refused(BudgetKey::Cost)
    });
    assert_ne!(h.state.kind(), StateKind::BudgetExhausted);
}
