//! Runs keep the machine rules they started with. A spec stored by runtape 0.1.0 has no
//! `semantics` field and follows revision 1; new specs follow the current revision. Replaying
//! an old history under revision 1 must give the old states (no cooldowns, sticky fallback,
//! every `retry_after` waited for), or `verify` of an old run would fail after an upgrade.

use crate::support;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

fn unavailable(retry_after_ms: Option<u64>) -> ModelFailure {
    ModelFailure {
        retry_after_ms,
        status: Some(503),
        ..ModelFailure::new(ProviderErrorClass::ProviderUnavailable, "down")
    }
}

fn called_route(h: &Harness) -> u32 {
    match h.history.last().and_then(|(_, t)| t.effects.first()) {
        Some(Effect::CallModel { request, .. }) => request.route,
        other => panic!("no CallModel emitted: {other:?}"),
    }
}

fn spec_at(revision: u32) -> RunSpec {
    solo_with(|s| {
        s.agents[0].routes[0].max_attempts = 1;
        s.agents[0].routes[0].cooldown_ms = TICK_MS;
        s.semantics = revision;
    })
}

/// The route of each model call over: fail on the primary, a tool round on the fallback,
/// then the next turn well after the primary's cooldown ended.
fn routes_over_a_fallback(revision: u32) -> (Vec<u32>, bool) {
    let mut h = Harness::new(spec_at(revision));
    h.start("Find it.");
    h.proceed();
    let mut routes = vec![called_route(&h)];
    h.fail(unavailable(None));
    routes.push(called_route(&h));
    let cooled = !h.state.data().expect("started").cooldowns.is_empty();
    h.reply(ModelReply::tools(vec![call(
        "c1",
        "lookup",
        json!({"q": "a"}),
    )]));
    h.tool_ok("c1", json!("a"));
    h.clock += 100 * TICK_MS;
    h.proceed();
    routes.push(called_route(&h));
    (routes, cooled)
}

#[test]
fn revision_1_keeps_the_fallback_for_the_activation_and_records_no_cooldown() {
    assert_eq!(routes_over_a_fallback(1), (vec![0, 1, 1], false));
}

#[test]
fn the_current_revision_cools_the_primary_down_and_returns_to_it() {
    assert_eq!(routes_over_a_fallback(SEMANTICS), (vec![0, 1, 0], true));
}

#[test]
fn revision_1_waits_for_any_retry_after() {
    let retry_after = MAX_RETRY_AFTER_MS * 2;
    let edge_after = |revision: u32| {
        let mut h = Harness::new(solo_with(|s| s.semantics = revision));
        h.start("Find it.");
        h.proceed();
        h.fail(unavailable(Some(retry_after)));
        h.history.last().expect("a transition").1.edge
    };
    assert_eq!(edge_after(1), "generating.failed.retry");
    assert_eq!(edge_after(SEMANTICS), "generating.failed.fallback");
}

#[test]
fn a_stored_spec_without_a_revision_is_revision_1_and_new_specs_are_current() {
    let mut stored = serde_json::to_value(solo()).expect("serialises");
    assert_eq!(stored["semantics"], json!(SEMANTICS), "new specs store it");
    stored.as_object_mut().expect("object").remove("semantics");
    let old: RunSpec = serde_json::from_value(stored.clone()).expect("loads");
    assert_eq!(old.spec().semantics, FIRST_SEMANTICS);
    stored["semantics"] = json!(SEMANTICS + 1);
    let err = serde_json::from_value::<RunSpec>(stored).expect_err("a newer revision");
    assert!(err.to_string().contains("upgrade"), "{err}");
}

/// A spec whose agent is granted `lookup` and two MCP tools of server `fs` (as a spec file's
/// `[[mcp]]` grants are stored: the tools in the spec, the grants expanded), at `revision`.
fn mcp_spec(revision: u32) -> RunSpec {
    solo_with(|s| {
        s.semantics = revision;
        s.tools.push(ToolSpec {
            read_only: true,
            ..ToolSpec::new("fs__read", "reads a file")
        });
        s.tools.push(ToolSpec::new("fs__remove", "removes a file"));
        s.agents[0].tools = Some(vec![
            "lookup".into(),
            "fs__read".into(),
            "fs__remove".into(),
        ]);
    })
}

fn listed(tools: &[&str]) -> EventBody {
    EventBody::ToolsListed {
        server: "fs".into(),
        catalog: Digest::of(tools.join(",").as_bytes()),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        added: Vec::new(),
    }
}

fn offered(h: &Harness) -> (Vec<String>, serde_json::Value) {
    match h.history.last().and_then(|(_, t)| t.effects.first()) {
        Some(effect @ Effect::CallModel { request, .. }) => (
            request.tools.clone(),
            serde_json::to_value(effect).expect("encodes")["request"]["catalogs"].clone(),
        ),
        other => panic!("no CallModel emitted: {other:?}"),
    }
}

#[test]
fn a_tool_list_is_an_input_only_from_revision_3() {
    for revision in [1, 2] {
        let mut h = Harness::new(mcp_spec(revision));
        h.start("Tidy up.");
        let event = h.event(listed(&["fs__read"]));
        let refused =
            step(&h.state, &event, &h.spec).expect_err("no ToolsListed before revision 3");
        assert!(
            matches!(refused, MachineError::InvalidTransition { .. }),
            "{refused}"
        );
        // Phase-A runs offer every granted tool, and their requests name no catalog: their
        // effects' bytes are what they were.
        h.proceed();
        let (tools, catalogs) = offered(&h);
        assert_eq!(tools, ["lookup", "fs__read", "fs__remove"]);
        assert_eq!(catalogs, serde_json::Value::Null);
    }
}

