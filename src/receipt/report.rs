//! What verification reports: the receipt at fault ([`ReceiptAt`]), the failure ([`VerifyError`]),
//! and on success how much the bundle proves ([`VerifyReport`], [`Integrity`]).

use std::fmt;

use super::body::{FieldError, Receipt, ReceiptKind};
use crate::machine::RunId;

/// Where a receipt sits in a bundle: its 0-based index (line `index + 1` of a JSONL file), its
/// seq and kind, so a failure can be found both in the file and in the run's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiptAt {
    /// 0-based position in the bundle.
    pub index: usize,
    /// The receipt's seq, as written.
    pub seq: u64,
    /// The receipt's kind, as written.
    pub kind: ReceiptKind,
}

impl ReceiptAt {
    pub(crate) fn of(receipts: &[Receipt], index: usize) -> Option<ReceiptAt> {
        receipts.get(index).map(|r| ReceiptAt {
            index,
            seq: r.body.seq,
            kind: r.body.kind,
        })
    }
}

impl fmt::Display for ReceiptAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "receipt {} (line {}, seq {}, {})",
            self.index,
            self.index + 1,
            self.seq,
            self.kind
        )
    }
}

/// How much a verified bundle proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// Every receipt is signed by the given key and chained: authentic and complete up to the
    /// tip.
    Signed {
        /// Hex of the public key that signed.
        key_id: String,
    },
    /// Every receipt is unsigned and hash-chained: accidental edits and gaps are caught, but
    /// anyone could have rebuilt the chain.
    HashChainedOnly,
    /// The bundle holds no receipts.
    Empty,
}

/// What [`verify_chain`](super::verify_chain()) established about a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Number of receipts checked.
    pub receipts: usize,
    /// Signed, or unsigned and hash-chained only.
    pub integrity: Integrity,
    /// The run ids present, in order of first appearance (one, unless the bundle is a fork's
    /// chain including its parent's shared part).
    pub runs: Vec<RunId>,
    /// The last receipt's link. Compare it with the tip recorded by the store to detect
    /// receipts cut off the end.
    pub tip: Option<String>,
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.integrity {
            Integrity::Empty => f.write_str("no receipts to verify"),
            Integrity::Signed { key_id } => write!(
                f,
                "{} receipts verified: signed by key {}, chain intact",
                self.receipts,
                short(key_id)
            ),
            Integrity::HashChainedOnly => write!(
                f,
                "{} receipts verified: unsigned, hash-chained only (nothing proves who wrote them)",
                self.receipts
            ),
        }
    }
}

