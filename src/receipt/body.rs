//! What a receipt says: the signed fields, their canonical bytes, and the seal over them.
//!
//! The signed bytes are the RFC 8785 (JCS) canonical JSON of [`ReceiptBody`]: object keys
//! sorted by UTF-16 code units, no whitespace, numbers in their shortest double form. JCS
//! writes every number as an IEEE double, so an integer above 2⁵³ − 1 would be rounded and two
//! different receipts could share one signature. Receipts therefore keep every JSON number a
//! safe integer: `seq` and `cost` are checked, `usage` is scanned, and `hlc` (whose values
//! always exceed 2⁵³, being milliseconds shifted left 16 bits) is written as a decimal string.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::hex;
use crate::machine::{AgentId, Hlc, RunId};

/// The largest integer a JSON number can carry without rounding under RFC 8785 (2⁵³ − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// What a receipt records: one model turn or one tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A model call that returned a reply (`ModelReplied`).
    Model,
    /// A tool call that returned a result (`ToolReturned`).
    Tool,
    /// A child run's result reaching its parent (`ChildFinished`, revision 5): the receipt
    /// names where the child's record ends ([`ChildTip`]).
    Child,
}

impl fmt::Display for ReceiptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReceiptKind::Model => "model turn",
            ReceiptKind::Tool => "tool call",
            ReceiptKind::Child => "child result",
        })
    }
}

/// The fields of a receipt before it is chained: what the executor knows when the result of a
/// model turn or tool call has been committed. Hand it to
/// [`ReceiptSigner::seal`](super::ReceiptSigner::seal), which adds `parent_sig` and the seal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptDraft {
    /// The run the receipt belongs to.
    pub run_id: RunId,
    /// Seq of the transition whose event carried the result.
    pub seq: u64,
    /// Model turn or tool call.
    pub kind: ReceiptKind,
    /// The agent that made the call.
    pub agent: AgentId,
    /// [`hash_json`] of the request (model request or tool arguments): 64 lowercase hex.
    pub request_hash: String,
    /// [`hash_json`] of the response (model reply or tool output): 64 lowercase hex.
    pub response_hash: String,
    /// Token usage as the provider reported it (a JSON object), if any.
    pub usage: Option<Value>,
    /// Cost in nanodollars, when the price is known.
    pub cost: Option<u64>,
    /// When the result was committed.
    pub hlc: Hlc,
    /// For a child run's result (kind `child`): where the child's record starts and ends.
    pub child: Option<ChildTip>,
}

/// What a parent's receipt for a child run's result names of the child (revision 5), so the
/// parent's chain commits to the child's whole chain: the link its first receipt hangs from,
/// its last receipt, and its last step. Fields are declared in RFC 8785 key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildTip {
    /// The link the child's first receipt hangs from (its `parent_sig`): a receipt of the
    /// parent's chain; `null` when the parent had none then.
    pub anchor: Option<String>,
    /// The chain link of the child's last step (64 hex).
    pub chain: String,
    /// The child's last receipt's link; `null` when it has none.
    pub receipt: Option<String>,
    /// That receipt's seq (`null` with it).
    pub receipt_seq: Option<u64>,
    /// The child run.
    pub run_id: RunId,
    /// The child's last step.
    pub seq: u64,
}

