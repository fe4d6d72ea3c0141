//! Bundles as JSON Lines: one receipt per line, in chain order.
//!
//! Each line is the receipt's RFC 8785 canonical JSON, so an export is byte-for-byte stable
//! and independent of struct field order:
//!
//! ```text
//! {"body":{"agent":"planner","cost":1200,"hlc":"111411200000000000","kind":"model","parent_sig":null,"request_hash":"…","response_hash":"…","run_id":"run-1","seq":3,"usage":{"input_tokens":12}},"seal":{"key_id":"…","scheme":"ed25519","signature":"…"}}
//! ```
//!
//! Line *n* of the file is the receipt at index *n − 1*, the index that verification errors
//! name. Empty lines are not allowed (they would shift that correspondence).

use std::io::{BufRead, BufReader, Read, Write};

use super::body::Receipt;
use super::error::ReceiptError;

/// Writes `receipts` to `writer`, one canonical JSON object per line, each ending in `\n`.
/// Export a run's receipts with it for offline [`verify_chain`](super::verify_chain).
pub fn write_jsonl<W: Write>(mut writer: W, receipts: &[Receipt]) -> Result<(), ReceiptError> {
    let io = |e: std::io::Error| ReceiptError::Io {
        reason: e.to_string(),
    };
    for receipt in receipts {
        let line = serde_json_canonicalizer::to_vec(receipt).map_err(|e| ReceiptError::Io {
            reason: e.to_string(),
        })?;
        writer.write_all(&line).map_err(io)?;
        writer.write_all(b"\n").map_err(io)?;
    }
    writer.flush().map_err(io)
}

/// Reads a bundle written by [`write_jsonl`]. A line that is empty, not UTF-8 or not a
/// receipt (unknown fields included) is an error naming its 1-based line number. Reading
/// checks only the shape; call [`verify_chain`](super::verify_chain) to check the chain and signatures.
pub fn read_jsonl<R: Read>(reader: R) -> Result<Vec<Receipt>, ReceiptError> {
    let mut reader = BufReader::new(reader);
    let mut receipts = Vec::new();
    let mut buf = Vec::new();
    for line in 1.. {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| ReceiptError::Io {
                reason: e.to_string(),
            })?;
        if read == 0 {
            break;
        }
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let malformed = |reason: String| ReceiptError::MalformedLine { line, reason };
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(malformed("the line is empty".to_owned()));
        }
        let text = std::str::from_utf8(text).map_err(|_| malformed("not UTF-8".to_owned()))?;
        // serde quotes the offending key or value, which may hold newlines: kept on one line.
        let receipt = serde_json::from_str(text)
            .map_err(|e| malformed(crate::text::one_line(&e.to_string(), 300)))?;
        receipts.push(receipt);
    }
    Ok(receipts)
}
