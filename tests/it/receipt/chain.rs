//! Receipt chains that should verify: signed and unsigned, in memory and through JSONL, and the
//! signer's refusal to build chains that could not.

use crate::support::receipt::sealed;
use runtape::machine::{AgentId, Hlc, RunId};
use runtape::receipt::*;
use serde_json::json;

const RUN: &str = "run-01HZX";

/// Receipt `i` of a test run: alternating model turns (with usage and cost) and tool calls,
/// seqs 1, 3, 5, ...
fn draft(i: u64) -> ReceiptDraft {
    let model = i.is_multiple_of(2);
    ReceiptDraft {
        run_id: RunId::new(RUN),
        seq: 2 * i + 1,
        kind: if model {
            ReceiptKind::Model
        } else {
            ReceiptKind::Tool
        },
        agent: AgentId::new(if i < 10 { "planner" } else { "writer" }),
        request_hash: hash_json(&json!({"messages": [{"role": "user", "content": i}]})),
        response_hash: hash_json(&json!({"content": format!("reply {i}")})),
        usage: model.then(|| json!({"input_tokens": 100 + i, "output_tokens": 7})),
        cost: model.then_some(1_500 * i),
        hlc: Hlc::new(1_700_000_000_000 + 40 * i, (i % 3) as u16),
        child: None,
    }
}

fn signer() -> ReceiptSigner {
    ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[11; 32]))
}

fn jsonl_round_trip(receipts: &[Receipt]) -> (String, Vec<Receipt>) {
    let mut buf = Vec::new();
    write_jsonl(&mut buf, receipts).expect("writing to a Vec succeeds");
    let text = String::from_utf8(buf).expect("JSONL is UTF-8");
    let back = read_jsonl(text.as_bytes()).expect("an export reads back");
    (text, back)
}

#[test]
fn twenty_signed_receipts_verify() {
    let signer = signer();
    let key = signer
        .verifying_key()
        .expect("a keyed signer has a public key");
    let receipts = sealed(&signer, 20, draft);
    assert_eq!(receipts[0].body.parent_sig, None);
    for pair in receipts.windows(2) {
        assert_eq!(
            pair[1].body.parent_sig.as_deref(),
            Some(pair[0].link().as_str())
        );
        assert_eq!(pair[0].key_id(), Some(public_key_hex(&key).as_str()));
    }

    let report = verify_chain(&receipts, Some(&key)).expect("an untouched chain verifies");
    assert_eq!(report.receipts, 20);
    assert_eq!(
        report.integrity,
        Integrity::Signed {
            key_id: public_key_hex(&key)
        }
    );
    assert_eq!(report.runs, vec![RunId::new(RUN)]);
    assert_eq!(report.tip, receipts.last().map(Receipt::link));
    assert!(
        report
            .to_string()
            .starts_with("20 receipts verified: signed by key")
    );
    check_run(&receipts, &RunId::new(RUN)).expect("one run");
}

#[test]
fn jsonl_export_reads_back_identical_and_verifies() {
    let signer = signer();
    let key = signer.verifying_key().expect("keyed");
    let receipts = sealed(&signer, 20, draft);
    let (text, back) = jsonl_round_trip(&receipts);
    assert_eq!(text.lines().count(), 20);
    assert!(text.ends_with('\n'));
    assert_eq!(back, receipts);
    verify_chain(&back, Some(&key)).expect("the re-read chain verifies");

    // Export is canonical: writing the re-read receipts gives the same bytes.
    let (again, _) = jsonl_round_trip(&back);
    assert_eq!(again, text);
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or_default()).expect("JSON line");
    assert_eq!(first["seal"]["scheme"], "ed25519");
    assert_eq!(first["body"]["parent_sig"], serde_json::Value::Null);
    assert!(first["body"]["hlc"].is_string(), "hlc is a decimal string");
}

