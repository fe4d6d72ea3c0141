//! A delegated child's own MCP tool lists in a tree cassette (version 4): the builder puts a
//! child's lists in its section only when one changed during its run (its first included,
//! each at the count of the child's own entries), the envelope hash covers them, and a child
//! whose lists never changed writes its section exactly as before.

use runtape::cassette::{
    Cassette, CassetteBuilder, CassetteError, CassetteId, LoadOptions, Prompt, RecordOptions,
};
use runtape::machine::{AgentId, Message, ModelReply, Role};
use serde_json::{Value, json};

const RECORDED_AT: &str = "2025-01-31T12:00:00Z";

fn prompt(text: &str) -> Prompt {
    Prompt {
        messages: vec![Message::text(Role::User, text)],
        tools: Vec::new(),
        settings: Default::default(),
        output_schema: None,
    }
}

fn list(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"name": n, "description": "", "schema": {"type": "object"}}))
            .collect(),
    )
}

/// A tree: the top run lists `ops` and delegates; child `3.0` lists `ops`, makes a call, gets
/// a grown list, makes another; child `3.1` lists `ops` once and makes one call.
fn tree() -> Cassette {
    let options = RecordOptions {
        cassette_id: CassetteId::from_hex("0123456789abcdef0123456789abcdef"),
        ..RecordOptions::default()
    };
    let mut b = CassetteBuilder::new(options).expect("id given");
    // Each step: the section, who calls, the tools `ops` lists just before, what is asked.
    let steps: [(&str, &str, &[&str], &str); 4] = [
        ("", "lead", &["ops__status"], "delegate"),
        ("3.0", "worker", &["ops__status"], "status"),
        ("3.0", "worker", &["ops__status", "ops__stamp"], "stamp"),
        ("3.1", "worker", &["ops__status"], "status"),
    ];
    for (path, agent, tools, asked) in steps {
        b.add_catalog_in(path, "ops", list(tools)).expect("a list");
        let reply = Ok(ModelReply::text("ok"));
        b.push_in(path, &AgentId::from(agent), prompt(asked), reply, vec![])
            .expect("a call");
    }
    b.finish(RECORDED_AT, "export:run-1").expect("valid time")
}

#[test]
fn a_childs_changed_lists_go_to_its_section_and_a_steady_childs_add_nothing() {
    let cassette = tree();
    assert!(
        cassette.catalog_changes().is_empty(),
        "no list of the top run changed"
    );
    assert_eq!(cassette.catalogs()["ops"], list(&["ops__status"]));
    let own: Vec<(&str, u64, &Value)> = cassette
        .catalog_changes_in("3.0")
        .iter()
        .map(|c| (c.server.as_str(), c.at_entry, &c.catalog))
        .collect();
    assert_eq!(
        own,
        [
            ("ops", 0, &list(&["ops__status"])),
            ("ops", 1, &list(&["ops__status", "ops__stamp"]))
        ]
    );
    assert!(cassette.catalog_changes_in("3.1").is_empty());
    let file: Value = serde_json::from_str(&cassette.to_json().expect("json")).expect("json");
    assert!(
        file["children"][1].get("catalogChanges").is_none(),
        "a steady child's section is written as before: {}",
        file["children"][1]
    );
    let again = Cassette::from_json(&cassette.to_json().expect("json"), &LoadOptions::default())
        .expect("loads");
    assert_eq!(again, cassette);
}

#[test]
fn an_edited_or_dropped_child_list_fails_the_envelope_hash() {
    let text = tree().to_json().expect("json");
    let file: Value = serde_json::from_str(&text).expect("json");
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit); 3] = [
        ("a tool renamed", |f| {
            f["children"][0]["catalogChanges"][1]["catalog"][1]["name"] = json!("ops__deploy");
        }),
        ("moved to another entry", |f| {
            f["children"][0]["catalogChanges"][1]["atEntry"] = json!(0);
        }),
        ("dropped", |f| {
            f["children"][0]
                .as_object_mut()
                .expect("section")
                .remove("catalogChanges");
        }),
    ];
    for (what, edit) in edits {
        let mut edited = file.clone();
        edit(&mut edited);
        let error =
            Cassette::from_json(&edited.to_string(), &LoadOptions::default()).expect_err(what);
        assert_eq!(error, CassetteError::EnvelopeEdited, "{what}");
        assert_eq!(error.to_string().lines().count(), 1, "{what}");
    }
}
