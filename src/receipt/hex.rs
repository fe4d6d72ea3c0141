//! Lowercase hex, the one text encoding receipts use for bytes (hashes, signatures, keys).
//!
//! Decoding is strict about length and alphabet and reports only *that* the text is wrong,
//! never the text itself, because the same decoder reads secret key seeds.

use sha2::{Digest as _, Sha256};

/// `bytes` as lowercase hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    crate::text::lower_hex(bytes)
}

/// Decodes exactly `N` bytes from `2 * N` hex characters of either case; `None` for any other
/// length or a character outside `[0-9a-fA-F]`.
pub(crate) fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *slot = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// True when `text` is exactly `len` lowercase hex characters: the canonical spelling that
/// receipts store, so two spellings of one value cannot both appear in a chain.
pub(crate) fn is_lower_hex(text: &str, len: usize) -> bool {
    crate::text::is_lower_hex(text, len)
}

/// SHA-256 of `bytes`, as lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    encode(&Sha256::digest(bytes))
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Overwrites `buf` with zeros, as a best effort to keep secret material from lingering in
/// memory after use. `black_box` keeps the compiler from dropping the writes as dead stores.
pub(crate) fn wipe(buf: &mut [u8]) {
    buf.fill(0);
    std::hint::black_box(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_bad_text() {
        let bytes = [0x00, 0x7f, 0xa5, 0xff];
        let text = encode(&bytes);
        assert_eq!(text, "007fa5ff");
        assert_eq!(decode::<4>(&text), Some(bytes));
        assert_eq!(decode::<4>("007FA5FF"), Some(bytes));
        assert_eq!(decode::<4>("007fa5f"), None);
        assert_eq!(decode::<4>("007fa5fg"), None);
        assert_eq!(decode::<2>("é0"), None);
        assert!(is_lower_hex("00ff", 4));
        assert!(!is_lower_hex("00FF", 4));
        assert!(!is_lower_hex("00ff", 6));
        // Exactly the sixteen lowercase digits are accepted, at the start, middle and end.
        for c in (0u32..0x100).filter_map(char::from_u32) {
            let want = c.is_ascii_digit() || ('a'..='f').contains(&c);
            for text in [format!("{c}00"), format!("0{c}0"), format!("00{c}")] {
                assert_eq!(is_lower_hex(&text, text.len()), want, "{c:?} in {text:?}");
            }
        }
    }

    #[test]
    fn sha256_matches_the_standard_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn wipe_zeroes() {
        let mut buf = [9u8; 8];
        wipe(&mut buf);
        assert_eq!(buf, [0u8; 8]);
    }
}