#[test]
fn revision_3_offers_the_granted_mcp_tools_the_latest_list_has() {
    let mut h = Harness::new(mcp_spec(3));
    h.start("Tidy up.");
    let t = h.send(listed(&["fs__read", "fs__remove"])).clone();
    assert_eq!(t.edge, EdgeId::PreparingToolsListed);
    assert!(t.effects.is_empty());
    h.proceed();
    let (tools, catalogs) = offered(&h);
    assert_eq!(tools, ["lookup", "fs__read", "fs__remove"]);
    assert_eq!(
        catalogs,
        json!({"fs": Digest::of(b"fs__read,fs__remove").to_hex()})
    );

    // The model reads; then the server drops `remove` and the next boundary records it.
    h.reply(ModelReply::tools(vec![call("c1", "fs__read", json!({}))]));
    h.tool_ok("c1", json!("contents"));
    h.send(listed(&["fs__read"]));
    h.proceed();
    let (tools, catalogs) = offered(&h);
    assert_eq!(
        tools,
        ["lookup", "fs__read"],
        "the dropped tool is not offered"
    );
    assert_eq!(catalogs, json!({"fs": Digest::of(b"fs__read").to_hex()}));

    // A model that calls it anyway is told it is unavailable; nothing is performed.
    let t = h.called("c2", "fs__remove", json!({}));
    assert!(!calls_a_tool(&t), "{:?}", t.effects);
    assert!(appended_text(&t, TOOL_UNAVAILABLE), "{:?}", t.appended);
}

#[test]
fn a_tool_list_naming_another_servers_tool_is_refused() {
    let mut h = Harness::new(mcp_spec(3));
    h.start("Tidy up.");
    let body = EventBody::ToolsListed {
        server: "fs".into(),
        catalog: Digest::ZERO,
        tools: vec!["web__fetch".into()],
        added: Vec::new(),
    };
    let event = h.event(body);
    let refused = step(&h.state, &event, &h.spec).expect_err("refused");
    assert!(matches!(refused, MachineError::BadListing(_)), "{refused}");
}

/// Sessions and the retriever are revision 5's: a spec of an older revision cannot ask for
/// either, and a stored run of one never begins with a session's history — so runs recorded
/// before them replay exactly as they were.
#[test]
fn sessions_and_the_retriever_are_revision_5s_only() {
    for revision in 1..5 {
        let base = Spec {
            agents: vec![solo_agent()],
            tools: tools(),
            semantics: revision,
            ..Spec::default()
        };
        let retrieving = Spec {
            retriever: Some(RetrieverSpec {
                agents: None,
                results: Default::default(),
            }),
            ..base.clone()
        };
        let refused = RunSpec::build(retrieving).expect_err("no retriever before revision 5");
        assert!(refused.to_string().contains("revision 5"), "{refused}");
        let in_session = Spec {
            session: Some(SessionSpec {
                name: "chat".into(),
                index: 2,
                previous: Some(RunId::new(PREVIOUS)),
                window: SessionWindow::Messages(4),
                summarizer: None,
                replayed: false,
            }),
            ..base.clone()
        };
        let refused = RunSpec::build(in_session).expect_err("no session before revision 5");
        assert!(refused.to_string().contains("revision 5"), "{refused}");
        // An old run's spec has neither, so `SessionStart` never applies to it.
        let mut h = Harness::new(RunSpec::build(base).expect("valid"));
        let seed = seed(vec![("solo", chat("be careful", 1))]);
        assert!(matches!(
            h.try_send(EventBody::SessionStart {
                goal: "g".into(),
                seed
            }),
            Err(MachineError::BadSessionSeed(_))
        ));
    }
    assert_eq!(SEMANTICS, 7);
    assert_eq!((SESSION_SEMANTICS, RETRIEVAL_SEMANTICS), (5, 5));
    assert_eq!(SHA256_HISTORY_SEMANTICS, 6);
    assert_eq!(TRUNCATION_SEMANTICS, 7);
}

/// Revision 6 took a reply cut by the output-token limit as a whole answer; revision 7 asks
/// again with twice the limit (the default `on_truncated`), so a run recorded under 6 still
/// replays to its answer.
#[test]
fn a_cut_reply_is_an_answer_before_revision_7_and_retried_from_it() {
    let cut = ModelReply {
        finish_reason: FinishReason {
            raw: Some("length".into()),
            normalized: Some(Finish::Length),
        },
        ..ModelReply::text("The answer is")
    }
    .with_usage(10, 64);
    let mut old = Harness::new(solo_with(|s| s.semantics = 6));
    old.start("g");
    old.proceed();
    assert_eq!(old.reply(cut.clone()).edge, EdgeId::GeneratingRepliedAnswer);
    old.proceed();
    assert_eq!(old.state.outcome(), Some(&answered("The answer is")));
    let mut new = Harness::new(solo());
    new.start("g");
    new.proceed();
    assert_eq!(new.reply(cut).edge, EdgeId::GeneratingRepliedTruncatedRetry);
    new.proceed();
    match new.history.last().and_then(|(_, t)| t.effects.first()) {
        Some(Effect::CallModel { request, .. }) => {
            assert_eq!(request.max_output_tokens, Some(128))
        }
        other => panic!("no CallModel emitted: {other:?}"),
    }
}
