//! Compact JSON, byte for byte what `serde_json::to_writer` writes, written faster: every
//! step of a run serialises its event, effects, state, head and receipt, and hashes the
//! bytes, so these writes are a large share of what a step costs.
//!
//! When to use: wherever the engine writes JSON that is hashed or stored (through
//! [`crate::scratch`], or [`write`] directly). The bytes never differ from serde_json's: the
//! writer handles strings, integers, booleans, nulls, sequences, maps, structs and enums
//! itself, and for anything else — floats (serde_json's shortest form is its own choice),
//! 128-bit integers, byte arrays, map keys other than strings and integers, serde_json's own
//! raw values — it gives up and the whole value is written again by serde_json. So does any
//! error a value's `Serialize` raises, which serde_json then reports as it always did.
//!
//! What makes it faster than serde_json's writer: strings are checked for characters to
//! escape eight bytes at a time rather than one, and bytes are pushed onto the `Vec`
//! directly rather than through `io::Write`.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};

/// Appends `value`'s compact JSON to `out`: exactly the bytes `serde_json::to_writer(out,
/// value)` would append, and the same error when it fails (on error `out` is as it was).
pub(crate) fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let start = out.len();
    if value.serialize(Json(&mut *out)).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    let written = serde_json::to_writer(&mut *out, value);
    if written.is_err() {
        out.truncate(start);
    }
    written
}

/// `serde_json::to_vec(value)`, written by [`write`].
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    write(&mut out, value)?;
    Ok(out)
}

/// Why the fast writer stopped: a value it leaves to serde_json, or an error the value
/// raised. Either way serde_json writes the value again.
#[derive(Debug)]
struct GiveUp;

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for GiveUp {}

impl ser::Error for GiveUp {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        GiveUp
    }
}

/// Whether any of the eight bytes of `word` is a quote, a backslash or a control character
/// (below 0x20): the bytes JSON escapes. Exact for "any" (a borrow can only spread from a
/// byte that already matched).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v;
    (below_space | has_zero(quote) | has_zero(backslash)) & HIGH != 0
}

/// How serde_json escapes `byte`, or `None` when it is written as it is.
const fn escape(byte: u8) -> Option<&'static [u8]> {
    Some(match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0C => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x00..=0x1F => return Some(&[]),
        _ => return None,
    })
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it. Most strings (every key,
/// ids, digests, most text) have nothing to escape and are copied whole.
#[inline]
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if needs_escape(bytes) {
        return escaped(out, bytes);
    }
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    out.extend_from_slice(bytes);
    out.push(b'"');
}

/// Whether any byte of `bytes` is one JSON escapes: eight at a time, the last eight
/// overlapping the word before when the length is not a multiple of eight; a string shorter
/// than a word (most keys) byte by byte, without a branch per byte.
#[inline]
fn needs_escape(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return bytes
            .iter()
            .fold(false, |found, &b| found | ESCAPED[usize::from(b)]);
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        word_needs_escape(u64::from_ne_bytes(w))
    };
    (0..bytes.len() / 8).any(|i| word(i * 8)) || word(bytes.len() - 8)
}

/// The bytes JSON escapes: quote, backslash, control characters.
/// Built from [`escape`], so the two cannot disagree.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = escape(b as u8).is_some();
        b += 1;
    }
    table
};

/// [`string`] for a string with something to escape.
#[cold]
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 8);
    out.push(b'"');
    let mut written = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let Some(escaped) = escape(byte) else {
            continue;
        };
        out.extend_from_slice(&bytes[written..i]);
        if escaped.is_empty() {
            // Other control characters: \u00XX, lowercase hex.
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&crate::text::hex_pair(byte));
        } else {
            out.extend_from_slice(escaped);
        }
        written = i + 1;
    }
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
}

fn integer<I: itoa::Integer>(out: &mut Vec<u8>, value: I) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// An unsigned integer; a single digit (an index, a count of visits) without formatting.
#[inline]
fn unsigned(out: &mut Vec<u8>, value: u64) {
    match u8::try_from(value) {
        Ok(digit @ 0..=9) => out.push(b'0' + digit),
        _ => integer(out, value),
    }
}

/// The serializer: appends to the `Vec` it borrows.
struct Json<'a>(&'a mut Vec<u8>);

/// Text written onto the buffer as it is (escaping, if any is needed, comes after).
struct Raw<'a>(&'a mut Vec<u8>);

impl fmt::Write for Raw<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A sequence, map or struct being written; `close` ends it (`]`, `}`, or `]}`/`}}` for a
/// variant's).
struct Compound<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    close: &'static [u8],
}

