//! Structured output and reasoning in the pure machine: with an `output_schema`, a valid
//! answer becomes the agent's parsed output (the run's outcome and plan edges use it), an
//! invalid one is fed back under the correction budget, a refusal is a typed outcome; the
//! reasoning a reply carries is kept with the assistant message.

use crate::support;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

fn city_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": false
    })
}

fn extractor(budget: u32) -> RunSpec {
    solo_with(|s| {
        s.agents[0].output_schema = Some(city_schema());
        s.agents[0].correction_budget = budget;
    })
}

fn last_message(h: &Harness) -> Message {
    let conv = h.state.data().unwrap().agents[&AgentId::from("solo")].conversation;
    h.conversations
        .messages(&AgentId::from("solo"), &conv)
        .and_then(|m| m.last().cloned())
        .expect("a conversation")
}

#[test]
fn a_valid_answer_becomes_the_agents_parsed_output() {
    let mut h = Harness::new(extractor(3));
    h.start("Where is the Eiffel tower?");
    h.proceed();
    h.reply(ModelReply::text(
        "```json\n{\"country\": \"France\", \"city\": \"Paris\"}\n```",
    ));
    let RunState::Handoff { answer, output, .. } = &h.state else {
        panic!("the agent finished: {:?}", h.state.kind());
    };
    assert_eq!(
        output.as_ref(),
        Some(&json!({"city": "Paris", "country": "France"}))
    );
    assert_eq!(
        answer.as_deref(),
        Some(r#"{"city":"Paris","country":"France"}"#)
    );
    h.proceed();
    assert_eq!(
        h.state.outcome(),
        Some(&Outcome::Completed {
            answer: Some(r#"{"city":"Paris","country":"France"}"#.into()),
            output: Some(json!({"city": "Paris", "country": "France"})),
        })
    );
}

#[test]
fn an_invalid_answer_is_fed_back_and_a_second_try_can_pass() {
    let mut h = Harness::new(extractor(3));
    h.start("Where?");
    h.proceed();
    h.reply(ModelReply::text("{\"city\": \"Paris\"}"));
    assert_eq!(h.last_edge(), "generating.replied.output_invalid");
    let feedback = last_message(&h);
    assert_eq!(feedback.role, Role::User);
    let text = feedback.content.unwrap();
    assert!(text.starts_with(OUTPUT_FEEDBACK), "{text}");
    assert!(
        text.contains("\"country\" is a required property"),
        "{text}"
    );
    let RunState::Preparing { run } = &h.state else {
        panic!("the agent goes on");
    };
    assert_eq!(run.agents[&AgentId::from("solo")].strikes, 1);
    h.proceed();
    h.reply(ModelReply::text("not json at all"));
    assert!(last_message(&h).content.unwrap().contains("not valid JSON"));
    h.proceed();
    h.reply(ModelReply::text(
        "{\"city\": \"Paris\", \"country\": \"France\"}",
    ));
    h.proceed();
    assert!(matches!(
        h.state.outcome(),
        Some(Outcome::Completed {
            output: Some(_),
            ..
        })
    ));
}

#[test]
fn invalid_answers_past_the_correction_budget_fail_the_run() {
    let mut h = Harness::new(extractor(1));
    h.start("Where?");
    h.proceed();
    h.reply(ModelReply::text("Paris"));
    h.proceed();
    h.reply(ModelReply::text("Paris, France"));
    assert_eq!(h.last_edge(), "generating.replied.output_failed");
    let error = failure(&h.state);
    assert_eq!(error.class, ErrorClass::OutputInvalid);
    assert!(error.message.contains("correction budget 1"), "{error:?}");
}

#[test]
fn a_refusal_is_a_typed_outcome_not_an_empty_answer() {
    for reply in [
        ModelReply {
            refusal: Some("I can't help with that.".into()),
            ..ModelReply::default()
        },
        ModelReply {
            finish_reason: FinishReason {
                raw: Some("refusal".into()),
                normalized: Some(Finish::ContentFilter),
            },
            ..ModelReply::text("I won't do that.")
        },
    ] {
        let mut h = Harness::new(extractor(3));
        h.start("Where?");
        h.proceed();
        h.reply(reply);
        assert_eq!(h.last_edge(), "generating.replied.refused");
        let error = failure(&h.state);
        assert_eq!(error.class, ErrorClass::Refused);
        assert!(error.message.contains("won't") || error.message.contains("can't"));
    }
}

#[test]
fn plan_edges_read_the_parsed_output() {
    let spec = RunSpec::build(Spec {
        agents: vec![
            AgentSpec {
                output_schema: Some(json!({
                    "type": "object",
                    "properties": {"verdict": {"enum": ["pass", "fail"]}},
                    "required": ["verdict"]
                })),
                ..AgentSpec::new("judge", "p", "m")
            },
            AgentSpec::new("fixer", "p", "m"),
            AgentSpec::new("shipper", "p", "m"),
        ],
        plan: plan(
            "judge",
            vec![
                edge(
                    "judge",
                    "fixer",
                    When::JsonPointerEquals {
                        pointer: "/verdict".into(),
                        value: json!("fail"),
                    },
                ),
                edge("judge", "shipper", When::Always),
            ],
            &["fixer", "shipper"],
            8,
        ),
        ..Spec::default()
    })
    .expect("valid");
    let mut h = Harness::new(spec);
    h.start("Judge it.");
    h.proceed();
    // Whitespace and key order differ from any text match; the parsed value decides.
    h.reply(ModelReply::text("{ \"verdict\" :\n \"fail\" }"));
    h.proceed();
    assert_eq!(h.state.data().unwrap().active, AgentId::from("fixer"));
}

#[test]
fn reasoning_is_kept_with_the_assistant_message() {
    let mut h = Harness::new(solo());
    h.start("Think, then look it up.");
    h.proceed();
    let reasoning = vec![
        Reasoning::Thinking {
            text: "I should look it up.".into(),
            signature: "sig-1".into(),
        },
        Reasoning::RedactedThinking {
            data: "opaque".into(),
        },
    ];
    h.reply(ModelReply {
        reasoning: reasoning.clone(),
        thinking: Some("I should look it up.".into()),
        usage: Some(TokenUsage {
            reasoning_tokens: Some(7),
            ..TokenUsage::new(10, 20)
        }),
        ..ModelReply::tools(vec![call("c1", "lookup", json!({"q": "x"}))])
    });
    let conv = h.state.data().unwrap().agents[&AgentId::from("solo")].conversation;
    let messages = h
        .conversations
        .messages(&AgentId::from("solo"), &conv)
        .unwrap();
    let assistant = messages
        .iter()
        .rfind(|m| m.role == Role::Assistant)
        .unwrap();
    assert_eq!(assistant.reasoning, reasoning);
    assert_eq!(h.state.data().unwrap().usage.reasoning_tokens, 7);
}

#[test]
fn a_bad_output_schema_is_refused_when_the_spec_is_built() {
    let err = RunSpec::build(Spec {
        agents: vec![AgentSpec {
            output_schema: Some(json!({"type": "no-such-type"})),
            ..AgentSpec::new("a", "p", "m")
        }],
        ..Spec::default()
    })
    .expect_err("invalid schema");
    assert_eq!(err.path(), "agents[0].output_schema");
}

proptest::proptest! {
    /// Whatever a model answers, an agent with an output schema never finishes with an
    /// answer that does not validate: it finishes with a valid parsed output, is told what is
    /// wrong, or fails with `output_invalid` once the correction budget is spent.
    #[test]
    fn no_invalid_answer_ever_becomes_an_output(
        answers in proptest::collection::vec(
            proptest::prop_oneof![
                ".{0,40}",
                "\\{\"city\": \"[a-z]{0,8}\"(, \"country\": \"[a-z]{0,8}\")?(, \"x\": 1)?\\}",
                "```json\n\\{\"city\": \"a\", \"country\": \"b\"\\}\n```",
            ],
            1..5,
        ),
    ) {
        let validator = jsonschema::validator_for(&city_schema()).unwrap();
        let mut h = Harness::new(extractor(2));
        h.start("Where?");
        for text in answers {
            if !matches!(h.state, RunState::Preparing { .. }) {
                break;
            }
            h.proceed();
            h.reply(ModelReply::text(text));
            match &h.state {
                RunState::Handoff { output, answer, .. } => {
                    let output = output.as_ref().expect("a schema agent's answer is its output");
                    proptest::prop_assert!(validator.is_valid(output));
                    proptest::prop_assert_eq!(answer.clone(), Some(output.to_string()));
                }
                RunState::Preparing { .. } => {
                    let feedback = last_message(&h).content.unwrap_or_default();
                    proptest::prop_assert!(feedback.starts_with(OUTPUT_FEEDBACK));
                }
                RunState::Done { outcome: Outcome::Failed { error }, .. } => {
                    proptest::prop_assert_eq!(error.class, ErrorClass::OutputInvalid);
                }
                other => proptest::prop_assert!(false, "unexpected state {:?}", other.kind()),
            }
        }
    }
}
