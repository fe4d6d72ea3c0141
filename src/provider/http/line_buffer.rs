//! The byte buffer under the two stream decoders ([`SseDecoder`](super::SseDecoder) and
//! [`NdjsonDecoder`](super::NdjsonDecoder)): received bytes wait here until a whole line is
//! in, and a line that never ends is refused once it passes [`MAX_EVENT_BYTES`].

use super::codec::DecodeError;
use super::sse::MAX_EVENT_BYTES;

/// Bytes received from a stream and not yet consumed. Use one per decoder: [`push`] each
/// chunk, find the end of the next line with [`line_end`], read it from [`rest`], then
/// [`consume`] it. Each byte is looked at once however the stream is cut: a line that arrives
/// a byte at a time costs what it would in one chunk, not its length squared.
///
/// [`push`]: Self::push
/// [`line_end`]: Self::line_end
/// [`rest`]: Self::rest
/// [`consume`]: Self::consume
#[derive(Clone, Debug, Default)]
pub(crate) struct LineBuffer {
    /// Bytes received; those not yet consumed start at `start`.
    buf: Vec<u8>,
    start: usize,
    /// How many bytes of [`rest`](Self::rest) are known to hold no line terminator (looked at
    /// by an earlier [`line_end`](Self::line_end) that found none): the next search starts
    /// after them.
    scanned: usize,
}

impl LineBuffer {
    /// Appends received bytes, first dropping consumed ones once they are at least half the
    /// buffer (so a long stream does not keep everything it has read).
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The bytes received and not yet consumed.
    pub(crate) fn rest(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Marks the first `n` bytes of [`rest`](Self::rest) consumed. Call it with at most
    /// `rest().len()`; more is clamped to the end.
    pub(crate) fn consume(&mut self, n: usize) {
        let before = self.start;
        self.start = (self.start + n).min(self.buf.len());
        // The bytes consumed leave the front; those after them keep what is known of them.
        self.scanned = self.scanned.saturating_sub(self.start - before);
    }

    /// Where the next line ends in [`rest`](Self::rest): the position of the first byte for
    /// which `is_terminator` holds, `Ok(None)` when none has arrived yet (more bytes are
    /// needed). Fails with [`DecodeError::TooLarge`] naming `what` once the unfinished line
    /// is longer than [`MAX_EVENT_BYTES`], so an endless line is refused rather than kept.
    /// Bytes an earlier call found no terminator in are not looked at again, so a decoder
    /// passes the same `is_terminator` every time.
    pub(crate) fn line_end(
        &mut self,
        is_terminator: impl Fn(u8) -> bool,
        what: &'static str,
    ) -> Result<Option<usize>, DecodeError> {
        let rest = &self.buf[self.start..];
        let unseen = &rest[self.scanned.min(rest.len())..];
        match unseen.iter().position(|&b| is_terminator(b)) {
            Some(at) => Ok(Some(rest.len() - unseen.len() + at)),
            None if rest.len() > MAX_EVENT_BYTES => Err(DecodeError::TooLarge {
                limit: MAX_EVENT_BYTES,
                what,
            }),
            None => {
                self.scanned = rest.len();
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumed_bytes_are_dropped_and_rest_survives_compaction() {
        let mut b = LineBuffer::default();
        b.push(b"ab\ncd");
        assert_eq!(b.line_end(|c| c == b'\n', "line"), Ok(Some(2)));
        b.consume(3);
        b.push(b"e\n");
        assert_eq!(b.rest(), b"cde\n");
        assert_eq!(b.line_end(|c| c == b'\n', "line"), Ok(Some(3)));
        b.consume(100);
        assert!(b.rest().is_empty());
        assert_eq!(b.line_end(|c| c == b'\n', "line"), Ok(None));
    }

    #[test]
    fn a_line_cut_into_pieces_is_looked_at_once() {
        let looked = std::cell::Cell::new(0usize);
        let newline = |c: u8| {
            looked.set(looked.get() + 1);
            c == b'\n'
        };
        let mut b = LineBuffer::default();
        for _ in 0..1000 {
            b.push(b"a");
            assert_eq!(b.line_end(newline, "line"), Ok(None));
        }
        assert_eq!(looked.get(), 1000, "each byte once, not 1 + 2 + … + 1000");
        b.push(b"b\nc");
        assert_eq!(b.line_end(newline, "line"), Ok(Some(1001)));
        assert_eq!(looked.get(), 1002);
        // The next line starts unseen: `c` is looked at, then what arrives after it.
        b.consume(1002);
        assert_eq!(b.line_end(newline, "line"), Ok(None));
        b.push(b"\n");
        assert_eq!(b.line_end(newline, "line"), Ok(Some(1)));
        assert_eq!(looked.get(), 1004);
        // Consuming part of a line that was looked at keeps what is known of the rest.
        let mut b = LineBuffer::default();
        b.push(b"xyz");
        assert_eq!(b.line_end(newline, "line"), Ok(None));
        b.consume(1);
        b.push(b"\n");
        assert_eq!(b.line_end(newline, "line"), Ok(Some(2)));
    }

    #[test]
    fn an_endless_line_is_refused_past_the_bound() {
        let mut b = LineBuffer::default();
        b.push(&vec![b'a'; MAX_EVENT_BYTES]);
        assert_eq!(b.line_end(|c| c == b'\n', "line"), Ok(None));
        b.push(b"a");
        assert_eq!(
            b.line_end(|c| c == b'\n', "line"),
            Err(DecodeError::TooLarge {
                limit: MAX_EVENT_BYTES,
                what: "line"
            })
        );
    }
}