impl<'a> Compound<'a> {
    fn open(out: &'a mut Vec<u8>, open: &[u8], close: &'static [u8]) -> Compound<'a> {
        out.extend_from_slice(open);
        Compound {
            out,
            first: true,
            close,
        }
    }

    #[inline]
    fn comma(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
    }

    #[inline]
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), GiveUp> {
        self.comma();
        value.serialize(Json(&mut *self.out))
    }

    #[inline]
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), GiveUp> {
        if needs_escape(key.as_bytes()) {
            self.comma();
            escaped(self.out, key.as_bytes());
            self.out.push(b':');
        } else {
            // The usual case (a field name): `,"key":` with one check for room.
            self.out.reserve(key.len() + 4);
            self.comma();
            self.out.push(b'"');
            self.out.extend_from_slice(key.as_bytes());
            self.out.extend_from_slice(b"\":");
        }
        value.serialize(Json(&mut *self.out))
    }

    fn end(self) -> Result<(), GiveUp> {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

/// `{"variant":` opened on `out`.
fn open_variant(out: &mut Vec<u8>, variant: &str) {
    out.push(b'{');
    string(out, variant);
    out.push(b':');
}

impl Json<'_> {
    fn signed<I: itoa::Integer>(self, value: I) -> Result<(), GiveUp> {
        integer(self.0, value);
        Ok(())
    }

    fn unsigned(self, value: impl Into<u64>) -> Result<(), GiveUp> {
        unsigned(self.0, value.into());
        Ok(())
    }
}

/// A serializer's eight integer methods, the signed and the unsigned ones each passing the
/// value to a method of the serializer.
macro_rules! integer_methods {
    ($signed:ident: $($s:ident($st:ty)),*; $unsigned:ident: $($u:ident($ut:ty)),*) => {
        $(fn $s(self, v: $st) -> Result<(), GiveUp> {
            self.$signed(v)
        })*
        $(fn $u(self, v: $ut) -> Result<(), GiveUp> {
            self.$unsigned(v)
        })*
    };
}

