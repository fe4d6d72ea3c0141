//! Replay is strict by default: a drifted request fails mid-replay naming the turn, with a
//! diff; non-strict replay serves in order regardless; a replay is single-use until reset.

use crate::support;

use runtape::cassette::{CassetteError, CassetteProvider, RecordOptions, ReplayOptions};
use runtape::machine::{Message, ProviderErrorClass, Role};
use support::cassette::*;

fn replay_of(options: RecordOptions, replay: ReplayOptions) -> CassetteProvider {
    let (cassette, _) = record_with(model(), options, &requests()[..3]);
    CassetteProvider::new(cassette, replay).expect("no filter on either side")
}

/// The fixture requests with turn 1's tool result changed from "Paris" to "Lyon".
fn drifted_requests() -> Vec<runtape::provider::ProviderRequest> {
    let mut requests = requests();
    for r in &mut requests[1..] {
        let mut messages = r.messages.as_ref().clone();
        messages[3] = Message {
            content: Some("Lyon".into()),
            ..messages[3].clone()
        };
        r.messages = messages.into();
    }
    requests
}

/// Recording options that store the prompts in full, or (`false`) only their hashes.
fn prompts_stored(store_prompts: bool) -> RecordOptions {
    RecordOptions {
        store_prompts,
        ..RecordOptions::default()
    }
}

#[test]
fn a_drifted_request_is_a_mismatch_naming_the_turn_with_a_diff() {
    let replay = replay_of(prompts_stored(true), ReplayOptions::default());
    let requests = drifted_requests();
    let (first, _) = block_on(call(&replay, &requests[0]));
    assert!(first.is_ok(), "turn 0 did not drift");

    let (second, chunks) = block_on(call(&replay, &requests[1]));
    let error = second.expect_err("turn 1 drifted");
    assert_eq!(error.class, ProviderErrorClass::BadRequest);
    assert!(!error.retryable, "the same request would mismatch again");
    assert!(error.message.contains("turn 1"), "{}", error.message);
    assert!(chunks.is_empty(), "nothing is streamed for a refused call");

    let Some(CassetteError::Mismatch {
        turn,
        expected_hash,
        actual_hash,
        diff,
    }) = replay.last_error()
    else {
        panic!("expected a mismatch, got {:?}", replay.last_error());
    };
    assert_eq!(turn, 1);
    assert_ne!(expected_hash, actual_hash);
    assert!(
        error.message.contains(&diff),
        "the provider error carries the diff"
    );
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++"))
        .collect();
    assert_eq!(
        changed,
        [
            r#"-      "content": "Paris","#,
            r#"+      "content": "Lyon","#
        ],
        "only the changed line, recorded then sent:\n{diff}"
    );
    assert!(diff.starts_with("--- recorded\n+++ sent\n@@"), "{diff}");
    assert!(
        !diff.contains("geography assistant"),
        "unchanged lines far from the change are left out:\n{diff}"
    );
    assert_eq!(
        replay.position(),
        1,
        "a refused call does not consume its entry"
    );
}

#[test]
fn without_stored_prompts_a_mismatch_still_names_the_turn_and_says_why_there_is_no_diff() {
    let replay = replay_of(prompts_stored(false), ReplayOptions::default());
    let requests = drifted_requests();
    let outcomes = block_on(call_all(&replay, &requests[..2]));
    assert!(outcomes[0].0.is_ok());
    let Some(CassetteError::Mismatch { turn, diff, .. }) = replay.last_error() else {
        panic!("expected a mismatch, got {:?}", replay.last_error());
    };
    assert_eq!(turn, 1);
    assert!(diff.contains("store_prompts"), "{diff}");
    assert!(diff.contains("4 messages, tools [lookup, write]"), "{diff}");
}

#[test]
fn non_strict_replay_serves_the_next_entry_and_lists_the_drifted_turns() {
    let replay = replay_of(
        RecordOptions::default(),
        ReplayOptions {
            strict: false,
            ..ReplayOptions::default()
        },
    );
    let mut requests = drifted_requests();
    requests.truncate(3);
    requests[2].messages = vec![Message::text(Role::User, "something else entirely")].into();
    let replayed = block_on(call_all(&replay, &requests));
    let live = block_on(call_all(model().as_ref(), &self::requests()[..3]));
    assert_eq!(
        replayed, live,
        "the recorded replies, in order, whatever was asked"
    );
    assert_eq!(replay.drifted_turns(), [1, 2]);
    assert_eq!(replay.last_error(), None);
}

#[test]
fn running_past_the_end_is_exhausted_and_reset_rewinds() {
    let replay = replay_of(RecordOptions::default(), ReplayOptions::default());
    let requests = requests();
    let first = block_on(call_all(&replay, &requests[..3]));
    assert!(replay.is_finished());

    let (past_end, _) = block_on(call(&replay, &requests[3]));
    let error = past_end.expect_err("only three turns were recorded");
    assert!(!error.retryable);
    assert!(error.message.contains("exhausted"), "{}", error.message);
    assert_eq!(
        replay.last_error(),
        Some(CassetteError::Exhausted { turns: 3 })
    );
    let (again, _) = block_on(call(&replay, &requests[0]));
    assert!(
        again.is_err(),
        "single-use: turn 0 is not served again without a reset"
    );

    replay.reset();
    assert_eq!(replay.position(), 0);
    assert_eq!(replay.last_error(), None);
    let second = block_on(call_all(&replay, &requests[..3]));
    assert_eq!(second, first, "after reset the replay starts over");
}

#[test]
fn describe_names_the_cassette_and_its_source() {
    let replay = replay_of(RecordOptions::default(), ReplayOptions::default());
    let id = replay
        .cassette()
        .cassette_id()
        .expect("version 2")
        .to_owned();
    use runtape::provider::ModelProvider;
    assert_eq!(
        replay.describe(),
        format!("cassette:{id} (recorded from scripted:geo-model)")
    );
}
