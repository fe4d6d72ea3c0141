//! Whole runs driven through the pure machine, each pinned by a snapshot of every transition
//! plus assertions on the behaviour the scenario exists for.

use crate::support;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

fn snap(name: &str, h: &Harness) {
    insta_settings()
        .bind(|| insta::assert_yaml_snapshot!(format!("scenario__{name}"), h.scenario()));
}

fn lookup(id: &str) -> ToolCallRequest {
    call(id, "lookup", json!({"q": id}))
}

fn failed_with(h: &Harness) -> Failure {
    match h.state.outcome() {
        Some(Outcome::Failed { error }) => error.clone(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn tool_messages(h: &Harness, agent: &str) -> Vec<Message> {
    h.conversations.all()[&AgentId::from(agent)]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .cloned()
        .collect()
}

#[test]
fn single_agent_tool_loop() {
    let mut h = Harness::new(solo());
    h.start("What is 6 × 7?");
    for i in 0..3 {
        h.tool_round(vec![lookup(&format!("q{i}"))]);
    }
    h.proceed();
    h.reply(ModelReply::text("42").with_usage(40, 2));
    h.proceed();
    assert_eq!(h.state.outcome(), Some(&answered("42")));
    let run = h.state.data().expect("started");
    assert_eq!(run.usage.turns, 4);
    assert_eq!(run.usage.tool_calls, 3);
    assert_eq!(tool_messages(&h, "solo").len(), 3);
    snap("single_agent_tool_loop", &h);
}

/// Results arriving in any order give the same state once the batch completes: tool results
/// go into the conversation in call order.
#[test]
fn parallel_tool_calls_out_of_order() {
    let orders: [[&str; 3]; 3] = [["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"]];
    let mut hashes = Vec::new();
    for order in orders {
        let mut h = Harness::new(solo());
        h.start("Look up three things.");
        h.proceed();
        h.reply(ModelReply::tools(vec![
            lookup("a"),
            lookup("b"),
            call("c", "write", json!({"text": "c"})),
        ]));
        for id in order {
            h.tool_ok(id, json!(format!("result {id}")));
        }
        assert_eq!(h.state.kind(), StateKind::Preparing);
        let ids: Vec<_> = tool_messages(&h, "solo")
            .iter()
            .map(|m| m.tool_call_id.clone().unwrap_or_default())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        hashes.push(h.state.state_hash(h.spec.history_hash()));
        if order == ["c", "a", "b"] {
            h.proceed();
            h.reply(ModelReply::text("done"));
            h.proceed();
            snap("parallel_tool_calls_out_of_order", &h);
        }
    }
    assert!(
        hashes.windows(2).all(|w| w[0] == w[1]),
        "state after the batch depends on arrival order"
    );
}

#[test]
fn handoff_with_conditional_edges() {
    let mut h = Harness::new(pair());
    h.start("Research and write.");
    h.tool_round(vec![lookup("r1")]);
    h.proceed();
    h.reply(ModelReply::text("FOUND: the answer is 42"));
    h.proceed();
    assert_eq!(
        h.state.data().map(|d| d.active.clone()),
        Some("writer".into())
    );
    h.proceed();
    h.reply(ModelReply::text("Report: 42."));
    h.proceed();
    assert_eq!(h.state.outcome(), Some(&answered("Report: 42.")));
    let writer = &h.conversations.all()[&AgentId::from("writer")];
    assert!(
        writer[1]
            .content
            .as_deref()
            .is_some_and(|c| c.contains("FOUND: the answer is 42"))
    );
    snap("handoff_with_conditional_edges", &h);

    // Without "FOUND" the second edge (always) fires.
    let mut h = Harness::new(pair());
    h.start("Research and write.");
    h.proceed();
    h.reply(ModelReply::text("nothing turned up"));
    h.proceed();
    assert_eq!(
        h.state.data().map(|d| d.active.clone()),
        Some("apology".into())
    );
}

/// a → b → d and a → c → d: d is reached once, so max_agent_visits = 1 is never exceeded.
#[test]
fn diamond_plan_is_not_a_cycle() {
    for (answer, via) in [("left please", "b"), ("right please", "c")] {
        let mut h = Harness::new(diamond());
        h.start("Go through the diamond.");
        for agent in ["a", via, "d"] {
            assert_eq!(
                h.state.data().map(|d| d.active.as_str().to_owned()),
                Some(agent.to_owned())
            );
            h.proceed();
            h.reply(ModelReply::text(if agent == "a" { answer } else { "ok" }));
            h.proceed();
        }
        assert_eq!(h.state.outcome(), Some(&answered("ok")));
        let visits: Vec<u32> = h
            .state
            .data()
            .expect("started")
            .agents
            .values()
            .map(|a| a.visits)
            .collect();
        assert!(visits.iter().all(|&v| v <= 1));
        if via == "b" {
            snap("diamond_plan", &h);
        }
    }
}

#[test]
fn cycle_cap_ends_the_run() {
    let mut h = Harness::new(cycle(3));
    h.start("Bounce.");
    while !h.state.is_done() {
        if h.state.wants_proceed() {
            h.proceed();
        } else {
            h.reply(ModelReply::text(r#"{"done": false}"#));
        }
    }
    assert_eq!(failed_with(&h).class, ErrorClass::HandoffCycle);
    assert!(
        h.history
            .iter()
            .any(|(_, t)| noted(t, |n| matches!(n, Note::HandoffCycle { .. })))
    );
    snap("cycle_cap", &h);
}

/// Each budget kind, on the agent, with the default `handoff` policy: the exit agent runs out
/// without answering, so the run fails with that budget's limit class and no model call is
/// made once the cap is reached.
#[test]
fn each_budget_kind_exhausted() {
    let cases = [
        ("turns", ErrorClass::TurnLimit),
        ("tool_calls", ErrorClass::ToolCallLimit),
        ("tokens", ErrorClass::TokenLimit),
        ("cost", ErrorClass::CostLimit),
        ("wall_time", ErrorClass::WallTimeLimit),
    ];
    for (name, class) in cases {
        let mut limits = Limits::default();
        match name {
            "turns" => limits.max_turns = Some(2),
            "tool_calls" => limits.max_tool_calls = Some(2),
            "tokens" => limits.max_tokens = Some(20),
            "cost" => limits.max_cost_nanos = Some(2_000),
            "wall_time" => limits.max_wall_ms = Some(100),
            other => unreachable!("no budget kind {other}"),
        }
        let mut h = Harness::new(solo_with(|s| s.agents[0].limits = limits));
        h.start("Spend.");
        let mut rounds = 0;
        while !h.state.is_done() {
            match h.state.kind() {
                StateKind::Generating => {
                    rounds += 1;
                    h.reply(
                        ModelReply::tools(vec![lookup(&format!("x{rounds}"))])
                            .with_usage(8, 4)
                            .with_cost_nanos(1_000),
                    );
                }
                StateKind::CallingTools => {
                    let id = format!("x{rounds}");
                    h.tool_ok(&id, json!("ok"));
                }
                _ => {
                    h.proceed();
                }
            }
            assert!(rounds < 100, "{name}: runaway");
        }
        assert_eq!(failed_with(&h).class, class, "{name}");
        let exhausted_at = h
            .history
            .iter()
            .position(|(_, t)| t.next.kind() == StateKind::BudgetExhausted)
            .unwrap_or_else(|| panic!("{name}: never exhausted"));
        assert!(
            h.history[exhausted_at..].iter().all(|(_, t)| t
                .effects
                .iter()
                .all(|e| !matches!(e, Effect::CallModel { .. }))),
            "{name}: a model call after exhaustion"
        );
        snap(&format!("budget_{name}"), &h);
    }
}

#[test]
fn run_budget_exhaustion_fails_the_run() {
    let mut h = Harness::new(solo_with(|s| s.limits.max_turns = Some(1)));
    h.start("Spend.");
    h.tool_round(vec![lookup("x")]);
    h.proceed();
    assert!(matches!(
        &h.state,
        RunState::BudgetExhausted {
            scope: Scope::Run,
            key: BudgetKey::Turns,
            resting: false,
            ..
        }
    ));
    h.proceed();
    assert_eq!(failed_with(&h).class, ErrorClass::TurnLimit);
}

#[test]
fn retry_then_fallback_then_failure() {
    let mut h = Harness::new(solo());
    h.start("Try hard.");
    h.proceed();
    let rate_limited = ModelFailure {
        retry_after_ms: Some(2_000),
        status: Some(429),
        ..ModelFailure::new(ProviderErrorClass::ProviderRateLimit, "slow down")
    };
    h.fail(rate_limited.clone());
    let RunState::Generating { call, .. } = &h.state else {
        panic!("not retrying")
    };
    assert_eq!((call.route, call.attempt), (0, 2));
    let Effect::CallModel { not_before, .. } = &h.history.last().expect("one").1.effects[0] else {
        panic!()
    };
    assert_eq!(
        not_before.map(|t| t.ms()),
        Some(h.clock + 2_000),
        "retry_after wins over a shorter backoff"
    );
    h.fail(rate_limited);
    let RunState::Generating { call, .. } = &h.state else {
        panic!("no fallback")
    };
    assert_eq!((call.route, call.attempt), (1, 1));
    h.fail(ModelFailure {
        status: Some(503),
        ..ModelFailure::new(ProviderErrorClass::ProviderUnavailable, "down")
    });
    assert_eq!(failed_with(&h).class, ErrorClass::ProviderUnavailable);
    snap("retry_fallback_failure", &h);
}

/// Builds a run resting in the given state.
fn in_state(kind: StateKind) -> Harness {
    let spec = match kind {
        StateKind::BudgetExhausted => solo_with(|s| {
            s.agents[0].limits.max_turns = Some(1);
            s.agents[0].on_exhausted = OnExhausted::Pause;
        }),
        StateKind::Retrieving => with_retriever(),
        StateKind::Summarizing => {
            let spec = Spec {
                agents: vec![solo_agent()],
                tools: tools(),
                ..Spec::default()
            };
            in_session(spec, SessionWindow::Messages(1), None)
        }
        _ => solo(),
    };
    let mut h = Harness::new(spec);
    if kind == StateKind::Created {
        return h;
    }
    if kind == StateKind::Summarizing {
        h.session_start("Be cancelled.", seed(vec![("solo", chat("be careful", 2))]));
        assert_eq!(h.state.kind(), kind);
        return h;
    }
    h.start("Be cancelled.");
    match kind {
        StateKind::Retrieving => {
            h.proceed();
        }
        StateKind::Generating => {
            h.proceed();
        }
        StateKind::CallingTools => {
            h.proceed();
            h.reply(ModelReply::tools(vec![lookup("a")]));
        }
        StateKind::AwaitingInput => {
            h.proceed();
            h.reply(ModelReply::tools(vec![call("d", "deploy", json!({}))]));
        }
        StateKind::Handoff => {
            h.proceed();
            h.reply(ModelReply::text("answer"));
        }
        StateKind::BudgetExhausted => {
            h.tool_round(vec![lookup("a")]);
            h.proceed();
        }
        _ => {}
    }
    assert_eq!(h.state.kind(), kind);
    h
}

#[test]
fn cancel_in_each_non_terminal_state() {
    let mut all = Vec::new();
    // `Publishing` (revision 5) holds a cancel until its publish answers: see
    // `memory_machine.rs`. `Compensating` goes on with its saga: see
    // `edges/compensate.rs` (`compensating.cancel`).
    for kind in StateKind::ALL.into_iter().filter(|k| {
        !matches!(
            k,
            StateKind::Done | StateKind::Publishing | StateKind::Compensating
        )
    }) {
        let mut h = in_state(kind);
        let t = h.cancel().clone();
        assert!(
            matches!(t.next.outcome(), Some(Outcome::Cancelled { .. })),
            "{kind}"
        );
        assert!(t.effects.is_empty());
        all.push((kind, t.edge, t.next.outcome().cloned()));
        // Done absorbs everything afterwards, unchanged.
        let before = h.state.clone();
        for body in [
            EventBody::Proceed,
            EventBody::CancelRequested { reason: None },
            EventBody::Start {
                goal: "again".into(),
            },
        ] {
            let err = h.try_send(body).expect_err("Done refuses events");
            assert!(matches!(
                err,
                MachineError::InvalidTransition {
                    state: StateKind::Done,
                    ..
                }
            ));
        }
        assert_eq!(h.state, before);
    }
    insta_settings().bind(|| insta::assert_yaml_snapshot!("scenario__cancel_in_each_state", all));
}

#[test]
fn call_outside_the_grant() {
    let mut h = Harness::new(solo());
    h.start("Try the secret tool.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![
            call("s1", "secret", json!({})),
            lookup("l1"),
        ]))
        .clone();
    assert!(t.notes.contains(&Note::ToolRejected {
        agent: "solo".into(),
        call_id: "s1".into(),
        tool: "secret".into()
    }));
    h.tool_ok("l1", json!("fine"));
    let results = tool_messages(&h, "solo");
    assert_eq!(results[0].content.as_deref(), Some(TOOL_UNAVAILABLE));
    assert!(results[0].is_error);
    assert_eq!(
        results[0].name, None,
        "the refused tool's name is not echoed back"
    );
    // An unknown tool gets the very same words: the model cannot probe for tool names.
    h.proceed();
    h.reply(ModelReply::tools(vec![call("u1", "rm_rf", json!({}))]));
    assert_eq!(
        tool_messages(&h, "solo")[2].content.as_deref(),
        Some(TOOL_UNAVAILABLE)
    );
    h.proceed();
    h.reply(ModelReply::text("ok, without it"));
    h.proceed();
    assert!(matches!(h.state.outcome(), Some(Outcome::Completed { .. })));
    snap("call_outside_the_grant", &h);
}

#[test]
fn correction_budget_exhausted() {
    let mut h = Harness::new(solo());
    h.start("Keep getting it wrong.");
    let bad = [
        call("b1", "lookup", json!({"q": 5})),
        call("b2", "nope", json!({})),
        ToolCallRequest {
            parse_error: Some("EOF while parsing".into()),
            arguments_raw: Some("{\"q\":".into()),
            ..call("b3", "lookup", json!(null))
        },
    ];
    for c in bad {
        h.proceed();
        h.reply(ModelReply::tools(vec![c]));
        assert_eq!(
            h.state.kind(),
            StateKind::Preparing,
            "fed back as an error result"
        );
    }
    let msgs = tool_messages(&h, "solo");
    assert!(
        msgs[0]
            .content
            .as_deref()
            .is_some_and(|c| c.starts_with("invalid arguments for lookup")),
        "{msgs:?}"
    );
    assert!(
        msgs[2]
            .content
            .as_deref()
            .is_some_and(|c| c.contains("not valid JSON"))
    );
    // The fourth bad call in a row spends the budget (3).
    h.proceed();
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    h.reply(ModelReply::tools(vec![call(
        "b4",
        "lookup",
        json!({"q": deep}),
    )]));
    let error = failed_with(&h);
    assert_eq!(error.class, ErrorClass::ToolFailed);
    snap("correction_budget_exhausted", &h);

    // A good reply in between resets the count.
    let mut h = Harness::new(solo());
    h.start("Learn.");
    for round in 0..8 {
        h.proceed();
        if round % 3 == 2 {
            h.reply(ModelReply::tools(vec![lookup("good")]));
            h.tool_ok("good", json!("ok"));
        } else {
            h.reply(ModelReply::tools(vec![call("bad", "nope", json!({}))]));
        }
    }
    assert_eq!(h.state.kind(), StateKind::Preparing);
}

/// tool_denied outranks tool_failed when both kinds of bad call spend the budget together.
#[test]
fn denied_outranks_failed() {
    let mut h = Harness::new(solo_with(|s| s.agents[0].correction_budget = 1));
    h.start("Misbehave.");
    h.proceed();
    h.reply(ModelReply::tools(vec![
        call("a", "nope", json!({})),
        call("b", "secret", json!({})),
    ]));
    assert_eq!(failed_with(&h).class, ErrorClass::ToolDenied);
    assert_eq!(
        ErrorClass::ToolFailed.most_severe(ErrorClass::ToolDenied),
        ErrorClass::ToolDenied
    );
    assert_eq!(
        ErrorClass::ProviderAuth.most_severe(ErrorClass::ToolFailed),
        ErrorClass::ToolFailed
    );
    assert_eq!(
        ErrorClass::TurnLimit.most_severe(ErrorClass::Unknown),
        ErrorClass::Unknown
    );
}

#[test]
fn approval_granted_and_rejected() {
    for (name, input) in [
        ("granted", HumanInput::Approve),
        (
            "rejected",
            HumanInput::Reject {
                reason: Some("not on a Friday".into()),
            },
        ),
    ] {
        let mut h = Harness::new(solo());
        h.start("Deploy it.");
        h.proceed();
        let t = h.called("d", "deploy", json!({"env": "prod"}));
        assert!(matches!(
            &t.effects[..],
            [Effect::RequestInput {
                request: InputRequest {
                    kind: InputKind::Approval,
                    ..
                },
                ..
            }]
        ));
        assert_eq!(h.state.kind(), StateKind::AwaitingInput);
        let approved = input == HumanInput::Approve;
        h.input("d", input);
        if approved {
            assert_eq!(h.state.kind(), StateKind::CallingTools);
            h.tool_ok("d", json!("deployed"));
        }
        let result = tool_messages(&h, "solo").remove(0);
        assert_eq!(result.is_error, !approved);
        if !approved {
            assert!(
                result
                    .content
                    .as_deref()
                    .is_some_and(|c| c.contains("declined") && c.contains("not on a Friday"))
            );
        }
        h.proceed();
        h.reply(ModelReply::text("done"));
        h.proceed();
        snap(&format!("approval_{name}"), &h);
    }
}

/// Budgets are state: a paused run resumes with what was left, and a raise lets it go on.
#[test]
fn budget_raised_after_a_pause() {
    let mut h = Harness::new(solo_with(|s| {
        s.agents[0].limits.max_turns = Some(2);
        s.agents[0].on_exhausted = OnExhausted::Pause;
    }));
    h.start("Work.");
    h.tool_round(vec![lookup("a")]);
    h.tool_round(vec![lookup("b")]);
    h.proceed();
    assert!(matches!(
        h.state,
        RunState::BudgetExhausted { resting: true, .. }
    ));
    assert!(!h.state.wants_proceed());
    assert!(
        h.try_send(EventBody::Proceed).is_err(),
        "a resting run does not proceed"
    );
    let not_a_raise = h.try_send(EventBody::BudgetRaised {
        scope: Scope::Agent("solo".into()),
        key: BudgetKey::Turns,
        limit: 2,
    });
    assert!(matches!(not_a_raise, Err(MachineError::NotARaise { .. })));
    h.raise(Scope::Agent("solo".into()), BudgetKey::Turns, 3);
    assert_eq!(h.state.kind(), StateKind::Preparing);
    let t = h.proceed().clone();
    let Effect::CallModel { request, .. } = &t.effects[0] else {
        panic!()
    };
    assert_eq!(
        request.remaining.turns,
        Some(1),
        "one turn left of the raised three"
    );
    h.reply(ModelReply::text("finished"));
    h.proceed();
    assert!(matches!(h.state.outcome(), Some(Outcome::Completed { .. })));
    snap("budget_raised_after_pause", &h);
}

#[test]
fn interactive_tool_and_in_doubt_ask() {
    let mut h = Harness::new(solo_with(|s| s.agents[0].on_in_doubt = OnInDoubt::Ask));
    h.start("Ask and write.");
    h.proceed();
    h.reply(ModelReply::tools(vec![
        call("q", "ask_human", json!({"question": "Which env?"})),
        call("w", "write", json!({"text": "x"})),
    ]));
    assert!(matches!(
        h.try_send(EventBody::InputProvided {
            effect: h.slot_effect("q"),
            input: HumanInput::Approve
        }),
        Err(MachineError::InputMismatch { .. })
    ));
    h.input(
        "q",
        HumanInput::Answer {
            text: "staging".into(),
            files: Vec::new(),
        },
    );
    h.in_doubt("w");
    assert_eq!(h.state.kind(), StateKind::AwaitingInput);
    let t = h.input("w", HumanInput::Approve).clone();
    let Effect::CallTool {
        idempotency_key, ..
    } = &t.effects[0]
    else {
        panic!()
    };
    let first_key = match &h.history[2].1.effects[1] {
        Effect::CallTool {
            idempotency_key, ..
        } => idempotency_key.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(
        idempotency_key, &first_key,
        "a retried call keeps its idempotency key"
    );
    h.tool_ok("w", json!("written"));
    let results = tool_messages(&h, "solo");
    assert_eq!(results[0].content.as_deref(), Some("staging"));
    snap("interactive_and_in_doubt", &h);
}

#[test]
fn stale_and_foreign_effects_are_refused_without_change() {
    let mut h = Harness::new(solo());
    h.start("x");
    h.proceed();
    let stale = EffectId {
        run: h.run.clone(),
        seq: 1,
        index: 0,
    };
    let before = h.state.clone();
    let err = h.try_send(EventBody::ModelReplied {
        effect: stale,
        reply: ModelReply::text("late"),
        chunks: Vec::new(),
    });
    assert!(matches!(err, Err(MachineError::UnknownEffect { .. })));
    assert_eq!(h.state, before);
    let err = h.try_send(EventBody::Proceed);
    assert!(matches!(
        err,
        Err(MachineError::InvalidTransition {
            state: StateKind::Generating,
            event: EventKind::Proceed
        })
    ));
}
