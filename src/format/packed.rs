//! Packed JSON: the compact form in which a SQLite database stores the JSON of events, effects
//! and snapshots (schema 4 on). It is a lossless transcoding of the exact bytes serde_json
//! wrote, so everything hashed or signed — chain links, state hashes, receipts — stays defined
//! over the JSON, and a packed row reads back as the very bytes it was packed from.
//!
//! When to use: [`pack`] when writing a JSON column, [`unpack`] when reading one (blobs:
//! [`super::packed_blob`]). A value that
//! does not start with [`PACKED`] is JSON as earlier runtape versions stored it and is returned
//! unchanged, so old rows and new rows live side by side without a data migration.
//!
//! The format, after the [`PACKED`] byte, is one value as a token stream (punctuation `,` and
//! `:` is implied by the nesting, so it is not stored):
//!
//! | byte | token |
//! |---|---|
//! | `0x02` / `0x03` / `0x04` | `{` / `[` / the closing `}` or `]` of the innermost container |
//! | `0x05` / `0x06` / `0x07` | `true` / `false` / `null` |
//! | `0x08` + zigzag varint | an integer written in its shortest form (fits in an `i64`) |
//! | `0x09` + varint length + text | any other number, verbatim |
//! | `0x0A` + varint length + bytes | a string of 64 bytes or more (its JSON escapes verbatim) |
//! | `0x0B` + varint index | the same string as the index-th literal string of this value |
//! | `0x0C` + 32 bytes | a string of 64 lowercase hex digits (a digest) |
//! | `0x0D` + varint index + varint length + bytes | the index-th literal string, then these bytes |
//! | `0x0E` + varint offset + varint length | bytes of the source value (a blob's, see [`super::packed_blob`]) |
//! | `0x40 + n` + `n` bytes | a string shorter than 64 bytes (escapes verbatim) |
//! | `0x80 + i` | the string [`WORDS`]`[i]` |
//!
//! [`WORDS`] is part of the format: it never changes; another table would take another first
//! byte. [`pack`] checks that unpacking gives its input back and otherwise keeps the JSON as
//! it is, so any input is stored faithfully.

use std::borrow::Cow;
use std::sync::LazyLock;

/// The first byte of a packed value (JSON starts with `{`, `[`, `"`, a digit, `-`, `t`, `f`
/// or `n`, so the two never collide).
pub const PACKED: u8 = 0x01;

const OBJECT: u8 = 0x02;
const ARRAY: u8 = 0x03;
const END: u8 = 0x04;
const TRUE: u8 = 0x05;
const FALSE: u8 = 0x06;
const NULL: u8 = 0x07;
const INTEGER: u8 = 0x08;
const NUMBER: u8 = 0x09;
const LONG_STRING: u8 = 0x0A;
const REPEAT: u8 = 0x0B;
const HEX32: u8 = 0x0C;
const PREFIXED: u8 = 0x0D;
/// The shortest earlier string a [`PREFIXED`] string may start with.
const PREFIX_MIN: usize = 8;
const EXTERNAL: u8 = 0x0E;
/// The shortest string stored as a reference into a source value.
pub const EXTERNAL_MIN: usize = 32;
const SHORT_STRING: u8 = 0x40;
const SHORT_LIMIT: usize = 0x40;
const WORD: u8 = 0x80;

/// Strings common in runtape's events, effects and states (field names, tags, roles), each
/// stored as one byte. At most 128; the order is part of the format.
pub const WORDS: &[&str] = &[
    // events and effects
    "run",
    "at",
    "body",
    "type",
    "effect",
    "seq",
    "index",
    "id",
    "agent",
    "reply",
    "text",
    "tool_calls",
    "name",
    "arguments",
    "usage",
    "input_tokens",
    "output_tokens",
    "chunks",
    "request",
    "attempt",
    "call_id",
    "tool",
    "args",
    "idempotency_key",
    "provider",
    "model",
    "route",
    "conversation",
    "len",
    "head",
    "tools",
    "remaining",
    "turns",
    "not_before",
    "finish_reason",
    "normalized",
    "outcome",
    "status",
    "ok",
    "value",
    "error",
    "goal",
    "start",
    "proceed",
    "model_replied",
    "model_failed",
    "tool_returned",
    "input_provided",
    "effect_in_doubt",
    "reconciled",
    "budget_raised",
    "cancel_requested",
    "call_model",
    "call_tool",
    "reconcile",
    "request_input",
    "tools_listed",
    "catalog",
    "answer",
    "kind",
    // states
    "state",
    "created",
    "preparing",
    "generating",
    "calling_tools",
    "awaiting_input",
    "handoff",
    "completed",
    "failed",
    "cancelled",
    "started_at",
    "active",
    "agents",
    "limits",
    "max_turns",
    "max_tool_calls",
    "visits",
    "first_active_at",
    "strikes",
    "cost_nanos",
    "unpriced_turns",
    "outstanding",
    "pending",
    "results",
    "settings",
    // messages and replies
    "role",
    "content",
    "assistant",
    "user",
    "system",
    "tool_call_id",
    "reasoning",
    "stop",
    "length",
    "tool_use",
    "cached_input_tokens",
    "reasoning_tokens",
    "message",
    "code",
];

