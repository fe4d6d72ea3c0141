//! The signed bytes are RFC 8785 canonical JSON: pinned by known vectors, independent of key
//! order and number spelling, and exact for values (like HLCs) beyond 2^53.

use runtape::machine::{AgentId, Hlc, RunId};
use runtape::receipt::*;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hex_to_64(text: &str) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex");
    }
    out
}

const REQUEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const RESPONSE: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn draft() -> ReceiptDraft {
    ReceiptDraft {
        run_id: RunId::new("run-1"),
        seq: 7,
        kind: ReceiptKind::Tool,
        agent: AgentId::new("researcher"),
        request_hash: REQUEST.into(),
        response_hash: RESPONSE.into(),
        // Keys that sort differently by UTF-8 bytes and by UTF-16 code units; floats with
        // non-canonical spellings.
        usage: Some(json!({"\u{fb33}": 1, "\u{1f600}": 2.50, "input_tokens": 1000.0})),
        cost: Some(1200),
        hlc: Hlc::new(1_700_000_000_000, 3),
        child: None,
    }
}

/// Worked out by hand from RFC 8785: keys sorted by UTF-16 code units (U+1F600 is the
/// surrogate pair D83D DE00, which sorts before U+FB33), shortest number forms, no whitespace,
/// hlc as a decimal string.
const EXPECTED: &str = concat!(
    r#"{"agent":"researcher","cost":1200,"hlc":"111411200000000003","kind":"tool","#,
    r#""parent_sig":null,"#,
    r#""request_hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","#,
    r#""response_hash":"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210","#,
    r#""run_id":"run-1","seq":7,"usage":{"input_tokens":1000,"#,
    "\"\u{1f600}\":2.5,\"\u{fb33}\":1}}"
);

#[test]
fn the_signed_bytes_are_the_rfc8785_form_of_the_body() {
    let key = SigningKey::from_bytes(&[42; 32]);
    let public = key.verifying_key();
    let receipt = ReceiptSigner::from_signing_key(key)
        .seal(None, draft())
        .expect("valid draft");
    let bytes = receipt.body.canonical_bytes();
    assert_eq!(String::from_utf8(bytes).expect("UTF-8"), EXPECTED);

    // The signature is over exactly those bytes.
    let Seal::Ed25519 { signature, .. } = &receipt.seal else {
        panic!("a keyed signer signs");
    };
    let signature = ed25519_dalek::Signature::from_bytes(&hex_to_64(signature));
    public
        .verify_strict(EXPECTED.as_bytes(), &signature)
        .expect("the signature covers the canonical bytes");

    // An unsigned receipt's digest (and link) is their SHA-256.
    let unsigned = ReceiptSigner::unsigned()
        .seal(None, draft())
        .expect("valid draft");
    assert_eq!(
        unsigned.seal,
        Seal::Unsigned {
            digest: sha256_hex(EXPECTED.as_bytes())
        }
    );
    assert_eq!(unsigned.link(), sha256_hex(EXPECTED.as_bytes()));
}

#[test]
fn canonical_bytes_do_not_depend_on_how_the_body_was_written() {
    let body = ReceiptBody::from_draft(draft(), None);
    let scrambled = r#"{
        "usage": {"input_tokens": 1e3, "\ufb33": 1, "\ud83d\ude00": 2.5},
        "seq": 7, "run_id": "run-1", "parent_sig": null, "kind": "tool", "hlc": "111411200000000003",
        "response_hash": "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        "request_hash": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "cost": 1200, "agent": "researcher"
    }"#;
    let parsed: ReceiptBody = serde_json::from_str(scrambled).expect("a valid body");
    assert_eq!(parsed.canonical_bytes(), body.canonical_bytes());
}

