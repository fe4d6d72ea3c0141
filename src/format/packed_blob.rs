//! How a SQLite database (schema 4 on) stores a blob: a conversation node keeps its 32-byte
//! previous head and packs its message JSON ([`super::packed`]); the long strings it shares
//! with the event of the transition that appended it (a model's reply text, a tool's result,
//! the goal) are stored once, in the event, and the node refers to them. So a message's text
//! costs its bytes once, not twice.
//!
//! When to use: [`pack_blob`] when writing a blob, naming the transition row whose event
//! appended it — or [`PackedBlob::new`] where the blob is known before its row is (the
//! packing is the costly part) and [`PackedBlob::stored`] once it is; when reading,
//! [`blob_source`] says which row's event (as JSON) to fetch, and [`unpack_blob`] rebuilds the
//! blob's bytes from it.
//!
//! After the head, byte 32 is:
//! - [`PACKED`]: the message JSON packed, standing alone;
//! - [`REFERS`], then the row id (varint), then the packed tokens, whose references read the
//!   JSON of that row's event;
//! - [`RAW`], then the blob's bytes from byte 32 on: a blob stored as written whose own byte 32
//!   would read as one of these markers (an image or PDF a message carries, see
//!   `machine::attachment`, has arbitrary bytes there);
//! - anything else: the blob as written (schema 3 and before: byte 32 of a node is the `{` of
//!   its message; an MCP catalog is stored as it is).

use std::borrow::Cow;

use super::packed::{
    PACKED, PackError, pack_referring, pack_unchecked, pack_with, unpack_with, unpacks_to,
};

/// Byte 32 of a node whose message refers to the event of the row that follows.
pub const REFERS: u8 = 0x02;

/// Byte 32 of a blob stored as written after a marker: its own byte 32 is one of
/// [`PACKED`], [`REFERS`] or this, which would otherwise be read as the marker.
pub const RAW: u8 = 0x03;

/// `bytes` stored as written: as they are, or with [`RAW`] before byte 32 when that byte
/// would read as a marker.
fn as_written(bytes: &[u8]) -> PackedBlob {
    match bytes.get(NODE_HEAD) {
        Some(&(PACKED | REFERS | RAW)) => {
            let mut out = Vec::with_capacity(bytes.len() + 1);
            out.extend_from_slice(&bytes[..NODE_HEAD]);
            out.push(RAW);
            out.extend_from_slice(&bytes[NODE_HEAD..]);
            PackedBlob::Whole(out)
        }
        _ => PackedBlob::Whole(bytes.to_vec()),
    }
}

/// Bytes before the JSON of a stored conversation node: its previous head.
const NODE_HEAD: usize = 32;

/// The stored form of blob `bytes`, written by the transition stored at row `source`, whose
/// event is the JSON `source_event`. The smallest lossless form: referring to the event,
/// packed alone, or the bytes as they are (an MCP catalog, whose bytes from 32 on are not a
/// value).
pub fn pack_blob(bytes: &[u8], source: u64, source_event: &[u8]) -> Vec<u8> {
    PackedBlob::new(bytes, source_event)
        .stored(source)
        .into_owned()
}

/// A blob packed for storage, before the row id of the transition that writes it is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackedBlob {
    /// Stored exactly as these bytes (packed alone, or as written).
    Whole(Vec<u8>),
    /// A node referring to its transition's event: the head, then (after [`REFERS`] and the
    /// row id) these packed tokens.
    Refers {
        /// The node's previous head.
        head: Vec<u8>,
        /// The message's packed tokens, whose references read the event's JSON.
        tokens: Vec<u8>,
    },
}

