//! A complete export: the receipts, then one last line holding the run's sealed head and the
//! count and tip of the receipts before it.
//!
//! A chain of receipts proves that nothing before its last receipt is missing, but not that
//! the last receipt is the run's last: removing lines from the end leaves a valid, shorter
//! chain. The head line closes that gap. Its head is sealed with the run's key and names the
//! run's last receipt ([`RunHead::receipt_tip`]), so a file cut short — its head line removed
//! along with any receipts, or receipts removed before it — no longer shows it is complete.
//! Files without a head line (exports by runtape 0.1.0, or cut short) are refused by
//! [`verify_bundle`] unless the caller accepts them explicitly.
//!
//! ```text
//! {"body":{…},"seal":{…}}
//! {"body":{…},"seal":{…}}
//! {"head":{…the run head…},"receipts":2,"seal":{…},"tip":"…","type":"runtape.receipts.head"}
//! ```

use std::io::{BufRead, BufReader, Read, Write};

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use super::body::{Receipt, Seal};
use super::error::ReceiptError;
use super::head::{HeadOrigin, RunHead, check_head_seal};
use super::report::{VerifyError, VerifyReport};

/// The `type` of a bundle's head line.
pub const BUNDLE_HEAD_TYPE: &str = "runtape.receipts.head";

/// The last line of a complete export.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleHead {
    /// The run's sealed head, as stored when the file was written.
    pub head: RunHead,
    /// How many receipts the lines before hold.
    pub receipts: u64,
    /// The head's seal.
    pub seal: Seal,
    /// The last receipt's link (`null` when there is none).
    pub tip: Option<String>,
    /// [`BUNDLE_HEAD_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
}

impl BundleHead {
    /// The head line closing `receipts`, for a run whose stored head is `head`, sealed `seal`.
    pub fn new(head: RunHead, seal: Seal, receipts: &[Receipt]) -> BundleHead {
        BundleHead {
            head,
            receipts: receipts.len() as u64,
            seal,
            tip: receipts.last().map(Receipt::link),
            kind: BUNDLE_HEAD_TYPE.into(),
        }
    }
}

/// A bundle as read: its receipts and, for a complete export, its head line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The receipts, in file order.
    pub receipts: Vec<Receipt>,
    /// The head line, when the file ends with one.
    pub head: Option<BundleHead>,
}

/// Writes `receipts` one canonical JSON object per line, then `head` as the last line.
pub fn write_bundle<W: Write>(
    mut writer: W,
    receipts: &[Receipt],
    head: &BundleHead,
) -> Result<(), ReceiptError> {
    let io = |e: std::io::Error| ReceiptError::Io {
        reason: e.to_string(),
    };
    super::write_jsonl(&mut writer, receipts)?;
    let line = serde_json_canonicalizer::to_vec(head).map_err(|e| ReceiptError::Io {
        reason: e.to_string(),
    })?;
    writer.write_all(&line).map_err(io)?;
    writer.write_all(b"\n").map_err(io)?;
    writer.flush().map_err(io)
}

/// Reads a bundle: receipts, and a head line if the file ends with one. A head line anywhere
/// but last, or any line that is neither, is an error naming its 1-based line number.
pub fn read_bundle<R: Read>(reader: R) -> Result<Bundle, ReceiptError> {
    let lines = read_lines(reader)?;
    let last = lines.len();
    let mut receipts = Vec::with_capacity(last);
    let mut head = None;
    for (i, line) in lines.into_iter().enumerate() {
        match line {
            Line::Receipt(r) => receipts.push(*r),
            Line::Head(h) if i + 1 == last => head = Some(*h),
            Line::Head(_) => {
                return Err(ReceiptError::MalformedLine {
                    line: i + 1,
                    reason: "a head line must be the file's last line".to_owned(),
                });
            }
        }
    }
    Ok(Bundle { receipts, head })
}

/// One line of an export.
pub(crate) enum Line {
    /// A receipt.
    Receipt(Box<Receipt>),
    /// A head line.
    Head(Box<BundleHead>),
}

