//! Hostile input: files that are huge, not JSON, the wrong shape, or carry values no recorder
//! writes are refused with a typed error, never a panic.

use crate::support;

use proptest::prelude::*;
use runtape::cassette::{Cassette, CassetteError, LoadOptions};
use serde_json::json;
use support::cassette::*;

fn parse(text: &str) -> Result<Cassette, CassetteError> {
    Cassette::from_json(text, &LoadOptions::default())
}

fn good_text() -> String {
    record_default().to_json().expect("a recording serialises")
}

#[test]
fn text_that_is_not_a_cassette_is_malformed() {
    for text in [
        "",
        "   ",
        "not json",
        "[]",
        "null",
        "{\"version\": 2",
        "{\"version\": 2}",
        "{\"entries\": []}",
    ] {
        assert!(
            matches!(parse(text), Err(CassetteError::Malformed { .. })),
            "{text:?}: {:?}",
            parse(text)
        );
    }
}

#[test]
fn fields_of_the_wrong_type_or_unknown_fields_are_malformed_with_a_location() {
    let mut file: serde_json::Value = serde_json::from_str(&good_text()).expect("JSON");
    file["entries"][0]["turnIndex"] = json!("zero");
    let Err(CassetteError::Malformed { detail }) = parse(&file.to_string()) else {
        panic!("a string turnIndex is malformed");
    };
    assert!(
        detail.contains("line"),
        "serde's location is kept: {detail}"
    );

    let mut file: serde_json::Value = serde_json::from_str(&good_text()).expect("JSON");
    file["entries"][0]["chunk"] = json!(["typo"]);
    let error = parse(&file.to_string());
    assert!(
        matches!(&error, Err(CassetteError::Malformed { detail }) if detail.contains("unknown field `chunk`")),
        "{error:?}"
    );
}

#[test]
fn unknown_versions_are_named() {
    for (version, shown) in [
        (json!(5), "5"),
        (json!("2"), "\"2\""),
        (json!(2.5), "2.5"),
        (json!(null), "null"),
    ] {
        let mut file: serde_json::Value = serde_json::from_str(&good_text()).expect("JSON");
        file["version"] = version;
        file["newField"] = json!(true);
        assert_eq!(
            parse(&file.to_string()),
            Err(CassetteError::UnsupportedVersion {
                found: shown.into()
            })
        );
    }
}

#[test]
fn files_over_the_size_limit_are_refused_before_parsing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("huge.json");
    std::fs::write(&path, vec![b' '; 4096]).expect("writable");
    let options = LoadOptions {
        max_bytes: 1024,
        ..LoadOptions::default()
    };
    assert_eq!(
        Cassette::load(&path, &options),
        Err(CassetteError::TooLarge {
            size: 4096,
            limit: 1024
        })
    );
    assert!(matches!(
        load(&dir.path().join("missing.json")),
        Err(CassetteError::Io { action: "open", .. })
    ));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let text = format!("{{\"version\": 2, \"entries\": {deep}}}");
    assert!(matches!(parse(&text), Err(CassetteError::Malformed { .. })));
}

/// An edit of a cassette's JSON.
type Edit = fn(&mut serde_json::Value);

#[test]
fn values_no_recorder_writes_are_refused() {
    let cases: [(&str, Edit); 4] = [
        ("cassetteId", |f| f["cassetteId"] = json!("ABC")),
        ("promptHash", |f| {
            f["entries"][0]["promptHash"] = json!("../../etc/passwd")
        }),
        ("recordedAt", |f| f["recordedAt"] = json!("yesterday")),
        ("responseHash", |f| {
            f["entries"][0]["responseHash"] = json!("")
        }),
    ];
    for (field, edit) in cases {
        let mut file: serde_json::Value = serde_json::from_str(&good_text()).expect("JSON");
        edit(&mut file);
        let error = parse(&file.to_string());
        assert!(
            matches!(&error, Err(CassetteError::BadField { field: f, .. }) if *f == field),
            "{field}: {error:?}"
        );
    }
}

#[test]
fn an_integer_canonical_json_cannot_carry_is_refused_at_load() {
    let mut file: serde_json::Value = serde_json::from_str(&good_text()).expect("JSON");
    file["entries"][0]["response"]["reply"]["tool_calls"][0]["arguments"]["q"] =
        json!(9_007_199_254_740_993_u64);
    let error = parse(&file.to_string());
    assert!(
        matches!(&error, Err(CassetteError::Unencodable { detail, .. }) if detail.contains("/reply/tool_calls/0/arguments/q")),
        "{error:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Truncating or corrupting a good file anywhere gives an error, never a panic, and never
    /// a cassette that differs from the original.
    #[test]
    fn corrupted_files_never_panic(cut in 0usize..4000, flip in 0usize..4000, byte in any::<u8>()) {
        let good = good_text();
        let original = parse(&good).expect("the good file loads");
        let mut bytes = good.into_bytes();
        let at = flip % bytes.len();
        bytes[at] = byte;
        bytes.truncate(cut.max(1).min(bytes.len()));
        if let Ok(loaded) = Cassette::from_slice(&bytes, &LoadOptions::default()) {
            prop_assert_eq!(loaded, original);
        }
    }
}