impl PackedBlob {
    /// Packs blob `bytes`, appended by a transition whose event is the JSON `source_event`:
    /// the smallest lossless form, as [`pack_blob`] stores it.
    pub fn new(bytes: &[u8], source_event: &[u8]) -> PackedBlob {
        let Some((head, json)) = bytes.split_at_checked(NODE_HEAD) else {
            return PackedBlob::Whole(bytes.to_vec());
        };
        let whole = |packed: &[u8]| {
            let mut out = Vec::with_capacity(NODE_HEAD + packed.len());
            out.extend_from_slice(head);
            out.extend_from_slice(packed);
            PackedBlob::Whole(out)
        };
        // The referring form is packed and checked first. When it takes nothing from the event
        // it is the standalone form; otherwise the standalone form is packed only to compare
        // sizes, and checked only if it is the one kept (one check a blob, not two).
        match pack_referring(json, source_event) {
            Some((alone, false)) => whole(&alone),
            Some((referring, true)) => match pack_unchecked(json) {
                Some(alone) if referring.len() + 10 < alone.len() => PackedBlob::Refers {
                    head: head.to_vec(),
                    tokens: referring[1..].to_vec(),
                },
                Some(alone) if unpacks_to(&alone, &[], json) => whole(&alone),
                _ => as_written(bytes),
            },
            None => match pack_with(json, &[]) {
                Some(alone) => whole(&alone),
                None => as_written(bytes),
            },
        }
    }

    /// The stored bytes, the transition that writes the blob being at row `source`.
    pub fn stored(&self, source: u64) -> Cow<'_, [u8]> {
        match self {
            PackedBlob::Whole(bytes) => Cow::Borrowed(bytes),
            PackedBlob::Refers { head, tokens } => {
                let mut out = Vec::with_capacity(head.len() + 11 + tokens.len());
                out.extend_from_slice(head);
                out.push(REFERS);
                super::packed::varint(&mut out, source);
                out.extend_from_slice(tokens);
                Cow::Owned(out)
            }
        }
    }
}

/// The row whose event a stored blob refers to, if it does.
pub fn blob_source(stored: &[u8]) -> Option<u64> {
    let rest = stored.get(NODE_HEAD..)?;
    let (&REFERS, mut rest) = rest.split_first()? else {
        return None;
    };
    super::packed::read_varint(&mut rest).ok()
}

