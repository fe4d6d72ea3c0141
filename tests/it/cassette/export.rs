//! A run's cassette, exported from its history: streamed replies keep their chunks, the
//! request fingerprint covers the model settings and output schema (cassette version 3), and
//! a version-2 cassette recorded by an earlier runtape still replays, compared the way it was
//! hashed.

use std::sync::{Arc, Mutex};

use crate::support::cli::{
    err, example, fixture, out, replay_stepped, run_id, runtape, temp_db, utf8,
};
use crate::support::durable::run_to_rest;
use runtape::cassette::{CassetteProvider, ReplayOptions, VERSION, export_run};
use runtape::exec::Engine;
use runtape::machine::{AgentSpec, ModelReply, RunSpec, Spec};
use runtape::provider::{ModelProvider, ProviderRequest, ScriptOutcome, ScriptedProvider};
use runtape::store::RunStatus;

#[tokio::test]
async fn streamed_chunks_are_exported_and_replayed_as_they_came() {
    let engine = Engine::in_memory();
    let chunks = ["The ", "answer ", "is 42."];
    engine.register_provider(
        "p",
        Arc::new(ScriptedProvider::new("p", move |_| ScriptOutcome {
            chunks: chunks.iter().map(|c| c.to_string()).collect(),
            ..ScriptOutcome::reply(ModelReply::text("The answer is 42."))
        })),
    );
    let spec = RunSpec::build(Spec {
        agents: vec![AgentSpec::new("solo", "p", "m")],
        ..Spec::default()
    })
    .expect("valid");
    let end = run_to_rest(&engine, spec, "What is it?").await;
    assert_eq!(end.status, RunStatus::Completed);

    let cassette = export_run(engine.store().as_ref(), &end.run_id).expect("exports");
    assert_eq!(cassette.version(), VERSION);
    assert_eq!(cassette.len(), 1);
    assert_eq!(
        cassette.entries()[0].chunks(),
        chunks,
        "the chunks, not one lump"
    );

    let prompt = cassette.entries()[0]
        .prompt()
        .expect("prompts are kept")
        .clone();
    let replay = CassetteProvider::new(cassette, ReplayOptions::default()).expect("replays");
    let request = ProviderRequest {
        agent: "solo".into(),
        model: "m".into(),
        messages: Arc::new(prompt.messages),
        tools: prompt.tools,
        attempt: 1,
        ..ProviderRequest::default()
    };
    let streamed = Mutex::new(Vec::new());
    let reply = replay
        .complete(&request, &|d| {
            streamed.lock().expect("not poisoned").push(d.to_owned())
        })
        .await
        .expect("the same request is answered");
    assert_eq!(reply.text.as_deref(), Some("The answer is 42."));
    assert_eq!(streamed.into_inner().expect("not poisoned"), chunks);
}

#[test]
fn a_changed_setting_no_longer_matches_the_recording() {
    let (dir, db) = temp_db();
    let spec = example("structured.toml");
    let spec = utf8(&spec);
    let o = runtape(&db, &["run", "--stepped-clock", spec]);
    assert!(o.status.success(), "{}", err(&o));
    let run = run_id(&o);
    let cassette = dir.path().join("structured.json");
    let cassette = utf8(&cassette);
    let o = runtape(&db, &["cassette", "export", &run, "-o", cassette]);
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(cassette).expect("reads");
    let file: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(file["version"], 3);
    let settings = &file["entries"][0]["prompt"]["settings"];
    assert_eq!(settings["temperature"], 0.2, "{settings}");
    assert!(file["entries"][0]["prompt"]["output_schema"].is_object());

    let o = replay_stepped(&db, spec, cassette);
    assert!(o.status.success(), "{}", err(&o));

    // The same spec with another temperature asks another question.
    let warmer = dir.path().join("warmer.toml");
    let original = std::fs::read_to_string(spec).expect("reads");
    assert!(original.contains("temperature = 0.2"));
    std::fs::write(
        &warmer,
        original.replace("temperature = 0.2", "temperature = 0.9"),
    )
    .expect("writes");
    let warmer = utf8(&warmer);
    let o = replay_stepped(&db, warmer, cassette);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let e = err(&o);
    assert!(e.contains("turn 0") && e.lines().count() == 1, "{e}");
    let diff = out(&o);
    assert!(diff.contains("0.9"), "the diff shows the setting: {diff}");
}

#[test]
fn a_version_2_cassette_recorded_by_an_earlier_runtape_still_replays() {
    // Recorded by runtape 0.1.0 + wave 1 (`cassette export` of `examples/structured.toml`
    // run with `--stepped-clock`): version 2, whose promptHash covers messages and tools only.
    let fixture = fixture("cassette-v2/structured.v2.cassette.json");
    let text = std::fs::read_to_string(&fixture).expect("reads");
    assert!(text.contains("\"version\": 2"));
    let (_dir, db) = temp_db();
    let spec = example("structured.toml");
    let o = replay_stepped(&db, utf8(&spec), utf8(&fixture));
    assert!(o.status.success(), "{}", err(&o));
    let printed = out(&o);
    assert!(
        printed.contains("replayed 3 of 3 recorded model turns"),
        "{printed}"
    );
}
