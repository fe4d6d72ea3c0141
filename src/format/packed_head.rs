//! How a SQLite database (schema 9 on) stores a run's sealed head: the head's fields in their
//! declared order, each 64-digit hex digest as its 32 bytes and each number as a varint —
//! about 250 bytes where the head's canonical JSON is about 740. Every commit of a run
//! rewrites its row in `runs`, which holds the head since schema 9, so a small head lets many
//! runs' rows share a page: a group commit of a thousand runs then writes far fewer pages.
//!
//! It is a lossless encoding of a [`RunHead`]: what is read back is the head's canonical JSON
//! ([`RunHead::canonical_bytes`]), the very bytes that were sealed.
//!
//! When to use: [`PackedHead::of`] when sealing a head (its fields are at hand), or
//! [`pack_head`] for a head known only by its JSON; [`unpack_head`] when reading the column.
//! A stored value that does not start with [`PACKED_HEAD`] is kept as written — a body that is
//! not the canonical JSON of a head of a known format (a head from an earlier schema is packed
//! by the migration only when it is) — and read back as it is, so any body is stored
//! faithfully and a damaged one is reported by `verify`, never silently repaired.
//!
//! The format, after [`PACKED_HEAD`], is the fields of [`RunHead`] in order:
//!
//! | field | encoding |
//! |---|---|
//! | `chain`, `goal`, `spec`, `state_hash` | a hex text |
//! | `cost_nanos`, `created_ms`, `seq`, `tokens`, `unpriced_turns`, `updated_ms` | varint |
//! | `format` | `0` for [`HEAD_FORMAT`], else `1` and a text |
//! | `origin` | `0` engine, `1` migration |
//! | `outcome`, `setup` | `0` none, else `1` and a hex text |
//! | `parent` | `0` none, else `1`, the run as a text, the seq as a varint |
//! | `receipt_tip` | `0` none, else `1`, the link as a hex text, the seq as a varint |
//! | `run`, `state`, `status` | a text |
//! | `started` | a varint count, then each seq and index as varints |
//!
//! A *text* is a varint length and its UTF-8 bytes. A *hex text* is `0` and 32 bytes when it
//! is exactly 64 lowercase hex digits (a digest, as the engine writes them), else `1` and a
//! text. Nothing may follow the last field.

use std::borrow::Cow;

use super::packed::{PackError, read_varint, varint};
use crate::machine::RunId;
use crate::receipt::{HEAD_FORMAT, HeadOrigin, HeadParent, HeadTip, RunHead};

/// The first byte of a packed head. A head's JSON starts with `{`, and packed JSON with `0x01`
/// ([`super::packed::PACKED`]), so none of the three is taken for another.
pub const PACKED_HEAD: u8 = 0x02;

const DIGEST: u8 = 0;
const TEXT: u8 = 1;
const NONE: u8 = 0;
const SOME: u8 = 1;

/// A head in its stored form (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedHead(Vec<u8>);

