//! Delegation and model-chosen handoffs in the pure machine (revision 4): what the model is
//! offered, what a delegate or transfer call does, validation at load, child specs, and
//! proptest invariants (a parent never completes while a child is out; depth never passes
//! the cap; children never get more than the parent has left; their spend is charged).

mod common;

use std::collections::BTreeSet;

use common::*;
use proptest::prelude::*;
use runtape::machine::*;
use serde_json::json;

fn run_child_effects(t: &Transition) -> Vec<&Effect> {
    t.effects
        .iter()
        .filter(|e| matches!(e, Effect::RunChild { .. }))
        .collect()
}

#[test]
fn delegates_and_handoffs_are_offered_as_tools_with_definitions() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    let t = h.proceed().clone();
    let Effect::CallModel { request, .. } = &t.effects[0] else {
        panic!("a model call")
    };
    assert_eq!(
        request.tools,
        [
            "lookup",
            "deploy",
            "delegate_researcher",
            "delegate_coder",
            "transfer_to_reviewer"
        ]
    );
    let spec = team(8);
    let def = spec.offered_tool("delegate_coder").expect("defined");
    assert_eq!(def.schema["required"], json!(["task"]));
    assert!(spec.offered_tool("transfer_to_reviewer").is_some());
    assert!(
        spec.offered_tool("delegate_reviewer").is_none(),
        "nobody delegates to reviewer"
    );
}

#[test]
fn two_delegate_calls_start_two_children_with_carved_budgets() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![
            delegate("d1", "researcher", "Find the figures."),
            delegate("d2", "coder", "Write the script."),
        ]))
        .clone();
    let children = run_child_effects(&t);
    assert_eq!(children.len(), 2, "both run at once");
    // lead has 20 turns, 1 spent: 19 left. Half of it (9) is shared by the two children (4
    // each), and each is capped at 4 anyway.
    for e in children {
        let Effect::RunChild { limits, depth, .. } = e else {
            unreachable!()
        };
        assert_eq!(limits.max_turns, Some(4));
        assert_eq!(*depth, 1);
    }
    assert_eq!(h.state.kind(), StateKind::CallingTools);
}

#[test]
fn a_childs_spend_is_charged_and_a_budget_failure_is_typed_for_the_model() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    h.reply(ModelReply::tools(vec![delegate(
        "d1",
        "researcher",
        "Dig.",
    )]));
    let before = h.state.data().expect("started").usage;
    let spent = Usage {
        turns: 4,
        input_tokens: 100,
        output_tokens: 20,
        cost_nanos: 5_000,
        ..Usage::default()
    };
    let effect = h.slot_effect("d1");
    let t = h
        .send(EventBody::ChildFinished {
            effect,
            report: ChildReport {
                outcome: ChildOutcome::BudgetExhausted {
                    budget: BudgetKey::Turns,
                },
                usage: spent,
            },
        })
        .clone();
    assert_eq!(t.edge, EdgeId::CallingToolsChildDone);
    let run = t.next.data().expect("started");
    assert_eq!(run.usage.turns, before.turns + 4);
    assert_eq!(run.usage.cost_nanos, before.cost_nanos + 5_000);
    assert_eq!(
        run.agents[&AgentId::from("lead")].usage.input_tokens,
        before.input_tokens + 100
    );
    let result = t.appended.last().expect("the result goes back");
    assert!(result.message.is_error);
    assert_eq!(
        result.message.content.as_deref(),
        Some(r#"{"status":"budget_exhausted","budget":"turns"}"#)
    );
}

