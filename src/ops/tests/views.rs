//! The views serialise to what `--json` printed before they were types: the same keys, the
//! same `type`, integers past 2^53 as strings, a failed verification's `column` as `null`.

use serde_json::{Value, json};

use super::super::{self as ops, VerifyView};
use super::{APPROVAL, start_file};
use crate::exec::Engine;
use crate::history::Divergence;
use crate::machine::RunId;

fn json(v: &impl serde::Serialize) -> Value {
    serde_json::from_str(&ops::json::encode(v).expect("encodes")).expect("is JSON")
}

#[tokio::test]
async fn a_run_view_has_the_keys_ls_json_printed_and_nothing_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::in_memory();
    let end = start_file(&engine, dir.path(), APPROVAL)
        .await
        .wait()
        .await
        .expect("rests");
    let mut view = ops::runs(engine.store().as_ref())
        .expect("lists")
        .pop()
        .expect("one run");
    let v = json(&view);
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cost_known",
            "cost_nanos",
            "created_ms",
            "delegated_by",
            "driver",
            "goal",
            "id",
            "parent",
            "session",
            "session_index",
            "session_kind",
            "state",
            "status",
            "steps",
            "tokens",
            "type",
            "unpriced_turns",
            "updated_ms"
        ]
    );
    assert_eq!(v["type"], "run");
    assert_eq!(v["id"], end.run_id.as_str());
    assert_eq!(v["status"], "awaiting_input");
    assert_eq!(v["state"], "awaiting_input");
    assert_eq!((&v["parent"], &v["session"]), (&Value::Null, &Value::Null));
    view.cost_nanos = (1 << 53) + 1;
    assert_eq!(json(&view)["cost_nanos"], json!("9007199254740993"));
    view.cost_nanos = 1 << 53;
    assert_eq!(json(&view)["cost_nanos"], json!(9_007_199_254_740_992u64));
}

#[test]
fn a_failed_verification_names_the_run_and_the_place_with_column_null() {
    let view = VerifyView {
        run: RunId::new("r1"),
        result: Err(Divergence {
            seq: 3,
            column: None,
            what: "state hash".into(),
            expected: "aa".into(),
            found: "bb".into(),
        }),
    };
    assert_eq!(
        json(&view),
        json!({"type": "verify", "ok": false, "run": "r1", "seq": 3, "column": null,
               "what": "state hash", "expected": "aa", "found": "bb"})
    );
    let e = view.check().expect_err("does not verify");
    assert_eq!(
        (e.code(), e.kind()),
        ("does_not_verify", ops::ErrorKind::CheckFailed)
    );
    assert_eq!(
        e.to_string(),
        "run r1 does not verify: seq 3: state hash: expected aa, found bb"
    );
}