impl PackedHead {
    /// Packs `head`. Call it where the head is sealed: it reads the fields, never the JSON.
    pub fn of(head: &RunHead) -> PackedHead {
        let mut out = Vec::with_capacity(288);
        out.push(PACKED_HEAD);
        hex_text(&mut out, &head.chain);
        varint(&mut out, head.cost_nanos);
        varint(&mut out, head.created_ms);
        if head.format == HEAD_FORMAT {
            out.push(0);
        } else {
            out.push(1);
            text(&mut out, &head.format);
        }
        hex_text(&mut out, &head.goal);
        out.push(match head.origin {
            HeadOrigin::Engine => 0,
            HeadOrigin::Migration => 1,
        });
        optional_hex_text(&mut out, head.outcome.as_deref());
        match &head.parent {
            None => out.push(NONE),
            Some(p) => {
                out.push(SOME);
                text(&mut out, p.run.as_str());
                varint(&mut out, p.seq);
            }
        }
        match &head.receipt_tip {
            None => out.push(NONE),
            Some(t) => {
                out.push(SOME);
                hex_text(&mut out, &t.link);
                varint(&mut out, t.seq);
            }
        }
        text(&mut out, head.run.as_str());
        varint(&mut out, head.seq);
        optional_hex_text(&mut out, head.setup.as_deref());
        hex_text(&mut out, &head.spec);
        varint(&mut out, head.started.len() as u64);
        for (seq, index) in &head.started {
            varint(&mut out, *seq);
            varint(&mut out, u64::from(*index));
        }
        text(&mut out, &head.state);
        hex_text(&mut out, &head.state_hash);
        text(&mut out, &head.status);
        varint(&mut out, head.tokens);
        varint(&mut out, head.unpriced_turns);
        varint(&mut out, head.updated_ms);
        PackedHead(out)
    }

    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The stored bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Head `body` packed, when it is the canonical JSON of a head of a known format (so
/// unpacking gives these bytes back); `None` otherwise, and the body is stored as it is.
/// Parses the JSON: where the head itself is at hand, [`PackedHead::of`] is cheaper.
pub fn pack_head(body: &[u8]) -> Option<PackedHead> {
    RunHead::from_bytes(body)
        .filter(|head| head.canonical_bytes() == body)
        .map(|head| PackedHead::of(&head))
}

/// The head's canonical JSON from its stored form; a value not packed is returned as it is.
pub fn unpack_head(stored: &[u8]) -> Result<Cow<'_, [u8]>, PackError> {
    match stored.split_first() {
        Some((&PACKED_HEAD, rest)) => Ok(Cow::Owned(read_head(rest)?.canonical_bytes())),
        _ => Ok(Cow::Borrowed(stored)),
    }
}

/// Reads the fields after [`PACKED_HEAD`].
fn read_head(mut rest: &[u8]) -> Result<RunHead, PackError> {
    let r = &mut rest;
    let chain = read_hex_text(r)?;
    let cost_nanos = read_varint(r)?;
    let created_ms = read_varint(r)?;
    let format = match byte(r)? {
        0 => HEAD_FORMAT.to_owned(),
        1 => read_text(r)?,
        _ => return Err(PackError("a head's format is neither known nor spelled")),
    };
    let goal = read_hex_text(r)?;
    let origin = match byte(r)? {
        0 => HeadOrigin::Engine,
        1 => HeadOrigin::Migration,
        _ => return Err(PackError("a head's origin is unknown")),
    };
    let outcome = read_optional(r, read_hex_text)?;
    let parent = read_optional(r, |r| {
        Ok(HeadParent {
            run: RunId::new(read_text(r)?),
            seq: read_varint(r)?,
        })
    })?;
    let receipt_tip = read_optional(r, |r| {
        Ok(HeadTip {
            link: read_hex_text(r)?,
            seq: read_varint(r)?,
        })
    })?;
    let run = RunId::new(read_text(r)?);
    let seq = read_varint(r)?;
    let setup = read_optional(r, read_hex_text)?;
    let spec = read_hex_text(r)?;
    let count = read_varint(r)?;
    // Each entry takes at least two bytes: a count past what is left is damage, not a reason
    // to reserve memory.
    if count > r.len() as u64 / 2 {
        return Err(PackError("a head's started list is longer than its bytes"));
    }
    let mut started = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let seq = read_varint(r)?;
        let index = u32::try_from(read_varint(r)?)
            .map_err(|_| PackError("a started call's index is too large"))?;
        started.push((seq, index));
    }
    let state = read_text(r)?;
    let state_hash = read_hex_text(r)?;
    let status = read_text(r)?;
    let tokens = read_varint(r)?;
    let unpriced_turns = read_varint(r)?;
    let updated_ms = read_varint(r)?;
    if !r.is_empty() {
        return Err(PackError("bytes follow a head's last field"));
    }
    Ok(RunHead {
        chain,
        cost_nanos,
        created_ms,
        format,
        goal,
        origin,
        outcome,
        parent,
        receipt_tip,
        run,
        seq,
        setup,
        spec,
        started,
        state,
        state_hash,
        status,
        tokens,
        unpriced_turns,
        updated_ms,
    })
}

fn text(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn hex_text(out: &mut Vec<u8>, s: &str) {
    match crate::text::from_lower_hex::<32>(s) {
        Some(d) => {
            out.push(DIGEST);
            out.extend_from_slice(&d);
        }
        None => {
            out.push(TEXT);
            text(out, s);
        }
    }
}

fn optional_hex_text(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(NONE),
        Some(s) => {
            out.push(SOME);
            hex_text(out, s);
        }
    }
}

fn byte(r: &mut &[u8]) -> Result<u8, PackError> {
    let (&b, tail) = r.split_first().ok_or(PackError("a cut head"))?;
    *r = tail;
    Ok(b)
}

fn read_text(r: &mut &[u8]) -> Result<String, PackError> {
    let len = usize::try_from(read_varint(r)?).map_err(|_| PackError("a length too large"))?;
    let (s, tail) = r.split_at_checked(len).ok_or(PackError("a cut string"))?;
    *r = tail;
    String::from_utf8(s.to_vec()).map_err(|_| PackError("a string that is not UTF-8"))
}

fn read_hex_text(r: &mut &[u8]) -> Result<String, PackError> {
    match byte(r)? {
        DIGEST => {
            let (d, tail) = r.split_at_checked(32).ok_or(PackError("a cut digest"))?;
            *r = tail;
            Ok(crate::text::lower_hex(d))
        }
        TEXT => read_text(r),
        _ => Err(PackError("a hex text of unknown kind")),
    }
}

