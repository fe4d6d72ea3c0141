//! The byte buffer under the two stream decoders ([`SseDecoder`](super::SseDecoder) and
//! [`NdjsonDecoder`](super::NdjsonDecoder)): received bytes wait here until a whole line is
//! in, and a line that never ends is refused once it passes [`MAX_EVENT_BYTES`].

use super::codec::DecodeError;
use super::sse::MAX_EVENT_BYTES;

/// Bytes received from a stream and not yet consumed. Use one per decoder: [`push`] each
/// chunk, find the end of the next line with [`line_end`], read it from [`rest`], then
/// [`consume`] it.
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
        self.start = (self.start + n).min(self.buf.len());
    }

    /// Where the next line ends in [`rest`](Self::rest): the position of the first byte for
    /// which `is_terminator` holds, `Ok(None)` when none has arrived yet (more bytes are
    /// needed). Fails with [`DecodeError::TooLarge`] naming `what` once the unfinished line
    /// is longer than [`MAX_EVENT_BYTES`], so an endless line is refused rather than kept.
    pub(crate) fn line_end(
        &self,
        is_terminator: impl Fn(u8) -> bool,
        what: &'static str,
    ) -> Result<Option<usize>, DecodeError> {
        let rest = self.rest();
        match rest.iter().position(|&b| is_terminator(b)) {
            Some(end) => Ok(Some(end)),
            None if rest.len() > MAX_EVENT_BYTES => Err(DecodeError::TooLarge {
                limit: MAX_EVENT_BYTES,
                what,
            }),
            None => Ok(None),
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
