//! What observers are told about one committed transition: the trace events it implies, built
//! from the state before it, the event and the transition. Pure: the driver publishes them
//! once the transition is durable.

use super::trace::{Trace, TraceEvent};
use crate::machine::{Event, EventBody, Note, RunId, RunSpec, RunState, ToolOutcome, Transition};

/// The trace events of transition `t`, which `event` made from `before`, in the order they are
/// published: what the event carried (a model reply or error, a tool result), the transition
/// itself, the machine's notes (refused calls, retries, handoffs, ...), and the run's end.
pub(crate) fn transition_traces(
    run: &RunId,
    spec: &RunSpec,
    before: &RunState,
    event: &Event,
    t: &Transition,
) -> Vec<TraceEvent> {
    let seq = Some(t.next.seq());
    let agent = before.data().map(|d| d.active.clone()).unwrap_or_default();
    let mut out = Vec::with_capacity(2 + t.notes.len());
    let mut push = |kind: Trace| {
        out.push(TraceEvent {
            run: run.clone(),
            at: event.at,
            seq,
            kind,
        })
    };
    match &event.body {
        EventBody::ModelReplied { reply, .. } => {
            // A session or context summary is written by its writer, on that agent's route.
            let (agent, route) = match before {
                RunState::Generating { call, .. } => (
                    agent.clone(),
                    spec.agent(&agent)
                        .and_then(|a| a.routes.get(call.route as usize)),
                ),
                RunState::Summarizing {
                    call, summaries, ..
                } => {
                    let by = summaries
                        .writer()
                        .map_or_else(|| agent.clone(), |(_, by)| by.clone());
                    let route = spec
                        .agent(&by)
                        .and_then(|a| a.routes.get(call.route as usize));
                    (by, route)
                }
                _ => (agent.clone(), None),
            };
            let usage = t.next.data().map(|d| d.usage).unwrap_or_default();
            push(Trace::ModelReply {
                agent: agent.clone(),
                provider: route.map(|r| r.provider.clone()).unwrap_or_default(),
                model: route.map(|r| r.model.clone()).unwrap_or_default(),
                response_model: reply.model.clone(),
                response_id: reply.response_id.clone(),
                text: reply.text.clone(),
                tool_calls: reply.tool_calls.len(),
                finish: reply.finish_reason.normalized,
                refusal: crate::machine::refusal_of(reply),
                usage: reply.usage,
                cost_nanos: reply.cost_nanos,
                run_cost_nanos: usage.cost_nanos,
                run_unpriced_turns: usage.unpriced_turns,
            })
        }
        EventBody::Retrieved {
            retrieval: crate::machine::Retrieval::Passages { passages },
            ..
        } => push(Trace::RetrievalResult {
            agent: agent.clone(),
            passages: passages.len(),
        }),
        EventBody::ModelFailed { failure, .. } => push(Trace::ModelError {
            agent: agent.clone(),
            error: failure.message.clone(),
            retryable: failure.retryable,
        }),
        EventBody::ToolReturned { effect, outcome } => {
            if let RunState::CallingTools { batch, .. } = before
                && let Some(slot) = batch
                    .slots
                    .iter()
                    .find(|s| s.status.effect().is_some_and(|e| e.matches(effect)))
            {
                push(Trace::ToolResult {
                    call_id: slot.call_id.clone(),
                    tool: slot.tool.clone(),
                    ok: matches!(outcome, ToolOutcome::Ok { .. }),
                });
            }
        }
        EventBody::TimerFired { effect, due, early } => {
            if let Some(fired) = timer_fired(before, effect, *due, *early) {
                push(fired);
            }
        }
        _ => {}
    }
    push(Trace::Transition {
        edge: t.edge,
        state: t.next.kind(),
    });
    for note in &t.notes {
        push(note_trace(note));
    }
    if let Some(outcome) = t.next.outcome() {
        push(Trace::RunFinished {
            outcome: outcome.clone(),
        });
    }
    out
}

