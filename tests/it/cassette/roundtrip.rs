//! Record → save → load → replay gives back exactly what the live provider gave: the same
//! replies, the same recorded failures and the same token chunks; and the file holds only
//! what the recorder saw.

use crate::support;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use runtape::cassette::{
    Cassette, CassetteBuilder, CassetteError, CassetteId, CassetteProvider, LoadOptions, Prompt,
    RecordOptions, RecordedResponse, ReplayOptions, VERSION,
};
use runtape::machine::{AgentId, ModelReply, ProviderErrorClass};
use runtape::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};
use serde_json::Value;
use support::cassette::*;

#[test]
fn replay_gives_identical_replies_errors_and_chunks() {
    let requests = requests();
    let (cassette, live) = record_with(streaming_model(), RecordOptions::default(), &requests);
    assert_eq!(cassette.len(), 4);
    assert_eq!(
        live[2].1,
        ["The capital ", "of France is ", "Paris."],
        "the caller still gets live chunks"
    );
    assert!(
        live[3]
            .0
            .as_ref()
            .is_err_and(|e| e.class == ProviderErrorClass::ProviderRateLimit)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let path = save(&cassette, dir.path(), "geo.json");
    let loaded = load(&path).expect("a fresh recording loads");
    assert_eq!(loaded, cassette, "save then load is lossless");

    let replay =
        CassetteProvider::new(loaded, ReplayOptions::default()).expect("no filter on either side");
    let replayed = block_on(call_all(&replay, &requests));
    assert_eq!(
        replayed, live,
        "same replies, same failure, same chunks, in order"
    );
    assert!(replay.is_finished());
    assert_eq!(replay.last_error(), None);
}

#[test]
fn the_saved_file_has_the_version_2_shape() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = save(&record_default(), dir.path(), "geo.json");
    let text = std::fs::read_to_string(&path).expect("saved");
    let file: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(file["version"], VERSION);
    assert_eq!(file["agentId"], "geo");
    assert_eq!(file["recordedAt"], RECORDED_AT);
    assert_eq!(file["recordedProvider"], "scripted:geo-model");
    let id = file["cassetteId"].as_str().expect("a cassette id");
    assert!(
        CassetteId::from_hex(id).is_some(),
        "128 random bits as hex: {id}"
    );
    assert_eq!(file["envelopeHash"].as_str().map(str::len), Some(64));
    let entries = file["entries"].as_array().expect("entries");
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(entry["turnIndex"], i);
        assert_eq!(entry["promptHash"].as_str().map(str::len), Some(64));
        assert_eq!(entry["responseHash"].as_str().map(str::len), Some(64));
        assert!(
            entry["prompt"]["messages"].is_array(),
            "prompts are stored by default, so a mismatch can show a diff"
        );
    }
    assert_eq!(
        entries[0]["response"]["reply"]["tool_calls"][0]["name"],
        "lookup"
    );
    assert!(
        entries[0].get("chunks").is_none(),
        "a tool-only reply streamed nothing"
    );
    assert_eq!(entries[2]["chunks"][0], "The capital of France is Paris.");
}

#[test]
fn every_recording_gets_its_own_cassette_id() {
    let a = record_default();
    let b = record_default();
    assert_ne!(a.cassette_id(), b.cassette_id());
    assert_ne!(
        a.entries()[0].response_hash(),
        b.entries()[0].response_hash()
    );
    assert_eq!(a.entries()[0].prompt_hash(), b.entries()[0].prompt_hash());
}

#[test]
fn model_attempt_and_budget_are_not_part_of_the_prompt() {
    let mut retry = requests()[0].clone();
    retry.model = "model-b".into();
    retry.attempt = 3;
    retry.remaining.tokens = Some(10);
    assert_eq!(Prompt::of(&retry).hash(), Prompt::of(&requests()[0]).hash());
    let mut other = requests()[0].clone();
    other.tools.pop();
    assert_ne!(Prompt::of(&other).hash(), Prompt::of(&requests()[0]).hash());
}

