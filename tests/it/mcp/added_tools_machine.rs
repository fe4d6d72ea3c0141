//! The pure machine's rules for tools an MCP server adds after a run started (revision 4):
//! offered to `SERVER__*` grants (and, read-only ones, to agents without a grant list) from
//! the `ToolsListed` event that carries their definitions, checked against that schema, with
//! its flags; revision 3 keeps its rules byte for byte (the whole rev-3 history is a
//! snapshot).

use crate::support;

use runtape::machine::*;
use serde_json::json;
use support::machine::*;

/// A spec whose agent holds `grants` (with `fs__read`, found at start, a spec tool).
fn spec(revision: u32, grants: Option<Vec<&str>>) -> RunSpec {
    solo_with(|s| {
        s.semantics = revision;
        s.tools.push(ToolSpec {
            read_only: true,
            idempotent: true,
            ..ToolSpec::new("fs__read", "reads a file")
        });
        s.agents[0].tools = grants.map(|g| g.into_iter().map(str::to_owned).collect());
    })
}

/// `fs__stamp`: added later, non-idempotent, no approval, one required string argument.
fn stamp() -> ToolSpec {
    ToolSpec {
        schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        ..ToolSpec::new("fs__stamp", "stamps a file")
    }
}

/// `fs__wipe`: added later, needs approval.
fn wipe() -> ToolSpec {
    ToolSpec {
        requires_approval: true,
        ..ToolSpec::new("fs__wipe", "wipes a file")
    }
}

fn listed(tools: &[&str], added: Vec<ToolSpec>) -> EventBody {
    EventBody::ToolsListed {
        server: "fs".into(),
        catalog: Digest::of(tools.join(",").as_bytes()),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        added,
    }
}

fn offered(h: &Harness) -> Vec<String> {
    match h.history.last().and_then(|(_, t)| t.effects.first()) {
        Some(Effect::CallModel { request, .. }) => request.tools.clone(),
        other => panic!("no CallModel emitted: {other:?}"),
    }
}

/// Start, list `fs__read`, one model turn reading; then the server adds `fs__stamp` and
/// `fs__wipe` and the next boundary records the new list.
fn run_until_added(h: &mut Harness, added: Vec<ToolSpec>) {
    h.start("Stamp the file.");
    h.send(listed(&["fs__read"], Vec::new()));
    h.proceed();
    h.reply(ModelReply::tools(vec![call(
        "c1",
        "fs__read",
        json!({"path": "a"}),
    )]));
    h.tool_ok("c1", json!("contents"));
    h.send(listed(&["fs__read", "fs__stamp", "fs__wipe"], added));
    h.proceed();
}

#[test]
fn revision_4_offers_an_added_tool_to_a_server_wide_grant_and_checks_it_like_any_other() {
    let mut h = Harness::new(spec(4, Some(vec!["lookup", "fs__read", "fs__*"])));
    run_until_added(&mut h, vec![stamp(), wipe()]);
    assert_eq!(
        offered(&h),
        ["lookup", "fs__read", "fs__stamp", "fs__wipe"],
        "spec grants first, then the added tools in the server's order"
    );

    // Bad arguments are refused with the recorded schema's reason; nothing is performed.
    let t = h.called("c2", "fs__stamp", json!({}));
    assert!(!calls_a_tool(&t), "{:?}", t.effects);
    assert!(
        noted(
            &t,
            |n| matches!(n, Note::ToolInvalid { reason, .. } if reason.contains("text"))
        ),
        "{:?}",
        t.notes
    );

    // Good arguments: performed with an idempotency key; approval-flagged: a person is asked.
    h.proceed();
    let t = h
        .reply(ModelReply::tools(vec![
            call("c3", "fs__stamp", json!({"text": "hi"})),
            call("c4", "fs__wipe", json!({})),
        ]))
        .clone();
    assert!(effected(
        &t,
        |e| matches!(e, Effect::CallTool { tool, .. } if tool == "fs__stamp")
    ));
    assert!(effected(&t, |e| matches!(
        e,
        Effect::RequestInput { request, .. } if request.tool == "fs__wipe" && request.kind == InputKind::Approval
    )));
    // Interrupted mid-flight, the non-idempotent added tool follows the in-doubt policy.
    let t = h.in_doubt("c3").clone();
    assert_eq!(
        t.edge,
        EdgeId::CallingToolsInDoubtFail,
        "on_in_doubt = fail"
    );

    insta_settings()
        .bind(|| insta::assert_yaml_snapshot!("mcp_added_tools__revision_4", h.scenario()));
}

