//! Every edge of the transition table, pinned by a snapshot of `(state, event) → transition`.
//! `every_edge_has_a_case` fails when an edge is added to the table without a case here.

use crate::support;
mod compensate;
mod context;
mod memory_sessions;
pub(crate) mod timers;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

type Case = fn() -> (Harness, EventBody);

fn started(spec: RunSpec) -> Harness {
    let mut h = Harness::new(spec);
    h.start("Find the answer.");
    h
}

fn generating(spec: RunSpec) -> Harness {
    let mut h = started(spec);
    h.proceed();
    h
}

fn with_reply(spec: RunSpec, calls: Vec<ToolCallRequest>) -> Harness {
    let mut h = generating(spec);
    h.reply(ModelReply::tools(calls).with_usage(12, 4));
    h
}

fn replied(h: &Harness, reply: ModelReply) -> EventBody {
    EventBody::ModelReplied {
        effect: h.model_effect(),
        reply,
        chunks: Vec::new(),
    }
}

/// A text reply the output-token limit cut (OpenAI's `finish_reason: "length"`).
fn cut(text: &str) -> ModelReply {
    ModelReply {
        finish_reason: FinishReason {
            raw: Some("length".into()),
            normalized: Some(Finish::Length),
        },
        ..ModelReply::text(text)
    }
}

fn failed(h: &Harness, class: ProviderErrorClass, retryable: bool) -> EventBody {
    let failure = ModelFailure {
        retryable,
        status: Some(if retryable { 429 } else { 401 }),
        retry_after_ms: retryable.then_some(250),
        ..ModelFailure::new(class, "scripted failure")
    };
    EventBody::ModelFailed {
        effect: h.model_effect(),
        failure,
    }
}

fn returned(h: &Harness, call_id: &str) -> EventBody {
    EventBody::ToolReturned {
        effect: h.slot_effect(call_id),
        outcome: ToolOutcome::ok(json!({"answer": 42})),
    }
}

fn input(h: &Harness, call_id: &str, input: HumanInput) -> EventBody {
    EventBody::InputProvided {
        effect: h.slot_effect(call_id),
        input,
    }
}

fn in_doubt(h: &Harness, call_id: &str) -> EventBody {
    EventBody::EffectInDoubt {
        effect: h.slot_effect(call_id),
    }
}

fn city_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": false
    })
}

/// A run whose call `w` (and `l`, when `others`) was found in doubt under
/// `on_in_doubt = "reconcile"`: `w`'s tool is being asked.
fn reconciling(others: bool) -> Harness {
    let calls = if others {
        vec![write("w"), lookup("l")]
    } else {
        vec![write("w")]
    };
    let mut h = with_reply(in_doubt_spec(OnInDoubt::Reconcile), calls);
    h.in_doubt("w");
    h
}

fn reconciled(h: &Harness, answer: Reconciliation) -> EventBody {
    EventBody::Reconciled {
        effect: h.slot_effect("w"),
        answer,
    }
}

fn raise() -> EventBody {
    EventBody::BudgetRaised {
        scope: Scope::Agent("solo".into()),
        key: BudgetKey::Turns,
        limit: 80,
    }
}

fn cancel() -> EventBody {
    EventBody::CancelRequested {
        reason: Some("operator".into()),
    }
}

fn replace(call_id: &str) -> EventBody {
    EventBody::Edited {
        edits: vec![Edit::ReplaceToolResult {
            call_id: call_id.into(),
            result: ToolOutcome::ok(json!("edited result")),
        }],
    }
}

fn set_limit() -> EventBody {
    EventBody::Edited {
        edits: vec![Edit::SetLimit {
            scope: Scope::Run,
            key: BudgetKey::Tokens,
            limit: 10_000,
        }],
    }
}

fn lookup(id: &str) -> ToolCallRequest {
    call(id, "lookup", json!({"q": id}))
}

