//! Normalising and scrubbing: a named hash filter applied on both sides lets dynamic prompt
//! content replay; a filter on one side only is refused; the redact hook scrubs what is
//! stored; an exchange that cannot be encoded fails when it is recorded, not when loaded.

use crate::support;

use std::sync::Arc;

use runtape::cassette::{
    CassetteError, CassetteProvider, HashFilter, Prompt, RecordOptions, RecordingProvider,
    ReplayOptions,
};
use runtape::machine::{ModelReply, ProviderErrorClass, Role, ToolCallRequest};
use runtape::provider::{ProviderError, ScriptedProvider};
use serde_json::json;
use support::cassette::*;

/// Replaces the date at the end of the system prompt by a placeholder.
fn date_filter(name: &str) -> HashFilter {
    HashFilter::new(name, |prompt: &mut Prompt| {
        for m in prompt
            .messages
            .iter_mut()
            .filter(|m| m.role == Role::System)
        {
            if let Some(text) = &mut m.content
                && let Some(at) = text.find("Today is ")
            {
                text.truncate(at);
                text.push_str("Today is <DATE>.");
            }
        }
    })
}

fn dated(date: &str) -> Vec<runtape::provider::ProviderRequest> {
    requests_with_system(&format!("You are a geography assistant. Today is {date}."))[..3].to_vec()
}

fn recorded_with_filter() -> runtape::cassette::Cassette {
    let options = RecordOptions {
        hash_filter: Some(date_filter("date-v1")),
        ..RecordOptions::default()
    };
    record_with(model(), options, &dated("2025-01-31")).0
}

#[test]
fn a_filter_on_both_sides_replays_a_prompt_with_a_different_date() {
    let cassette = recorded_with_filter();
    assert_eq!(cassette.hash_filter(), Some("date-v1"));
    let options = ReplayOptions {
        hash_filter: Some(date_filter("date-v1")),
        ..ReplayOptions::default()
    };
    let replay = CassetteProvider::new(cassette.clone(), options).expect("same filter");
    let replayed = block_on(call_all(&replay, &dated("2026-06-15")));
    assert!(
        replayed.iter().all(|(r, _)| r.is_ok()),
        "{:?}",
        replay.last_error()
    );

    // Without normalisation the date would be a mismatch: the filter is what made it pass.
    let unfiltered = Prompt::of(&dated("2026-06-15")[0])
        .hash()
        .expect("hashable");
    assert_ne!(cassette.entries()[0].prompt_hash(), unfiltered);
}

#[test]
fn a_filter_only_at_record_time_is_refused_at_replay_start() {
    let error = CassetteProvider::new(recorded_with_filter(), ReplayOptions::default()).err();
    assert_eq!(
        error,
        Some(CassetteError::HashFilterMismatch {
            recorded: Some("date-v1".into()),
            given: None
        })
    );
}

#[test]
fn a_filter_only_at_replay_time_is_refused_at_replay_start() {
    let options = ReplayOptions {
        hash_filter: Some(date_filter("date-v1")),
        ..ReplayOptions::default()
    };
    let error = CassetteProvider::new(record_default(), options).err();
    assert_eq!(
        error,
        Some(CassetteError::HashFilterMismatch {
            recorded: None,
            given: Some("date-v1".into())
        })
    );
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("without a hash filter"), "{message}");
}

#[test]
fn a_filter_with_another_name_is_refused() {
    let options = ReplayOptions {
        hash_filter: Some(date_filter("date-v2")),
        ..ReplayOptions::default()
    };
    assert!(matches!(
        CassetteProvider::new(recorded_with_filter(), options),
        Err(CassetteError::HashFilterMismatch {
            recorded: Some(_),
            given: Some(_)
        })
    ));
}

#[test]
fn redact_scrubs_stored_responses_and_chunks_but_not_what_the_caller_saw() {
    const SECRET: &str = "tok_live_123456";
    let reply = ModelReply::tools(vec![ToolCallRequest::new(
        "c1",
        "lookup",
        json!({"token": SECRET}),
    )]);
    let text = ModelReply::text(format!("Your token is {SECRET}."));
    let model = Arc::new(ScriptedProvider::replies("leaky", vec![reply, text]));
    let options = RecordOptions {
        redact: Some(Arc::new(|s: &str| s.replace(SECRET, "[REDACTED]"))),
        ..RecordOptions::default()
    };
    let mut requests = requests();
    requests.truncate(3);
    let (cassette, live) = record_with(model, options, &requests);
    assert!(
        live[1].1[0].contains(SECRET),
        "the live caller is not affected"
    );
    let json = cassette.to_json().expect("serialises");
    assert!(!json.contains(SECRET), "{json}");
    assert!(json.contains(r#""token": "[REDACTED]""#));
    assert_eq!(
        cassette.entries()[1].chunks(),
        ["Your token is [REDACTED]."]
    );
    let failure = cassette.entries()[2]
        .response()
        .as_result()
        .expect_err("past the script");
    assert_eq!(
        failure.class,
        ProviderErrorClass::BadRequest,
        "redacted errors keep their class"
    );
}

#[test]
fn a_redact_hook_that_breaks_the_response_fails_at_record_time() {
    let options = RecordOptions {
        redact: Some(Arc::new(|s: &str| s.replace("stop", "halt"))),
        ..RecordOptions::default()
    };
    let recorder = RecordingProvider::new(model(), options).expect("random id");
    let outcomes = block_on(call_all(&recorder, &requests()[..3]));
    assert!(
        outcomes[0].0.is_ok() && outcomes[1].0.is_ok(),
        "tool calls have no `stop`"
    );
    let error = outcomes[2]
        .0
        .as_ref()
        .expect_err("the text reply finishes with `stop`");
    assert_eq!(error.class, ProviderErrorClass::BadRequest);
    assert!(error.message.contains("entry 2"), "{}", error.message);
    let typed = recorder.last_error();
    assert!(
        matches!(&typed, Some(CassetteError::Unencodable { location, .. }) if location == "entry 2"),
        "{typed:?}"
    );
    assert_eq!(recorder.finish(RECORDED_AT).err(), typed);
}

#[test]
fn an_integer_canonical_json_cannot_carry_fails_at_record_time() {
    let big = ModelReply::tools(vec![ToolCallRequest::new(
        "c1",
        "lookup",
        json!({"id": 9_007_199_254_740_993_u64}),
    )]);
    let model = Arc::new(ScriptedProvider::replies("big", vec![big]));
    let recorder = RecordingProvider::new(model, RecordOptions::default()).expect("random id");
    let (result, _) = block_on(call(&recorder, &requests()[0]));
    let error: ProviderError = result.expect_err("refused when recorded");
    assert!(!error.retryable);
    let Some(CassetteError::Unencodable { location, detail }) = recorder.last_error() else {
        panic!("expected Unencodable, got {:?}", recorder.last_error());
    };
    assert_eq!(location, "entry 0");
    assert!(
        detail.contains("9007199254740993") && detail.contains("/reply/tool_calls/0/arguments/id"),
        "{detail}"
    );
    assert!(
        recorder.is_empty(),
        "nothing was recorded for the refused exchange"
    );
    assert!(recorder.finish(RECORDED_AT).is_err());
}