/// Slots in [`WORD_TABLE`]: a power of two, well over twice [`WORDS`]' length, so a probe
/// rarely goes past its first slot.
const WORD_SLOTS: usize = 512;

/// Where a string would sit in [`WORD_TABLE`]: its length and its first and last eight bytes,
/// mixed. Cheap for the short keys that are most of what is packed, and it reads at most 16
/// bytes of a long string.
fn word_slot(s: &[u8]) -> usize {
    let load = |b: &[u8]| {
        let mut word = [0u8; 8];
        word[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(word)
    };
    let n = s.len();
    let first = load(&s[..n.min(8)]);
    let last = load(&s[n.saturating_sub(8)..]);
    let mixed = (first ^ last.rotate_left(29) ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 55) as usize % WORD_SLOTS
}

/// [`WORDS`] in an open-addressed table keyed by [`word_slot`]: slot `i` holds `index + 1`
/// of the word placed there, 0 when empty. Of words listed twice, the first is placed and
/// the later ones skipped, so a lookup finds the first index. A lookup compares the string
/// with one or two words, where a search of the sorted list compared it with seven.
static WORD_TABLE: LazyLock<[u8; WORD_SLOTS]> = LazyLock::new(|| {
    let mut table = [0u8; WORD_SLOTS];
    for (i, w) in WORDS.iter().enumerate() {
        let w = w.as_bytes();
        let mut slot = word_slot(w);
        loop {
            match table[slot] {
                0 => {
                    table[slot] = i as u8 + 1;
                    break;
                }
                k if WORDS[usize::from(k - 1)].as_bytes() == w => break,
                _ => slot = (slot + 1) % WORD_SLOTS,
            }
        }
    }
    table
});

/// The longest of [`WORDS`]: a longer string is not looked up.
static LONGEST_WORD: LazyLock<usize> =
    LazyLock::new(|| WORDS.iter().map(|w| w.len()).max().unwrap_or(0));

/// The index of `s` in [`WORDS`] (its first place), if it is one.
fn word_index(s: &[u8]) -> Option<u8> {
    if s.len() > *LONGEST_WORD {
        return None;
    }
    let table = &*WORD_TABLE;
    let mut slot = word_slot(s);
    loop {
        match table[slot] {
            0 => return None,
            k if WORDS[usize::from(k - 1)].as_bytes() == s => return Some(k - 1),
            _ => slot = (slot + 1) % WORD_SLOTS,
        }
    }
}

/// `text` as an `i64` when it is exactly how that integer is written (no sign but a leading
/// `-`, no leading zero, not `-0`): what parsing it and writing it back gives unchanged.
fn shortest_integer(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let shortest = match digits {
        [] => false,
        [b'0'] => digits.len() == text.len(),
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    if !shortest {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse::<i64>().ok()
}

/// Why a packed value does not unpack (a damaged or edited row).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packed JSON is damaged: {0}")]
pub struct PackError(pub(super) &'static str);

/// The stored form of `json`: packed when that round-trips exactly, otherwise `json` itself.
/// Empty input stays empty. Call it on bytes serde_json wrote (compact JSON); anything else is
/// simply kept as it is.
pub fn pack(json: &[u8]) -> Vec<u8> {
    if json.is_empty() {
        return Vec::new();
    }
    pack_with(json, &[]).unwrap_or_else(|| json.to_vec())
}

/// `json` packed (starting with [`PACKED`]), with strings of at least [`EXTERNAL_MIN`] bytes
/// that occur in `external` stored as references to it; `None` unless that unpacks, given the
/// same `external`, to exactly `json`.
pub(super) fn pack_with(json: &[u8], external: &[u8]) -> Option<Vec<u8>> {
    pack_referring(json, external).map(|(packed, _)| packed)
}

/// [`pack_with`], and whether the packed value refers to `external` at all: when it does not,
/// it is byte for byte what `pack_with(json, &[])` makes.
pub(super) fn pack_referring(json: &[u8], external: &[u8]) -> Option<(Vec<u8>, bool)> {
    let (packed, refers) = pack_tokens(json, external)?;
    unpacks_to(&packed, external, json).then_some((packed, refers))
}

/// `json` packed with nothing external, not yet checked ([`unpacks_to`]): for comparing sizes
/// before choosing a form.
pub(super) fn pack_unchecked(json: &[u8]) -> Option<Vec<u8>> {
    pack_tokens(json, &[]).map(|(packed, _)| packed)
}

/// True when `packed` (starting with [`PACKED`]) unpacks, reading `external`, to exactly `json`.
pub(super) fn unpacks_to(packed: &[u8], external: &[u8], json: &[u8]) -> bool {
    packed
        .get(1..)
        .and_then(|tokens| unpack_tokens(tokens, external, json.len()).ok())
        .is_some_and(|back| back == json)
}

/// Unpacks the tokens after a [`PACKED`] byte, reading external references from `external`.
pub(super) fn unpack_with(tokens: &[u8], external: &[u8]) -> Result<Vec<u8>, PackError> {
    unpack_tokens(tokens, external, tokens.len() * 2)
}

/// The JSON a stored value holds: unpacked when it starts with [`PACKED`], otherwise the bytes
/// as they are (JSON from schema 3 and before, or empty).
pub fn unpack(stored: &[u8]) -> Result<Cow<'_, [u8]>, PackError> {
    match stored.split_first() {
        Some((&PACKED, rest)) => unpack_tokens(rest, &[], rest.len() * 2).map(Cow::Owned),
        _ => Ok(Cow::Borrowed(stored)),
    }
}

fn pack_tokens(json: &[u8], external: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut refers = false;
    let mut out = Vec::with_capacity(json.len() / 2 + 8);
    out.push(PACKED);
    let mut literals: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'{' => out.push(OBJECT),
            b'[' => out.push(ARRAY),
            b'}' | b']' => out.push(END),
            b',' | b':' => {}
            b'"' => {
                let end = string_end(json, i + 1)?;
                let s = &json[i + 1..end];
                if let Some(w) = word_index(s) {
                    out.push(WORD + w);
                } else if let Some(k) = literals
                    .iter()
                    .position(|l| *l == s)
                    .filter(|_| s.len() > 2)
                {
                    out.push(REPEAT);
                    varint(&mut out, k as u64);
                } else if let Some(at) = find_external(external, s) {
                    refers = true;
                    out.push(EXTERNAL);
                    varint(&mut out, at as u64);
                    varint(&mut out, s.len() as u64);
                } else if let Some(digest) = hex32(s) {
                    out.push(HEX32);
                    out.extend_from_slice(&digest);
                } else if let Some(k) = literals
                    .iter()
                    .position(|l| l.len() >= PREFIX_MIN && s.len() > l.len() && s.starts_with(l))
                {
                    let tail = &s[literals[k].len()..];
                    out.push(PREFIXED);
                    varint(&mut out, k as u64);
                    varint(&mut out, tail.len() as u64);
                    out.extend_from_slice(tail);
                } else {
                    if s.len() < SHORT_LIMIT {
                        out.push(SHORT_STRING + s.len() as u8);
                    } else {
                        out.push(LONG_STRING);
                        varint(&mut out, s.len() as u64);
                    }
                    out.extend_from_slice(s);
                    literals.push(s);
                }
                i = end;
            }
            b't' if json[i..].starts_with(b"true") => {
                out.push(TRUE);
                i += 3;
            }
            b'f' if json[i..].starts_with(b"false") => {
                out.push(FALSE);
                i += 4;
            }
            b'n' if json[i..].starts_with(b"null") => {
                out.push(NULL);
                i += 3;
            }
            b'-' | b'0'..=b'9' => {
                let len = json[i..]
                    .iter()
                    .take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .count();
                let text = &json[i..i + len];
                match shortest_integer(text) {
                    Some(n) => {
                        out.push(INTEGER);
                        varint(&mut out, zigzag(n));
                    }
                    _ => {
                        out.push(NUMBER);
                        varint(&mut out, len as u64);
                        out.extend_from_slice(text);
                    }
                }
                i += len - 1;
            }
            _ => return None,
        }
        i += 1;
    }
    Some((out, refers))
}

/// Up to this many bytes of source, a string is looked for by comparing it at each place its
/// first byte occurs: building `memchr`'s substring searcher for every string cost more than
/// the search itself (≈ 20% of packing at 10,000 runs in flight, `runtape bench --only w5`),
/// and the comparisons are bounded by this times the string's length.
const SCAN_LIMIT: usize = 2048;

/// Where `s` (at least [`EXTERNAL_MIN`] bytes) first occurs in `external`.
fn find_external(external: &[u8], s: &[u8]) -> Option<usize> {
    if s.len() < EXTERNAL_MIN || external.len() < s.len() {
        return None;
    }
    if external.len() > SCAN_LIMIT {
        return memchr::memmem::find(external, s);
    }
    let last_start = external.len() - s.len();
    memchr::memchr_iter(s[0], &external[..=last_start]).find(|&at| external[at..].starts_with(s))
}

/// The 32 bytes a string of exactly 64 lowercase hex digits spells.
fn hex32(s: &[u8]) -> Option<[u8; 32]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The index of the quote closing a string whose contents start at `from`.
fn string_end(json: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < json.len() {
        i += memchr::memchr2(b'\\', b'"', json.get(i..)?)?;
        match json[i] {
            b'\\' => i += 2,
            _ => return Some(i),
        }
    }
    None
}

/// One open container while unpacking: whether it is an object, and how many tokens (keys
/// and values) it holds so far.
struct Open {
    object: bool,
    tokens: usize,
}

/// The JSON the tokens `rest` spell, written into a buffer of `capacity` bytes to start with
/// (the JSON's length, where the caller knows it).
fn unpack_tokens(mut rest: &[u8], external: &[u8], capacity: usize) -> Result<Vec<u8>, PackError> {
    let mut out = Vec::with_capacity(capacity);
    let mut open: Vec<Open> = Vec::new();
    let mut literals: Vec<&[u8]> = Vec::new();
    let mut done = false;
    while let Some((&token, tail)) = rest.split_first() {
        rest = tail;
        if done {
            return Err(PackError("bytes after the value"));
        }
        if token == END {
            let top = open.pop().ok_or(PackError("a close with nothing open"))?;
            if top.object && top.tokens % 2 == 1 {
                return Err(PackError("a key without a value"));
            }
            out.push(if top.object { b'}' } else { b']' });
            done = open.is_empty();
            continue;
        }
        let is_key = match open.last_mut() {
            Some(top) => {
                let is_key = top.object && top.tokens % 2 == 0;
                if top.tokens > 0 {
                    out.push(if top.object && !is_key { b':' } else { b',' });
                }
                top.tokens += 1;
                is_key
            }
            None => false,
        };
        let string = match token {
            OBJECT | ARRAY | TRUE | FALSE | NULL | INTEGER | NUMBER if is_key => {
                return Err(PackError("a key that is not a string"));
            }
            OBJECT | ARRAY => {
                out.push(if token == OBJECT { b'{' } else { b'[' });
                open.push(Open {
                    object: token == OBJECT,
                    tokens: 0,
                });
                None
            }
            TRUE => {
                out.extend_from_slice(b"true");
                None
            }
            FALSE => {
                out.extend_from_slice(b"false");
                None
            }
            NULL => {
                out.extend_from_slice(b"null");
                None
            }
            INTEGER => {
                let n = read_varint(&mut rest)?;
                out.extend_from_slice(itoa::Buffer::new().format(unzigzag(n)).as_bytes());
                None
            }
            NUMBER => {
                let len = read_len(&mut rest)?;
                let (text, tail) = rest
                    .split_at_checked(len)
                    .ok_or(PackError("a cut number"))?;
                rest = tail;
                out.extend_from_slice(text);
                None
            }
            LONG_STRING => {
                let len = read_len(&mut rest)?;
                Some(take_literal(&mut rest, len, &mut literals)?)
            }
            REPEAT => {
                let k = read_len(&mut rest)?;
                Some(
                    *literals
                        .get(k)
                        .ok_or(PackError("a repeat of no earlier string"))?,
                )
            }
            EXTERNAL => {
                let at = read_len(&mut rest)?;
                let len = read_len(&mut rest)?;
                let s = at
                    .checked_add(len)
                    .and_then(|end| external.get(at..end))
                    .ok_or(PackError("a reference outside its source"))?;
                out.push(b'"');
                out.extend_from_slice(s);
                out.push(b'"');
                None
            }
            HEX32 => {
                let (digest, tail) = rest.split_at_checked(32).ok_or(PackError("a cut digest"))?;
                rest = tail;
                out.push(b'"');
                for &b in digest {
                    out.extend_from_slice(&crate::text::hex_pair(b));
                }
                out.push(b'"');
                None
            }
            PREFIXED => {
                let k = read_len(&mut rest)?;
                let prefix = *literals
                    .get(k)
                    .ok_or(PackError("a prefix of no earlier string"))?;
                let len = read_len(&mut rest)?;
                let (tail, after) = rest
                    .split_at_checked(len)
                    .ok_or(PackError("a cut string"))?;
                rest = after;
                out.push(b'"');
                out.extend_from_slice(prefix);
                out.extend_from_slice(tail);
                out.push(b'"');
                None
            }
            t if (SHORT_STRING..WORD).contains(&t) => {
                let len = usize::from(t - SHORT_STRING);
                Some(take_literal(&mut rest, len, &mut literals)?)
            }
            t if t >= WORD => Some(
                WORDS
                    .get(usize::from(t - WORD))
                    .ok_or(PackError("an unknown word"))?
                    .as_bytes(),
            ),
            _ => return Err(PackError("an unknown token")),
        };
        if let Some(s) = string {
            out.push(b'"');
            out.extend_from_slice(s);
            out.push(b'"');
        }
        done = open.is_empty();
    }
    if !done {
        return Err(PackError("a value cut short"));
    }
    Ok(out)
}

fn take_literal<'a>(
    rest: &mut &'a [u8],
    len: usize,
    literals: &mut Vec<&'a [u8]>,
) -> Result<&'a [u8], PackError> {
    let (s, tail) = rest
        .split_at_checked(len)
        .ok_or(PackError("a cut string"))?;
    *rest = tail;
    literals.push(s);
    Ok(s)
}

