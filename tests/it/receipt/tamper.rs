//! Tampering with a bundle — deleting, reordering, duplicating, editing, re-signing, changing
//! the key id, mixing signed and unsigned — fails verification and names the right receipt.

use crate::support::receipt::sealed;
use ed25519_dalek::Signer as _;
use runtape::machine::{AgentId, Hlc, RunId};
use runtape::receipt::*;
use serde_json::json;

fn draft(i: u64) -> ReceiptDraft {
    let model = i.is_multiple_of(2);
    ReceiptDraft {
        run_id: RunId::new("run-1"),
        seq: 2 * i + 1,
        kind: if model {
            ReceiptKind::Model
        } else {
            ReceiptKind::Tool
        },
        agent: AgentId::new("planner"),
        request_hash: hash_json(&json!({"request": i})),
        response_hash: hash_json(&json!({"response": i})),
        usage: model.then(|| json!({"input_tokens": 100 + i, "output_tokens": 7})),
        cost: model.then_some(1_500 * i),
        hlc: Hlc::new(1_700_000_000_000 + 40 * i, 0),
        child: None,
    }
}

fn key_a() -> SigningKey {
    SigningKey::from_bytes(&[0xa1; 32])
}

fn key_b() -> SigningKey {
    SigningKey::from_bytes(&[0xb2; 32])
}