/// Every line of an export, each a receipt or a head line; any other line is an error naming
/// its 1-based line number.
pub(crate) fn read_lines<R: Read>(reader: R) -> Result<Vec<Line>, ReceiptError> {
    let mut lines = Vec::new();
    let mut reader = BufReader::new(reader);
    loop {
        let mut buf = Vec::new();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| ReceiptError::Io {
                reason: e.to_string(),
            })?;
        if read == 0 {
            break;
        }
        lines.push(buf);
    }
    let mut out = Vec::with_capacity(lines.len());
    for (i, buf) in lines.iter().enumerate() {
        let line = i + 1;
        let text = buf.strip_suffix(b"\n").unwrap_or(buf);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let malformed = |reason: String| ReceiptError::MalformedLine { line, reason };
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(malformed("the line is empty".to_owned()));
        }
        let text = std::str::from_utf8(text).map_err(|_| malformed("not UTF-8".to_owned()))?;
        match serde_json::from_str::<Receipt>(text) {
            Ok(r) => out.push(Line::Receipt(Box::new(r))),
            Err(e) => match serde_json::from_str::<BundleHead>(text) {
                Ok(h) if h.kind == BUNDLE_HEAD_TYPE => out.push(Line::Head(Box::new(h))),
                Ok(_) => {
                    return Err(malformed(format!(
                        "a head-shaped line whose `type` is not `{BUNDLE_HEAD_TYPE}`"
                    )));
                }
                // serde quotes the offending key or value, which may hold newlines.
                Err(_) => return Err(malformed(crate::text::one_line(&e.to_string(), 300))),
            },
        }
    }
    Ok(out)
}

/// What a bundle's head line established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// The head line is sealed (signed by the trusted key, or consistent when no key was
    /// given) and names the file's last receipt: nothing was cut from the end.
    Complete {
        /// The run head.
        head: Box<RunHead>,
        /// True when the head is signed (by the trusted key, when one was given).
        signed: bool,
    },
    /// No head line (or one sealed without a key on first use, where a key is trusted), and
    /// the caller accepted that: the receipts verify, but nothing shows none was removed from
    /// the end.
    Unproven,
}

/// Verifies a bundle: the receipts as [`verify_chain`](super::verify_chain()) does, then the head line —
/// its seal (signed by `public_key` when one is given), the count, and that the run's sealed
/// head ends its chain at the file's last receipt. A file without a head line is refused
/// unless `accept_headless`; so is, where a key is trusted, a head sealed without a key on
/// first use (it cannot show completeness against a forger).
pub fn verify_bundle(
    bundle: &Bundle,
    public_key: Option<&VerifyingKey>,
    accept_headless: bool,
) -> Result<(VerifyReport, Completeness), VerifyError> {
    verify_bundle_under(bundle, public_key, accept_headless, None)
}

/// [`verify_bundle`] for the receipts of a run whose chain hangs from `anchor` (a delegated
/// child's section of a tree export): its first receipt's `parent_sig` must be `anchor`.
pub fn verify_bundle_under(
    bundle: &Bundle,
    public_key: Option<&VerifyingKey>,
    accept_headless: bool,
    anchor: Option<&str>,
) -> Result<(VerifyReport, Completeness), VerifyError> {
    let report = super::verify_chain_under(&bundle.receipts, public_key, anchor)?;
    let Some(line) = &bundle.head else {
        return if accept_headless {
            Ok((report, Completeness::Unproven))
        } else {
            Err(VerifyError::Headless {
                receipts: bundle.receipts.len(),
            })
        };
    };
    let body = line.head.canonical_bytes();
    check_head_seal(&body, &line.seal, public_key)
        .map_err(|error| VerifyError::HeadSeal { error })?;
    let signed = matches!(line.seal, Seal::Ed25519 { .. });
    if public_key.is_some() && !signed {
        if line.head.origin == HeadOrigin::Engine {
            return Err(VerifyError::HeadNotSigned);
        }
        if !accept_headless {
            return Err(VerifyError::HeadTrustedOnFirstUse);
        }
    }
    if line.receipts != bundle.receipts.len() as u64 {
        return Err(VerifyError::CountMismatch {
            expected: line.receipts,
            found: bundle.receipts.len(),
        });
    }
    let last = bundle.receipts.last().map(|r| (r.body.seq, r.link()));
    let sealed = line
        .head
        .receipt_tip
        .as_ref()
        .map(|t| (t.seq, t.link.clone()));
    if line.tip != report.tip || sealed != last {
        return Err(VerifyError::NotTheEnd {
            sealed_seq: sealed.map(|(s, _)| s),
            last_seq: last.map(|(s, _)| s),
        });
    }
    let complete = if public_key.is_some() && !signed {
        Completeness::Unproven
    } else {
        Completeness::Complete {
            head: Box::new(line.head.clone()),
            signed,
        }
    };
    Ok((report, complete))
}