/// What `TimerFired` for `effect` fired, from the state before it: the call that slept on
/// it, or whose deadline it is. `None` when no call of `before` waits on it.
fn timer_fired(
    before: &RunState,
    effect: &crate::machine::EffectId,
    due: crate::machine::Hlc,
    early: bool,
) -> Option<Trace> {
    let (RunState::CallingTools { batch, .. } | RunState::AwaitingInput { batch, .. }) = before
    else {
        return None;
    };
    let agent = before.data().map(|d| d.active.clone()).unwrap_or_default();
    batch.slots.iter().find_map(|slot| {
        let timer = match (&slot.status, slot.deadline) {
            (crate::machine::SlotStatus::Sleeping { effect: e, .. }, _) if e.matches(effect) => {
                "sleep"
            }
            (_, Some(d)) if d.effect.matches(effect) => "deadline",
            _ => return None,
        };
        Some(Trace::TimerFired {
            agent: agent.clone(),
            call_id: slot.call_id.clone(),
            timer: timer.into(),
            started_seq: effect.seq,
            due_ms: due.ms(),
            early,
        })
    })
}

/// The trace event of one machine note.
fn note_trace(note: &Note) -> Trace {
    match note {
        Note::ToolRejected {
            agent,
            call_id,
            tool,
        } => Trace::ToolRejected {
            agent: agent.clone(),
            call_id: call_id.clone(),
            tool: tool.clone(),
            reason: "outside the agent's grant".into(),
        },
        Note::ToolBlocked {
            agent,
            call_id,
            tool,
            rule,
            asked,
        } => Trace::ToolRejected {
            agent: agent.clone(),
            call_id: call_id.clone(),
            tool: tool.clone(),
            reason: if *asked {
                format!("blocked by policy ({rule}): a person is asked")
            } else {
                format!("blocked by policy ({rule})")
            },
        },
        Note::ToolInvalid {
            agent,
            call_id,
            tool,
            reason,
        } => Trace::ToolRejected {
            agent: agent.clone(),
            call_id: call_id.clone(),
            tool: tool.clone(),
            reason: reason.clone(),
        },
        Note::ToolBudget { agent, call_id } => Trace::ToolRejected {
            agent: agent.clone(),
            call_id: call_id.clone(),
            tool: String::new(),
            reason: "tool-call budget spent".into(),
        },
        Note::BudgetExhausted { scope, key } => Trace::BudgetExhausted {
            scope: scope.clone(),
            key: *key,
        },
        Note::Retry {
            agent,
            attempt,
            delay_ms,
        } => Trace::ModelRetry {
            agent: agent.clone(),
            detail: format!("attempt {attempt} after {delay_ms} ms"),
        },
        Note::Fallback {
            agent,
            provider,
            model,
            ..
        } => Trace::ModelRetry {
            agent: agent.clone(),
            detail: format!("falling back to {provider}/{model}"),
        },
        Note::RouteRestored {
            agent,
            provider,
            model,
            ..
        } => Trace::ModelRetry {
            agent: agent.clone(),
            detail: format!("cooldown over: back to {provider}/{model}"),
        },
        Note::Handoff { from, to } => Trace::Handoff {
            from: from.clone(),
            to: to.clone(),
        },
        Note::HandoffCycle { agent, visits } => Trace::HandoffCycle {
            agent: agent.clone(),
            visits: *visits,
        },
        Note::SessionSummarized { agent, by } => Trace::SessionSummary {
            agent: agent.clone(),
            by: by.clone(),
        },
        Note::SessionSummarySkipped { agent } => Trace::SessionSummarySkipped {
            agent: agent.clone(),
        },
        Note::RetrievalFailed { agent, error } => Trace::RetrievalFailed {
            agent: agent.clone(),
            error: error.clone(),
        },
        Note::Truncated {
            agent,
            policy,
            output_tokens,
            next_limit,
        } => Trace::ModelTruncated {
            agent: agent.clone(),
            policy: *policy,
            output_tokens: *output_tokens,
            next_limit: *next_limit,
        },
        Note::ContextSummarized(s) => Trace::ContextSummarized(s.clone()),
        Note::Compacted {
            agent,
            policy,
            messages,
            bytes_before,
            bytes_after,
        } => Trace::ContextCompacted {
            agent: agent.clone(),
            policy: policy.clone(),
            messages: messages.clone(),
            bytes_before: *bytes_before,
            bytes_after: *bytes_after,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{
        AgentSpec, Hlc, ModelFailure, ModelReply, ProviderErrorClass, Spec, ToolCallRequest,
        ToolSpec, step,
    };

    fn spec() -> RunSpec {
        RunSpec::build(Spec {
            agents: vec![AgentSpec {
                tools: Some(vec!["look".into()]),
                ..AgentSpec::new("solo", "p", "m1")
            }],
            tools: vec![ToolSpec::new("look", "looks")],
            ..Spec::default()
        })
        .expect("valid")
    }

    /// Steps `body` from `state` and returns the traces and the next state.
    fn traced(state: &RunState, ms: u64, body: EventBody) -> (Vec<Trace>, RunState) {
        let run = RunId::new("r");
        let event = Event::new(&run, Hlc::from_ms(ms), body);
        let t = step(state, &event, &spec()).expect("steps");
        let traces = transition_traces(&run, &spec(), state, &event, &t);
        assert!(
            traces
                .iter()
                .all(|e| e.at == event.at && e.seq == Some(t.next.seq()))
        );
        (traces.into_iter().map(|e| e.kind).collect(), t.next)
    }

    fn call_of(state: &RunState) -> crate::machine::EffectId {
        state.outstanding()[0].in_run(&RunId::new("r"))
    }

    #[test]
    fn a_reply_a_tool_result_a_retry_and_the_end_are_each_told_once() {
        let (traces, s) = traced(&RunState::Created, 1, EventBody::Start { goal: "g".into() });
        assert_eq!(traces.len(), 1);
        assert!(matches!(&traces[0], Trace::Transition { edge, .. } if *edge == "created.start"));

        let (_, s) = traced(&s, 2, EventBody::Proceed);
        let failure = ModelFailure::new(ProviderErrorClass::ProviderRateLimit, "slow down");
        let (traces, s) = traced(
            &s,
            3,
            EventBody::ModelFailed {
                effect: call_of(&s),
                failure,
            },
        );
        assert!(matches!(
            &traces[0],
            Trace::ModelError {
                retryable: true,
                ..
            }
        ));
        assert!(
            matches!(&traces[1], Trace::Transition { edge, .. } if *edge == "generating.failed.retry")
        );
        assert!(
            matches!(&traces[2], Trace::ModelRetry { detail, .. } if detail.starts_with("attempt 2 after"))
        );

        let reply = ModelReply::tools(vec![ToolCallRequest::new(
            "c1",
            "look",
            serde_json::json!({}),
        )])
        .with_usage(10, 2);
        let (traces, s) = traced(
            &s,
            4,
            EventBody::ModelReplied {
                effect: call_of(&s),
                reply,
                chunks: Vec::new(),
            },
        );
        assert!(matches!(
            &traces[0],
            Trace::ModelReply { provider, model, tool_calls: 1, run_cost_nanos: 0, .. }
                if provider == "p" && model == "m1"
        ));

        let (traces, s) = traced(
            &s,
            5,
            EventBody::ToolReturned {
                effect: call_of(&s),
                outcome: ToolOutcome::ok(serde_json::json!("seen")),
            },
        );
        assert!(
            matches!(&traces[0], Trace::ToolResult { call_id, tool, ok: true } if call_id == "c1" && tool == "look")
        );

        let (traces, _) = traced(&s, 6, EventBody::CancelRequested { reason: None });
        assert!(matches!(traces.last(), Some(Trace::RunFinished { .. })));
    }
}
