//! Signed, hash-chained receipts for model turns and tool calls.
//!
//! Every model turn and every tool call of a run produces a [`Receipt`] once its result is
//! committed: the fields of a [`ReceiptBody`] — `run_id`, `seq` (the transition whose event
//! carried the result), `kind`, `agent`, `request_hash`, `response_hash` ([`hash_json`] of the
//! request and the response), `usage`, `cost` (nanodollars), `hlc` and `parent_sig` — sealed
//! over their RFC 8785 canonical JSON.
//!
//! # Chaining
//!
//! Each receipt's `parent_sig` holds the previous receipt's [`Receipt::link`] (`null` for the
//! first), so deleting, reordering, editing or re-signing any receipt breaks the chain or a
//! signature, and [`verify_chain`] names the receipt at fault. A delegated child run's first
//! receipt holds instead the link of its parent's receipt for the model turn that asked for
//! the child (its anchor): exported after the parent's receipts through that one, the child's
//! chain verifies as one with them, and [`verify_chain_under`] checks it alone given the
//! anchor.
//!
//! | mode | seal | link (the next `parent_sig`) | proves |
//! |---|---|---|---|
//! | signed (a key is configured) | `{"scheme":"ed25519","key_id":<public key hex>,"signature":<128 hex>}` | the signature | who wrote the receipts, and that none was changed or removed before the tip |
//! | unsigned (no key) | `{"scheme":"unsigned","digest":<SHA-256 hex of the canonical body>}` | the digest | only that the chain is internally consistent |
//!
//! Chaining over the signature (rather than the body digest) ties each receipt to the key that
//! signed its predecessor: re-signing one receipt with another key changes its link and breaks
//! the next one. Without a key there is no signature, so the link is the SHA-256 of the
//! canonical body; the lengths (128 vs 64 hex) keep the two kinds of link apart, and a bundle
//! must be all signed or all unsigned. Unsigned bundles verify as
//! [`Integrity::HashChainedOnly`]: anyone could rebuild such a chain, so they guard against
//! accidents, not forgery.
//!
//! # Keys
//!
//! The signing key is an Ed25519 seed, in a key file or in an environment variable holding the
//! same text ([`DEFAULT_KEY_ENV`] by convention); [`ReceiptSigner::from_env_or_file`] loads
//! it. This module never writes the secret anywhere except the file [`keygen`] creates (mode
//! 0600, never overwriting), and no error or `Debug` output quotes it. Receipts carry only the
//! public key, as `key_id`; verifiers get it from [`write_public_key`] or [`public_key_hex`]
//! and must not take it from the bundle.
//!
//! ## Key file format
//!
//! UTF-8 text. Blank lines and lines starting with `#` are ignored; exactly one other line
//! must remain, holding the 32-byte Ed25519 seed as 64 hex characters (either case;
//! surrounding whitespace ignored). [`keygen`] writes the lines below (shown with the RFC 8032
//! test key, which must never be used for real). An environment variable holds the same text,
//! usually just the hex line; one that is unset or blank means "no key". A public key file has
//! the same shape with the 32-byte public key on its key line — the same hex as `key_id`.
//!
//! ```text
//! # runtape receipt signing key (Ed25519 seed, hex). Keep it secret.
//! # public key: d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a
//! 9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60
//! ```
//!
//! # Bundles
//!
//! [`write_jsonl`] exports receipts one per line; [`read_jsonl`] reads them back; [`verify_chain`]
//! checks a bundle offline, with the trusted public key or none, and [`check_run`] checks that
//! it holds one run's receipts. A complete export ([`write_bundle`]) ends with a head line: the
//! run's sealed [`RunHead`] naming its last receipt, so [`verify_bundle`] can tell a file cut
//! short from a whole one.
//!
//! ```
//! use runtape::machine::{AgentId, Hlc, RunId};
//! use runtape::receipt::*;
//! use serde_json::json;
//!
//! // In production: ReceiptSigner::from_env_or_file(DEFAULT_KEY_ENV, Some(path))?
//! let signer = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[42; 32]));
//! let mut bundle: Vec<Receipt> = Vec::new();
//! for seq in [3, 5, 8] {
//!     let draft = ReceiptDraft {
//!         run_id: RunId::new("run-1"),
//!         seq,
//!         kind: ReceiptKind::Tool,
//!         agent: AgentId::new("researcher"),
//!         request_hash: hash_json(&json!({"tool": "search", "args": {"q": seq}})),
//!         response_hash: hash_json(&json!({"hits": []})),
//!         usage: None,
//!         cost: None,
//!         hlc: Hlc::new(1_700_000_000_000 + seq, 0),
//!         child: None,
//!     };
//!     let receipt = signer.seal(bundle.last(), draft)?;
//!     bundle.push(receipt);
//! }
//! let mut file = Vec::new();
//! write_jsonl(&mut file, &bundle)?;
//! let read_back = read_jsonl(file.as_slice())?;
//! let public_key = signer.verifying_key();
//! let report = verify_chain(&read_back, public_key.as_ref())?;
//! assert_eq!(report.integrity, Integrity::Signed { key_id: public_key_hex(&public_key.unwrap()) });
//! check_run(&read_back, &RunId::new("run-1"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod body;
mod bundle;
mod error;
mod head;
mod hex;
mod jsonl;
mod key;
mod removal;
mod report;
mod signer;
mod tree;
mod verify;

pub use body::{
    ChainTip, ChildTip, FieldError, MAX_SAFE_INTEGER, Receipt, ReceiptBody, ReceiptDraft,
    ReceiptKind, Seal, hash_json, hash_serialize, sha256_hex,
};
pub use bundle::{
    BUNDLE_HEAD_TYPE, Bundle, BundleHead, Completeness, read_bundle, verify_bundle,
    verify_bundle_under, write_bundle,
};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use error::{KeyOrigin, KeyProblem, ReceiptError};
pub use head::{
    HEAD_DOMAIN, HEAD_FORMAT, HeadOrigin, HeadParent, HeadSealError, HeadTip, RunHead,
    check_head_seal, head_body_digest, text_digest, unsigned_head_seal,
};
pub use jsonl::{read_jsonl, write_jsonl};
pub use key::{
    KEY_FILE_HEADER, keygen, parse_public_key, public_key_hex, read_public_key, write_public_key,
};
pub use removal::{REMOVAL_DOMAIN, check_removal_seal};
pub use report::{Integrity, ReceiptAt, VerifyError, VerifyReport};
pub use signer::ReceiptSigner;
pub use tree::{
    SectionReport, TreeBundle, TreeError, TreeReport, read_tree_bundle, verify_tree,
    write_tree_bundle,
};
pub use verify::{check_run, verify_chain, verify_chain_under};

/// The environment variable the engine reads the signing key from by default (the key file's
/// text, usually just its 64 hex characters). Pass it to
/// [`ReceiptSigner::from_env_or_file`].
pub const DEFAULT_KEY_ENV: &str = "RUNTAPE_RECEIPT_KEY";