#[test]
fn saving_replaces_the_file_atomically_and_leaves_no_temporary_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = save(&record_default(), dir.path(), "geo.json");
    let second = record_default();
    second.save(&path).expect("overwrite");
    assert_eq!(
        load(&path).ok().as_ref().and_then(Cassette::cassette_id),
        second.cassette_id()
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("listable")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["geo.json"]);
    let missing_dir = dir.path().join("no/such/dir/geo.json");
    assert!(matches!(
        second.save(&missing_dir),
        Err(CassetteError::Io { .. })
    ));
}

#[test]
fn a_builder_exports_a_stored_run_that_replays() {
    let id = CassetteId::from_hex("00112233445566778899aabbccddeeff").expect("valid hex");
    let options = RecordOptions {
        cassette_id: Some(id),
        ..RecordOptions::default()
    };
    let requests = requests();
    let build = || {
        let mut builder = CassetteBuilder::new(options.clone()).expect("id given");
        for (request, reply) in requests.iter().zip(replies()) {
            let chunks = reply.text.clone().into_iter().collect();
            builder
                .push(&request.agent, Prompt::of(request), Ok(reply), chunks)
                .expect("encodable");
        }
        builder
            .finish(RECORDED_AT, "export:run-42")
            .expect("valid time")
    };
    let exported = build();
    assert_eq!(
        exported.to_json(),
        build().to_json(),
        "a given id makes the export reproducible"
    );
    assert_eq!(exported.agent_id(), Some(&AgentId::from("geo")));

    let replay = CassetteProvider::new(exported, ReplayOptions::default()).expect("no filter");
    let replayed = block_on(call_all(&replay, &requests[..3]));
    let live = block_on(call_all(model().as_ref(), &requests[..3]));
    assert_eq!(replayed, live);
}

#[test]
fn agent_id_is_left_out_when_several_agents_called() {
    let mut builder = CassetteBuilder::new(RecordOptions::default()).expect("random id");
    let prompt = Prompt::of(&requests()[0]);
    let reply = || ModelReply::text("hi");
    builder
        .push(&AgentId::from("a"), prompt.clone(), Ok(reply()), vec![])
        .expect("ok");
    builder
        .push(&AgentId::from("b"), prompt, Ok(reply()), vec![])
        .expect("ok");
    let cassette = builder.finish(RECORDED_AT, "scripted").expect("valid time");
    assert_eq!(cassette.agent_id(), None);
    assert!(matches!(
        cassette.entries()[1].response(),
        RecordedResponse::Reply(r) if r.text.as_deref() == Some("hi")
    ));
}

#[test]
fn recorded_at_must_be_rfc_3339() {
    let builder = CassetteBuilder::new(RecordOptions::default()).expect("random id");
    let err = builder.finish("31/01/2025", "scripted");
    assert!(
        matches!(
            err,
            Err(CassetteError::BadField {
                field: "recordedAt",
                ..
            })
        ),
        "{err:?}"
    );
}

/// A provider configured with a secret it never puts in a reply, like an HTTP adapter's key.
struct KeyedProvider {
    api_key: String,
}

impl ModelProvider for KeyedProvider {
    fn describe(&self) -> String {
        "keyed:model-a".into()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            if self.api_key.is_empty() {
                return Err(ProviderError::new(
                    "keyed",
                    ProviderErrorClass::ProviderAuth,
                    "no key",
                ));
            }
            tokens("ok ");
            tokens(&format!("turn {}", request.turn()));
            Ok(ModelReply::text(format!("ok turn {}", request.turn())))
        })
    }
}

#[test]
fn the_cassette_never_contains_the_wrapped_providers_key() {
    const KEY: &str = "sk-planted-9f8e7d6c5b4a";
    let model: Arc<dyn ModelProvider> = Arc::new(KeyedProvider {
        api_key: KEY.into(),
    });
    let (cassette, live) = record_with(model, RecordOptions::default(), &requests());
    assert!(live.iter().all(|(r, _)| r.is_ok()));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = save(&cassette, dir.path(), "keyed.json");
    let text = std::fs::read_to_string(&path).expect("saved");
    assert!(text.contains("ok turn 3"), "the replies were recorded");
    assert!(
        !text.contains(KEY),
        "the recorder only sees requests and replies"
    );
    let options = LoadOptions {
        require_integrity: true,
        ..LoadOptions::default()
    };
    assert!(Cassette::load(&path, &options).is_ok());
}