fn deploy(id: &str) -> ToolCallRequest {
    call(id, "deploy", json!({"target": id}))
}

fn write(id: &str) -> ToolCallRequest {
    call(id, "write", json!({"text": id}))
}

fn agent_limits(limits: Limits, on_exhausted: OnExhausted) -> RunSpec {
    solo_with(|s| {
        s.agents[0].limits = limits;
        s.agents[0].on_exhausted = on_exhausted;
    })
}

fn one_turn(on_exhausted: OnExhausted) -> RunSpec {
    agent_limits(
        Limits {
            max_turns: Some(1),
            ..Limits::default()
        },
        on_exhausted,
    )
}

/// A run resting in `BudgetExhausted` (turns) with the given spec.
fn exhausted(spec: RunSpec) -> Harness {
    let mut h = started(spec);
    h.tool_round(vec![lookup("l1")]);
    h.proceed();
    h
}

fn in_doubt_spec(policy: OnInDoubt) -> RunSpec {
    solo_with(|s| s.agents[0].on_in_doubt = policy)
}

fn handoff(spec: RunSpec, answer: &str) -> Harness {
    let mut h = generating(spec);
    h.reply(ModelReply::text(answer));
    h
}

fn child_finished(h: &Harness, call_id: &str, outcome: ChildOutcome) -> EventBody {
    EventBody::ChildFinished {
        effect: h.slot_effect(call_id),
        report: ChildReport {
            outcome,
            usage: Usage {
                turns: 2,
                input_tokens: 40,
                output_tokens: 12,
                cost_nanos: 3_000,
                ..Usage::default()
            },
            label: Default::default(),
        },
        proof: None,
    }
}