impl ChildTip {
    /// Checks the fields are well formed (what [`ReceiptBody::validate`] asks of a child's).
    fn validate(&self) -> Result<(), FieldError> {
        let id = self.run_id.as_str();
        if id.is_empty() || id.chars().any(char::is_control) {
            return Err(FieldError::new(
                "child.run_id",
                "is empty or holds control characters",
            ));
        }
        if !hex::is_lower_hex(&self.chain, 64) {
            return Err(FieldError::new(
                "child.chain",
                "is not 64 lowercase hex characters",
            ));
        }
        for (field, link) in [
            ("child.anchor", &self.anchor),
            ("child.receipt", &self.receipt),
        ] {
            if let Some(l) = link
                && !(hex::is_lower_hex(l, 128) || hex::is_lower_hex(l, 64))
            {
                return Err(FieldError::new(
                    field,
                    "is neither a signature (128 hex) nor a digest (64 hex)",
                ));
            }
        }
        if self.receipt.is_some() != self.receipt_seq.is_some() {
            return Err(FieldError::new(
                "child.receipt_seq",
                "must be given exactly when child.receipt is",
            ));
        }
        if self.seq > MAX_SAFE_INTEGER || self.receipt_seq.is_some_and(|s| s > MAX_SAFE_INTEGER) {
            return Err(FieldError::new("child.seq", "is above 2^53 - 1"));
        }
        Ok(())
    }
}

/// The signed fields of a receipt. Its canonical JSON ([`ReceiptBody::canonical_bytes`]) is
/// what the Ed25519 signature covers, and (for unsigned receipts) what the digest hashes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptBody {
    /// The run the receipt belongs to.
    pub run_id: RunId,
    /// Seq of the transition whose event carried the result; strictly increasing along a chain.
    pub seq: u64,
    /// Model turn or tool call.
    pub kind: ReceiptKind,
    /// The agent that made the call.
    pub agent: AgentId,
    /// SHA-256 (or other 32-byte digest) of the canonical request, 64 lowercase hex.
    pub request_hash: String,
    /// SHA-256 (or other 32-byte digest) of the canonical response, 64 lowercase hex.
    pub response_hash: String,
    /// Token usage as reported, a JSON object; `null` when the provider reported none.
    pub usage: Option<Value>,
    /// Cost in nanodollars; `null` when the price is unknown.
    pub cost: Option<u64>,
    /// When the result was committed. Written as a decimal string (see the module doc).
    #[serde(with = "hlc_text")]
    pub hlc: Hlc,
    /// The previous receipt's [`Receipt::link`]; `null` for the first receipt of a chain.
    pub parent_sig: Option<String>,
    /// For a child run's result (kind `child`, revision 5): what it names of the child. Left
    /// out of the JSON (and of what is signed) for every other receipt, so receipts written
    /// before it existed read and verify unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<ChildTip>,
}

/// The body's fields in RFC 8785 key order (sorted by UTF-16 code units; all ASCII here).
#[derive(Serialize)]
struct CanonicalBody<'a> {
    agent: &'a AgentId,
    #[serde(skip_serializing_if = "Option::is_none")]
    child: Option<&'a ChildTip>,
    cost: Option<u64>,
    hlc: HlcText,
    kind: ReceiptKind,
    parent_sig: Option<&'a str>,
    request_hash: &'a str,
    response_hash: &'a str,
    run_id: &'a RunId,
    seq: u64,
    usage: Option<&'a Value>,
}

/// An [`Hlc`] written as its decimal string.
struct HlcText(Hlc);

impl Serialize for HlcText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0.0)
    }
}

/// True when `value` holds a float anywhere (iterative: no recursion on hostile nesting).
fn has_float(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if n.is_f64() => return true,
            Value::Array(a) => stack.extend(a),
            Value::Object(m) => stack.extend(m.values()),
            _ => {}
        }
    }
    false
}

/// Why a receipt's fields cannot be sealed, or cannot be trusted as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}` {problem}")]
pub struct FieldError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl FieldError {
    pub(crate) fn new(field: &'static str, problem: impl Into<String>) -> Self {
        FieldError {
            field,
            problem: problem.into(),
        }
    }
}

impl ReceiptBody {
    /// The draft's fields chained after `parent_sig` (the previous receipt's
    /// [`Receipt::link`], or `None` to start a chain).
    pub fn from_draft(draft: ReceiptDraft, parent_sig: Option<String>) -> Self {
        ReceiptBody {
            run_id: draft.run_id,
            seq: draft.seq,
            kind: draft.kind,
            agent: draft.agent,
            request_hash: draft.request_hash,
            response_hash: draft.response_hash,
            usage: draft.usage,
            cost: draft.cost,
            hlc: draft.hlc,
            parent_sig,
            child: draft.child,
        }
    }

