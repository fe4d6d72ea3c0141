//! Where a run goes next when it is not about tools: retries and the fallback chain after a
//! failed model call, the handoff plan after an agent finishes, and budget raises.

use super::budget::{BudgetKey, Scope};
use super::error::{ErrorClass, Failure, MachineError};
use super::ids::AgentId;
use super::reply::ModelFailure;
use super::state::{ModelCall, Outcome, RunData, RunState};
use super::step::{Cx, Note, activate};

/// `Generating` + `ModelFailed`: retry on this route, else the next route, else fail. Budgets
/// are checked again first: a retry is a model call too.
pub(crate) fn on_model_failed(
    cx: &mut Cx<'_>,
    mut run: RunData,
    call: &ModelCall,
    failure: &ModelFailure,
) -> (&'static str, RunState) {
    let agent = run.active.clone();
    if let Some((scope, key, resting)) = cx.exhaustion(&run) {
        cx.notes.push(Note::BudgetExhausted {
            scope: scope.clone(),
            key,
        });
        return (
            "generating.failed.exhausted",
            RunState::BudgetExhausted {
                run,
                scope,
                key,
                resting,
            },
        );
    }
    let routes = cx
        .spec
        .agent(&agent)
        .map(|a| a.routes.as_slice())
        .unwrap_or_default();
    let route = routes.get(call.route as usize);
    if let Some(route) = route.filter(|r| failure.retryable && call.attempt < r.max_attempts) {
        let attempt = call.attempt + 1;
        let delay_ms = route.backoff.delay_ms(attempt, failure.retry_after_ms);
        cx.notes.push(Note::Retry {
            agent,
            attempt,
            delay_ms,
        });
        let not_before = Some(cx.at.plus_ms(delay_ms));
        let call = cx.call_model(&run, call.route, attempt, not_before);
        return (
            "generating.failed.retry",
            RunState::Generating { run, call },
        );
    }
    let next_route = call.route + 1;
    if let Some(next) = routes.get(next_route as usize) {
        cx.notes.push(Note::Fallback {
            agent: agent.clone(),
            route: next_route,
            provider: next.provider.clone(),
            model: next.model.clone(),
        });
        if let Some(a) = run.agents.get_mut(&agent) {
            a.route = next_route;
        }
        let call = cx.call_model(&run, next_route, 1, None);
        return (
            "generating.failed.fallback",
            RunState::Generating { run, call },
        );
    }
    let status = failure
        .status
        .map(|s| format!(" (HTTP {s})"))
        .unwrap_or_default();
    let error = Failure::new(
        ErrorClass::from(failure.class),
        format!(
            "agent {agent}: every model route failed; last: {}{status}",
            failure.message
        ),
    );
    (
        "generating.failed.fail",
        RunState::Done {
            run,
            outcome: Outcome::Failed { error },
        },
    )
}

/// `Handoff` + `Proceed`: the first plan edge from the finished agent whose condition matches
/// its answer activates the next agent; without one, an exit completes the run.
pub(crate) fn on_handoff(
    cx: &mut Cx<'_>,
    mut run: RunData,
    from: &AgentId,
    answer: Option<&str>,
    exhausted: Option<BudgetKey>,
) -> (&'static str, RunState) {
    let plan = cx.spec.plan();
    let target = plan
        .edges
        .iter()
        .enumerate()
        .find(|(i, e)| &e.from == from && e.when.matches(answer, cx.spec.edge_regex(*i)))
        .map(|(_, e)| e.to.clone());
    let done = |run, class, message: String| RunState::Done {
        run,
        outcome: Outcome::Failed {
            error: Failure::new(class, message),
        },
    };
    let Some(to) = target else {
        if !plan.exits.contains(from) {
            let msg = format!(
                "agent {from} finished, no plan edge matches its answer and it is not an exit"
            );
            return (
                "handoff.proceed.no_route",
                done(run, ErrorClass::NoRoute, msg),
            );
        }
        if let (Some(key), None) = (exhausted, answer) {
            let msg = format!("agent {from} ran out of its {key} budget before answering");
            return (
                "handoff.proceed.unfinished",
                done(run, ErrorClass::for_budget(key), msg),
            );
        }
        let outcome = Outcome::Completed {
            answer: answer.map(str::to_owned),
        };
        return ("handoff.proceed.complete", RunState::Done { run, outcome });
    };
    let visits = run.agents.get(&to).map_or(0, |a| a.visits);
    if visits >= plan.max_agent_visits {
        cx.notes.push(Note::HandoffCycle {
            agent: to.clone(),
            visits,
        });
        let msg = format!(
            "agent {to} would be activated a {}th time; max_agent_visits is {}",
            visits + 1,
            plan.max_agent_visits
        );
        return (
            "handoff.proceed.cycle",
            done(run, ErrorClass::HandoffCycle, msg),
        );
    }
    cx.notes.push(Note::Handoff {
        from: from.clone(),
        to: to.clone(),
    });
    let text = match (answer, exhausted) {
        (Some(a), _) => format!("{}\n\n[handoff from {from}]\n{a}", run.goal),
        (None, Some(key)) => format!(
            "{}\n\n[handoff from {from}: it ran out of its {key} budget without an answer]",
            run.goal
        ),
        (None, None) => format!("{}\n\n[handoff from {from}: no answer]", run.goal),
    };
    activate(cx, &mut run, &to, text);
    ("handoff.proceed.next", RunState::Preparing { run })
}

