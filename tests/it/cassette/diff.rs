//! Diffing two recordings compares what the model did: tool names and canonical arguments
//! (never provider call ids), outcomes, and (unless ignored) assistant text.

use crate::support;

use std::sync::Arc;

use runtape::cassette::{Cassette, CassetteDiff, DiffOptions, Difference, RecordOptions, diff};
use runtape::machine::{ModelReply, ToolCallRequest};
use runtape::provider::ScriptedProvider;
use serde_json::json;
use support::cassette::*;

fn recording(replies: Vec<ModelReply>) -> Cassette {
    let model = Arc::new(ScriptedProvider::replies("geo-model", replies));
    record_with(model, RecordOptions::default(), &requests()).0
}

/// The fixture replies as another provider would send them: other call ids, argument keys
/// in another order, usage and ids that differ.
fn respelled() -> Vec<ModelReply> {
    let mut replies = replies();
    replies[0] = ModelReply::tools(vec![ToolCallRequest::new(
        "toolu_01XYZ",
        "lookup",
        json!({"q": "capital of France"}),
    )]);
    let mut write = ToolCallRequest::new(
        "toolu_02ABC",
        "write",
        serde_json::from_str(r#"{ "text" : "Paris" }"#).expect("JSON"),
    );
    write.arguments_raw = Some(r#"{ "text" : "Paris" }"#.into());
    replies[1] = ModelReply {
        response_id: Some("msg_2".into()),
        ..ModelReply::tools(vec![write])
    };
    replies[2] = replies[2].clone().with_usage(1, 1).with_cost_nanos(42);
    replies
}

#[test]
fn call_ids_spelling_and_usage_do_not_count() {
    let d = diff(
        &recording(replies()),
        &recording(respelled()),
        DiffOptions::default(),
    );
    assert!(d.is_same(), "{d}");
    assert_eq!(d.first_difference, None);
    assert_eq!(
        d.to_string(),
        "cassettes match (4 turns; compared tool calls, outcomes and text)\n"
    );
}

#[test]
fn different_arguments_are_reported_at_the_first_differing_turn() {
    let mut changed = replies();
    changed[1] = ModelReply::tools(vec![
        ToolCallRequest::new("call_2", "write", json!({"text": "Lyon"})),
        ToolCallRequest::new("call_3", "lookup", json!({"q": "population", "n": 1})),
    ]);
    let d = diff(
        &recording(replies()),
        &recording(changed),
        DiffOptions::default(),
    );
    assert_eq!(d.first_difference, Some(1));
    assert_eq!(d.turns.len(), 1);
    assert_eq!(d.turns[0].differences, [Difference::ToolCalls]);
    let b = d.turns[0].b.as_ref().expect("both sides have turn 1");
    assert_eq!(
        b.tool_calls[1].arguments, r#"{"n":1,"q":"population"}"#,
        "canonical: keys sorted"
    );
}

#[test]
fn ignore_content_compares_only_actions() {
    let mut reworded = replies();
    reworded[2] = ModelReply::text("Paris is the capital.");
    let (a, b) = (recording(replies()), recording(reworded));
    let with_text = diff(&a, &b, DiffOptions::default());
    assert_eq!(with_text.first_difference, Some(2));
    assert_eq!(with_text.turns[0].differences, [Difference::Text]);
    let actions_only = diff(
        &a,
        &b,
        DiffOptions {
            ignore_content: true,
        },
    );
    assert!(actions_only.is_same(), "{actions_only}");
}

#[test]
fn extra_turns_and_failures_are_differences() {
    let mut longer = replies();
    longer.push(ModelReply::text("Rome."));
    let d = diff(
        &recording(replies()),
        &recording(longer),
        DiffOptions {
            ignore_content: true,
        },
    );
    // Turn 3 failed in `a` (script exhausted) and replied in `b`.
    assert_eq!(d.first_difference, Some(3));
    assert_eq!(d.turns[0].differences, [Difference::Outcome]);

    let short = record_with(model(), RecordOptions::default(), &requests()[..2]).0;
    let d = diff(&short, &recording(replies()), DiffOptions::default());
    assert_eq!(d.first_difference, Some(2));
    assert_eq!(
        d.turns
            .iter()
            .map(|t| t.differences.clone())
            .collect::<Vec<_>>(),
        [[Difference::OnlyInB], [Difference::OnlyInB]]
    );
}

#[test]
fn the_report_reads_well_and_round_trips_as_json() {
    let mut changed = replies();
    changed[0] = ModelReply::tools(vec![ToolCallRequest::new(
        "x",
        "lookup",
        json!({"q": "capital of Italy"}),
    )]);
    changed[2] = ModelReply::text("Rome.");
    changed.push(ModelReply::text("Rome, again."));
    let d = diff(
        &recording(replies()),
        &recording(changed),
        DiffOptions::default(),
    );

    let json = serde_json::to_value(&d).expect("serialisable");
    assert_eq!(json["firstDifference"], 0);
    assert_eq!(json["turns"][0]["differences"][0], "tool_calls");
    let back: CassetteDiff = serde_json::from_value(json).expect("deserialisable");
    assert_eq!(back, d);

    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!("cassette__diff_report", d.to_string()));
}