#[test]
fn revision_4_takes_an_added_tool_away_when_the_server_drops_it() {
    let mut h = Harness::new(spec(4, Some(vec!["fs__read", "fs__*"])));
    run_until_added(&mut h, vec![stamp(), wipe()]);
    h.reply(ModelReply::tools(vec![call("c2", "fs__read", json!({}))]));
    h.tool_ok("c2", json!("x"));
    h.send(listed(&["fs__read", "fs__wipe"], vec![wipe()]));
    h.proceed();
    assert_eq!(offered(&h), ["fs__read", "fs__wipe"]);
    let t = h.called("c3", "fs__stamp", json!({"text": "x"}));
    assert!(appended_text(&t, TOOL_UNAVAILABLE), "{:?}", t.appended);
}

#[test]
fn exact_grants_do_not_cover_added_tools_but_no_grant_list_covers_read_only_ones() {
    let read_only = ToolSpec {
        read_only: true,
        ..ToolSpec::new("fs__stat", "stats a file")
    };
    let mut exact = Harness::new(spec(4, Some(vec!["fs__read"])));
    run_until_added(&mut exact, vec![stamp(), wipe()]);
    assert_eq!(offered(&exact), ["fs__read"]);
    let t = exact.called("c2", "fs__stamp", json!({"text": "x"}));
    assert!(
        noted(
            &t,
            |n| matches!(n, Note::ToolRejected { tool, .. } if tool == "fs__stamp")
        ),
        "outside the grant: {:?}",
        t.notes
    );

    let mut open = Harness::new(spec(4, None));
    open.start("Look.");
    open.send(listed(
        &["fs__read", "fs__stamp", "fs__stat"],
        vec![stamp(), read_only],
    ));
    open.proceed();
    assert_eq!(offered(&open), ["lookup", "secret", "fs__read", "fs__stat"]);
}

#[test]
fn added_definitions_that_do_not_fit_are_refused() {
    let cases: Vec<(u32, EventBody, &str)> = vec![
        (
            3,
            listed(&["fs__read", "fs__stamp"], vec![stamp()]),
            "revision 3",
        ),
        (4, listed(&["fs__read"], vec![stamp()]), "not listed"),
        (
            4,
            listed(&["fs__read"], vec![ToolSpec::new("fs__read", "again")]),
            "already a tool",
        ),
        (
            4,
            listed(
                &["fs__read", "fs__bad"],
                vec![ToolSpec {
                    schema: json!({"type": 12}),
                    ..ToolSpec::new("fs__bad", "bad schema")
                }],
            ),
            "schema",
        ),
        (
            4,
            listed(&["fs__read", "fs__stamp"], vec![stamp(), stamp()]),
            "twice",
        ),
    ];
    for (revision, body, why) in cases {
        let grants = if revision < 4 {
            vec!["fs__read"]
        } else {
            vec!["fs__read", "fs__*"]
        };
        let mut h = Harness::new(spec(revision, Some(grants)));
        h.start("Go.");
        let event = h.event(body);
        let refused = step(&h.state, &event, &h.spec).expect_err(why);
        assert!(
            matches!(&refused, MachineError::BadListing(m) if m.contains(why)),
            "{why}: {refused}"
        );
    }
}

#[test]
fn a_server_wide_grant_is_refused_before_revision_4() {
    let mut stored =
        serde_json::to_value(spec(4, Some(vec!["fs__read", "fs__*"]))).expect("encodes");
    stored["semantics"] = json!(3);
    let err = serde_json::from_value::<RunSpec>(stored).expect_err("revision 3 has no `fs__*`");
    assert!(err.to_string().contains("fs__*"), "{err}");
}

#[test]
fn revision_3_never_offers_a_tool_the_server_added_and_keeps_its_history_byte_for_byte() {
    // Revision 3 stored the expanded grants only (no `fs__*`), and its lists carry no
    // definitions: the added tool is listed but not offered, and a call of it is unknown.
    let mut h = Harness::new(spec(3, Some(vec!["lookup", "fs__read"])));
    run_until_added(&mut h, Vec::new());
    assert_eq!(offered(&h), ["lookup", "fs__read"]);
    let t = h.called("c2", "fs__stamp", json!({"text": "x"}));
    assert!(
        noted(
            &t,
            |n| matches!(n, Note::ToolInvalid { reason, .. } if reason == "unknown tool")
        ),
        "{:?}",
        t.notes
    );
    h.proceed();
    h.reply(ModelReply::text("Done."));
    insta_settings()
        .bind(|| insta::assert_yaml_snapshot!("mcp_added_tools__revision_3", h.scenario()));
}