    /// The exact bytes that are signed or hashed: RFC 8785 canonical JSON of the body.
    /// Independent of struct field order and of how the body was spelled in a file.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Fast path: the fields in RFC 8785 key order, written by serde_json, are the
        // canonical bytes whenever every number is an integer within ±(2^53 - 1) (RFC 8785
        // writes numbers as doubles, so larger integers round and floats may print
        // differently). `canonical_bytes_match_rfc8785` pins this against the canonicaliser.
        let exact = self.seq <= MAX_SAFE_INTEGER
            && self.cost.is_none_or(|c| c <= MAX_SAFE_INTEGER)
            && self
                .usage
                .as_ref()
                .is_none_or(|u| !has_float(u) && numbers_are_exact(u))
            && self.child.as_ref().is_none_or(|c| {
                c.seq <= MAX_SAFE_INTEGER && c.receipt_seq.is_none_or(|s| s <= MAX_SAFE_INTEGER)
            });
        if exact {
            let canonical = CanonicalBody {
                agent: &self.agent,
                child: self.child.as_ref(),
                cost: self.cost,
                hlc: HlcText(self.hlc),
                kind: self.kind,
                parent_sig: self.parent_sig.as_deref(),
                request_hash: &self.request_hash,
                response_hash: &self.response_hash,
                run_id: &self.run_id,
                seq: self.seq,
                usage: self.usage.as_ref(),
            };
            if let Ok(bytes) = crate::scratch::json_exact(&canonical) {
                return bytes;
            }
        }
        // Cannot fail: every key is a fixed string, `usage` is a `serde_json::Value` (unique
        // string keys, finite numbers only) and the writer is a `Vec`.
        serde_json_canonicalizer::to_vec(self).expect("a receipt body always canonicalises")
    }

    /// SHA-256 of [`Self::canonical_bytes`], lowercase hex: an unsigned receipt's digest.
    pub fn digest(&self) -> String {
        hex::sha256_hex(&self.canonical_bytes())
    }

    /// Checks that the fields are well formed and that their canonical JSON is exact: ids are
    /// non-empty printable text, hashes are 64 lowercase hex, numbers are safe integers, `usage` is an object.
    /// Called before sealing and again by the verifier.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (field, value) in [
            ("run_id", self.run_id.as_str()),
            ("agent", self.agent.as_str()),
        ] {
            if value.is_empty() || value.chars().any(char::is_control) {
                return Err(FieldError::new(
                    field,
                    "is empty or holds control characters",
                ));
            }
        }
        for (field, value) in [
            ("request_hash", &self.request_hash),
            ("response_hash", &self.response_hash),
        ] {
            if !hex::is_lower_hex(value, 64) {
                return Err(FieldError::new(field, "is not 64 lowercase hex characters"));
            }
        }
        if self.seq > MAX_SAFE_INTEGER {
            return Err(FieldError::new("seq", "is above 2^53 - 1"));
        }
        if self.cost.is_some_and(|c| c > MAX_SAFE_INTEGER) {
            return Err(FieldError::new("cost", "is above 2^53 - 1 nanodollars"));
        }
        if let Some(usage) = &self.usage {
            if !usage.is_object() {
                return Err(FieldError::new("usage", "is not a JSON object"));
            }
            if !numbers_are_exact(usage) {
                return Err(FieldError::new(
                    "usage",
                    "holds an integer beyond ±(2^53 - 1), which canonical JSON would round",
                ));
            }
        }
        if let Some(parent) = &self.parent_sig
            && !(hex::is_lower_hex(parent, 128) || hex::is_lower_hex(parent, 64))
        {
            return Err(FieldError::new(
                "parent_sig",
                "is neither a signature (128 hex) nor a digest (64 hex)",
            ));
        }
        match (&self.child, self.kind) {
            (Some(c), ReceiptKind::Child) => c.validate()?,
            (None, ReceiptKind::Child) => {
                return Err(FieldError::new(
                    "child",
                    "is missing: a child result's receipt names the child",
                ));
            }
            (Some(_), _) => {
                return Err(FieldError::new(
                    "child",
                    "is given on a receipt that is not a child result's",
                ));
            }
            (None, _) => {}
        }
        Ok(())
    }
}