#[test]
fn hlc_is_a_canonical_decimal_string() {
    let body = serde_json::to_value(ReceiptBody::from_draft(draft(), None)).expect("serialises");
    assert_eq!(body["hlc"], json!("111411200000000003"));
    let mut as_number = body.clone();
    as_number["hlc"] = json!(111_411_200_000_000_003_u64);
    assert!(serde_json::from_value::<ReceiptBody>(as_number).is_err());
    let mut padded = body;
    padded["hlc"] = json!("0111411200000000003");
    assert!(serde_json::from_value::<ReceiptBody>(padded).is_err());
}

#[test]
fn integers_that_canonical_json_would_round_are_refused() {
    let signer = ReceiptSigner::unsigned();
    let mut big_seq = draft();
    big_seq.seq = MAX_SAFE_INTEGER + 1;
    assert!(matches!(
        signer.seal(None, big_seq),
        Err(ReceiptError::InvalidField { .. })
    ));
    let mut ok_seq = draft();
    ok_seq.seq = MAX_SAFE_INTEGER;
    assert!(signer.seal(None, ok_seq).is_ok());
    let mut big_usage = draft();
    big_usage.usage = Some(json!({"nested": [{"tokens": -9_007_199_254_740_993_i64}]}));
    let err = signer.seal(None, big_usage).expect_err("rounded by JCS");
    assert!(err.to_string().contains("usage"), "{err}");
}

#[test]
fn hash_json_matches_the_rfc8785_sample() {
    // RFC 8785 §3.2.2 input and its canonical output.
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let output = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
    let value: Value = serde_json::from_str(input).expect("valid JSON");
    assert_eq!(hash_json(&value), sha256_hex(output.as_bytes()));
}

#[test]
fn hash_json_ignores_key_order_and_spelling_but_not_content() {
    let a = json!({"b": 1, "a": [1.0, "x"]});
    let b: Value = serde_json::from_str(r#"{ "a" : [ 1, "x" ], "b" : 1.0 }"#).expect("valid");
    assert_eq!(hash_json(&a), hash_json(&b));
    assert_ne!(hash_json(&a), hash_json(&json!({"b": 1, "a": [1, "y"]})));
    assert_eq!(hash_json(&a).len(), 64);
}

mod fast_path {
    use proptest::prelude::*;
    use runtape::machine::{AgentId, Hlc, RunId};
    use runtape::receipt::{ReceiptBody, ReceiptKind};
    use serde_json::{Map, Value};

    fn usage() -> impl Strategy<Value = Option<Value>> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u32>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
            Just(Value::Null)
        ];
        let tree = leaf.prop_recursive(3, 16, 4, |inner| {
            prop::collection::btree_map("[a-z_]{1,6}|.{0,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
        });
        prop::option::of(
            prop::collection::btree_map("[a-z_]{1,12}", tree, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        )
    }

    proptest! {
        /// The serde_json fast path of `canonical_bytes` writes exactly RFC 8785 (as the
        /// canonicaliser crate does) for any body: any text, any integers.
        #[test]
        fn canonical_bytes_match_rfc8785(
            run in ".{0,24}", agent in ".{0,24}", seq in any::<u64>(), hlc in any::<u64>(),
            cost in prop::option::of(any::<u64>()), tool in any::<bool>(), usage in usage(),
            req in "[0-9a-f]{64}", resp in ".{0,70}", parent in prop::option::of(".{0,130}"),
        ) {
            let body = ReceiptBody {
                run_id: RunId::new(run),
                seq,
                kind: if tool { ReceiptKind::Tool } else { ReceiptKind::Model },
                agent: AgentId::new(agent),
                request_hash: req,
                response_hash: resp,
                usage,
                cost,
                hlc: Hlc(hlc),
                child: None,
                parent_sig: parent,
            };
            let reference = serde_json_canonicalizer::to_vec(&body).expect("canonicalises");
            let fast = body.canonical_bytes();
            prop_assert_eq!(String::from_utf8_lossy(&fast), String::from_utf8_lossy(&reference));
        }
    }
}
