//! A run's sealed head: what the run *is* (its identity: id, parent, spec, setup, goal,
//! creation time) and where it *stands* (its last seq, the state hash and chain link there, its
//! status, outcome, usage, receipt tip and the non-idempotent calls marked started), sealed
//! with the run's receipt key like a receipt.
//!
//! The receipts and the transition chain prove that each recorded step is what it claims and
//! that no step is missing *before* the last one; they cannot say where a run ends, nor vouch
//! for what is stored beside the history (the spec, the setup, the status `ls` shows). The head
//! does: the engine writes it in the same transaction as every commit and every write that
//! changes what is shown, and `verify` recomputes its fields from the history. Cutting a
//! history short, lowering `runs.seq` or editing the spec or setup then breaks either the seal
//! or the agreement between head and history.
//!
//! # What is sealed
//!
//! The head's canonical JSON ([`RunHead::canonical_bytes`], RFC 8785: keys sorted, no
//! whitespace, every integer that could exceed 2⁵³ written as a decimal string), prefixed with
//! [`HEAD_DOMAIN`] so a head signature can never pass for a receipt's. Texts that can be long
//! (spec, setup, goal, outcome) are sealed as their BLAKE3 digests.
//!
//! | seal | proves |
//! |---|---|
//! | Ed25519, checked against a key you trust | the holder of that key wrote this head: nothing sealed in it was changed since, and the history ends where it says |
//! | Ed25519, checked against the key it names | only consistency (anyone can sign with a key of their own) |
//! | unsigned (SHA-256 digest) | only consistency: an edit that did not also recompute the digest is caught; a deliberate forger is not |
//!
//! A head whose [`origin`](RunHead::origin) is [`HeadOrigin::Migration`] was sealed (unsigned)
//! when a database written before heads existed was first opened: it records what was found
//! then (trust on first use) and proves nothing about what happened before.

use serde::{Deserialize, Serialize};

use ed25519_dalek::{Signature, VerifyingKey};

use super::body::Seal;
use super::hex;
use super::key::public_key_hex;
use crate::machine::{Digest, RunId};

/// Prefixed to a head's canonical bytes before they are signed or hashed, so a head's seal and
/// a receipt's can never be confused.
pub const HEAD_DOMAIN: &[u8] = b"runtape run head v1\n";

/// The value of [`RunHead::format`] this runtape writes.
pub const HEAD_FORMAT: &str = "runtape.head.1";

/// Who sealed a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadOrigin {
    /// The engine, as it committed the run's writes.
    Engine,
    /// The schema migration, for a run stored before heads existed: unsigned, trust on first
    /// use.
    Migration,
}

/// Where a fork branched off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadParent {
    /// The parent run.
    pub run: RunId,
    /// The seq it was forked at.
    pub seq: u64,
}

/// The last receipt of the run's chain (across its fork ancestry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadTip {
    /// The receipt's link ([`Seal::link`]): what a complete export must end with.
    pub link: String,
    /// The receipt's seq.
    pub seq: u64,
}

/// A run's head. Fields are declared in RFC 8785 key order, so serde's JSON of it is canonical.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunHead {
    /// The chain link of transition `seq` (hex; zeros before the first transition).
    pub chain: String,
    /// Known cost so far, nanodollars.
    #[serde(with = "u64_text")]
    pub cost_nanos: u64,
    /// When the run was created, wall-clock ms.
    #[serde(with = "u64_text")]
    pub created_ms: u64,
    /// [`HEAD_FORMAT`].
    pub format: String,
    /// BLAKE3 (hex) of the goal as stored.
    pub goal: String,
    /// Who sealed it.
    pub origin: HeadOrigin,
    /// BLAKE3 (hex) of the outcome JSON as stored, once the run has ended.
    pub outcome: Option<String>,
    /// For a fork: the parent and the fork seq.
    pub parent: Option<HeadParent>,
    /// The last receipt of the run's chain, if any.
    pub receipt_tip: Option<HeadTip>,
    /// The run id.
    pub run: RunId,
    /// The latest committed seq: the history ends here.
    pub seq: u64,
    /// BLAKE3 (hex) of the setup as stored, when the run has one.
    pub setup: Option<String>,
    /// BLAKE3 (hex) of the spec as stored.
    pub spec: String,
    /// Non-idempotent tool calls marked started and not answered, as `[seq, index]`, sorted:
    /// what a resume must treat as in doubt rather than perform.
    pub started: Vec<(u64, u32)>,
    /// The kind of the latest state, as `runs.state_kind` stores it.
    pub state: String,
    /// Hash of the state after transition `seq` (hex; zeros before the first transition).
    pub state_hash: String,
    /// The status recorded with the latest sealed write, as `runs.status` stores it.
    pub status: String,
    /// Tokens so far.
    #[serde(with = "u64_text")]
    pub tokens: u64,
    /// Model turns whose cost was unknown (an unpriced model) so far.
    #[serde(with = "u64_text")]
    pub unpriced_turns: u64,
    /// When the run's row was last updated by a commit, wall-clock ms.
    #[serde(with = "u64_text")]
    pub updated_ms: u64,
}

