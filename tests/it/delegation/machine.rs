//! Delegation and model-chosen handoffs in the pure machine (revisions 4 and 5): what the model
//! is offered, what a delegate or transfer call does (revision 5: the sender's conversation is
//! handed over), validation at load, child specs, and proptest invariants (a parent never
//! completes while a child is out; depth never passes the cap; children never get more than
//! the parent has left; their spend is charged; a handover never drops, duplicates or alters a
//! message of the sender's conversation).

use crate::support;

use std::collections::BTreeSet;

use proptest::prelude::*;
use runtape::machine::*;
use serde_json::json;
use support::machine::*;

fn run_child_effects(t: &Transition) -> Vec<&Effect> {
    t.effects
        .iter()
        .filter(|e| matches!(e, Effect::RunChild { .. }))
        .collect()
}

/// The model's reply: hand over to the reviewer with a note (`transfer_to_reviewer`).
fn hand_to_reviewer(h: &mut Harness) -> Transition {
    h.called(
        "t1",
        "transfer_to_reviewer",
        json!({"note": "figures in section 2"}),
    )
}

/// [`team`] (8 turns) started with "Ship it." and past its first step: the lead's model is
/// being asked.
fn lead_asked_to_ship() -> Harness {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.proceed();
    h
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
    let mut h = lead_asked_to_ship();
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
    let mut h = lead_asked_to_ship();
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
                label: Default::default(),
            },
            proof: None,
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
fn revision_4_transfers_move_control_with_the_goal_and_the_note_and_mixed_transfers_are_refused() {
    let mut h = Harness::new(team_with(8, |s| s.semantics = 4));
    h.start("Ship it.");
    h.proceed();
    let t = hand_to_reviewer(&mut h);
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

    let mut h = Harness::new(team_with(8, |s| s.semantics = 4));
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

/// The messages `lead` has at this point, as the machine's companion keeps them.
fn conversation_of(h: &Harness, agent: &str) -> Vec<Message> {
    h.conversations
        .all()
        .get(&AgentId::from(agent))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_transfer_hands_the_senders_conversation_to_the_receiver_after_its_own_system_prompt() {
    let mut h = Harness::new(team(8));
    h.start("Ship it.");
    h.tool_round(vec![call("l1", "lookup", json!({"q": "x"}))]);
    h.proceed();
    let t = hand_to_reviewer(&mut h);
    assert_eq!(t.edge, EdgeId::GeneratingRepliedTransferCarry);
    assert_eq!(t.next.kind(), StateKind::Handoff);
    assert!(!t.next.wants_proceed(), "it waits for the conversation");
    let sent = conversation_of(&h, "lead");
    assert_eq!(
        sent.last().and_then(|m| m.content.clone()).as_deref(),
        Some("transferred to reviewer"),
        "the call is answered in the sender's conversation first"
    );
    let (who, wanted) = t.next.wants_conversation().expect("waits for lead's");
    assert_eq!((who.as_str(), wanted.len as usize), ("lead", sent.len()));
    assert!(matches!(
        h.try_send(EventBody::Proceed),
        Err(MachineError::InvalidTransition { .. })
    ));

    // Anything but the sender's exact messages is refused and changes nothing.
    let before = h.state.clone();
    let mut dropped = sent.clone();
    dropped.remove(2);
    let mut doubled = sent.clone();
    doubled.insert(2, sent[2].clone());
    let mut altered = sent.clone();
    altered[1].content = Some("Ship something else.".into());
    for (what, messages, agent) in [
        ("dropped", dropped, "lead"),
        ("doubled", doubled, "lead"),
        ("altered", altered, "lead"),
        ("another's", sent.clone(), "reviewer"),
    ] {
        let e = h.try_send(EventBody::ConversationSupplied {
            agent: agent.into(),
            messages,
        });
        assert!(
            matches!(e, Err(MachineError::ConversationMismatch { .. })),
            "{what}: {e:?}"
        );
        assert_eq!(h.state, before, "{what}");
    }

    let t = h
        .send(EventBody::ConversationSupplied {
            agent: "lead".into(),
            messages: sent.clone(),
        })
        .clone();
    assert_eq!(t.edge, EdgeId::HandoffConversationTransfer);
    assert_eq!(
        t.next.data().expect("started").active,
        AgentId::from("reviewer")
    );
    let got = conversation_of(&h, "reviewer");
    let mut expected = vec![Message::text(Role::System, "You are reviewer.")];
    expected.extend(sent.iter().filter(|m| m.role != Role::System).cloned());
    expected.push(Message::text(
        Role::User,
        "[transfer from lead]\nfigures in section 2",
    ));
    assert_eq!(got, expected);
    assert!(
        got.iter()
            .any(|m| m.tool_calls.iter().any(|c| c.name == "lookup")),
        "the sender's tool calls come along"
    );
    // The next request sends exactly that conversation.
    let t = h.proceed().clone();
    let Effect::CallModel { request, .. } = &t.effects[0] else {
        panic!("a model call")
    };
    assert_eq!(request.conversation.len as usize, expected.len());
    assert_eq!(request.conversation.head, head_of(&expected));

    // Handed back, lead continues reviewer's conversation, which holds its own turns.
    h.reply(ModelReply::tools(vec![call(
        "t2",
        "transfer_to_lead",
        json!({}),
    )]));
    let reviewer = conversation_of(&h, "reviewer");
    h.send(EventBody::ConversationSupplied {
        agent: "reviewer".into(),
        messages: reviewer.clone(),
    });
    let lead = conversation_of(&h, "lead");
    assert_eq!(lead[0], Message::text(Role::System, "You lead."));
    assert_eq!(&lead[1..lead.len() - 1], &reviewer[1..]);
    assert_eq!(
        lead.last().and_then(|m| m.content.clone()).as_deref(),
        Some("[transfer from reviewer]")
    );
    assert_eq!(
        h.state.data().expect("started").agents[&AgentId::from("lead")].visits,
        2
    );
}

#[test]
fn names_an_agent_does_not_have_are_unknown_tools() {
    let mut h = lead_asked_to_ship();
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
    /// Supply the conversation a pending transfer waits for: 0 as it is, 1 with a message
    /// dropped, 2 with one doubled, 3 with one altered.
    Supply(u8),
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        5 => Just(Action::Proceed),
        2 => Just(Action::Answer),
        5 => prop::collection::vec(0u8..6, 1..4).prop_map(Action::Calls),
        5 => (0usize..4, 0u8..4).prop_map(|(i, k)| Action::ChildEnds(i, k)),
        2 => (0usize..4).prop_map(Action::ToolReturns),
        1 => Just(Action::Cancel),
        3 => prop_oneof![Just(3u8), Just(4u8)].prop_map(|k| Action::Calls(vec![k])),
        4 => (0u8..4).prop_map(Action::Supply),
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

fn body_for(
    action: &Action,
    state: &RunState,
    run: &RunId,
    conversations: &Conversations,
) -> EventBody {
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
                label: Default::default(),
            },
            proof: None,
        },
        Action::ToolReturns(i) => EventBody::ToolReturned {
            effect: pick(*i),
            outcome: ToolOutcome::ok(json!(1)),
        },
        Action::Cancel => EventBody::CancelRequested { reason: None },
        Action::Supply(k) => {
            let (agent, conv) = state
                .wants_conversation()
                .map(|(a, c)| (a.clone(), c))
                .unwrap_or_else(|| (AgentId::from("lead"), ConversationRef::default()));
            let mut messages = conversations
                .messages(&agent, &conv)
                .map(<[Message]>::to_vec)
                .unwrap_or_default();
            if !messages.is_empty() {
                let i = messages.len() / 2;
                match k {
                    1 => {
                        messages.remove(i);
                    }
                    2 => messages.insert(i, messages[i].clone()),
                    3 => messages[i].content = Some("not what was said".into()),
                    _ => {}
                }
            }
            EventBody::ConversationSupplied { agent, messages }
        }
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
        let first = step(&RunState::Created, &start, &spec).expect("starts");
        let mut conversations = Conversations::new();
        for a in &first.appended {
            conversations.apply(a).expect("contiguous");
        }
        let mut state = first.next;
        let mut started: BTreeSet<EffectRef> = BTreeSet::new();
        let depth = spec.spec().depth + 1;
        let cap = spec.spec().agents[0].delegation.max_depth;
        for (action, dt) in &actions {
            at += dt;
            let event = Event::new(&id, Hlc::from_ms(at), body_for(action, &state, &id, &conversations));
            let Ok(t) = step(&state, &event, &spec) else { continue };
            for a in &t.appended {
                conversations.apply(a).expect("contiguous");
            }
            // A handover gives the receiver every message of the sender's conversation but its
            // system prompt, once each and in order, between its own system prompt and the
            // note: a supplied list that is not the sender's is refused above.
            if let EventBody::ConversationSupplied { agent, messages } = &event.body {
                prop_assert!(matches!(action, Action::Supply(0)), "a corrupted list was accepted");
                prop_assert_eq!(t.edge, EdgeId::HandoffConversationTransfer);
                let run = t.next.data().expect("started");
                let got = conversations.messages(&run.active, &run.agents[&run.active].conversation).expect("known").to_vec();
                let own: Vec<Message> = got.iter().filter(|m| m.role == Role::System).cloned().collect();
                prop_assert!(own.len() <= 1);
                let carried: Vec<Message> = messages.iter().filter(|m| m.role != Role::System).cloned().collect();
                prop_assert_eq!(&got[own.len()..got.len() - 1], carried.as_slice());
                let note = got.last().and_then(|m| m.content.clone()).unwrap_or_default();
                let tag = format!("[transfer from {agent}]");
                prop_assert!(note.starts_with(&tag));
            }
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
