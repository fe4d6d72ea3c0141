//! Replies cut by the output-token limit and refusals, on every wire format, through the
//! engine and real HTTP on 127.0.0.1 serving the vendors' recorded responses: a cut reply is
//! asked again with twice the limit (the default `on_truncated`), continued, or fails the run
//! `truncated`; a refusal fails it `refused` with the model's words. Each is in the history's
//! timeline, the step view and the trace.

use crate::support::durable::run_to_rest;
use crate::support::provider as provider_support;

use std::sync::Arc;

use crate::support::machine::failure;
use provider_support::{Case, base_for, case, config, provider, serve_cases};
use runtape::exec::Engine;
use runtape::history;
use runtape::machine::*;
use runtape::provider::http::ProviderKind;
use runtape::store::RunStatus;

struct Ran {
    end: runtape::exec::RunEnd,
    requests: Vec<serde_json::Value>,
    timeline: Vec<history::TimelineEntry>,
    traces: Vec<serde_json::Value>,
    engine: Engine,
    _db: tempfile::TempDir,
}

impl Ran {
    /// The first step of the timeline whose reply ended as `end`; panics naming case `name`.
    fn step_ending(&self, end: &str, name: &str) -> &history::TimelineEntry {
        self.timeline
            .iter()
            .find(|e| e.reply_end == Some(end))
            .unwrap_or_else(|| panic!("{name}: no {end} step in the timeline"))
    }
}

/// Runs one agent on `first`'s wire format against a server answering with `cases`; the
/// provider's configured output limit is the one `first` was recorded with.
async fn run(cases: Vec<Case>, limit: Option<u64>, agent: impl FnOnce(&mut AgentSpec)) -> Ran {
    let first = cases[0].clone();
    let kind = first.kind();
    let model = first.request["model"].as_str().unwrap_or("m").to_owned();
    let server = serve_cases(cases).await;
    let mut cfg = config(kind, &base_for(kind, &server.url()), &model);
    cfg.stream = first.stream();
    cfg.max_tokens = limit;
    let db = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(&db.path().join("runs.db")).expect("opens");
    engine.register_provider("p", Arc::new(provider(cfg, "k-1")));
    let mut a = AgentSpec::new("solo", "p", &model);
    agent(&mut a);
    let spec = RunSpec::build(Spec {
        agents: vec![a],
        ..Spec::default()
    })
    .expect("valid spec");
    let mut traces = Vec::new();
    let end = engine
        .start(spec, "Explain.")
        .await
        .expect("starts")
        .wait_with(|e| traces.push(serde_json::to_value(e).expect("a trace encodes")))
        .await
        .expect("runs");
    let timeline = history::timeline(engine.store().as_ref(), &end.run_id).expect("timeline");
    Ran {
        requests: server.requests().iter().map(|r| r.json()).collect(),
        end,
        timeline,
        traces,
        engine,
        _db: db,
    }
}

fn edges(r: &Ran) -> Vec<&str> {
    r.timeline.iter().map(|e| e.edge.as_str()).collect()
}