/// BLAKE3 of `text` as lowercase hex: how a head records a long stored text.
pub fn text_digest(text: &str) -> String {
    Digest::of(text.as_bytes()).to_hex()
}

impl RunHead {
    /// The canonical JSON of the head (what is sealed, after [`HEAD_DOMAIN`]).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Cannot fail: every field is a string, an integer, a sequence of integer pairs or an
        // option of those, and the writer is a `Vec`. `canonical_bytes_match_rfc8785` pins
        // that the result is RFC 8785.
        crate::scratch::json_exact(self).expect("a run head always serialises")
    }

    /// Reads a head's stored bytes; `None` when they are not a head of a known format.
    pub fn from_bytes(bytes: &[u8]) -> Option<RunHead> {
        let head: RunHead = serde_json::from_slice(bytes).ok()?;
        (head.format == HEAD_FORMAT).then_some(head)
    }
}

/// The bytes a head's seal covers.
pub(crate) fn sealed_bytes(body: &[u8]) -> Vec<u8> {
    [HEAD_DOMAIN, body].concat()
}

/// SHA-256 over [`HEAD_DOMAIN`] and `body`: an unsigned head's digest.
pub(crate) fn head_digest(body: &[u8]) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    h.update(HEAD_DOMAIN);
    h.update(body);
    h.finalize().into()
}

/// The digest a head is known by while it is stored: SHA-256 over [`HEAD_DOMAIN`] and its
/// canonical bytes `body` (for an unsigned head, the digest its seal carries). A write that
/// replaces a head names the one it replaces by this digest
/// ([`HeadRecord::replaces`](crate::store::HeadRecord)); it is kept in memory, never stored, so
/// what it is computed with can change between releases.
pub fn head_body_digest(body: &[u8]) -> crate::machine::Digest {
    crate::machine::Digest(head_digest(body))
}

/// The unsigned seal of a head's canonical bytes: SHA-256 over [`HEAD_DOMAIN`] and the bytes.
/// What the schema migration seals old runs' heads with.
pub fn unsigned_head_seal(body: &[u8]) -> Seal {
    Seal::Unsigned {
        digest: hex::encode(&head_digest(body)),
    }
}

/// Why a head's seal does not hold over its bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadSealError {
    /// Signed by another key than the trusted one.
    #[error("it is signed by key {found}, not by the trusted key {expected}")]
    KeyMismatch {
        /// The trusted key (hex).
        expected: String,
        /// The key the seal names (hex).
        found: String,
    },
    /// The signature does not verify: the head was edited after it was signed.
    #[error("its signature does not verify: it was edited after it was signed")]
    BadSignature,
    /// The digest does not match: the head was edited after it was sealed.
    #[error("its digest does not match its fields: it was edited after it was sealed")]
    DigestMismatch,
}