fn cases() -> Vec<(&'static str, Case)> {
    let mut cases: Vec<(&'static str, Case)> = vec![
        ("generating.replied.transfer", || {
            let h = generating(team_with(8, |s| s.semantics = 4));
            let body = replied(
                &h,
                ModelReply::tools(vec![call(
                    "t1",
                    "transfer_to_reviewer",
                    json!({"note": "check the figures"}),
                )]),
            );
            (h, body)
        }),
        ("generating.replied.transfer_carry", || {
            let h = generating(team(8));
            let body = replied(
                &h,
                ModelReply::tools(vec![call(
                    "t1",
                    "transfer_to_reviewer",
                    json!({"note": "check the figures"}),
                )]),
            );
            (h, body)
        }),
        ("handoff.conversation.transfer", || {
            let mut h = generating(team(8));
            h.reply(ModelReply::tools(vec![call(
                "t1",
                "transfer_to_reviewer",
                json!({"note": "check the figures"}),
            )]));
            let messages = h.conversations.all()[&AgentId::from("lead")].clone();
            let body = EventBody::ConversationSupplied {
                agent: "lead".into(),
                messages,
            };
            (h, body)
        }),
        ("generating.replied.transfer_cycle", || {
            let mut h = generating(team_with(1, |s| s.semantics = 4));
            h.reply(ModelReply::tools(vec![call(
                "t1",
                "transfer_to_reviewer",
                json!({}),
            )]));
            h.proceed();
            let body = replied(
                &h,
                ModelReply::tools(vec![call("t2", "transfer_to_lead", json!({}))]),
            );
            (h, body)
        }),
        ("calling_tools.child.wait", || {
            let h = with_reply(
                team(8),
                vec![
                    delegate("d1", "researcher", "Find the figures."),
                    delegate("d2", "coder", "Write the script."),
                ],
            );
            let body = child_finished(
                &h,
                "d1",
                ChildOutcome::Completed {
                    answer: Some("42".into()),
                },
            );
            (h, body)
        }),
        ("calling_tools.child.input", || {
            let h = with_reply(
                team(8),
                vec![
                    delegate("d1", "researcher", "Find the figures."),
                    deploy("p1"),
                ],
            );
            let body = child_finished(
                &h,
                "d1",
                ChildOutcome::BudgetExhausted {
                    budget: BudgetKey::Turns,
                },
            );
            (h, body)
        }),
        ("calling_tools.child.done", || {
            let h = with_reply(team(8), vec![delegate("d1", "coder", "Write the script.")]);
            let body = child_finished(
                &h,
                "d1",
                ChildOutcome::Completed {
                    answer: Some("done: script.py".into()),
                },
            );
            (h, body)
        }),
        ("created.start", || {
            (
                Harness::new(solo()),
                EventBody::Start {
                    goal: "Find the answer.".into(),
                },
            )
        }),
        ("created.transition_cap", || {
            (
                Harness::new(solo_with(|s| s.max_transitions = 1)),
                EventBody::Start {
                    goal: "Find the answer.".into(),
                },
            )
        }),
        ("created.cancel", || (Harness::new(solo()), cancel())),
        ("preparing.proceed.call", || {
            (started(solo()), EventBody::Proceed)
        }),
        ("preparing.proceed.exhausted", || {
            let mut h = started(one_turn(OnExhausted::Handoff));
            h.tool_round(vec![lookup("l1")]);
            (h, EventBody::Proceed)
        }),
        ("preparing.raise", || (started(solo()), raise())),
        ("preparing.edit", || (started(solo()), set_limit())),
        ("preparing.cancel", || (started(solo()), cancel())),
        ("preparing.tools_listed", || {
            let body = EventBody::ToolsListed {
                server: "fs".into(),
                catalog: Digest::of(b"[]"),
                tools: vec!["fs__read_text_file".into(), "fs__write_file".into()],
                added: Vec::new(),
            };
            (started(solo()), body)
        }),
        ("generating.replied.tools", || {
            let h = generating(solo());
            let body = replied(
                &h,
                ModelReply::tools(vec![lookup("c1"), write("c2")]).with_usage(30, 9),
            );
            (h, body)
        }),
        ("generating.replied.input", || {
            let h = generating(solo());
            let body = replied(&h, ModelReply::tools(vec![deploy("d1")]));
            (h, body)
        }),
        ("generating.replied.resolved", || {
            let h = generating(solo());
            let body = replied(&h, ModelReply::tools(vec![call("s1", "secret", json!({}))]));
            (h, body)
        }),
        ("generating.replied.answer", || {
            let h = generating(solo());
            let body = replied(
                &h,
                ModelReply::text("42")
                    .with_usage(20, 2)
                    .with_cost_nanos(1_500),
            );
            (h, body)
        }),
        ("generating.replied.refused", || {
            let h = generating(solo());
            let reply = ModelReply {
                refusal: Some("I can't help with that.".into()),
                ..ModelReply::text("")
            };
            let body = replied(&h, reply.with_usage(20, 6));
            (h, body)
        }),
        ("generating.replied.truncated_retry", || {
            let h = generating(solo());
            let body = replied(&h, cut("The answer is").with_usage(20, 256));
            (h, body)
        }),
        ("generating.replied.truncated_continue", || {
            let h = generating(solo_with(|s| {
                s.agents[0].on_truncated = OnTruncated::Continue
            }));
            let body = replied(&h, cut("The answer is").with_usage(20, 256));
            (h, body)
        }),
        ("generating.replied.truncated", || {
            let h = generating(solo_with(|s| s.agents[0].on_truncated = OnTruncated::Fail));
            let body = replied(&h, cut("The answer is").with_usage(20, 256));
            (h, body)
        }),
        ("generating.replied.output_invalid", || {
            let h = generating(solo_with(|s| {
                s.agents[0].output_schema = Some(city_schema())
            }));
            let body = replied(
                &h,
                ModelReply::text("{\"town\": \"Paris\"}").with_usage(20, 6),
            );
            (h, body)
        }),
        ("generating.replied.output_failed", || {
            let h = generating(solo_with(|s| {
                s.agents[0].output_schema = Some(city_schema());
                s.agents[0].correction_budget = 0;
            }));
            let body = replied(&h, ModelReply::text("Paris").with_usage(20, 2));
            (h, body)
        }),
        ("generating.replied.fail", || {
            let h = generating(solo_with(|s| s.agents[0].correction_budget = 0));
            let body = replied(
                &h,
                ModelReply::tools(vec![call("x1", "no_such_tool", json!({}))]),
            );
            (h, body)
        }),
        ("generating.failed.retry", || {
            let h = generating(solo());
            let body = failed(&h, ProviderErrorClass::ProviderRateLimit, true);
            (h, body)
        }),
        ("generating.failed.fallback", || {
            let h = generating(solo());
            let body = failed(&h, ProviderErrorClass::ProviderAuth, false);
            (h, body)
        }),
        ("generating.failed.exhausted", || {
            let h = generating(agent_limits(
                Limits {
                    max_wall_ms: Some(15),
                    ..Limits::default()
                },
                OnExhausted::Handoff,
            ));
            let body = failed(&h, ProviderErrorClass::ProviderUnavailable, true);
            (h, body)
        }),
        ("generating.failed.fail", || {
            let mut h = generating(solo());
            let fallback = failed(&h, ProviderErrorClass::ProviderAuth, false);
            h.send(fallback);
            let body = failed(&h, ProviderErrorClass::ProviderAuth, false);
            (h, body)
        }),
        ("generating.raise", || (generating(solo()), raise())),
        ("generating.edit", || {
            let h = generating(solo());
            let system = Message::text(Role::System, "You are a careful assistant.");
            let base = head_of(std::slice::from_ref(&system));
            let body = EventBody::Edited {
                edits: vec![Edit::RewriteConversation {
                    agent: "solo".into(),
                    keep: 1,
                    base,
                    messages: vec![Message::text(Role::User, "Find a better answer.")],
                }],
            };
            (h, body)
        }),
        ("generating.edit.exhausted", || {
            let body = EventBody::Edited {
                edits: vec![Edit::SetLimit {
                    scope: Scope::Agent("solo".into()),
                    key: BudgetKey::Turns,
                    limit: 0,
                }],
            };
            (generating(solo()), body)
        }),
        ("generating.cancel", || (generating(solo()), cancel())),
        ("calling_tools.returned.wait", || {
            let h = with_reply(solo(), vec![lookup("a"), lookup("b")]);
            let body = returned(&h, "b");
            (h, body)
        }),
        ("calling_tools.returned.input", || {
            let h = with_reply(solo(), vec![lookup("a"), deploy("d")]);
            let body = returned(&h, "a");
            (h, body)
        }),
        ("calling_tools.returned.done", || {
            let h = with_reply(solo(), vec![lookup("a")]);
            let body = returned(&h, "a");
            (h, body)
        }),
        ("calling_tools.input", || {
            let h = with_reply(solo(), vec![lookup("a"), deploy("d")]);
            let body = input(&h, "d", HumanInput::Approve);
            (h, body)
        }),
        ("calling_tools.in_doubt.retry", || {
            let h = with_reply(in_doubt_spec(OnInDoubt::Retry), vec![write("w")]);
            let body = in_doubt(&h, "w");
            (h, body)
        }),
        ("calling_tools.in_doubt.ask_wait", || {
            let h = with_reply(in_doubt_spec(OnInDoubt::Ask), vec![write("w"), lookup("l")]);
            let body = in_doubt(&h, "w");
            (h, body)
        }),
        ("calling_tools.in_doubt.ask", || {
            let h = with_reply(in_doubt_spec(OnInDoubt::Ask), vec![write("w")]);
            let body = in_doubt(&h, "w");
            (h, body)
        }),
        ("calling_tools.in_doubt.reconcile", || {
            let h = with_reply(in_doubt_spec(OnInDoubt::Reconcile), vec![write("w")]);
            let body = in_doubt(&h, "w");
            (h, body)
        }),
        ("calling_tools.reconciled.retry", || {
            let h = reconciling(false);
            let body = reconciled(&h, Reconciliation::NotPerformed);
            (h, body)
        }),
        ("calling_tools.reconciled.wait", || {
            let h = reconciling(true);
            let body = reconciled(
                &h,
                Reconciliation::Performed {
                    result: Some(json!({"written": true})),
                },
            );
            (h, body)
        }),
        ("calling_tools.reconciled.input", || {
            let h = reconciling(false);
            let body = reconciled(
                &h,
                Reconciliation::Unknown {
                    reason: "the reconcile command of write does not know".into(),
                },
            );
            (h, body)
        }),
        ("calling_tools.reconciled.done", || {
            let h = reconciling(false);
            let body = reconciled(&h, Reconciliation::Performed { result: None });
            (h, body)
        }),
        ("calling_tools.in_doubt.fail", || {
            let h = with_reply(solo(), vec![write("w")]);
            let body = in_doubt(&h, "w");
            (h, body)
        }),
        ("calling_tools.raise", || {
            (with_reply(solo(), vec![lookup("a")]), raise())
        }),
        ("calling_tools.edit", || {
            (
                with_reply(solo(), vec![lookup("a"), lookup("b")]),
                replace("a"),
            )
        }),
        ("calling_tools.edit.input", || {
            (
                with_reply(solo(), vec![lookup("a"), deploy("d")]),
                replace("a"),
            )
        }),
        ("calling_tools.edit.done", || {
            (with_reply(solo(), vec![lookup("a")]), replace("a"))
        }),
        ("calling_tools.cancel", || {
            (with_reply(solo(), vec![lookup("a")]), cancel())
        }),
        ("awaiting_input.input.wait", || {
            let h = with_reply(solo(), vec![deploy("d1"), deploy("d2")]);
            let body = input(
                &h,
                "d1",
                HumanInput::Reject {
                    reason: Some("not today".into()),
                },
            );
            (h, body)
        }),
        ("awaiting_input.input.run", || {
            let h = with_reply(solo(), vec![deploy("d")]);
            let body = input(&h, "d", HumanInput::Approve);
            (h, body)
        }),
        ("awaiting_input.input.done", || {
            let h = with_reply(solo(), vec![deploy("d")]);
            let body = input(&h, "d", HumanInput::Reject { reason: None });
            (h, body)
        }),
        ("awaiting_input.raise", || {
            (with_reply(solo(), vec![deploy("d")]), raise())
        }),
        ("awaiting_input.edit", || {
            (
                with_reply(solo(), vec![deploy("d1"), deploy("d2")]),
                replace("d1"),
            )
        }),
        ("awaiting_input.edit.done", || {
            (with_reply(solo(), vec![deploy("d")]), replace("d"))
        }),
        ("awaiting_input.cancel", || {
            (with_reply(solo(), vec![deploy("d")]), cancel())
        }),
        ("handoff.proceed.next", || {
            (handoff(pair(), "FOUND: 42"), EventBody::Proceed)
        }),
        ("handoff.proceed.complete", || {
            (handoff(solo(), "42"), EventBody::Proceed)
        }),
        ("handoff.proceed.unfinished", || {
            let mut h = exhausted(one_turn(OnExhausted::Handoff));
            h.proceed();
            (h, EventBody::Proceed)
        }),
        ("handoff.proceed.no_route", || {
            let spec = RunSpec::build(Spec {
                agents: vec![
                    AgentSpec::new("a", "primary", "m"),
                    AgentSpec::new("b", "primary", "m"),
                ],
                plan: plan("a", vec![edge("a", "b", when_contains("ready"))], &["b"], 8),
                ..Spec::default()
            })
            .expect("valid spec");
            (handoff(spec, "not yet"), EventBody::Proceed)
        }),
        ("handoff.proceed.cycle", || {
            let mut h = handoff(cycle(1), "pass it on");
            h.proceed();
            h.proceed();
            h.reply(ModelReply::text(r#"{"done": false}"#));
            (h, EventBody::Proceed)
        }),
        ("handoff.raise", || (handoff(solo(), "42"), raise())),
        ("handoff.edit", || (handoff(solo(), "42"), set_limit())),
        ("handoff.cancel", || (handoff(solo(), "42"), cancel())),
        ("budget_exhausted.proceed.handoff", || {
            (
                exhausted(one_turn(OnExhausted::Handoff)),
                EventBody::Proceed,
            )
        }),
        ("budget_exhausted.proceed.fail", || {
            let spec = solo_with(|s| s.limits.max_turns = Some(1));
            (exhausted(spec), EventBody::Proceed)
        }),
        ("budget_exhausted.raise.resume", || {
            (exhausted(one_turn(OnExhausted::Pause)), raise())
        }),
        ("budget_exhausted.raise.still", || {
            let spec = agent_limits(
                Limits {
                    max_turns: Some(1),
                    max_tool_calls: Some(1),
                    ..Limits::default()
                },
                OnExhausted::Pause,
            );
            (exhausted(spec), raise())
        }),
        ("budget_exhausted.edit", || {
            let spec = agent_limits(
                Limits {
                    max_turns: Some(1),
                    max_tool_calls: Some(1),
                    ..Limits::default()
                },
                OnExhausted::Pause,
            );
            let body = EventBody::Edited {
                edits: vec![Edit::SetLimit {
                    scope: Scope::Agent("solo".into()),
                    key: BudgetKey::Turns,
                    limit: 9,
                }],
            };
            (exhausted(spec), body)
        }),
        ("budget_exhausted.edit.resume", || {
            let body = EventBody::Edited {
                edits: vec![Edit::SetLimit {
                    scope: Scope::Agent("solo".into()),
                    key: BudgetKey::Turns,
                    limit: 9,
                }],
            };
            (exhausted(one_turn(OnExhausted::Pause)), body)
        }),
        ("budget_exhausted.cancel", || {
            (exhausted(one_turn(OnExhausted::Pause)), cancel())
        }),
        ("any.transition_cap", || {
            let h = generating(solo_with(|s| s.max_transitions = 3));
            let body = replied(&h, ModelReply::tools(vec![lookup("a")]));
            (h, body)
        }),
    ];
    cases.extend(memory_sessions::cases());
    cases.extend(timers::cases());
    cases.extend(context::cases());
    cases.extend(compensate::cases());
    cases
}

#[derive(serde::Serialize)]
struct EdgeSnapshot<'a> {
    from: StateKind,
    event: &'a Event,
    transition: &'a Transition,
}

#[test]
fn every_edge_has_a_case() {
    let cases = cases();
    let missing: Vec<&str> = table::TABLE
        .iter()
        .map(|e| e.id)
        .filter(|id| !cases.iter().any(|(c, _)| c == id))
        .collect();
    assert!(
        missing.is_empty(),
        "edges without a snapshot case: {missing:?}"
    );
    let unknown: Vec<&str> = cases
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| table::edge_by_id(c).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "cases for edges not in the table: {unknown:?}"
    );
}

#[test]
fn each_edge_snapshot() {
    let settings = insta_settings();
    for (id, case) in cases() {
        let (mut h, body) = case();
        let from = h.state.kind();
        let event = h.event(body);
        let t = step(&h.state, &event, &h.spec).unwrap_or_else(|e| panic!("{id}: refused: {e}"));
        assert_eq!(t.edge, id, "case for {id} took {} instead", t.edge);
        settings.bind(|| {
            insta::assert_yaml_snapshot!(
                format!("edge__{id}"),
                EdgeSnapshot {
                    from,
                    event: &event,
                    transition: &t
                }
            );
        });
    }
}