impl<'a> ser::Serializer for Json<'a> {
    type Ok = ();
    type Error = GiveUp;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), GiveUp> {
        self.0.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    integer_methods!(
        signed: serialize_i8(i8), serialize_i16(i16), serialize_i32(i32), serialize_i64(i64);
        unsigned: serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64)
    );
    fn serialize_f32(self, _v: f32) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_f64(self, _v: f64) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_char(self, v: char) -> Result<(), GiveUp> {
        string(self.0, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), GiveUp> {
        string(self.0, v);
        Ok(())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    /// Written in place rather than through a `String` of its own (serde's default): numbers
    /// spelled as text (a head's counters, a receipt's time) are written on every step.
    fn collect_str<T: fmt::Display + ?Sized>(self, value: &T) -> Result<(), GiveUp> {
        let start = self.0.len();
        self.0.push(b'"');
        if fmt::write(&mut Raw(&mut *self.0), format_args!("{value}")).is_err() {
            // serde_json reports the error when it writes the value again.
            return Err(GiveUp);
        }
        if needs_escape(&self.0[start + 1..]) {
            // The text came from `Display`, so it is UTF-8.
            let text = String::from_utf8(self.0.split_off(start + 1)).map_err(|_| GiveUp)?;
            self.0.truncate(start);
            string(self.0, &text);
        } else {
            self.0.push(b'"');
        }
        Ok(())
    }
    fn serialize_none(self) -> Result<(), GiveUp> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), GiveUp> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), GiveUp> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), GiveUp> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), GiveUp> {
        string(self.0, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), GiveUp> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), GiveUp> {
        open_variant(self.0, variant);
        value.serialize(Json(&mut *self.0))?;
        self.0.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, GiveUp> {
        Ok(Compound::open(self.0, b"[", b"]"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Compound<'a>, GiveUp> {
        Ok(Compound::open(self.0, b"[", b"]"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, GiveUp> {
        Ok(Compound::open(self.0, b"[", b"]"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, GiveUp> {
        open_variant(self.0, variant);
        Ok(Compound::open(self.0, b"[", b"]}"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a>, GiveUp> {
        Ok(Compound::open(self.0, b"{", b"}"))
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'a>, GiveUp> {
        // serde_json's own values (raw JSON, arbitrary-precision numbers) pass as structs of
        // these names, which only serde_json knows how to write.
        if name.starts_with("$serde_json::") {
            return Err(GiveUp);
        }
        Ok(Compound::open(self.0, b"{", b"}"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a>, GiveUp> {
        open_variant(self.0, variant);
        Ok(Compound::open(self.0, b"{", b"}}"))
    }
}

/// The compounds written element by element: sequences, tuples, tuple structs and variants.
macro_rules! element_compound {
    ($($kind:ident::$write:ident),*) => {$(
        impl ser::$kind for Compound<'_> {
            type Ok = ();
            type Error = GiveUp;
            fn $write<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), GiveUp> {
                self.element(value)
            }
            fn end(self) -> Result<(), GiveUp> {
                Compound::end(self)
            }
        }
    )*};
}

element_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = GiveUp;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), GiveUp> {
        self.comma();
        key.serialize(Key(&mut *self.out))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), GiveUp> {
        self.out.push(b':');
        value.serialize(Json(&mut *self.out))
    }
    fn end(self) -> Result<(), GiveUp> {
        Compound::end(self)
    }
}

/// The compounds written field by field: structs and struct variants.
macro_rules! field_compound {
    ($($kind:ident),*) => {$(
        impl ser::$kind for Compound<'_> {
            type Ok = ();
            type Error = GiveUp;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), GiveUp> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), GiveUp> {
                Compound::end(self)
            }
        }
    )*};
}

field_compound!(SerializeStruct, SerializeStructVariant);

/// A map key: a string, or an integer written as a string (as serde_json writes them); any
/// other key is left to serde_json.
struct Key<'a>(&'a mut Vec<u8>);

impl Key<'_> {
    fn quoted<I: itoa::Integer>(self, value: I) -> Result<(), GiveUp> {
        self.0.push(b'"');
        integer(self.0, value);
        self.0.push(b'"');
        Ok(())
    }
}

impl ser::Serializer for Key<'_> {
    type Ok = ();
    type Error = GiveUp;
    type SerializeSeq = Impossible<(), GiveUp>;
    type SerializeTuple = Impossible<(), GiveUp>;
    type SerializeTupleStruct = Impossible<(), GiveUp>;
    type SerializeTupleVariant = Impossible<(), GiveUp>;
    type SerializeMap = Impossible<(), GiveUp>;
    type SerializeStruct = Impossible<(), GiveUp>;
    type SerializeStructVariant = Impossible<(), GiveUp>;

    fn serialize_str(self, v: &str) -> Result<(), GiveUp> {
        string(self.0, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), GiveUp> {
        string(self.0, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), GiveUp> {
        string(self.0, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), GiveUp> {
        value.serialize(self)
    }
    integer_methods!(
        quoted: serialize_i8(i8), serialize_i16(i16), serialize_i32(i32), serialize_i64(i64);
        quoted: serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64)
    );
    fn serialize_bool(self, _v: bool) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_f32(self, _v: f32) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_f64(self, _v: f64) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_none(self) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_unit(self) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), GiveUp> {
        Err(GiveUp)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, GiveUp> {
        Err(GiveUp)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, GiveUp> {
        Err(GiveUp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let ours = to_vec(value);
        let theirs = serde_json::to_vec(value);
        match (ours, theirs) {
            (Ok(a), Ok(b)) => assert_eq!(
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b),
                "bytes differ"
            ),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("one failed and not the other: {a:?} vs {b:?}"),
        }
    }

    #[test]
    fn every_byte_is_escaped_as_serde_json_escapes_it() {
        let all: String = (0u32..0x80)
            .filter_map(char::from_u32)
            .chain("é€😀\u{7f}\u{2028}".chars())
            .collect();
        same_as_serde_json(&all);
        // Each escapable byte at each position of an eight-byte word, and past the last word.
        for byte in (0u8..0x20).chain([b'"', b'\\', b'/', 0x7f]) {
            for at in 0..17 {
                let mut s = "abcdefghijklmnopq".to_string().into_bytes();
                s[at] = byte;
                let s = String::from_utf8(s).expect("ascii");
                same_as_serde_json(&s);
                same_as_serde_json(&json!({ s.clone(): s }));
            }
        }
    }

    #[test]
    fn a_byte_to_escape_is_found_at_every_place_in_strings_up_to_three_words_long() {
        for len in 0..=24 {
            assert!(!needs_escape(&vec![b'x'; len]), "len {len}");
            for at in 0..len {
                for byte in [0x01, 0x1f, b'"', b'\\'] {
                    let mut s = vec![b'x'; len];
                    s[at] = byte;
                    assert!(needs_escape(&s), "len {len}, {byte:#04x} at {at}");
                    same_as_serde_json(&String::from_utf8(s).expect("ascii"));
                }
            }
        }
        for byte in 0..=255u8 {
            assert_eq!(
                ESCAPED[usize::from(byte)],
                escape(byte).is_some(),
                "{byte:#04x}"
            );
        }
    }

    #[test]
    fn the_word_test_finds_exactly_the_words_with_a_byte_to_escape() {
        for byte in 0u8..=255 {
            for at in 0..8 {
                let mut word = *b"abcdefgh";
                word[at] = byte;
                let expected = byte < 0x20 || byte == b'"' || byte == b'\\';
                assert_eq!(
                    word_needs_escape(u64::from_ne_bytes(word)),
                    expected,
                    "byte {byte:#04x} at {at}"
                );
            }
        }
    }

    #[derive(Serialize)]
    enum Shapes {
        Unit,
        Newtype(u8),
        Tuple(i64, String),
        Struct { a: Option<u32>, b: Vec<bool> },
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        One { x: u64 },
        Two(BTreeMap<String, i32>),
    }

    #[derive(Serialize)]
    struct Everything {
        unit: (),
        tuple: (u8, i16, char),
        shapes: Vec<Shapes>,
        tagged: Vec<Tagged>,
        int_keys: BTreeMap<u64, &'static str>,
        neg_keys: BTreeMap<i32, bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        #[serde(flatten)]
        flat: BTreeMap<String, Value>,
        extremes: (u64, i64, i64),
        #[serde(rename = "a field \"named\"\nto be escaped")]
        renamed: u8,
        digits: Vec<u64>,
    }

    #[test]
    fn structs_enums_maps_and_their_edges_are_written_as_serde_json_writes_them() {
        let mut flat = BTreeMap::new();
        flat.insert("z\"q".into(), json!([null, true, {"k": []}]));
        same_as_serde_json(&Everything {
            unit: (),
            tuple: (7, -3, '"'),
            shapes: vec![
                Shapes::Unit,
                Shapes::Newtype(9),
                Shapes::Tuple(-1, "t\n".into()),
                Shapes::Struct { a: None, b: vec![] },
            ],
            tagged: vec![Tagged::One { x: 1 }, Tagged::Two(BTreeMap::new())],
            int_keys: [(u64::MAX, "max"), (0, "zero")].into(),
            neg_keys: [(-5, true)].into(),
            skipped: None,
            flat,
            extremes: (u64::MAX, i64::MIN, 0),
            renamed: 10,
            digits: vec![0, 9, 10, 255, 256, u64::from(u32::MAX)],
        });
    }

    #[test]
    fn what_it_leaves_to_serde_json_comes_out_as_serde_json_writes_it() {
        // Floats, 128-bit integers, bytes, bool and float keys, raw JSON, and errors.
        same_as_serde_json(&json!({"f": 1.5, "g": [1e300, -0.0, 0.1], "h": f64::NAN}));
        same_as_serde_json(&(u128::MAX, i128::MIN));
        same_as_serde_json(&serde_bytes_like());
        same_as_serde_json(&BTreeMap::from([(true, 1), (false, 2)]));
        same_as_serde_json(&BTreeMap::from([(vec![1u8], 1)]));
        let raw = serde_json::value::RawValue::from_string("{ \"a\" : 1 }".into()).expect("raw");
        same_as_serde_json(&json!({"x": 1, "raw": raw}));
        same_as_serde_json(&vec![Failing]);
        let mut out = b"kept".to_vec();
        assert!(write(&mut out, &vec![Failing]).is_err());
        assert_eq!(out, b"kept", "a failed write leaves the buffer as it was");
    }

    /// Serialises its text through `collect_str` (a character at a time), as numbers spelled
    /// as text are. (A `Display` that fails is not tried: serde_json panics on one.)
    struct Collected(String);
    impl Serialize for Collected {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            struct Shown<'a>(&'a str);
            impl fmt::Display for Shown<'_> {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    self.0.chars().try_for_each(|c| write!(f, "{c}"))
                }
            }
            s.collect_str(&Shown(&self.0))
        }
    }

    #[test]
    fn text_collected_from_display_is_written_as_serde_json_writes_it() {
        for text in [
            "",
            "18446744073709551615",
            "a\"b\\c\nd\u{1}é😀",
            "plain text",
        ] {
            same_as_serde_json(&Collected(text.into()));
            same_as_serde_json(&vec![Collected(text.into()), Collected("x".into())]);
            same_as_serde_json(&BTreeMap::from([(text, Collected(text.into()))]));
        }
        for any in (0u32..0x80).filter_map(char::from_u32) {
            same_as_serde_json(&Collected(format!("{any}{any}ab{any}cdefgh{any}")));
        }
        // What the engine collects: times and counters spelled as decimal text.
        same_as_serde_json(&Collected(u64::MAX.to_string()));
    }

    fn serde_bytes_like() -> impl Serialize {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&[0, 255])
            }
        }
        Bytes
    }

    struct Failing;
    impl Serialize for Failing {
        fn serialize<S: ser::Serializer>(&self, _s: S) -> Result<S::Ok, S::Error> {
            Err(ser::Error::custom("this value refuses"))
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x7f]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_is_written_byte_for_byte_as_serde_json_writes_it(v in any_json()) {
            let ours = to_vec(&v).expect("a Value always serialises");
            prop_assert_eq!(ours, serde_json::to_vec(&v).expect("a Value always serialises"));
        }

        #[test]
        fn any_string_is_written_byte_for_byte_as_serde_json_writes_it(s in any::<String>()) {
            prop_assert_eq!(to_vec(&s).expect("writes"), serde_json::to_vec(&s).expect("writes"));
        }
    }
}
