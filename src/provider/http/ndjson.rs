//! An incremental newline-delimited JSON line splitter (Ollama's streaming format).
//!
//! Feed byte chunks with [`NdjsonDecoder::push`] and drain complete lines with
//! [`NdjsonDecoder::next_line`] until it returns `Ok(None)`. Blank lines are skipped and a
//! trailing `\r` is dropped. When the stream ends, [`NdjsonDecoder::finish`] hands back a last
//! line that had no newline. As with the SSE decoder, chunk boundaries do not matter: a line
//! is decoded only once it is complete.

use super::codec::DecodeError;
use super::line_buffer::LineBuffer;

/// Incremental NDJSON line splitter.
#[derive(Clone, Debug, Default)]
pub struct NdjsonDecoder {
    /// Bytes received and not yet consumed.
    pending: LineBuffer,
    lines: usize,
}

impl NdjsonDecoder {
    /// An empty decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes; drain with [`next_line`](Self::next_line).
    pub fn push(&mut self, chunk: &[u8]) {
        self.pending.push(chunk);
    }

    /// The next complete, non-blank line, `Ok(None)` when more bytes are needed. Fails on a
    /// line that is not UTF-8 or longer than
    /// [`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES).
    pub fn next_line(&mut self) -> Result<Option<String>, DecodeError> {
        loop {
            let Some(end) = self.pending.line_end(|b| b == b'\n', "NDJSON line")? else {
                return Ok(None);
            };
            // In bounds: `line_end` gave a position inside `pending.rest()`.
            let line = complete_line(&self.pending.rest()[..end])?;
            self.pending.consume(end + 1);
            if let Some(line) = line {
                self.lines += 1;
                return Ok(Some(line));
            }
        }
    }

    /// Ends the stream: the last line if it had no newline (and is not blank).
    pub fn finish(&mut self) -> Result<Option<String>, DecodeError> {
        let rest = self.pending.rest();
        let line = complete_line(rest)?;
        self.pending.consume(rest.len());
        if line.is_some() {
            self.lines += 1;
        }
        Ok(line)
    }

    /// How many non-blank lines have been returned.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// A line without its terminator: `None` when blank, an error when not UTF-8.
fn complete_line(raw: &[u8]) -> Result<Option<String>, DecodeError> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let line = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidUtf8)?;
    Ok((!line.trim().is_empty()).then(|| line.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = NdjsonDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(l) = d.next_line().unwrap() {
                out.push(l);
            }
        }
        out.extend(d.finish().unwrap());
        out
    }

    #[test]
    fn splits_are_invisible_and_blank_lines_skipped() {
        let body = "{\"a\":\"é\"}\r\n\n{\"b\":2}\n{\"c\":3}".as_bytes();
        let whole = lines(&[body]);
        assert_eq!(whole, vec!["{\"a\":\"é\"}", "{\"b\":2}", "{\"c\":3}"]);
        for cut in 0..=body.len() {
            assert_eq!(lines(&[&body[..cut], &body[cut..]]), whole, "cut {cut}");
        }
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut d = NdjsonDecoder::new();
        d.push(b"{\"a\":\"\xc3\"}\n");
        assert_eq!(d.next_line(), Err(DecodeError::InvalidUtf8));
    }
}