#[test]
fn malformed_jsonl_lines_are_named_by_number() {
    let receipts = sealed(&signer(), 3, draft);
    let (text, _) = jsonl_round_trip(&receipts);
    let lines: Vec<&str> = text.lines().collect();

    let broken = format!("{}\n{}\n{{\"body\": 1}}\n", lines[0], lines[1]);
    let err = read_jsonl(broken.as_bytes()).expect_err("line 3 is not a receipt");
    assert!(
        matches!(err, ReceiptError::MalformedLine { line: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("line 3"));

    let blank = format!("{}\n\n{}\n", lines[0], lines[1]);
    let err = read_jsonl(blank.as_bytes()).expect_err("an empty line is refused");
    assert!(
        matches!(err, ReceiptError::MalformedLine { line: 2, .. }),
        "{err}"
    );

    let extra = lines[1].replacen("{\"body\":", "{\"note\":\"hi\",\"body\":", 1);
    let unknown = format!("{}\n{extra}\n", lines[0]);
    let err = read_jsonl(unknown.as_bytes()).expect_err("unknown fields are refused");
    assert!(
        matches!(err, ReceiptError::MalformedLine { line: 2, .. }),
        "{err}"
    );

    let sealed_extra = lines[1].replacen("\"scheme\":", "\"x\":1,\"scheme\":", 1);
    assert_ne!(sealed_extra, lines[1]);
    let unknown = format!("{}\n{sealed_extra}\n", lines[0]);
    let err = read_jsonl(unknown.as_bytes()).expect_err("unknown seal fields are refused");
    assert!(
        matches!(err, ReceiptError::MalformedLine { line: 2, .. }),
        "{err}"
    );

    let crlf = format!("{}\r\n{}\r\n", lines[0], lines[1]);
    assert_eq!(read_jsonl(crlf.as_bytes()).expect("CRLF is fine").len(), 2);
}

#[test]
fn unsigned_chains_verify_as_hash_chained_only() {
    let signer = ReceiptSigner::unsigned();
    assert!(!signer.is_signed());
    assert_eq!(signer.key_id(), None);
    let receipts = sealed(&signer, 20, draft);
    for pair in receipts.windows(2) {
        assert!(!pair[0].is_signed());
        // The link of an unsigned receipt is the SHA-256 of its canonical body.
        assert_eq!(pair[0].link(), pair[0].body.digest());
        assert_eq!(
            pair[1].body.parent_sig.as_deref(),
            Some(pair[0].link().as_str())
        );
    }
    let (_, back) = jsonl_round_trip(&receipts);
    let report = verify_chain(&back, None).expect("an untouched unsigned chain verifies");
    assert_eq!(report.integrity, Integrity::HashChainedOnly);
    assert!(report.to_string().contains("unsigned, hash-chained only"));
}

#[test]
fn an_empty_bundle_verifies_as_empty() {
    let report = verify_chain(&[], None).expect("nothing to check");
    assert_eq!(report.integrity, Integrity::Empty);
    assert_eq!(report.tip, None);
}

#[test]
fn check_run_names_the_receipt_of_another_run() {
    let signer = signer();
    let mut receipts = sealed(&signer, 5, draft);
    let mut stray = draft(5);
    stray.run_id = RunId::new("run-other");
    let last = signer.seal(receipts.last(), stray).expect("valid");
    receipts.push(last);
    let err = check_run(&receipts, &RunId::new(RUN)).expect_err("two runs");
    assert!(matches!(
        err,
        VerifyError::WrongRun {
            at: ReceiptAt {
                index: 5,
                seq: 11,
                ..
            },
            ..
        }
    ));
    assert!(err.to_string().contains("run-other"));
    // The chain itself is intact (a fork's bundle may span its parent's run).
    let report = verify_chain(&receipts, signer.verifying_key().as_ref()).expect("intact");
    assert_eq!(report.runs, vec![RunId::new(RUN), RunId::new("run-other")]);
}

#[test]
fn the_signer_refuses_chains_that_would_not_verify() {
    let signed = signer();
    let receipts = sealed(&signed, 3, draft);
    let tip = receipts.last();

    let err = signed.seal(tip, draft(1)).expect_err("seq goes backwards");
    assert_eq!(
        err,
        ReceiptError::SeqNotIncreasing {
            previous: 5,
            seq: 3
        }
    );

    let err = ReceiptSigner::unsigned()
        .seal(tip, draft(3))
        .expect_err("mode change");
    assert_eq!(
        err,
        ReceiptError::ModeChanged {
            signer_signs: false
        }
    );

    let other = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[12; 32]));
    let err = other.seal(tip, draft(3)).expect_err("key change");
    assert!(matches!(err, ReceiptError::KeyChanged { .. }), "{err}");

    let mut bad = draft(3);
    bad.request_hash = "not-a-hash".into();
    let err = signed.seal(tip, bad).expect_err("malformed hash");
    assert!(err.to_string().contains("request_hash"), "{err}");

    let mut bad = draft(3);
    bad.usage = Some(json!([1, 2]));
    assert!(signed.seal(tip, bad).is_err(), "usage must be an object");
}
