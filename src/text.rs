//! Text the engine writes: outside input on one line (what error messages do with input they
//! quote), times, and bytes as lowercase hex.

/// `text` on one line, for an error message that quotes outside input: `\n`, `\r` and `\t`
/// escaped as such, other control characters as `\u{..}`, and at most `max_chars`
/// characters of `text` kept, `…` marking a cut.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(4)) + 4);
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                out.extend(c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    out
}

/// `bytes` as lowercase hex, two characters a byte: how digests, signatures and keys are
/// spelled wherever they are shown or sealed.
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    lower_hex_into(bytes, &mut out);
    // Only ASCII digits and letters were written.
    String::from_utf8(out).unwrap_or_default()
}

/// [`lower_hex`] into `out`, which holds two bytes for each of `bytes` (a buffer on the stack
/// where the text is only written on, not kept). Bytes of `out` past that are left as they are.
pub(crate) fn lower_hex_into(bytes: &[u8], out: &mut [u8]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&hex_pair(b));
    }
}

/// `byte`'s two lowercase hex digits, high nibble first.
pub(crate) fn hex_pair(byte: u8) -> [u8; 2] {
    HEX_PAIRS[usize::from(byte)]
}

/// True when `text` is exactly `len` lowercase hex digits: how digests are spelled wherever
/// they are stored or shown, so two spellings of one value cannot both appear. Every byte is
/// looked at without a branch each (receipts' hashes are checked as they are sealed).
pub(crate) fn is_lower_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .fold(true, |ok, c| ok & matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The `N` bytes `text` spells when it is exactly `2 * N` lowercase hex digits (the spelling
/// [`is_lower_hex`] accepts); `None` for any other text. One pass, one table lookup a digit
/// and no branch: a digit not in the spelling sets a high bit that is checked once at the end
/// (a head's digests are read back from hex at every commit).
pub(crate) fn from_lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    let mut refused = 0u8;
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (
            HEX_VALUES[usize::from(pair[0])],
            HEX_VALUES[usize::from(pair[1])],
        );
        refused |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (refused & NOT_A_DIGIT == 0).then_some(out)
}

/// What [`HEX_VALUES`] gives a byte that is not a lowercase hex digit (its high bit set).
const NOT_A_DIGIT: u8 = 0x80;

/// Each byte's value as a lowercase hex digit, or [`NOT_A_DIGIT`].
const HEX_VALUES: [u8; 256] = {
    let mut values = [NOT_A_DIGIT; 256];
    let mut c = 0;
    while c < 16 {
        values[b"0123456789abcdef"[c] as usize] = c as u8;
        c += 1;
    }
    values
};

/// Each byte's two hex digits, high nibble first: one lookup a byte instead of two (a digest
/// is spelled in hex several times a step).
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut b = 0;
    while b < 256 {
        pairs[b] = [DIGITS[b >> 4], DIGITS[b & 0x0f]];
        b += 1;
    }
    pairs
};

/// Unix milliseconds as `2026-11-21 14:03:22.123Z` (UTC).
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Unix milliseconds as RFC 3339 (`2026-11-21T14:03:22.123Z`).
pub(crate) fn rfc3339(ms: u64) -> String {
    utc(ms).replacen(' ', "T", 1)
}

// Howard Hinnant's days-from-civil inverse (public-domain algorithm), for dates without a
// calendar crate.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::{from_lower_hex, is_lower_hex, lower_hex, lower_hex_into, one_line};

    #[test]
    fn every_byte_is_two_lowercase_hex_digits_high_nibble_first() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(lower_hex(&all), expected);
        assert_eq!(lower_hex(&[]), "");
        let mut buf = [b'-'; 6];
        lower_hex_into(&[0x0f, 0xa0], &mut buf);
        assert_eq!(&buf, b"0fa0--");
    }

    #[test]
    fn lowercase_hex_reads_back_every_byte_and_nothing_else() {
        let all: Vec<u8> = (0..=255).collect();
        let text = lower_hex(&all);
        for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let pair = std::str::from_utf8(pair).expect("ascii");
            assert_eq!(from_lower_hex::<1>(pair), Some([i as u8]), "{pair}");
        }
        assert_eq!(
            from_lower_hex::<4>("0fa0ff10"),
            Some([0x0f, 0xa0, 0xff, 0x10])
        );
        // Exactly as is_lower_hex accepts: uppercase, other letters, signs and lengths refused.
        for c in 0..=255u8 {
            let text = format!("a{}", c as char);
            let ok = matches!(c, b'0'..=b'9' | b'a'..=b'f');
            assert_eq!(from_lower_hex::<1>(&text).is_some(), ok, "{text:?}");
            assert_eq!(is_lower_hex(&text, 2), ok && text.len() == 2, "{text:?}");
            let first = format!("{}0", c as char);
            assert_eq!(from_lower_hex::<1>(&first).is_some(), ok, "{first:?}");
        }
        assert_eq!(from_lower_hex::<2>("0fa"), None);
        assert_eq!(from_lower_hex::<1>("0fa"), None);
        assert_eq!(from_lower_hex::<0>(""), Some([]));
    }

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert_eq!(one_line("a\nb\r\tc\u{7}", 80), "a\\nb\\r\\tc\\u{7}");
        assert_eq!(one_line("line\u{2028}sep", 80), "line\\u{2028}sep");
        assert_eq!(one_line(&"é".repeat(10), 3), "ééé…");
        assert_eq!(one_line("short", 5), "short");
    }
}