#[test]
fn a_call_past_max_depth_is_a_tool_error_and_starts_nothing() {
    let spec = {
        let mut s = team(8).spec().clone();
        s.depth = 3;
        RunSpec::build(s).expect("valid")
    };
    let mut h = Harness::new(spec);
    h.start("Ship it.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![delegate("d1", "coder", "Code.")]))
        .clone();
    assert!(run_child_effects(&t).is_empty());
    assert_eq!(t.edge, EdgeId::GeneratingRepliedResolved);
    let result = &t.appended.last().expect("a result").message;
    assert!(result.is_error);
    assert!(
        result
            .content
            .as_deref()
            .unwrap_or("")
            .contains("max_depth is 3")
    );
    let strikes = t.next.data().expect("started").agents[&AgentId::from("lead")].strikes;
    assert_eq!(strikes, 0, "the depth cap is not the model's mistake");
}

#[test]
fn a_transfer_moves_control_with_the_note_and_mixed_transfers_are_refused() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![call(
            "t1",
            "transfer_to_reviewer",
            json!({"note": "figures in section 2"}),
        )]))
        .clone();
    assert_eq!(t.edge, EdgeId::GeneratingRepliedTransfer);
    assert_eq!(
        t.next.data().expect("started").active,
        AgentId::from("reviewer")
    );
    let to_reviewer = t.appended.last().expect("reviewer's first user message");
    assert_eq!(to_reviewer.agent, AgentId::from("reviewer"));
    assert!(
        to_reviewer
            .message
            .content
            .as_deref()
            .unwrap_or("")
            .ends_with("[transfer from lead]\nfigures in section 2")
    );
    // reviewer is an exit by being a handoff target: its answer completes the run.
    h.proceed();
    let t = h.reply(ModelReply::text("LGTM")).clone();
    assert_eq!(t.edge, EdgeId::GeneratingRepliedAnswer);
    let t = h.proceed().clone();
    assert_eq!(t.edge, EdgeId::HandoffProceedComplete);

    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![
            call("t1", "transfer_to_reviewer", json!({})),
            call("l1", "lookup", json!({"q": "x"})),
        ]))
        .clone();
    assert_eq!(
        t.next.data().expect("started").active,
        AgentId::from("lead")
    );
    assert_eq!(
        t.next.data().expect("started").agents[&AgentId::from("lead")].strikes,
        1
    );
}

#[test]
fn names_an_agent_does_not_have_are_unknown_tools() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    // reviewer is not one of lead's delegates; lead is not one of its handoffs.
    let t = h
        .reply(ModelReply::tools(vec![
            delegate("d1", "reviewer", "Review."),
            call("t1", "transfer_to_coder", json!({})),
        ]))
        .clone();
    assert!(run_child_effects(&t).is_empty());
    assert!(
        t.appended
            .iter()
            .filter(|a| a.message.role == Role::Tool)
            .all(|a| a.message.content.as_deref() == Some(TOOL_UNAVAILABLE))
    );
}

fn team_spec() -> Spec {
    team(8).spec().clone()
}

fn refused(spec: Spec) -> String {
    RunSpec::build(spec).expect_err("refused").to_string()
}

#[test]
fn bad_delegation_is_refused_at_load_with_the_field_named() {
    let mut s = team_spec();
    s.agents[0].delegates.push("reseacher".into());
    let e = refused(s);
    assert!(e.starts_with("agents[0].delegates[2]"), "{e}");
    assert!(e.contains("researcher"), "did you mean: {e}");

    let mut s = team_spec();
    s.agents[0].handoffs = vec!["nobody".into()];
    assert!(refused(s).starts_with("agents[0].handoffs[0]"));

    let mut s = team_spec();
    s.agents[1].delegates = vec!["coder".into()];
    s.agents[2].delegates = vec!["lead".into()];
    let e = refused(s);
    assert!(
        e.contains("delegation cycle lead → researcher → coder → lead"),
        "{e}"
    );

    let mut s = team_spec();
    s.agents[0].delegates = vec!["lead".into()];
    assert!(refused(s).contains("cannot delegate to itself"));

    let mut s = team_spec();
    s.semantics = 3;
    assert!(refused(s).contains("need revision 4"));

    let mut s = team_spec();
    s.tools.push(ToolSpec::new("delegate_coder", "clash"));
    assert!(refused(s).contains("rename the tool"));

    let mut s = team_spec();
    s.agents[0].delegation.max_depth = 0;
    assert!(refused(s).starts_with("agents[0].delegation.max_depth"));

    let mut s = team_spec();
    s.agents[0].delegation.budget.share_permille = Some(1001);
    assert!(refused(s).starts_with("agents[0].delegation.budget.share"));
}