fn read_optional<T>(
    r: &mut &[u8],
    read: impl FnOnce(&mut &[u8]) -> Result<T, PackError>,
) -> Result<Option<T>, PackError> {
    match byte(r)? {
        NONE => Ok(None),
        SOME => read(r).map(Some),
        _ => Err(PackError("an optional field neither absent nor present")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Digest;
    use crate::receipt::text_digest;
    use proptest::prelude::*;

    fn head() -> RunHead {
        RunHead {
            chain: Digest::of(b"c").to_hex(),
            cost_nanos: 12_345,
            created_ms: 1_700_000_000_000,
            format: HEAD_FORMAT.into(),
            goal: text_digest("Count the words"),
            origin: HeadOrigin::Engine,
            outcome: Some(text_digest("{\"outcome\":\"completed\"}")),
            parent: Some(HeadParent {
                run: RunId::new("01parent"),
                seq: 7,
            }),
            receipt_tip: Some(HeadTip {
                link: Digest::of(b"l").to_hex(),
                seq: 9,
            }),
            run: RunId::new("01run"),
            seq: 12,
            setup: Some(text_digest("[setup]")),
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
    fn a_head_packs_to_about_a_third_and_unpacks_to_its_canonical_json() {
        let h = head();
        let body = h.canonical_bytes();
        let packed = PackedHead::of(&h);
        assert!(
            packed.as_bytes().len() * 5 < body.len() * 2,
            "{} bytes for {}",
            packed.as_bytes().len(),
            body.len()
        );
        assert_eq!(pack_head(&body), Some(packed.clone()));
        assert_eq!(unpack_head(packed.as_bytes()).expect("unpacks"), body);
    }

    #[test]
    fn what_is_not_a_canonical_head_is_stored_as_it_is() {
        let body = head().canonical_bytes();
        let text = String::from_utf8(body.clone()).expect("utf-8");
        for other in [
            b"{}".to_vec(),
            b"not json".to_vec(),
            Vec::new(),
            // A head, but not in canonical form: packing would lose the spelling.
            text.replacen(':', ": ", 1).into_bytes(),
            // A head of another format.
            text.replace(HEAD_FORMAT, "runtape.head.0").into_bytes(),
        ] {
            assert_eq!(pack_head(&other), None);
            assert_eq!(unpack_head(&other).expect("as it is").as_ref(), &other[..]);
        }
        assert_eq!(
            unpack_head(&body).expect("JSON as it is").as_ref(),
            &body[..]
        );
    }

    #[test]
    fn texts_that_are_not_lowercase_digests_are_kept_letter_for_letter() {
        let mut h = head();
        h.chain = h.chain.to_uppercase();
        h.goal = "ab".into();
        h.spec = "é".repeat(40);
        h.outcome = Some(String::new());
        h.receipt_tip = Some(HeadTip {
            link: "0".repeat(63),
            seq: 0,
        });
        h.format = "runtape.head.9".into();
        h.origin = HeadOrigin::Migration;
        let packed = PackedHead::of(&h);
        assert_eq!(
            unpack_head(packed.as_bytes()).expect("unpacks"),
            h.canonical_bytes()
        );
    }

    #[test]
    fn every_cut_or_extended_head_is_refused_and_never_panics() {
        let packed = PackedHead::of(&head()).into_bytes();
        for len in 1..packed.len() {
            assert!(unpack_head(&packed[..len]).is_err(), "cut at {len}");
        }
        let mut longer = packed.clone();
        longer.push(0);
        assert!(unpack_head(&longer).is_err());
    }

    fn arb_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<[u8; 32]>().prop_map(|b| crate::text::lower_hex(&b)),
            ".{0,70}",
        ]
    }

    proptest! {
        #[test]
        fn any_head_round_trips(
            texts in proptest::collection::vec(arb_text(), 9),
            numbers in proptest::collection::vec(any::<u64>(), 9),
            options in proptest::collection::vec(any::<bool>(), 4),
            started in proptest::collection::vec((any::<u64>(), any::<u32>()), 0..4),
            migration in any::<bool>(),
        ) {
            let h = RunHead {
                chain: texts[0].clone(),
                cost_nanos: numbers[0],
                created_ms: numbers[1],
                format: if options[0] { HEAD_FORMAT.into() } else { texts[1].clone() },
                goal: texts[2].clone(),
                origin: if migration { HeadOrigin::Migration } else { HeadOrigin::Engine },
                outcome: options[1].then(|| texts[3].clone()),
                parent: options[2].then(|| HeadParent { run: RunId::new(texts[4].clone()), seq: numbers[2] }),
                receipt_tip: options[3].then(|| HeadTip { link: texts[5].clone(), seq: numbers[3] }),
                run: RunId::new(texts[6].clone()),
                seq: numbers[4],
                setup: options[1].then(|| texts[7].clone()),
                spec: texts[8].clone(),
                started,
                state: texts[1].clone(),
                state_hash: texts[0].clone(),
                status: texts[3].clone(),
                tokens: numbers[5],
                unpriced_turns: numbers[6],
                updated_ms: numbers[7],
            };
            let packed = PackedHead::of(&h);
            prop_assert_eq!(unpack_head(packed.as_bytes()).expect("unpacks"), h.canonical_bytes());
        }

        #[test]
        fn any_bytes_after_the_tag_unpack_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut stored = vec![PACKED_HEAD];
            stored.extend(bytes);
            let _ = unpack_head(&stored);
        }
    }
}