/// True when every integer in `value` is within ±(2⁵³ − 1). Iterative, so a deeply nested
/// value cannot overflow the stack.
fn numbers_are_exact(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) => {
                let exact = match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => u <= MAX_SAFE_INTEGER,
                    (None, Some(i)) => i.unsigned_abs() <= MAX_SAFE_INTEGER,
                    (None, None) => true, // a float: JCS writes it exactly as the double it is
                };
                if !exact {
                    return false;
                }
            }
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    true
}

/// How a receipt is sealed. Serialised with a `scheme` tag: `"ed25519"` or `"unsigned"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scheme", rename_all = "snake_case", deny_unknown_fields)]
pub enum Seal {
    /// Signed with Ed25519 over the body's canonical bytes.
    Ed25519 {
        /// The signer's public key, 64 lowercase hex. Only a claim: the verifier compares it
        /// with the key it trusts.
        key_id: String,
        /// The signature, 128 lowercase hex.
        signature: String,
    },
    /// Not signed (no key was configured): the receipt is only hash-chained.
    Unsigned {
        /// SHA-256 of the body's canonical bytes, 64 lowercase hex. Catches an edit that did
        /// not also recompute the digest; anyone can recompute it, so it proves no authorship.
        digest: String,
    },
}

/// The end of a receipt chain, as much of it as sealing the next receipt needs: its seq and
/// its seal (whose [`Seal::link`] becomes the next `parent_sig`). Cheap to keep and to load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainTip {
    /// The last receipt's seq.
    pub seq: u64,
    /// The last receipt's seal.
    pub seal: Seal,
}

impl Seal {
    /// What the next receipt's `parent_sig` holds: the signature, or for an unsigned receipt
    /// its stored digest (`verify` checks the digest against the body before trusting a link).
    pub fn link(&self) -> String {
        match self {
            Seal::Ed25519 { signature, .. } => signature.clone(),
            Seal::Unsigned { digest } => digest.clone(),
        }
    }

    /// [`Seal::link`] without copying it.
    pub(crate) fn link_str(&self) -> &str {
        match self {
            Seal::Ed25519 { signature, .. } => signature,
            Seal::Unsigned { digest } => digest,
        }
    }

    /// The signer's public key (hex), for a signed seal.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Seal::Ed25519 { key_id, .. } => Some(key_id),
            Seal::Unsigned { .. } => None,
        }
    }

    /// The seal in a compact binary form for storage beside a transition: `0x00` then the
    /// 32-byte digest, or `0x01` then the 32-byte public key and the 64-byte signature. `None`
    /// when a field is not the hex it should be.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Seal::Unsigned { digest } => {
                let d: [u8; 32] = hex::decode(digest)?;
                Some([&[0u8][..], &d].concat())
            }
            Seal::Ed25519 { key_id, signature } => {
                let k: [u8; 32] = hex::decode(key_id)?;
                let s: [u8; 64] = hex::decode(signature)?;
                Some([&[1u8][..], &k, &s].concat())
            }
        }
    }

    /// Reads [`Seal::to_bytes`] back; `None` for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Option<Seal> {
        match bytes {
            [0, d @ ..] if d.len() == 32 => Some(Seal::Unsigned {
                digest: hex::encode(d),
            }),
            [1, rest @ ..] if rest.len() == 96 => {
                let (k, s) = rest.split_at(32);
                Some(Seal::Ed25519 {
                    key_id: hex::encode(k),
                    signature: hex::encode(s),
                })
            }
            _ => None,
        }
    }
}

