//! Where a run goes next when it is not about tools: retries and the fallback chain after a
//! failed model call, the handoff plan after an agent finishes, and budget raises.

use serde_json::Value;

use super::budget::{BudgetKey, Scope};
use super::error::{ErrorClass, Failure, MachineError};
use super::ids::{AgentId, Hlc};
use super::reply::ModelFailure;
use super::spec::{MAX_RETRY_AFTER_MS, Route};
use super::state::{ModelCall, Outcome, RunData, RunState};
use super::step::{Cx, Note, activate};
use super::table::EdgeId;

/// `Generating` + `ModelFailed`: retry on this route, else cool the route down and take the
/// next route that is not cooling down, else fail. Budgets are checked again first: a retry
/// is a model call too.
///
/// A retry waits for the backoff, or the provider's `retry_after` when longer, but never
/// past the remaining wall-time budget. A `retry_after` beyond [`MAX_RETRY_AFTER_MS`] is
/// not waited for: the route gives up at once and is cooled down for that long.
pub(crate) fn on_model_failed(
    cx: &mut Cx<'_>,
    mut run: RunData,
    call: &ModelCall,
    failure: &ModelFailure,
) -> (EdgeId, RunState) {
    let agent = run.active.clone();
    let refused = failure.budget.map(|key| refused_by(cx, &run, key));
    if let Some((scope, key, resting)) = cx.exhaustion(&run).or(refused) {
        cx.notes.push(Note::BudgetExhausted {
            scope: scope.clone(),
            key,
        });
        return (
            EdgeId::GeneratingFailedExhausted,
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
    // Revision 1 (runtape 0.1.0) waited for any `retry_after`, past the wall budget too, and
    // kept no cooldowns: runs recorded under it replay by its rules.
    let revised = cx.spec.spec().semantics >= 2;
    let waits_too_long = revised
        && failure
            .retry_after_ms
            .is_some_and(|ms| ms > MAX_RETRY_AFTER_MS);
    if let Some(route) =
        route.filter(|r| failure.retryable && !waits_too_long && call.attempt < r.max_attempts)
    {
        let attempt = call.attempt + 1;
        let mut delay_ms = route.backoff.delay_ms(attempt, failure.retry_after_ms);
        if revised && let Some(left) = cx.remaining(&run).wall_ms {
            delay_ms = delay_ms.min(left);
        }
        cx.notes.push(Note::Retry {
            agent,
            attempt,
            delay_ms,
        });
        let not_before = Some(cx.at.plus_ms(delay_ms));
        let call = cx.call_model(&run, call.route, attempt, not_before);
        return (
            EdgeId::GeneratingFailedRetry,
            RunState::Generating { run, call },
        );
    }
    if let Some(route) = route.filter(|_| revised) {
        let cool_for = route.cooldown_ms.max(failure.retry_after_ms.unwrap_or(0));
        run.cooldowns.insert(
            route_key(&route.provider, &route.model),
            cx.at.plus_ms(cool_for),
        );
    }
    let next = routes
        .iter()
        .enumerate()
        .skip(call.route as usize + 1)
        .find(|(_, r)| !cooling(&run, r, cx.at));
    if let Some((index, next)) = next {
        let next_route = u32::try_from(index).unwrap_or(u32::MAX);
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
            EdgeId::GeneratingFailedFallback,
            RunState::Generating { run, call },
        );
    }
    let status = failure
        .status
        .map(|s| format!(" (HTTP {s})"))
        .unwrap_or_default();
    let waited = if waits_too_long {
        format!(
            "; the provider asked to wait {} s, longer than the {} s runtape waits",
            failure.retry_after_ms.unwrap_or(0) / 1000,
            MAX_RETRY_AFTER_MS / 1000
        )
    } else {
        String::new()
    };
    let error = Failure::new(
        ErrorClass::from(failure.class),
        format!(
            "agent {agent}: every model route failed; last: {}{status}{waited}",
            failure.message
        ),
    );
    (
        EdgeId::GeneratingFailedFail,
        RunState::Done {
            run,
            outcome: Outcome::Failed { error },
        },
    )
}

/// The key a route is cooled down under: `provider/model`.
pub(crate) fn route_key(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// Whether `route` is cooling down at `at`.
fn cooling(run: &RunData, route: &Route, at: Hlc) -> bool {
    run.cooldowns
        .get(&route_key(&route.provider, &route.model))
        .is_some_and(|until| *until > at)
}

/// At a step boundary: drops expired cooldowns and picks the active agent's route, the
/// first one not cooling down (the primary whenever it is available), or, when all are
/// cooling, the one whose cooldown ends first. Notes a return to an earlier route.
pub(crate) fn choose_route(cx: &mut Cx<'_>, run: &mut RunData) -> u32 {
    let at = cx.at;
    run.cooldowns.retain(|_, until| *until > at);
    let agent = run.active.clone();
    let routes = cx
        .spec
        .agent(&agent)
        .map(|a| a.routes.as_slice())
        .unwrap_or_default();
    let free = routes.iter().position(|r| !cooling(run, r, at));
    let chosen = free.unwrap_or_else(|| {
        routes
            .iter()
            .enumerate()
            .min_by_key(|(i, r)| {
                let until = run.cooldowns.get(&route_key(&r.provider, &r.model));
                (until.copied(), *i)
            })
            .map_or(0, |(i, _)| i)
    });
    let chosen = u32::try_from(chosen).unwrap_or(0);
    if let Some(a) = run.agents.get_mut(&agent) {
        if chosen < a.route
            && let Some(r) = routes.get(chosen as usize)
        {
            cx.notes.push(Note::RouteRestored {
                agent: agent.clone(),
                route: chosen,
                provider: r.provider.clone(),
                model: r.model.clone(),
            });
        }
        a.route = chosen;
    }
    chosen
}

/// `Handoff` + `Proceed`: the first plan edge from the finished agent whose condition matches
/// its answer activates the next agent; without one, an exit completes the run.
pub(crate) fn on_handoff(
    cx: &mut Cx<'_>,
    mut run: RunData,
    from: &AgentId,
    answer: Option<&str>,
    output: Option<&Value>,
    exhausted: Option<BudgetKey>,
) -> (EdgeId, RunState) {
    let plan = cx.spec.plan();
    let target = plan
        .edges
        .iter()
        .enumerate()
        .find(|(i, e)| &e.from == from && e.when.matches(answer, output, cx.spec.edge_regex(*i)))
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
                EdgeId::HandoffProceedNoRoute,
                done(run, ErrorClass::NoRoute, msg),
            );
        }
        if let (Some(key), None) = (exhausted, answer) {
            let msg = format!("agent {from} ran out of its {key} budget before answering");
            return (
                EdgeId::HandoffProceedUnfinished,
                done(run, ErrorClass::for_budget(key), msg),
            );
        }
        return super::memory::complete(cx, run, from, answer.map(str::to_owned), output.cloned());
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
            EdgeId::HandoffProceedCycle,
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
    let label = run.agents.get(from).map(|a| a.taint).unwrap_or_default();
    activate(cx, &mut run, &to, text, label);
    (EdgeId::HandoffProceedNext, RunState::Preparing { run })
}