fn limit_field(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "max_tokens",
        ProviderKind::OpenAiResponses => "max_output_tokens",
        _ => "max_completion_tokens",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_reply_is_asked_again_with_twice_the_limit_on_every_wire_format() {
    // (cut reply, whole reply of the same wire format, the limit it was recorded with, the
    // agent's max_output_tokens, the limit the retry must ask for)
    let table = [
        (
            "openai-chat-length-nonstream",
            "openai-chat-text-nonstream",
            100,
            None,
            200,
        ),
        (
            "anthropic-messages-max-tokens-nonstream",
            "anthropic-messages-text-nonstream",
            15,
            None,
            30,
        ),
        (
            "anthropic-messages-max-tokens-stream",
            "anthropic-messages-text-stream",
            15,
            None,
            30,
        ),
        // Reported with `usage: null`: the agent's own limit is the one doubled.
        (
            "openai-responses-incomplete-max-tokens-stream",
            "openai-responses-text-stream",
            16,
            Some(16),
            32,
        ),
    ];
    for (cut, whole, recorded_limit, own, retry_limit) in table {
        let (cut, whole) = (case(cut), case(whole));
        let kind = cut.kind();
        let r = run(
            vec![cut.clone(), whole.clone()],
            Some(recorded_limit),
            |a| {
                a.model_settings.max_output_tokens = own;
            },
        )
        .await;
        let name = &cut.name;
        assert_eq!(
            r.end.status,
            RunStatus::Completed,
            "{name}: {:?}",
            r.end.state.outcome()
        );
        let answer = match r.end.state.outcome() {
            Some(Outcome::Completed { answer, .. }) => answer.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(answer.as_deref(), whole.expect["text"].as_str(), "{name}");
        assert_eq!(r.requests.len(), 2, "{name}: one retry");
        let field = limit_field(kind);
        assert_eq!(
            r.requests[0][field],
            serde_json::json!(recorded_limit),
            "{name}"
        );
        assert_eq!(
            r.requests[1][field],
            serde_json::json!(retry_limit),
            "{name}"
        );
        // The cut text is not in the conversation the retry sends.
        let cut_text = cut.expect["text"].as_str().unwrap_or_default();
        if !cut_text.is_empty() {
            assert!(
                !r.requests[1]
                    .to_string()
                    .contains(&cut_text[..20.min(cut_text.len())]),
                "{name}: the cut reply was sent back"
            );
        }
        assert!(
            edges(&r).contains(&"generating.replied.truncated_retry"),
            "{name}: {:?}",
            edges(&r)
        );
        let cut_entry = r.step_ending("truncated", name);
        assert!(
            cut_entry.summary.contains("[truncated]"),
            "{name}: {}",
            cut_entry.summary
        );
        let traced = r
            .traces
            .iter()
            .find(|t| t["type"] == "model.truncated")
            .unwrap_or_else(|| panic!("{name}: no model.truncated trace"));
        assert_eq!(traced["policy"], "retry", "{name}");
        assert_eq!(
            traced["next_limit"],
            serde_json::json!(retry_limit),
            "{name}"
        );
        assert!(
            r.traces
                .iter()
                .any(|t| t["type"] == "model.reply" && t["finish"] == "length"),
            "{name}: the reply trace names the finish"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_truncated_fail_ends_the_run_truncated() {
    let r = run(vec![case("openai-chat-length-nonstream")], Some(100), |a| {
        a.on_truncated = OnTruncated::Fail
    })
    .await;
    assert_eq!(r.end.status, RunStatus::Failed);
    let error = failure(&r.end.state);
    assert_eq!(error.class, ErrorClass::Truncated);
    assert!(error.message.contains("output-token limit"), "{error:?}");
    assert_eq!(r.requests.len(), 1, "no retry");
    assert_eq!(edges(&r).last(), Some(&"generating.replied.truncated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_reply_is_joined_to_the_rest() {
    let cut = case("anthropic-messages-max-tokens-nonstream");
    let rest = case("anthropic-messages-text-nonstream");
    let r = run(vec![cut.clone(), rest.clone()], Some(15), |a| {
        a.on_truncated = OnTruncated::Continue
    })
    .await;
    assert_eq!(r.end.status, RunStatus::Completed);
    let (cut_text, rest_text) = (
        cut.expect["text"].as_str().unwrap(),
        rest.expect["text"].as_str().unwrap(),
    );
    let Some(Outcome::Completed { answer, .. }) = r.end.state.outcome() else {
        panic!("{:?}", r.end.state.outcome())
    };
    assert_eq!(
        answer.as_deref(),
        Some(format!("{cut_text}{rest_text}").as_str())
    );
    // The second request carries the cut text as the assistant's and asks to go on, with the
    // limit unchanged.
    let messages = r.requests[1]["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert!(messages[n - 2].to_string().contains("God is dead"));
    assert_eq!(messages[n - 1]["role"], "user");
    assert!(messages[n - 1].to_string().contains(CONTINUE_PROMPT));
    assert_eq!(r.requests[1]["max_tokens"], 15);
    assert!(edges(&r).contains(&"generating.replied.truncated_continue"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_cut_every_time_spend_the_correction_budget() {
    let r = run(vec![case("openai-chat-length-nonstream")], Some(100), |a| {
        a.correction_budget = 2
    })
    .await;
    let error = failure(&r.end.state);
    assert_eq!(error.class, ErrorClass::Truncated);
    assert!(error.message.contains("3 replies in a row"), "{error:?}");
    let limits: Vec<_> = r
        .requests
        .iter()
        .map(|q| q["max_completion_tokens"].as_u64())
        .collect();
    // 100 asked, 100 used: 200; then 400 (the reply still used 100, the limit was 200).
    assert_eq!(limits, vec![Some(100), Some(200), Some(400)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_fails_the_run_refused_with_the_models_words_on_every_wire_format() {
    for name in [
        "openai-chat-refusal-nonstream",
        "openai-chat-refusal-stream",
        "anthropic-refusal-stream",
        "openai-responses-refusal-nonstream",
    ] {
        let refusal = case(name);
        let words = refusal.expect["refusal"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: expect.json has the refusal"))
            .to_owned();
        let r = run(vec![refusal], None, |_| {}).await;
        let error = failure(&r.end.state);
        assert_eq!(error.class, ErrorClass::Refused, "{name}");
        assert!(error.message.contains(&words), "{name}: {}", error.message);
        assert_eq!(
            edges(&r).last(),
            Some(&"generating.replied.refused"),
            "{name}"
        );
        let entry = r.step_ending("refused", name);
        assert!(
            entry.summary.starts_with("refused: "),
            "{name}: {}",
            entry.summary
        );
        let step =
            history::show(r.engine.store().as_ref(), &r.end.run_id, Some(entry.seq)).expect("step");
        assert_eq!(step.reply_end, Some("refused"), "{name}");
        assert!(
            r.traces
                .iter()
                .any(|t| t["type"] == "model.reply" && t["refusal"] == words.as_str()),
            "{name}: the reply trace carries the refusal"
        );
    }
}

/// A cut reply and its retry are recorded in a cassette (the reply's finish, the retry's
/// larger limit in its settings), and the cassette replays the run offline to the same
/// states: the retry asks exactly what was recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncation_is_recorded_in_the_cassette_and_replays() {
    use runtape::cassette::{
        CassetteProvider, LoadOptions, RecordOptions, RecordingProvider, ReplayOptions,
    };
    use runtape::exec::{EngineConfig, SteppedClock};
    use runtape::provider::ModelProvider;

    let server = serve_cases(vec![
        case("openai-chat-length-nonstream"),
        case("openai-chat-text-nonstream"),
    ])
    .await;
    let mut cfg = config(
        ProviderKind::OpenAi,
        &base_for(ProviderKind::OpenAi, &server.url()),
        "gpt-4o",
    );
    cfg.stream = false;
    cfg.max_tokens = Some(100);
    let http: Arc<dyn ModelProvider> = Arc::new(provider(cfg, "k-1"));
    let recorder =
        Arc::new(RecordingProvider::new(http, RecordOptions::default()).expect("recorder"));
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = |name: &str, p: Arc<dyn ModelProvider>| {
        let config = EngineConfig {
            clock: Arc::new(SteppedClock {
                start_ms: 1_800_000_000_000,
                step_ms: 5,
            }),
            ..EngineConfig::default()
        };
        let e = Engine::open_with(&dir.path().join(name), config).expect("opens");
        e.register_provider("p", p);
        e
    };
    let spec = || {
        RunSpec::build(Spec {
            agents: vec![AgentSpec::new("solo", "p", "gpt-4o")],
            ..Spec::default()
        })
        .expect("valid")
    };
    let recorded = engine("recorded.db", recorder.clone());
    let end = run_to_rest(&recorded, spec(), "Explain.").await;
    assert_eq!(end.status, RunStatus::Completed);
    let file = dir.path().join("run.cassette.json");
    recorder
        .finish("2026-11-29T00:00:00Z")
        .expect("cassette")
        .save(&file)
        .expect("saves");
    let text = std::fs::read_to_string(&file).expect("reads");
    assert!(
        text.contains("\"length\""),
        "the cut reply's finish is recorded"
    );
    assert!(
        text.contains("\"max_output_tokens\":200") || text.contains("\"max_output_tokens\": 200"),
        "the retry's limit is recorded"
    );

    let replay = Arc::new(
        CassetteProvider::load(&file, &LoadOptions::default(), ReplayOptions::default())
            .expect("loads"),
    );
    let replayed = engine("replayed.db", replay.clone());
    let again = run_to_rest(&replayed, spec(), "Explain.").await;
    assert_eq!(again.status, RunStatus::Completed);
    assert_eq!(
        server.requests().len(),
        2,
        "nothing reached the server on replay"
    );
    assert!(replay.is_finished() && replay.last_error().is_none());
    let hashes = |e: &Engine, run: &RunId| -> Vec<String> {
        history::transitions(e.store().as_ref(), run, 1, 10_000)
            .expect("reads")
            .iter()
            .map(|t| t.state_hash.to_hex())
            .collect()
    };
    assert_eq!(
        hashes(&recorded, &end.run_id),
        hashes(&replayed, &again.run_id)
    );
}
