//! Offline verification of an exported bundle: chain, order, signatures, consistency.

use std::collections::HashMap;

use ed25519_dalek::{Signature, VerifyingKey};

use super::body::{FieldError, Receipt, Seal};
use super::hex;
use super::key::public_key_hex;
use super::report::{Integrity, ReceiptAt, VerifyError, VerifyReport, report};
use crate::machine::RunId;

/// Verifies an exported bundle offline, needing no database. Pass the trusted public key for
/// signed bundles; pass `None` for bundles written without a key, which then verify as
/// [`Integrity::HashChainedOnly`].
///
/// # What is checked, in order
///
/// 1. **Consistency** (whole bundle): all receipts signed, or all unsigned. A signed bundle
///    needs the trusted public key; with a key given, an unsigned bundle is refused (it could
///    be a signed one with its signatures stripped and its chain rebuilt).
/// 2. For each receipt, first to last, stopping at the first failure:
///    1. its fields are well formed ([`ReceiptBody::validate`](crate::receipt::ReceiptBody::validate));
///    2. **chain**: `parent_sig` equals the previous receipt's link (`null` for the first);
///    3. **order**: its seq is above the previous receipt's when both belong to one run (a
///       delegated child's receipts follow the parent's receipt they hang from, and start their
///       own seqs afresh);
///    4. **seal**: signed — the `key_id` is the given key and the signature verifies (strict
///       Ed25519) over the canonical body; unsigned — the stored digest matches the body.
///
/// So an edited receipt is named by its own seal check, a missing one by the chain check of
/// the receipt after the gap, a moved one by the chain check at its new place, and a receipt
/// re-signed with another key by its key or signature check. Removing receipts from the *end*
/// of a bundle leaves a valid shorter chain: compare [`VerifyReport::tip`] with the tip the
/// store recorded to detect that.
pub fn verify_chain(
    receipts: &[Receipt],
    public_key: Option<&VerifyingKey>,
) -> Result<VerifyReport, VerifyError> {
    verify_chain_under(receipts, public_key, None)
}

/// [`verify_chain`] for a chain that hangs from `anchor`: its first receipt's `parent_sig` must
/// be `anchor` rather than `null`. A delegated child run's receipts hang from the link of its
/// parent's receipt for the model turn that asked for the child; check them alone with that
/// link, or export the child (its parent's receipts through the anchor come first) and check
/// the whole with [`verify_chain`].
pub fn verify_chain_under(
    receipts: &[Receipt],
    public_key: Option<&VerifyingKey>,
    anchor: Option<&str>,
) -> Result<VerifyReport, VerifyError> {
    let Some(first) = receipts.first() else {
        return Ok(report(receipts, Integrity::Empty));
    };
    if let Some(at) = receipts
        .iter()
        .position(|r| r.is_signed() != first.is_signed())
        .and_then(|i| ReceiptAt::of(receipts, i))
    {
        return Err(VerifyError::Mixed {
            at,
            signed: !first.is_signed(),
        });
    }
    let trusted = match (first.key_id(), public_key) {
        (Some(key_id), None) => {
            return Err(VerifyError::KeyRequired {
                key_id: key_id.to_owned(),
            });
        }
        (None, Some(_)) => return Err(VerifyError::NotSigned),
        (Some(_), Some(key)) => Some((key, public_key_hex(key))),
        (None, None) => None,
    };
    let links: Vec<String> = receipts.iter().map(Receipt::link).collect();
    let mut by_link: HashMap<&str, usize> = HashMap::with_capacity(links.len());
    for (i, link) in links.iter().enumerate() {
        by_link.entry(link.as_str()).or_insert(i);
    }
    for (index, receipt) in receipts.iter().enumerate() {
        let at = ReceiptAt {
            index,
            seq: receipt.body.seq,
            kind: receipt.body.kind,
        };
        check_fields(receipt, at)?;
        let previous = index.checked_sub(1);
        let expected = match previous {
            Some(p) => links.get(p).map(String::as_str),
            None => anchor,
        };
        let found = receipt.body.parent_sig.as_deref();
        if expected != found {
            let parent = found
                .and_then(|p| by_link.get(p))
                .and_then(|&j| ReceiptAt::of(receipts, j));
            return Err(match parent {
                Some(parent) => VerifyError::Misplaced { at, parent },
                None => VerifyError::ChainBreak {
                    at,
                    expected: expected.map(str::to_owned),
                    found: found.map(str::to_owned),
                },
            });
        }
        // Seqs rise along one run's receipts; a delegated child's start afresh under the
        // parent's receipt that anchors them (the chain check above pins that place).
        if let Some(prev) = previous.and_then(|p| ReceiptAt::of(receipts, p))
            && receipt.body.seq <= prev.seq
            && previous
                .and_then(|p| receipts.get(p))
                .map(|r| &r.body.run_id)
                == Some(&receipt.body.run_id)
        {
            return Err(VerifyError::SeqNotIncreasing { at, previous: prev });
        }
        check_seal(receipt, at, trusted.as_ref())?;
    }
    let integrity = match trusted {
        Some((_, key_id)) => Integrity::Signed { key_id },
        None => Integrity::HashChainedOnly,
    };
    Ok(report(receipts, integrity))
}

