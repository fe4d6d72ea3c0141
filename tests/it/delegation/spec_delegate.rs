//! A delegate given as a whole spec (`Spec::spec_delegates`, revision 4) in the pure machine:
//! it is offered as `delegate_<name>`, a call starts a `RunChild`, the child's spec is the
//! embedded one (its own agents, tools and plan) under the carved caps, it survives the stored
//! form, and bad spec delegates are refused at load with the field named.

use crate::support;

use runtape::machine::*;
use support::machine::*;

/// A two-agent review spec: `critic` hands its verdict to `editor`, which ends the run.
fn review_spec() -> Spec {
    Spec {
        agents: vec![
            AgentSpec {
                tools: Some(vec!["grep".into()]),
                ..AgentSpec::new("critic", "reviewer-model", "m-review")
            },
            AgentSpec::new("editor", "reviewer-model", "m-review"),
        ],
        tools: vec![ToolSpec::new("grep", "searches the draft")],
        plan: plan(
            "critic",
            vec![edge("critic", "editor", When::Always)],
            &["editor"],
            5,
        ),
        limits: Limits {
            max_turns: Some(2),
            max_tokens: Some(900),
            ..Limits::default()
        },
        ..Spec::default()
    }
}

/// `team` with `review` (the spec above) added as a spec delegate of `lead`.
fn team_with_review() -> Spec {
    let mut spec = team(8).spec().clone();
    spec.agents[0].delegates.push("review".into());
    spec.spec_delegates.push(SpecDelegate {
        name: "review".into(),
        spec: Box::new(review_spec()),
    });
    spec
}

fn refused(spec: Spec) -> String {
    RunSpec::build(spec).expect_err("refused").to_string()
}

#[test]
fn a_spec_delegate_is_offered_and_its_call_starts_a_child_of_the_embedded_spec() {
    let spec = RunSpec::build(team_with_review()).expect("valid");
    let mut h = Harness::new(spec.clone());
    h.start("Ship it.");
    let t = h.proceed().clone();
    let Effect::CallModel { request, .. } = &t.effects[0] else {
        panic!("a model call")
    };
    assert!(
        request.tools.iter().any(|n| n == "delegate_review"),
        "{:?}",
        request.tools
    );
    assert!(spec.is_delegate_call(&"lead".into(), "delegate_review"));
    let def = spec.offered_tool("delegate_review").expect("defined");
    assert_eq!(def.schema["required"], serde_json::json!(["task"]));

    let t = h
        .reply(ModelReply::tools(vec![delegate(
            "d1",
            "review",
            "Review the draft.",
        )]))
        .clone();
    let effect = t
        .effects
        .iter()
        .find(|e| matches!(e, Effect::RunChild { .. }))
        .expect("a RunChild")
        .clone();
    let Effect::RunChild { delegate, task, .. } = &effect else {
        unreachable!()
    };
    assert_eq!(delegate.as_str(), "review");
    assert_eq!(task, "Review the draft.");

    let child = spec.child_spec(&effect).expect("builds");
    // The embedded spec's own agents, tools and plan, not the parent's.
    let ids: Vec<&str> = child.spec().agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["critic", "editor"]);
    assert_eq!(child.plan().entry, AgentId::from("critic"));
    assert_eq!(child.plan().exits, [AgentId::from("editor")]);
    assert!(child.tool("grep").is_some() && child.tool("lookup").is_none());
    // Caps: the tighter of the carve (lead's absolute max_turns 4) and the spec's own.
    assert_eq!(child.spec().limits.max_turns, Some(2));
    assert_eq!(child.spec().limits.max_tokens, Some(900));
    assert_eq!(child.spec().depth, 1);
    assert_eq!(child.spec().delegated_by.as_ref(), Some(effect.id()));
    assert_eq!(child.spec().on_exhausted, RunOnExhausted::Fail);
    assert!(child.spec().spec_delegates.is_empty());
}

#[test]
fn the_embedded_spec_survives_the_stored_form_and_old_specs_are_unchanged() {
    let spec = RunSpec::build(team_with_review()).expect("valid");
    let stored = serde_json::to_string(&spec).expect("encodes");
    assert!(stored.contains("\"spec_delegates\""), "{stored}");
    let back: RunSpec = serde_json::from_str(&stored).expect("decodes");
    assert_eq!(back, spec);
    assert_eq!(
        back.spec().spec_delegates[0].spec.agents[0].id.as_str(),
        "critic"
    );
    // A spec without spec delegates stores exactly as before (no new key).
    let plain = serde_json::to_string(&team(8)).expect("encodes");
    assert!(!plain.contains("spec_delegates"), "{plain}");
}

#[test]
fn bad_spec_delegates_are_refused_with_the_field_named() {
    // Listed by an agent but not defined.
    let mut s = team_with_review();
    s.spec_delegates.clear();
    let e = refused(s);
    assert!(e.starts_with("agents[0].delegates[2]"), "{e}");

    // The name clashes with an agent of the spec.
    let mut s = team_with_review();
    s.spec_delegates[0].name = "coder".into();
    let e = refused(s);
    assert!(e.starts_with("spec_delegates[0].name"), "{e}");
    assert!(e.contains("also an agent"), "{e}");

    // The name clashes with a declared tool.
    let mut s = team_with_review();
    s.spec_delegates[0].name = "lookup".into();
    s.agents[0].delegates[2] = "lookup".into();
    let e = refused(s);
    assert!(e.starts_with("spec_delegates[0].name"), "{e}");
    assert!(e.contains("declared tool"), "{e}");

    // Two with one name.
    let mut s = team_with_review();
    let twin = s.spec_delegates[0].clone();
    s.spec_delegates.push(twin);
    let e = refused(s);
    assert!(e.starts_with("spec_delegates[1].name"), "{e}");

    // The embedded spec is itself invalid.
    let mut s = team_with_review();
    s.spec_delegates[0].spec.agents.clear();
    let e = refused(s);
    assert!(e.starts_with("spec_delegates[0].spec"), "{e}");

    // Before revision 4.
    let mut s = team_with_review();
    s.semantics = 3;
    assert!(refused(s).contains("revision 4"));

    // An embedded spec claiming to be a child already.
    let mut s = team_with_review();
    s.spec_delegates[0].spec.depth = 2;
    let e = refused(s);
    assert!(e.starts_with("spec_delegates[0].spec"), "{e}");
}