/// Appends `n` as a LEB128 varint.
pub(super) fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a LEB128 varint off the front of `rest`.
pub(super) fn read_varint(rest: &mut &[u8]) -> Result<u64, PackError> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, tail) = rest.split_first().ok_or(PackError("a cut number"))?;
        *rest = tail;
        n |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(n);
        }
    }
    Err(PackError("a number too long"))
}

fn read_len(rest: &mut &[u8]) -> Result<usize, PackError> {
    usize::try_from(read_varint(rest)?).map_err(|_| PackError("a length too large"))
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(json: &[u8]) -> Vec<u8> {
        let stored = pack(json);
        unpack(&stored).expect("unpacks").into_owned()
    }

    #[test]
    fn an_event_packs_smaller_and_unpacks_to_the_same_bytes() {
        let json = br#"{"run":"01JDXAMPLERUNID0000000000","key":"01JDXAMPLERUNID0000000000:12:0","head":"65c3aa9518369318db0628e919fbaeb9a6b28f7993553148be072ca0d038935a","at":1732350000000,"body":{"type":"model_replied","effect":{"run":"01JDXAMPLERUNID0000000000","seq":12,"index":0},"reply":{"text":"hi \"there\"\n","tool_calls":[{"id":"c1","name":"lookup","arguments":{"q":"x"}}],"usage":{"input_tokens":100,"output_tokens":50}},"chunks":[],"ok":true,"none":null,"no":false,"f":-1.5e3,"neg":-7,"big":18446744073709551615}}"#;
        let stored = pack(json);
        assert_eq!(stored[0], PACKED);
        assert!(
            stored.len() * 2 < json.len(),
            "{} vs {}",
            stored.len(),
            json.len()
        );
        assert_eq!(round_trip(json), json.to_vec());
    }

    #[test]
    fn plain_json_and_empty_columns_read_back_as_they_are() {
        let legacy = br#"{"type":"proceed"}"#;
        assert!(matches!(unpack(legacy), Ok(Cow::Borrowed(b)) if b == legacy));
        assert!(pack(b"").is_empty());
        assert!(unpack(b"").expect("empty").is_empty());
    }

    #[test]
    fn what_is_not_compact_json_is_kept_as_it_is() {
        for odd in [&b"{ \"a\": 1 }"[..], b"nope", b"{\"a\"", b"[1,,2]", b"1 2"] {
            assert_eq!(pack(odd), odd.to_vec(), "{}", String::from_utf8_lossy(odd));
        }
        // Packed or not, every input reads back as it was.
        for odd in [&b"{\"a\":01}"[..], b"-", b"\"\\\"\"", b"[]", b"{}"] {
            assert_eq!(
                round_trip(odd),
                odd.to_vec(),
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
    }

    #[test]
    fn damaged_packed_bytes_are_an_error_not_a_panic() {
        let stored = pack(br#"{"run":"abc","seq":[1,2,{"x":"yy"}]}"#);
        for cut in 1..stored.len() {
            assert!(unpack(&stored[..cut]).is_err(), "cut at {cut}");
        }
        assert!(unpack(&[PACKED, END]).is_err());
        assert!(
            unpack(&[PACKED, OBJECT, INTEGER, 2, END]).is_err(),
            "a number key"
        );
        assert!(unpack(&[PACKED, NULL, NULL]).is_err(), "two values");
        assert!(unpack(&[PACKED, REPEAT, 0]).is_err());
        assert!(unpack(&[PACKED, WORD + 127]).is_err());
        assert!(unpack(&[PACKED, LONG_STRING, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }

    #[test]
    fn every_word_is_found_at_its_first_place_in_the_list() {
        for (i, w) in WORDS.iter().enumerate() {
            let first = WORDS.iter().position(|x| x == w).map(|i| i as u8);
            assert_eq!(word_index(w.as_bytes()), first, "{w} at {i}");
        }
        assert_eq!(word_index(b"not a word"), None);
        assert_eq!(
            word_index(b""),
            WORDS.iter().position(|w| w.is_empty()).map(|i| i as u8)
        );
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            any::<u64>().prop_map(|n| serde_json::json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::json!(f)),
            prop_oneof![
                ".*",
                "(run|seq|abc|\"|\\\\|\n){0,4}",
                "[0-9a-f]{64}",
                "(runid-0123456789){1,3}"
            ]
            .prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("(run|type|x|.{0,70})", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn an_external_string_is_found_at_either_end_of_its_source() {
        let needle = b"0123456789abcdefghijklmnopqrstuvwxyz";
        for source in [
            [&needle[..], b"tail"].concat(),
            [&b"head"[..], needle].concat(),
            needle.to_vec(),
        ] {
            assert_eq!(
                find_external(&source, needle),
                memchr::memmem::find(&source, needle)
            );
        }
        assert_eq!(
            find_external(&needle[1..], needle),
            None,
            "longer than its source"
        );
    }

    proptest! {
        #[test]
        fn any_json_serde_writes_reads_back_byte_for_byte(v in json_value()) {
            let json = serde_json::to_vec(&v).expect("encodes");
            let stored = pack(&json);
            prop_assert_eq!(stored.first() == Some(&PACKED), true, "serde's JSON always packs");
            prop_assert_eq!(round_trip(&json), json);
        }

        /// The shortcuts give what the plain ways gave: the same commit packs to the same
        /// bytes as before.
        #[test]
        fn words_integers_and_external_strings_are_found_as_before(
            text in "-?[0-9+]{0,21}",
            word in "(run|seq|type|body|tool_calls|codes|x|)|[a-z_]{0,24}",
            hay in "(ab|abc|x){0,60}",
            needle in "(ab|abc|x){11,20}",
        ) {
            prop_assert_eq!(
                shortest_integer(text.as_bytes()),
                text.parse::<i64>().ok().filter(|n| n.to_string() == text)
            );
            prop_assert_eq!(
                word_index(word.as_bytes()),
                WORDS.iter().position(|w| *w == word).map(|i| i as u8)
            );
            let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
            let plain = (needle.len() >= EXTERNAL_MIN && hay.len() >= needle.len())
                .then(|| hay.windows(needle.len()).position(|w| w == needle))
                .flatten();
            prop_assert_eq!(find_external(hay, needle), plain);
            // Past the scanned size, `memchr`'s searcher finds the same place.
            let mut big = b"y".repeat(SCAN_LIMIT);
            big.extend_from_slice(hay);
            let plain_big = (needle.len() >= EXTERNAL_MIN)
                .then(|| big.windows(needle.len()).position(|w| w == needle))
                .flatten();
            prop_assert_eq!(find_external(&big, needle), plain_big);
        }

        #[test]
        fn arbitrary_packed_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut stored = vec![PACKED];
            stored.extend(bytes);
            let _ = unpack(&stored);
        }
    }
}