#[test]
fn a_child_spec_runs_the_delegate_alone_under_the_carved_caps() {
    let spec = team(8);
    let mut h = Harness::new(spec.clone());
    h.start("Ship it.");
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![delegate("d1", "coder", "Code.")]))
        .clone();
    let effect = run_child_effects(&t)[0].clone();
    let child = spec.child_spec(&effect).expect("builds");
    assert_eq!(child.plan().entry, AgentId::from("coder"));
    // Its own exit first; agents reachable by a transfer may end it too.
    assert_eq!(child.plan().exits[0], AgentId::from("coder"));
    assert_eq!(child.spec().limits.max_turns, Some(4));
    assert_eq!(child.spec().depth, 1);
    assert_eq!(child.spec().delegated_by.as_ref(), Some(effect.id()));
    assert_eq!(child.spec().on_exhausted, RunOnExhausted::Fail);
    // The link survives the stored form, which is what the child's sealed head covers.
    let stored = serde_json::to_string(&child).expect("encodes");
    let back: RunSpec = serde_json::from_str(&stored).expect("decodes");
    assert_eq!(back.spec().delegated_by.as_ref(), Some(effect.id()));
    assert_eq!(
        effect.id().child_run_id().as_str(),
        format!(
            "{}.{}.{}",
            effect.id().run,
            effect.id().seq,
            effect.id().index
        )
    );
    let deep = EffectId {
        run: RunId::new("x".repeat(125)),
        seq: 7,
        index: 1,
    };
    let id = deep.child_run_id();
    assert!(id.as_str().starts_with('d') && id.as_str().len() == 33);
    assert_eq!(id, deep.child_run_id(), "derived, not random");
}

// ---- proptest invariants ----

#[derive(Clone, Debug)]
enum Action {
    Proceed,
    Answer,
    Calls(Vec<u8>),
    ChildEnds(usize, u8),
    ToolReturns(usize),
    Cancel,
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        5 => Just(Action::Proceed),
        2 => Just(Action::Answer),
        5 => prop::collection::vec(0u8..6, 1..4).prop_map(Action::Calls),
        5 => (0usize..4, 0u8..4).prop_map(|(i, k)| Action::ChildEnds(i, k)),
        2 => (0usize..4).prop_map(Action::ToolReturns),
        1 => Just(Action::Cancel),
    ]
}

fn arb_team() -> impl Strategy<Value = RunSpec> {
    (
        0u32..5,
        1u32..4,
        1u32..=1000,
        1u32..4,
        prop::option::of(1u64..30),
    )
        .prop_map(|(depth, max_depth, share, visits, turns)| {
            let mut s = team(visits).spec().clone();
            s.depth = depth;
            s.agents[0].delegation.max_depth = max_depth;
            s.agents[0].delegation.budget.share_permille = Some(share);
            s.agents[0].delegation.budget.limits = Limits::default();
            s.limits.max_turns = turns;
            RunSpec::build(s).expect("valid")
        })
}

fn call_for(k: u8, n: usize) -> ToolCallRequest {
    let id = format!("c{n}");
    match k {
        0 => delegate(&id, "researcher", "Find."),
        1 => delegate(&id, "coder", "Code."),
        2 => call(&id, "delegate_coder", json!({"task": 3})),
        3 => call(&id, "transfer_to_reviewer", json!({})),
        4 => call(&id, "transfer_to_lead", json!({})),
        _ => call(&id, "lookup", json!({"q": "x"})),
    }
}

fn body_for(action: &Action, state: &RunState, run: &RunId) -> EventBody {
    let out: Vec<EffectId> = state
        .outstanding()
        .into_iter()
        .map(|r| r.in_run(run))
        .collect();
    let pick = |i: usize| {
        out.get(i % out.len().max(1)).cloned().unwrap_or(EffectId {
            run: run.clone(),
            seq: 0,
            index: 0,
        })
    };
    match action {
        Action::Proceed => EventBody::Proceed,
        Action::Answer => EventBody::ModelReplied {
            effect: pick(0),
            reply: ModelReply::text("done").with_usage(3, 3),
            chunks: Vec::new(),
        },
        Action::Calls(ks) => EventBody::ModelReplied {
            effect: pick(0),
            reply: ModelReply::tools(
                ks.iter()
                    .enumerate()
                    .map(|(n, k)| call_for(*k, n))
                    .collect(),
            )
            .with_usage(2, 2),
            chunks: Vec::new(),
        },
        Action::ChildEnds(i, k) => EventBody::ChildFinished {
            effect: pick(*i),
            report: ChildReport {
                outcome: match k {
                    0 => ChildOutcome::Completed {
                        answer: Some("ok".into()),
                    },
                    1 => ChildOutcome::BudgetExhausted {
                        budget: BudgetKey::Turns,
                    },
                    2 => ChildOutcome::Cancelled { reason: None },
                    _ => ChildOutcome::Failed {
                        error: Failure::new(ErrorClass::ToolFailed, "x"),
                    },
                },
                usage: Usage {
                    turns: u64::from(*k) + 1,
                    input_tokens: 10,
                    ..Usage::default()
                },
            },
        },
        Action::ToolReturns(i) => EventBody::ToolReturned {
            effect: pick(*i),
            outcome: ToolOutcome::Ok { value: json!(1) },
        },
        Action::Cancel => EventBody::CancelRequested { reason: None },
    }
}