/// Checks `seal` over a head's canonical bytes `body`. A signed seal is checked against `key`
/// when one is given (and must name it), else against the key it names — which proves
/// consistency, not authorship. An unsigned seal's digest is recomputed. Whether an unsigned
/// seal is acceptable where a key is trusted is the caller's policy.
pub fn check_head_seal(
    body: &[u8],
    seal: &Seal,
    key: Option<&VerifyingKey>,
) -> Result<(), HeadSealError> {
    match seal {
        Seal::Ed25519 { key_id, signature } => {
            let named;
            let key = match key {
                Some(k) => {
                    let expected = public_key_hex(k);
                    if &expected != key_id {
                        return Err(HeadSealError::KeyMismatch {
                            expected,
                            // From the bundle, so possibly hostile: escaped to stay on one line.
                            found: key_id.escape_debug().to_string(),
                        });
                    }
                    k
                }
                None => {
                    named = super::key::parse_public_key(key_id)
                        .map_err(|_| HeadSealError::BadSignature)?;
                    &named
                }
            };
            let bytes = hex::decode::<64>(signature).ok_or(HeadSealError::BadSignature)?;
            key.verify_strict(&sealed_bytes(body), &Signature::from_bytes(&bytes))
                .map_err(|_| HeadSealError::BadSignature)
        }
        Seal::Unsigned { digest } => {
            if *digest == hex::encode(&head_digest(body)) {
                Ok(())
            } else {
                Err(HeadSealError::DigestMismatch)
            }
        }
    }
}

/// Decimal-string serde for `u64` fields a JSON number could not carry exactly.
mod u64_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let canonical = !text.is_empty()
            && text.bytes().all(|c| c.is_ascii_digit())
            && (text.len() == 1 || !text.starts_with('0'));
        match text.parse::<u64>() {
            Ok(n) if canonical => Ok(n),
            _ => Err(serde::de::Error::custom(
                "expected a decimal string of an unsigned 64-bit integer, without leading zeros",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> RunHead {
        RunHead {
            chain: Digest::of(b"c").to_hex(),
            cost_nanos: u64::MAX,
            created_ms: 1_700_000_000_000,
            format: HEAD_FORMAT.into(),
            goal: text_digest("Count \"words\"\n\u{1}é"),
            origin: HeadOrigin::Engine,
            outcome: None,
            parent: Some(HeadParent {
                run: RunId::new("01parent\u{7f}\"x"),
                seq: 7,
            }),
            receipt_tip: Some(HeadTip {
                link: "ab".repeat(64),
                seq: 9,
            }),
            run: RunId::new("01run"),
            seq: 12,
            setup: None,
            spec: text_digest("{}"),
            started: vec![(3, 0), (5, 2)],
            state: "calling_tools".into(),
            state_hash: Digest::ZERO.to_hex(),
            status: "running".into(),
            tokens: 1 << 60,
            unpriced_turns: 2,
            updated_ms: 1_700_000_000_001,
        }
    }

    #[test]
    fn canonical_bytes_match_rfc8785() {
        let h = head();
        let canonical = serde_json_canonicalizer::to_vec(&h).expect("canonicalises");
        assert_eq!(h.canonical_bytes(), canonical);
        assert_eq!(RunHead::from_bytes(&h.canonical_bytes()), Some(h));
    }

    #[test]
    fn unknown_formats_fields_and_spellings_do_not_read() {
        let mut h = head();
        h.format = "runtape.head.0".into();
        assert_eq!(RunHead::from_bytes(&h.canonical_bytes()), None);
        let text = String::from_utf8(head().canonical_bytes()).expect("utf-8");
        let extra = text.replacen('{', "{\"extra\":1,", 1);
        assert_eq!(RunHead::from_bytes(extra.as_bytes()), None);
        let padded = text.replacen("\"tokens\":\"", "\"tokens\":\"0", 1);
        assert_eq!(RunHead::from_bytes(padded.as_bytes()), None);
    }

    #[test]
    fn the_unsigned_seal_covers_the_domain_and_the_bytes() {
        let body = head().canonical_bytes();
        let Seal::Unsigned { digest } = unsigned_head_seal(&body) else {
            panic!("unsigned");
        };
        assert_ne!(digest, hex::sha256_hex(&body), "domain-separated");
        assert_eq!(digest, hex::sha256_hex(&sealed_bytes(&body)));
    }
}