fn signed_bundle() -> (Vec<Receipt>, VerifyingKey) {
    let signer = ReceiptSigner::from_signing_key(key_a());
    (sealed(&signer, 20, draft), key_a().verifying_key())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Signs `body` with `key`, claiming `claimed` as the key id.
fn resign(body: ReceiptBody, key: &SigningKey, claimed: &VerifyingKey) -> Receipt {
    let signature = hex(&key.sign(&body.canonical_bytes()).to_bytes());
    Receipt {
        body,
        seal: Seal::Ed25519 {
            key_id: public_key_hex(claimed),
            signature,
        },
    }
}

/// A named way to tamper with one receipt's fields.
type Edit = fn(&mut ReceiptBody);

fn at(index: usize, seq: u64, kind: ReceiptKind) -> ReceiptAt {
    ReceiptAt { index, seq, kind }
}

/// The index of the receipt a refusal names, and of the one it was checked against (a
/// misplaced receipt's parent, an out-of-order receipt's predecessor).
fn named(err: &VerifyError) -> (Option<usize>, Option<usize>) {
    let other = match err {
        VerifyError::Misplaced { parent, .. } => Some(parent.index),
        VerifyError::SeqNotIncreasing { previous, .. } => Some(previous.index),
        _ => None,
    };
    (err.at().map(|at| at.index), other)
}

#[test]
fn a_deleted_receipt_breaks_the_chain_at_the_next_one() {
    let (original, key) = signed_bundle();
    let mut bundle = original.clone();
    bundle.remove(7);
    let err = verify_chain(&bundle, Some(&key)).expect_err("a receipt is missing");
    assert_eq!(
        err,
        VerifyError::ChainBreak {
            at: at(7, original[8].body.seq, ReceiptKind::Model),
            expected: Some(original[6].link()),
            found: Some(original[7].link()),
        }
    );
    let shown = err.to_string();
    assert!(
        shown.contains("receipt 7 (line 8, seq 17, model turn)"),
        "{shown}"
    );
    assert!(!shown.contains('\n'));

    let mut headless = original.clone();
    headless.remove(0);
    let err = verify_chain(&headless, Some(&key)).expect_err("the first receipt is missing");
    assert!(
        matches!(
            &err,
            VerifyError::ChainBreak {
                at: ReceiptAt {
                    index: 0,
                    seq: 3,
                    ..
                },
                expected: None,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_truncated_bundle_is_caught_only_by_comparing_tips() {
    let (original, key) = signed_bundle();
    let report = verify_chain(&original[..19], Some(&key)).expect("a prefix is a valid chain");
    assert_ne!(report.tip, original.last().map(Receipt::link));
}

#[test]
fn swapped_and_duplicated_receipts_are_misplaced() {
    let (original, key) = signed_bundle();
    let mut swapped = original.clone();
    swapped.swap(4, 5);
    let err = verify_chain(&swapped, Some(&key)).expect_err("reordered");
    assert_eq!(
        err,
        VerifyError::Misplaced {
            at: at(4, original[5].body.seq, ReceiptKind::Tool),
            parent: at(5, original[4].body.seq, ReceiptKind::Model),
        }
    );
    assert!(err.to_string().contains("out of place"), "{err}");

    let mut duplicated = original.clone();
    duplicated.insert(4, original[3].clone());
    let err = verify_chain(&duplicated, Some(&key)).expect_err("duplicated");
    assert!(matches!(err, VerifyError::Misplaced { .. }), "{err}");
    assert_eq!(named(&err), (Some(4), Some(2)), "{err}");
}

#[test]
fn every_edited_field_fails_the_signature_of_that_receipt() {
    let (original, key) = signed_bundle();
    let edits: [(&str, Edit); 7] = [
        ("usage", |b| {
            b.usage = Some(json!({"input_tokens": 1, "output_tokens": 7}))
        }),
        ("cost", |b| b.cost = b.cost.map(|c| c / 2)),
        ("response_hash", |b| {
            b.response_hash = hash_json(&json!("forged"))
        }),
        ("request_hash", |b| {
            b.request_hash = hash_json(&json!("forged"))
        }),
        ("agent", |b| b.agent = AgentId::new("intruder")),
        ("kind", |b| b.kind = ReceiptKind::Tool),
        ("hlc", |b| b.hlc = Hlc(b.hlc.0 + 1)), // above 2^53: must not be rounded away
    ];
    for (field, edit) in edits {
        let mut bundle = original.clone();
        edit(&mut bundle[10].body);
        assert_ne!(bundle[10], original[10], "{field} edit changed nothing");
        let err = verify_chain(&bundle, Some(&key)).expect_err(field);
        assert_eq!(
            err,
            VerifyError::BadSignature {
                at: at(10, 21, bundle[10].body.kind)
            },
            "editing {field}"
        );
    }

    let mut bundle = original.clone();
    bundle[10].body.seq = bundle[9].body.seq;
    let err = verify_chain(&bundle, Some(&key)).expect_err("seq edited");
    assert!(matches!(err, VerifyError::SeqNotIncreasing { .. }), "{err}");
    assert_eq!(named(&err), (Some(10), Some(9)), "{err}");

    let mut bundle = original;
    bundle[10].body.parent_sig = Some(bundle[8].link());
    let err = verify_chain(&bundle, Some(&key)).expect_err("parent edited");
    assert!(matches!(err, VerifyError::Misplaced { .. }), "{err}");
    assert_eq!(err.at().map(|at| at.index), Some(10), "{err}");
}

#[test]
fn a_receipt_resigned_with_another_key_is_named() {
    let (original, key) = signed_bundle();
    let b = key_b();

    // Re-signed, honestly claiming key B.
    let mut bundle = original.clone();
    bundle[6] = resign(bundle[6].body.clone(), &b, &b.verifying_key());
    let err = verify_chain(&bundle, Some(&key)).expect_err("re-signed");
    assert_eq!(
        err,
        VerifyError::KeyMismatch {
            at: at(6, 13, ReceiptKind::Model),
            expected: public_key_hex(&key),
            found: public_key_hex(&b.verifying_key()),
        }
    );

    // Re-signed with key B, still claiming key A: the signature fails.
    let mut bundle = original.clone();
    bundle[6] = resign(bundle[6].body.clone(), &b, &key);
    let err = verify_chain(&bundle, Some(&key)).expect_err("re-signed, claiming A");
    assert_eq!(
        err,
        VerifyError::BadSignature {
            at: at(6, 13, ReceiptKind::Model)
        }
    );

    // Only the key id changed.
    let mut bundle = original;
    if let Seal::Ed25519 { key_id, .. } = &mut bundle[6].seal {
        *key_id = public_key_hex(&b.verifying_key());
    }
    let err = verify_chain(&bundle, Some(&key)).expect_err("key id changed");
    assert!(matches!(err, VerifyError::KeyMismatch { .. }), "{err}");
    assert_eq!(err.at().map(|at| at.index), Some(6), "{err}");
}

#[test]
fn a_bundle_resigned_with_another_key_fails_at_the_first_receipt() {
    let key = key_a().verifying_key();
    let forged = sealed(&ReceiptSigner::from_signing_key(key_b()), 20, draft);
    verify_chain(&forged, Some(&key_b().verifying_key())).expect("valid under its own key");
    let err = verify_chain(&forged, Some(&key)).expect_err("not signed by A");
    assert!(matches!(err, VerifyError::KeyMismatch { .. }), "{err}");
    assert_eq!(err.at().map(|at| at.index), Some(0), "{err}");

    // Re-signed with B while claiming A: every signature fails, the first is named.
    let mut claimed: Vec<Receipt> = Vec::new();
    for i in 0..20 {
        let body = ReceiptBody::from_draft(draft(i), claimed.last().map(Receipt::link));
        claimed.push(resign(body, &key_b(), &key));
    }
    let err = verify_chain(&claimed, Some(&key)).expect_err("signed by B");
    assert_eq!(
        err,
        VerifyError::BadSignature {
            at: at(0, 1, ReceiptKind::Model)
        }
    );
}

#[test]
fn mixing_signed_and_unsigned_is_refused() {
    let (signed, key) = signed_bundle();
    let unsigned = sealed(&ReceiptSigner::unsigned(), 20, draft);
    let mut mixed = signed[..10].to_vec();
    mixed.extend_from_slice(&unsigned[10..]);
    for public in [Some(&key), None] {
        let err = verify_chain(&mixed, public).expect_err("mixed");
        assert_eq!(
            err,
            VerifyError::Mixed {
                at: at(10, 21, ReceiptKind::Model),
                signed: false
            }
        );
    }

    // A signed bundle needs the key; an unsigned one cannot stand in for a signed one.
    assert!(matches!(
        verify_chain(&signed, None),
        Err(VerifyError::KeyRequired { .. })
    ));
    assert_eq!(
        verify_chain(&unsigned, Some(&key)),
        Err(VerifyError::NotSigned)
    );
}

#[test]
fn tampering_with_an_unsigned_chain_is_caught_by_the_chain() {
    let original = sealed(&ReceiptSigner::unsigned(), 20, draft);

    // Edited, digest left alone: the receipt's own digest names it.
    let mut bundle = original.clone();
    bundle[5].body.agent = AgentId::new("intruder");
    let err = verify_chain(&bundle, None).expect_err("edited");
    assert!(matches!(err, VerifyError::DigestMismatch { .. }), "{err}");
    let found = err.at().map(|at| (at.index, at.seq));
    assert_eq!(found, Some((5, 11)), "{err}");

    // Edited and re-digested: the next receipt's parent_sig no longer matches.
    bundle[5].seal = Seal::Unsigned {
        digest: bundle[5].body.digest(),
    };
    let err = verify_chain(&bundle, None).expect_err("edited, re-digested");
    assert_eq!(
        err,
        VerifyError::ChainBreak {
            at: at(6, 13, ReceiptKind::Model),
            expected: Some(bundle[5].link()),
            found: Some(original[5].link()),
        }
    );

    let mut bundle = original.clone();
    bundle.remove(12);
    let err = verify_chain(&bundle, None).expect_err("deleted");
    assert!(matches!(err, VerifyError::ChainBreak { .. }), "{err}");
    let found = err.at().map(|at| (at.index, at.seq));
    assert_eq!(found, Some((12, 27)), "{err}");

    let mut bundle = original;
    bundle.swap(2, 3);
    let err = verify_chain(&bundle, None).expect_err("swapped");
    assert!(matches!(err, VerifyError::Misplaced { .. }), "{err}");
    let found = err.at().map(|at| (at.index, at.seq));
    assert_eq!(found, Some((2, 7)), "{err}");
}

#[test]
fn malformed_seals_are_named_not_trusted() {
    let (mut bundle, key) = signed_bundle();
    if let Seal::Ed25519 { signature, .. } = &mut bundle[3].seal {
        *signature = signature.to_uppercase();
    }
    let err = verify_chain(&bundle, Some(&key)).expect_err("non-canonical hex");
    assert!(matches!(err, VerifyError::Malformed { .. }), "{err}");
    assert_eq!(err.at().map(|at| at.index), Some(3), "{err}");
}