/// The `RunChild` effects `state` waits on, by position.
fn children_out(state: &RunState, started: &BTreeSet<EffectRef>) -> Vec<EffectRef> {
    state
        .outstanding()
        .into_iter()
        .filter(|r| started.contains(r))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn delegation_invariants_hold(spec in arb_team(), actions in prop::collection::vec((arb_action(), 0u64..20), 0..60)) {
        let id = RunId::new("prop");
        let mut at = 1_000u64;
        let start = Event::new(&id, Hlc::from_ms(at), EventBody::Start { goal: "goal".into() });
        let mut state = step(&RunState::Created, &start, &spec).expect("starts").next;
        let mut started: BTreeSet<EffectRef> = BTreeSet::new();
        let depth = spec.spec().depth + 1;
        let cap = spec.spec().agents[0].delegation.max_depth;
        for (action, dt) in &actions {
            at += dt;
            let event = Event::new(&id, Hlc::from_ms(at), body_for(action, &state, &id));
            let Ok(t) = step(&state, &event, &spec) else { continue };
            // What the parent had left when the children were carved out.
            let left = state.data().and_then(|run| {
                let a = &run.agents[&run.active];
                let mut after = run.usage;
                if let EventBody::ModelReplied { reply, .. } = &event.body {
                    after.add_turn(reply.usage.map(|u| (u.input_tokens, u.output_tokens)), reply.cost_nanos);
                }
                let mut agent_after = a.usage;
                if let EventBody::ModelReplied { reply, .. } = &event.body {
                    agent_after.add_turn(reply.usage.map(|u| (u.input_tokens, u.output_tokens)), reply.cost_nanos);
                }
                let mut caps = Vec::new();
                for (limits, used) in [(&run.limits, after), (&a.limits, agent_after)] {
                    if let Some(c) = limits.max_turns { caps.push(c.saturating_sub(used.turns)); }
                }
                caps.into_iter().min()
            });
            let mut carved_turns = 0u64;
            for e in &t.effects {
                if let Effect::RunChild { id: eid, depth: d, limits, .. } = e {
                    // Depth is the run's + 1 and never past the delegating agent's cap.
                    prop_assert_eq!(*d, depth);
                    prop_assert!(*d <= cap, "child at depth {} past cap {}", d, cap);
                    started.insert(EffectRef { seq: eid.seq, index: eid.index });
                    carved_turns += limits.max_turns.unwrap_or(0);
                    if left.is_some() { prop_assert!(limits.max_turns.is_some()); }
                }
            }
            // Children together never get more turns than the parent had left.
            if let Some(left) = left { prop_assert!(carved_turns <= left, "carved {} of {}", carved_turns, left); }
            // A parent never completes while a child is outstanding; only a cancel (or the
            // transition cap) ends it with children out, and the executor cascades that.
            if t.next.is_done() && !children_out(&state, &started).is_empty() {
                prop_assert!(
                    matches!(t.edge, EdgeId::CallingToolsCancel | EdgeId::AnyTransitionCap),
                    "ended by {} with children out", t.edge
                );
            }
            if let Some(Outcome::Completed { .. }) = t.next.outcome() {
                prop_assert!(children_out(&state, &started).is_empty());
            }
            // A child's spend is charged to the run, exactly.
            if let EventBody::ChildFinished { report, .. } = &event.body {
                let before = state.data().expect("started").usage.turns;
                prop_assert_eq!(t.next.data().expect("started").usage.turns, before + report.usage.turns);
            }
            state = t.next;
        }
    }
}