/// `BudgetExhausted` (not resting) + `Proceed`.
pub(crate) fn on_exhausted_proceed(
    run: RunData,
    scope: &Scope,
    key: BudgetKey,
) -> (&'static str, RunState) {
    match scope {
        Scope::Agent(agent) => (
            "budget_exhausted.proceed.handoff",
            RunState::Handoff {
                from: agent.clone(),
                run,
                answer: None,
                exhausted: Some(key),
            },
        ),
        Scope::Run => {
            let error = Failure::new(
                ErrorClass::for_budget(key),
                format!("the run's {key} budget is spent"),
            );
            (
                "budget_exhausted.proceed.fail",
                RunState::Done {
                    run,
                    outcome: Outcome::Failed { error },
                },
            )
        }
    }
}

/// Sets `key` of `scope` to `limit` in `run`; with `raise_only`, refuses values that do not
/// raise the current cap.
pub(crate) fn set_limit(
    run: &mut RunData,
    scope: &Scope,
    key: BudgetKey,
    limit: u64,
    raise_only: bool,
) -> Result<(), MachineError> {
    let limits = match scope {
        Scope::Run => &mut run.limits,
        Scope::Agent(agent) => {
            &mut run
                .agents
                .get_mut(agent)
                .ok_or_else(|| MachineError::UnknownAgent(agent.to_string()))?
                .limits
        }
    };
    let current = limits.get(key);
    if raise_only && current.is_none_or(|c| limit <= c) {
        return Err(MachineError::NotARaise {
            key,
            current,
            requested: limit,
        });
    }
    limits.set(key, Some(limit));
    Ok(())
}

/// Any started state + `BudgetRaised`. Out of `BudgetExhausted` when nothing is exhausted any
/// more; every other state keeps its kind.
pub(crate) fn on_budget_raised(
    cx: &mut Cx<'_>,
    state: &RunState,
    scope: &Scope,
    key: BudgetKey,
    limit: u64,
) -> Result<(&'static str, RunState), MachineError> {
    let mut next = state.clone();
    let run = next.data_mut().ok_or(MachineError::InvalidTransition {
        state: state.kind(),
        event: super::table::EventKind::BudgetRaised,
    })?;
    set_limit(run, scope, key, limit, true)?;
    Ok(match next {
        RunState::BudgetExhausted { run, .. } => match recheck(cx, run) {
            (true, s) => ("budget_exhausted.raise.resume", s),
            (false, s) => ("budget_exhausted.raise.still", s),
        },
        s @ RunState::Preparing { .. } => ("preparing.raise", s),
        s @ RunState::Generating { .. } => ("generating.raise", s),
        s @ RunState::CallingTools { .. } => ("calling_tools.raise", s),
        s @ RunState::AwaitingInput { .. } => ("awaiting_input.raise", s),
        s => ("handoff.raise", s),
    })
}

/// After caps changed in `BudgetExhausted`: `(true, Preparing)` when nothing is exhausted,
/// else `(false, BudgetExhausted)` naming what still is.
pub(crate) fn recheck(cx: &mut Cx<'_>, run: RunData) -> (bool, RunState) {
    match cx.exhaustion(&run) {
        None => (true, RunState::Preparing { run }),
        Some((scope, key, resting)) => (
            false,
            RunState::BudgetExhausted {
                run,
                scope,
                key,
                resting,
            },
        ),
    }
}
