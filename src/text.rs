//! Text from outside on one line: what error messages do with input they quote.

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

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert_eq!(one_line("a\nb\r\tc\u{7}", 80), "a\\nb\\r\\tc\\u{7}");
        assert_eq!(one_line("line\u{2028}sep", 80), "line\\u{2028}sep");
        assert_eq!(one_line(&"é".repeat(10), 3), "ééé…");
        assert_eq!(one_line("short", 5), "short");
    }
}