/// Why a bundle failed verification. Each variant names the receipt at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The bundle is signed but no public key was given.
    #[error(
        "the receipts are signed (key id {}); pass the signer's public key to verify them, the key id in the bundle cannot vouch for itself",
        short(key_id)
    )]
    KeyRequired {
        /// The key id the first receipt claims.
        key_id: String,
    },
    /// A public key was given but the bundle is unsigned.
    #[error(
        "the receipts are unsigned but a public key was given: the bundle was never signed or its signatures were stripped; verify without a key to check only the hash chain"
    )]
    NotSigned,
    /// Signed and unsigned receipts in one bundle.
    #[error(
        "{at} is {}, but the bundle starts {}: a bundle must be all signed or all unsigned",
        if *signed { "signed" } else { "unsigned" },
        if *signed { "unsigned" } else { "signed" }
    )]
    Mixed {
        /// The first receipt whose mode differs from the first receipt's.
        at: ReceiptAt,
        /// True when that receipt is signed.
        signed: bool,
    },
    /// A field cannot be trusted as written.
    #[error("{at} is malformed: {error}")]
    Malformed {
        /// The receipt.
        at: ReceiptAt,
        /// What is wrong.
        error: FieldError,
    },
    /// `parent_sig` matches no receipt in the bundle.
    #[error(
        "chain break at {at}: parent_sig should be {} but is {}; a receipt before it is missing or was re-signed, or its parent_sig was edited",
        opt_short(expected.as_deref()),
        opt_short(found.as_deref())
    )]
    ChainBreak {
        /// The receipt whose `parent_sig` is wrong.
        at: ReceiptAt,
        /// The previous receipt's link (`None` for the first receipt).
        expected: Option<String>,
        /// The `parent_sig` found.
        found: Option<String>,
    },
    /// `parent_sig` points at a receipt elsewhere in the bundle.
    #[error(
        "{at} is out of place: its parent is {parent}, not the receipt just before it; receipts were reordered, duplicated or inserted"
    )]
    Misplaced {
        /// The receipt that is out of place.
        at: ReceiptAt,
        /// The receipt its `parent_sig` points at.
        parent: ReceiptAt,
    },
    /// The seq does not increase.
    #[error("{at} has seq {} after seq {}: seqs must strictly increase", at.seq, previous.seq)]
    SeqNotIncreasing {
        /// The receipt.
        at: ReceiptAt,
        /// The receipt before it.
        previous: ReceiptAt,
    },
    /// A receipt claims a different signer than the trusted key.
    #[error(
        "{at} claims key {} but the trusted key is {}: it was signed by another key",
        short(found),
        short(expected)
    )]
    KeyMismatch {
        /// The receipt.
        at: ReceiptAt,
        /// Hex of the trusted public key.
        expected: String,
        /// The `key_id` found.
        found: String,
    },
    /// A signature does not verify.
    #[error(
        "{at} has an invalid signature: its fields were edited after signing, or another key signed it"
    )]
    BadSignature {
        /// The receipt.
        at: ReceiptAt,
    },
    /// An unsigned receipt's digest does not match its fields.
    #[error(
        "{at} was edited after sealing: its fields hash to {} but its digest is {}",
        short(expected),
        short(found)
    )]
    DigestMismatch {
        /// The receipt.
        at: ReceiptAt,
        /// SHA-256 of the fields as found.
        expected: String,
        /// The stored digest.
        found: String,
    },
    /// The file has no head line, so nothing shows none of its receipts were cut off the end.
    #[error(
        "the file has no head line (it was exported by runtape 0.1.0, or lines were removed from its end), so nothing shows it is complete; export the run's receipts again, or accept an unproven file explicitly (--allow-headless)"
    )]
    Headless {
        /// Receipts the file holds.
        receipts: usize,
    },
    /// The head line's seal does not hold.
    #[error("the head line's seal does not hold: {error}")]
    HeadSeal {
        /// Why.
        error: super::head::HeadSealError,
    },
    /// A key is trusted but the head line is unsigned (and not sealed on first use).
    #[error(
        "the head line is unsigned but a public key was given: the run was not signed, or the head's signature was stripped"
    )]
    HeadNotSigned,
    /// A key is trusted but the head was sealed without a key on first use.
    #[error(
        "the head line was sealed without a key when a database written by runtape 0.1.0 was first opened: it cannot show the file is complete; accept that explicitly (--allow-headless)"
    )]
    HeadTrustedOnFirstUse,
    /// The head line's count is not the number of receipts before it.
    #[error(
        "the head line counts {expected} receipts but the file holds {found}: receipts were removed or added"
    )]
    CountMismatch {
        /// The count in the head line.
        expected: u64,
        /// Receipts in the file.
        found: usize,
    },
    /// The run's sealed head ends the chain at another receipt than the file's last.
    #[error(
        "the run's sealed head ends its receipt chain at {} but the file ends at {}: receipts were removed from the end (or added)",
        seq_or_none(*sealed_seq),
        seq_or_none(*last_seq)
    )]
    NotTheEnd {
        /// The seq of the last receipt the head sealed.
        sealed_seq: Option<u64>,
        /// The seq of the file's last receipt.
        last_seq: Option<u64>,
    },
    /// A receipt belongs to another run.
    #[error("{at} belongs to run {found}, not run {expected}")]
    WrongRun {
        /// The receipt.
        at: ReceiptAt,
        /// The run the bundle should belong to.
        expected: RunId,
        /// The run it names.
        found: RunId,
    },
}

impl VerifyError {
    /// The receipt the error is about, when it is about one.
    pub fn at(&self) -> Option<&ReceiptAt> {
        match self {
            VerifyError::KeyRequired { .. }
            | VerifyError::NotSigned
            | VerifyError::Headless { .. }
            | VerifyError::HeadSeal { .. }
            | VerifyError::HeadNotSigned
            | VerifyError::HeadTrustedOnFirstUse
            | VerifyError::CountMismatch { .. }
            | VerifyError::NotTheEnd { .. } => None,
            VerifyError::Mixed { at, .. }
            | VerifyError::Malformed { at, .. }
            | VerifyError::ChainBreak { at, .. }
            | VerifyError::Misplaced { at, .. }
            | VerifyError::SeqNotIncreasing { at, .. }
            | VerifyError::KeyMismatch { at, .. }
            | VerifyError::BadSignature { at, .. }
            | VerifyError::DigestMismatch { at, .. }
            | VerifyError::WrongRun { at, .. } => Some(at),
        }
    }
}

pub(crate) fn report(receipts: &[Receipt], integrity: Integrity) -> VerifyReport {
    let mut runs: Vec<RunId> = Vec::new();
    for r in receipts {
        if !runs.contains(&r.body.run_id) {
            runs.push(r.body.run_id.clone());
        }
    }
    VerifyReport {
        receipts: receipts.len(),
        integrity,
        runs,
        tip: receipts.last().map(Receipt::link),
    }
}

/// The first 16 characters of a hex value and an ellipsis: enough to tell values apart in
/// a one-line message. Control characters (possible in a value read from a tampered file) are
/// replaced so the message stays one line.
fn short(hex: &str) -> String {
    let mut out: String = hex
        .chars()
        .take(16)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if hex.chars().nth(16).is_some() {
        out.push('…');
    }
    out
}

fn seq_or_none(seq: Option<u64>) -> String {
    seq.map_or_else(
        || "no receipt".to_owned(),
        |s| format!("the receipt of seq {s}"),
    )
}

fn opt_short(hex: Option<&str>) -> String {
    hex.map_or_else(|| "null".to_owned(), short)
}