/// Checks that every receipt in the bundle belongs to `run`; the error names the first that
/// does not. Use it alongside [`verify_chain`] when a bundle is presented as one run's receipts.
pub fn check_run(receipts: &[Receipt], run: &RunId) -> Result<(), VerifyError> {
    match receipts
        .iter()
        .enumerate()
        .find(|(_, r)| &r.body.run_id != run)
    {
        None => Ok(()),
        Some((index, r)) => Err(VerifyError::WrongRun {
            at: ReceiptAt {
                index,
                seq: r.body.seq,
                kind: r.body.kind,
            },
            expected: run.clone(),
            found: r.body.run_id.clone(),
        }),
    }
}

fn check_fields(receipt: &Receipt, at: ReceiptAt) -> Result<(), VerifyError> {
    let malformed = |field, problem: &str| VerifyError::Malformed {
        at,
        error: FieldError::new(field, problem),
    };
    receipt
        .body
        .validate()
        .map_err(|error| VerifyError::Malformed { at, error })?;
    match &receipt.seal {
        Seal::Ed25519 { key_id, signature } => {
            if !hex::is_lower_hex(key_id, 64) {
                return Err(malformed(
                    "seal.key_id",
                    "is not 64 lowercase hex characters",
                ));
            }
            if !hex::is_lower_hex(signature, 128) {
                return Err(malformed(
                    "seal.signature",
                    "is not 128 lowercase hex characters",
                ));
            }
        }
        Seal::Unsigned { digest } => {
            if !hex::is_lower_hex(digest, 64) {
                return Err(malformed(
                    "seal.digest",
                    "is not 64 lowercase hex characters",
                ));
            }
        }
    }
    Ok(())
}

fn check_seal(
    receipt: &Receipt,
    at: ReceiptAt,
    trusted: Option<&(&VerifyingKey, String)>,
) -> Result<(), VerifyError> {
    match (&receipt.seal, trusted) {
        (Seal::Ed25519 { key_id, signature }, Some((key, trusted_id))) => {
            if key_id != trusted_id {
                return Err(VerifyError::KeyMismatch {
                    at,
                    expected: trusted_id.clone(),
                    found: key_id.clone(),
                });
            }
            let bytes = hex::decode::<64>(signature).ok_or(VerifyError::BadSignature { at })?;
            key.verify_strict(
                &receipt.body.canonical_bytes(),
                &Signature::from_bytes(&bytes),
            )
            .map_err(|_| VerifyError::BadSignature { at })
        }
        (Seal::Unsigned { digest }, None) => {
            let expected = receipt.body.digest();
            if &expected == digest {
                Ok(())
            } else {
                Err(VerifyError::DigestMismatch {
                    at,
                    expected,
                    found: digest.clone(),
                })
            }
        }
        // The consistency check above rules these out; refuse rather than accept.
        (Seal::Ed25519 { .. }, None) | (Seal::Unsigned { .. }, Some(_)) => {
            Err(VerifyError::Mixed {
                at,
                signed: receipt.is_signed(),
            })
        }
    }
}
