//! Integrity: a good cassette is written to disk, edited there the way a person or a script
//! would, and loading it fails with the error that names the tamper.

use crate::support;

use std::path::PathBuf;

use runtape::cassette::{Cassette, CassetteError, LoadOptions, RecordOptions};
use serde_json::{Value, json};
use support::cassette::*;
use tempfile::TempDir;

/// A freshly recorded cassette saved in a new temp dir.
fn good_file() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = save(&record_default(), dir.path(), "geo.json");
    assert!(load(&path).is_ok(), "the untouched file loads");
    (dir, path)
}

fn strict() -> LoadOptions {
    LoadOptions {
        require_integrity: true,
        ..LoadOptions::default()
    }
}

/// Loading the cassette at `path` is refused: turn `turn`'s `part` was edited.
fn refused_as_edited(path: &std::path::Path, turn: u64, part: &'static str) {
    assert_eq!(load(path), Err(CassetteError::EntryEdited { turn, part }));
}

#[test]
fn an_edited_response_is_refused() {
    let (_dir, path) = good_file();
    edit_text(
        &path,
        "The capital of France is Paris.",
        "The capital of France is Lyon.",
    );
    refused_as_edited(&path, 2, "response");
}

#[test]
fn edited_tool_arguments_and_chunks_are_refused() {
    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["entries"][1]["response"]["reply"]["tool_calls"][0]["arguments"]["text"] = json!("Rome")
    });
    refused_as_edited(&path, 1, "response");

    let (_dir, path) = good_file();
    edit_json(&path, |f| f["entries"][2]["chunks"][0] = json!("Lyon"));
    refused_as_edited(&path, 2, "response");
}

#[test]
fn an_entry_spliced_from_another_cassette_is_refused() {
    let (_dir, path) = good_file();
    let other_dir = tempfile::tempdir().expect("temp dir");
    let mut other_replies = replies();
    other_replies[1] = runtape::machine::ModelReply::text("I refuse to write that down.");
    let model = std::sync::Arc::new(runtape::provider::ScriptedProvider::replies(
        "geo-model",
        other_replies,
    ));
    let (other, _) = record_with(model, RecordOptions::default(), &requests()[..3]);
    let other_path = save(&other, other_dir.path(), "other.json");
    let other_text = std::fs::read_to_string(&other_path).expect("saved");
    let other_file: Value = serde_json::from_str(&other_text).expect("JSON");

    edit_json(&path, |f| {
        f["entries"][1] = other_file["entries"][1].clone()
    });
    assert_eq!(load(&path), Err(CassetteError::EntrySpliced { turn: 1 }));
}

#[test]
fn an_edited_envelope_field_is_refused() {
    for (field, value) in [
        ("recordedProvider", json!("openai:gpt-5")),
        ("recordedAt", json!("2031-01-01T00:00:00Z")),
        ("agentId", json!("someone-else")),
        ("hashFilter", json!("date-v1")),
    ] {
        let (_dir, path) = good_file();
        edit_json(&path, |f| f[field] = value);
        assert_eq!(
            load(&path),
            Err(CassetteError::EnvelopeEdited),
            "editing {field}"
        );
    }
}

#[test]
fn a_removed_last_entry_is_refused() {
    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["entries"].as_array_mut().expect("entries").pop();
    });
    assert_eq!(load(&path), Err(CassetteError::EnvelopeEdited));
}

#[test]
fn reordered_or_renumbered_entries_are_refused_at_load() {
    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["entries"].as_array_mut().expect("entries").swap(0, 1)
    });
    assert_eq!(
        load(&path),
        Err(CassetteError::TurnOrder {
            position: 0,
            found: 1
        })
    );

    let (_dir, path) = good_file();
    edit_json(&path, |f| f["entries"][2]["turnIndex"] = json!(5));
    assert_eq!(
        load(&path),
        Err(CassetteError::TurnOrder {
            position: 2,
            found: 5
        })
    );

    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["entries"].as_array_mut().expect("entries").remove(1);
    });
    assert_eq!(
        load(&path),
        Err(CassetteError::TurnOrder {
            position: 1,
            found: 2
        })
    );
}

/// The good file rewritten as version 1: `version` lowered, the version-2 fields removed.
fn as_version_1(f: &mut Value) {
    f["version"] = json!(1);
    let envelope = f.as_object_mut().expect("object");
    envelope.remove("cassetteId");
    envelope.remove("envelopeHash");
    for entry in f["entries"].as_array_mut().expect("entries") {
        entry
            .as_object_mut()
            .expect("object")
            .remove("responseHash");
    }
}

#[test]
fn a_version_1_cassette_carrying_version_2_fields_is_a_downgrade() {
    let (_dir, path) = good_file();
    edit_json(&path, |f| f["version"] = json!(1));
    assert_eq!(
        load(&path),
        Err(CassetteError::Downgrade {
            field: "cassetteId"
        })
    );

    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["version"] = json!(1);
        f.as_object_mut().expect("object").remove("cassetteId");
        f.as_object_mut().expect("object").remove("envelopeHash");
        f["entries"][2]["response"]["reply"]["text"] = json!("Lyon.");
    });
    assert_eq!(
        load(&path),
        Err(CassetteError::Downgrade {
            field: "responseHash"
        })
    );
    assert_eq!(
        Cassette::load(&path, &strict()),
        Err(CassetteError::Downgrade {
            field: "responseHash"
        })
    );
}

#[test]
fn version_1_loads_without_integrity_unless_integrity_is_required() {
    let (_dir, path) = good_file();
    edit_json(&path, as_version_1);
    let v1 = load(&path).expect("version 1 has no hashes to check");
    assert_eq!(v1.version(), 1);
    assert_eq!(v1.cassette_id(), None);
    assert_eq!(v1.len(), 3);
    assert_eq!(
        Cassette::load(&path, &strict()),
        Err(CassetteError::IntegrityRequired)
    );

    // Version 1 still has its turn order checked.
    edit_json(&path, |f| {
        f["entries"].as_array_mut().expect("entries").swap(1, 2)
    });
    assert_eq!(
        load(&path),
        Err(CassetteError::TurnOrder {
            position: 1,
            found: 2
        })
    );
}

#[test]
fn a_stored_prompt_edited_by_hand_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = RecordOptions {
        store_prompts: true,
        ..RecordOptions::default()
    };
    let (cassette, _) = record_with(model(), options, &requests()[..3]);
    let path = save(&cassette, dir.path(), "geo.json");
    assert!(load(&path).is_ok());
    edit_text(
        &path,
        "You are a geography assistant.",
        "You are a history assistant.",
    );
    refused_as_edited(&path, 0, "prompt");
}

#[test]
fn a_version_2_cassette_missing_its_hashes_is_refused() {
    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f["entries"][1]
            .as_object_mut()
            .expect("object")
            .remove("responseHash");
    });
    assert!(matches!(
        load(&path),
        Err(CassetteError::MissingField { field: "responseHash", ref location }) if location == "entry 1"
    ));
    let (_dir, path) = good_file();
    edit_json(&path, |f| {
        f.as_object_mut().expect("object").remove("envelopeHash");
    });
    assert!(matches!(
        load(&path),
        Err(CassetteError::MissingField {
            field: "envelopeHash",
            ..
        })
    ));
}