/// A stored blob as it was written. `source_event` is the JSON of the event of the row
/// [`blob_source`] names (ignored when it names none).
pub fn unpack_blob<'a>(stored: &'a [u8], source_event: &[u8]) -> Result<Cow<'a, [u8]>, PackError> {
    let Some((head, rest)) = stored.split_at_checked(NODE_HEAD) else {
        return Ok(Cow::Borrowed(stored));
    };
    let json = match rest.split_first() {
        Some((&PACKED, tokens)) => unpack_with(tokens, &[])?,
        Some((&REFERS, mut tokens)) => {
            super::packed::read_varint(&mut tokens)?;
            unpack_with(tokens, source_event)?
        }
        Some((&RAW, written)) => written.to_vec(),
        _ => return Ok(Cow::Borrowed(stored)),
    };
    let mut out = Vec::with_capacity(NODE_HEAD + json.len());
    out.extend_from_slice(head);
    out.extend_from_slice(&json);
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_blobs_whose_byte_32_reads_as_a_marker_come_back_as_written() {
        for marker in [PACKED, REFERS, RAW, b'{', 0xff] {
            let mut file = b"\x89PNG\r\n\x1a\n".to_vec();
            file.resize(NODE_HEAD, 9);
            file.push(marker);
            file.extend_from_slice(&[0, 1, 2, 3, 0xfe]);
            let stored = pack_blob(&file, 1, b"{}");
            assert_eq!(blob_source(&stored), None);
            assert_eq!(
                unpack_blob(&stored, b"{}").unwrap().as_ref(),
                &file[..],
                "{marker}"
            );
        }
    }

    const TEXT: &str = "assistant lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum";

    fn node(message: &str) -> Vec<u8> {
        let mut node = vec![7u8; 32];
        node.extend_from_slice(message.as_bytes());
        node
    }

    #[test]
    fn a_node_refers_to_the_text_its_event_carries_and_reads_back_whole() {
        let event = format!(r#"{{"type":"model_replied","reply":{{"text":"{TEXT}"}}}}"#);
        let node = node(&format!(r#"{{"role":"assistant","content":"{TEXT}"}}"#));
        let stored = pack_blob(&node, 4_294_967_301, event.as_bytes());
        assert_eq!((&stored[..32], stored[32]), (&node[..32], REFERS));
        assert!(stored.len() < 32 + 20, "the text is not stored again");
        assert_eq!(blob_source(&stored), Some(4_294_967_301));
        let back = unpack_blob(&stored, event.as_bytes()).expect("unpacks");
        assert_eq!(back.as_ref(), &node[..]);
        // Another event (an edited one) gives another message, or none at all.
        let edited = event.replace("lorem", "LOREM");
        let other = unpack_blob(&stored, edited.as_bytes()).expect("unpacks");
        assert_ne!(other.as_ref(), &node[..]);
        assert!(unpack_blob(&stored, b"{}").is_err());
    }

    #[test]
    fn without_shared_text_a_node_is_packed_alone_and_other_blobs_are_kept() {
        let node = node(r#"{"role":"assistant","content":"hello there"}"#);
        let stored = pack_blob(&node, 9, br#"{"type":"proceed"}"#);
        assert_eq!(stored[32], PACKED);
        assert_eq!(blob_source(&stored), None);
        assert!(stored.len() < node.len());
        assert_eq!(
            unpack_blob(&stored, &[]).expect("unpacks").as_ref(),
            &node[..]
        );
        let catalog = br#"{"tools":[{"name":"read_file","description":"Reads a file"}]}"#;
        for other in [&catalog[..], b"short", &node[..32], b""] {
            let stored = pack_blob(other, 9, b"{}");
            assert_eq!(unpack_blob(&stored, &[]).expect("unpacks").as_ref(), other);
        }
        assert!(
            matches!(unpack_blob(&node, &[]), Ok(Cow::Borrowed(_))),
            "a schema-3 node"
        );
        assert!(unpack_blob(&stored[..stored.len() - 1], &[]).is_err());
    }

    /// How [`PackedBlob::new`] chose before it checked one form instead of two: both forms
    /// packed and checked, the referring one kept when 10 bytes smaller.
    fn chosen_as_before(bytes: &[u8], source_event: &[u8]) -> PackedBlob {
        let Some((head, json)) = bytes.split_at_checked(NODE_HEAD) else {
            return PackedBlob::Whole(bytes.to_vec());
        };
        let Some(alone) = pack_with(json, &[]) else {
            return PackedBlob::Whole(bytes.to_vec());
        };
        match pack_with(json, source_event) {
            Some(referring) if referring.len() + 10 < alone.len() => PackedBlob::Refers {
                head: head.to_vec(),
                tokens: referring[1..].to_vec(),
            },
            _ => PackedBlob::Whole([head, &alone[..]].concat()),
        }
    }

    proptest::proptest! {
        #[test]
        fn the_form_chosen_is_the_one_chosen_before_and_reads_back(
            texts in proptest::collection::vec(
                proptest::prop_oneof!["[a-z ]{32,40}", "(lorem|ipsum|[a-z]{1,9}| ){0,40}"],
                1..4,
            ),
            shared in proptest::collection::vec(proptest::bool::ANY, 4),
            numbers in proptest::collection::vec(proptest::num::i64::ANY, 0..3),
            repeats in 1usize..40,
        ) {
            // A text repeated often costs less packed alone (a repeat is 2 bytes, a reference
            // 3), so both forms get chosen.
            let content: Vec<&String> = texts.iter().cycle().take(texts.len() * repeats).collect();
            let message = serde_json::json!({"role": "tool", "content": content, "n": numbers});
            let in_event: Vec<&String> =
                texts.iter().zip(&shared).filter(|(_, s)| **s).map(|(t, _)| t).collect();
            let event = serde_json::json!({"type": "tool_returned", "texts": in_event});
            let node = node(&message.to_string());
            let event = event.to_string();
            let packed = PackedBlob::new(&node, event.as_bytes());
            proptest::prop_assert_eq!(&packed, &chosen_as_before(&node, event.as_bytes()));
            let stored = packed.stored(3);
            let back = unpack_blob(&stored, event.as_bytes()).expect("unpacks");
            proptest::prop_assert_eq!(back.as_ref(), &node[..]);
        }
    }
}