/// The scope a call refused for `key` ([`ModelFailure::budget`]) is charged to, and whether
/// its policy rests the run: the run's when its cap of `key` leaves no more than the active
/// agent's (or the agent has none), else the agent's. The refusal stands for that budget
/// being spent: raising it lets the call be asked for again.
fn refused_by(cx: &Cx<'_>, run: &RunData, key: BudgetKey) -> (Scope, BudgetKey, bool) {
    use super::budget::Remaining;
    use super::spec::{OnExhausted, RunOnExhausted};
    let left = |limits, usage, since: Hlc| {
        super::delegation::remaining_of(
            &Remaining::of(&[(limits, usage, cx.at.ms_since(since))]),
            key,
        )
    };
    let run_left = left(&run.limits, &run.usage, run.started_at);
    let agent_left = run
        .agents
        .get(&run.active)
        .and_then(|a| left(&a.limits, &a.usage, a.first_active_at));
    let agent_binds = match (run_left, agent_left) {
        (Some(r), Some(a)) => a < r,
        (None, a) => a.is_some(),
        (Some(_), None) => false,
    };
    if agent_binds {
        let resting = cx
            .spec
            .agent(&run.active)
            .is_some_and(|s| s.on_exhausted == OnExhausted::Pause);
        (Scope::Agent(run.active.clone()), key, resting)
    } else {
        let resting = cx.spec.spec().on_exhausted == RunOnExhausted::Pause;
        (Scope::Run, key, resting)
    }
}

/// `BudgetExhausted` (not resting) + `Proceed`.
pub(crate) fn on_exhausted_proceed(
    run: RunData,
    scope: &Scope,
    key: BudgetKey,
) -> (EdgeId, RunState) {
    match scope {
        Scope::Agent(agent) => (
            EdgeId::BudgetExhaustedProceedHandoff,
            RunState::Handoff {
                from: agent.clone(),
                run,
                answer: None,
                output: None,
                exhausted: Some(key),
                transfer: None,
            },
        ),
        Scope::Run => {
            let error = Failure::new(
                ErrorClass::for_budget(key),
                format!("the run's {key} budget is spent"),
            );
            (
                EdgeId::BudgetExhaustedProceedFail,
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
) -> Result<(EdgeId, RunState), MachineError> {
    let mut next = state.clone();
    let run = next.data_mut().ok_or(MachineError::InvalidTransition {
        state: state.kind(),
        event: super::table::EventKind::BudgetRaised,
    })?;
    set_limit(run, scope, key, limit, true)?;
    Ok(match next {
        RunState::BudgetExhausted { run, .. } => match recheck(cx, run) {
            (true, s) => (EdgeId::BudgetExhaustedRaiseResume, s),
            (false, s) => (EdgeId::BudgetExhaustedRaiseStill, s),
        },
        s @ RunState::Preparing { .. } => (EdgeId::PreparingRaise, s),
        s @ RunState::Generating { .. } => (EdgeId::GeneratingRaise, s),
        s @ RunState::Summarizing { .. } => (EdgeId::SummarizingRaise, s),
        s @ RunState::Retrieving { .. } => (EdgeId::RetrievingRaise, s),
        s @ RunState::CallingTools { .. } => (EdgeId::CallingToolsRaise, s),
        s @ RunState::AwaitingInput { .. } => (EdgeId::AwaitingInputRaise, s),
        s @ RunState::Publishing { .. } => (EdgeId::PublishingRaise, s),
        s => (EdgeId::HandoffRaise, s),
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