/// A sealed receipt: one line of an exported bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The signed fields.
    pub body: ReceiptBody,
    /// The signature, or the mark that the receipt is unsigned.
    pub seal: Seal,
}

impl Receipt {
    /// The value the next receipt's `parent_sig` must carry: the signature (128 hex) of a
    /// signed receipt, or the digest of the body (64 hex, recomputed from the fields, not
    /// read from the seal) of an unsigned one. Store it as the chain tip.
    pub fn link(&self) -> String {
        self.seal.link()
    }

    /// [`Receipt::link`] without copying it.
    pub(crate) fn link_ref(&self) -> &str {
        self.seal.link_str()
    }

    /// What sealing the next receipt needs of this one.
    pub fn tip(&self) -> ChainTip {
        ChainTip {
            seq: self.body.seq,
            seal: self.seal.clone(),
        }
    }

    /// [`tip`](Self::tip), for a receipt no longer needed (the seal is moved, not copied).
    pub fn into_tip(self) -> ChainTip {
        ChainTip {
            seq: self.body.seq,
            seal: self.seal,
        }
    }

    /// True when the receipt carries an Ed25519 signature.
    pub fn is_signed(&self) -> bool {
        matches!(self.seal, Seal::Ed25519 { .. })
    }

    /// The public key (hex) the receipt claims to be signed by; `None` when unsigned.
    pub fn key_id(&self) -> Option<&str> {
        match &self.seal {
            Seal::Ed25519 { key_id, .. } => Some(key_id),
            Seal::Unsigned { .. } => None,
        }
    }
}

/// SHA-256, as lowercase hex, of the RFC 8785 canonical JSON of `value`: the `request_hash`
/// and `response_hash` of a receipt. Equal for any two spellings of the same JSON (key order,
/// whitespace, `1.0` vs `1`). As in every RFC 8785 implementation, integers beyond 2⁵³ are
/// rounded to a double first.
pub fn hash_json(value: &Value) -> String {
    // Cannot fail: a `serde_json::Value` has unique string keys and only finite numbers, and
    // writing to a `Vec` does not fail.
    let bytes = serde_json_canonicalizer::to_vec(value).expect("a JSON value always canonicalises");
    hex::sha256_hex(&bytes)
}

/// SHA-256 of `bytes`, lowercase hex: how a receipt hashes the exact stored bytes of a request
/// or a response.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::sha256_hex(bytes)
}

/// [`hash_json`] of `value`'s JSON, canonicalised straight from the value (no intermediate
/// `serde_json::Value`): the same hash, less work. Fails only for values JSON cannot hold
/// (a map with non-string keys, a non-finite float).
pub fn hash_serialize<T: Serialize>(value: &T) -> Option<String> {
    serde_json_canonicalizer::to_vec(value)
        .ok()
        .map(|bytes| hex::sha256_hex(&bytes))
}

/// Serde for an [`Hlc`] as a canonical decimal string (no sign, no leading zeros).
mod hlc_text {
    use super::*;

    pub(super) fn serialize<S: Serializer>(hlc: &Hlc, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&hlc.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Hlc, D::Error> {
        let text = <Cow<'de, str>>::deserialize(d)?;
        let canonical = !text.is_empty()
            && text.bytes().all(|c| c.is_ascii_digit())
            && (text.len() == 1 || !text.starts_with('0'));
        match text.parse::<u64>() {
            Ok(n) if canonical => Ok(Hlc(n)),
            _ => Err(serde::de::Error::custom(
                "hlc must be a decimal string of an unsigned 64-bit integer, without leading zeros",
            )),
        }
    }
}
