//! An incremental Server-Sent Events decoder (the WHATWG event-stream format).
//!
//! Feed it byte chunks as they arrive with [`SseDecoder::push`], then drain complete events
//! with [`SseDecoder::next_event`] until it returns `Ok(None)` ("need more bytes"). The result
//! does not depend on where the chunks were cut: a chunk may end inside a UTF-8 sequence,
//! in the middle of a line, between the `\r` and `\n` of a line ending, or between the two
//! newlines that end an event. Only complete lines are decoded, so a split multi-byte
//! character is always whole by the time it is read.
//!
//! Per the format: lines end with `\n`, `\r\n` or `\r`; a line starting with `:` is a
//! comment; `field: value` loses one space after the colon; `data` lines are joined with
//! `\n`; a blank line dispatches the event (an event without `data` is dropped); a leading
//! byte-order mark is skipped; and an event still open when the stream ends is discarded.
//! Unlike a browser, a line that is not valid UTF-8 is an error rather than replaced.

use super::codec::DecodeError;
use super::line_buffer::LineBuffer;

/// The longest line, or the most `data` in one event, the decoder accepts (8 MiB).
pub const MAX_EVENT_BYTES: usize = 8 << 20;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental SSE decoder. See the module docs for the rules it follows.
#[derive(Clone, Debug, Default)]
pub struct SseDecoder {
    /// Bytes received and not yet consumed.
    pending: LineBuffer,
    /// The last line ended with `\r` at the very end of the buffer: a `\n` arriving next
    /// belongs to that line ending.
    pending_cr: bool,
    /// Whether the start of the stream has been checked for a byte-order mark.
    bom_checked: bool,
    event_type: String,
    data: String,
    comments: usize,
}

impl SseDecoder {
    /// An empty decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes. Call [`next_event`](Self::next_event) afterwards until it
    /// returns `Ok(None)`.
    pub fn push(&mut self, chunk: &[u8]) {
        self.pending.push(chunk);
    }

    /// The next complete event, `Ok(None)` when more bytes are needed. Fails on a line that
    /// is not UTF-8 or on a line or event larger than [`MAX_EVENT_BYTES`].
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, DecodeError> {
        while let Some(line) = self.next_line()? {
            if let Some(event) = self.process_line(&line)? {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }

    /// How many comment lines (`: ...`) have been seen.
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Whether bytes of an unfinished line or event are buffered (the stream was cut there
    /// if it ends now).
    pub fn has_partial(&self) -> bool {
        !self.pending.rest().is_empty() || !self.data.is_empty()
    }

    /// At the end of the stream: the event whose lines all arrived whole but that no blank
    /// line closed (a server that ends its last event with a single newline). Call it once,
    /// after the last [`next_event`](Self::next_event); `None` when nothing is pending or the
    /// last line was cut off.
    pub fn finish_event(&mut self) -> Option<SseEvent> {
        if !self.pending.rest().is_empty() || self.data.is_empty() {
            return None;
        }
        self.process_line("").ok().flatten()
    }

    fn next_line(&mut self) -> Result<Option<String>, DecodeError> {
        if self.pending_cr {
            let Some(&first) = self.pending.rest().first() else {
                return Ok(None);
            };
            if first == b'\n' {
                self.pending.consume(1);
            }
            self.pending_cr = false;
        }
        if !self.bom_checked {
            let rest = self.pending.rest();
            if rest.len() < BOM.len() && BOM.starts_with(rest) {
                return Ok(None);
            }
            if rest.starts_with(BOM) {
                self.pending.consume(BOM.len());
            }
            self.bom_checked = true;
        }
        let Some(end) = self
            .pending
            .line_end(|b| b == b'\n' || b == b'\r', "SSE line")?
        else {
            return Ok(None);
        };
        let rest = self.pending.rest();
        // `end` is a position inside `rest`, so both indexings are in bounds.
        let line = std::str::from_utf8(&rest[..end])
            .map_err(|_| DecodeError::InvalidUtf8)?
            .to_owned();
        let terminator = rest[end];
        self.pending.consume(end + 1);
        if terminator == b'\r' {
            match self.pending.rest().first() {
                Some(b'\n') => self.pending.consume(1),
                Some(_) => {}
                None => self.pending_cr = true,
            }
        }
        Ok(Some(line))
    }

    fn process_line(&mut self, line: &str) -> Result<Option<SseEvent>, DecodeError> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.event_type.clear();
                return Ok(None);
            }
            let mut data = std::mem::take(&mut self.data);
            if data.ends_with('\n') {
                data.pop();
            }
            let event_type = std::mem::take(&mut self.event_type);
            return Ok(Some(SseEvent {
                event: (!event_type.is_empty()).then_some(event_type),
                data,
            }));
        }
        if line.starts_with(':') {
            self.comments += 1;
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(DecodeError::TooLarge {
                        limit: MAX_EVENT_BYTES,
                        what: "SSE event",
                    });
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => {
                self.event_type.clear();
                self.event_type.push_str(value);
            }
            // `id`, `retry` and unknown fields do not matter to a model reply.
            _ => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(e) = d.next_event().unwrap() {
                out.push(e);
            }
        }
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn every_line_ending_style_and_split_gives_the_same_events() {
        let body = "event: a\r\ndata: x\r\ndata:y\r\n\r\n: note\rdata: z\r\rdata: é\n\n";
        let whole = all_events(&[body.as_bytes()]);
        assert_eq!(
            whole,
            vec![ev(Some("a"), "x\ny"), ev(None, "z"), ev(None, "é")]
        );
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(
                all_events(&[&bytes[..cut], &bytes[cut..]]),
                whole,
                "cut {cut}"
            );
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(all_events(&singles), whole);
    }

    #[test]
    fn comments_are_counted_and_events_without_data_dropped() {
        let mut d = SseDecoder::new();
        d.push(b": keep-alive\n\nevent: ping\n\nid: 7\nretry: 10\ndata\n\n");
        assert_eq!(d.next_event().unwrap(), Some(ev(None, "")));
        assert_eq!(d.next_event().unwrap(), None);
        assert_eq!(d.comments(), 1);
    }

    #[test]
    fn a_field_name_with_leading_space_is_not_data() {
        assert_eq!(
            all_events(&[b" data: {}\n\ndata: 1\n\n"]),
            vec![ev(None, "1")]
        );
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let body = b"\xEF\xBB\xBFdata: 1\n\n";
        assert_eq!(
            all_events(&[&body[..1], &body[1..2], &body[2..]]),
            vec![ev(None, "1")]
        );
    }

    #[test]
    fn an_unterminated_event_is_not_dispatched() {
        let mut d = SseDecoder::new();
        d.push(b"data: [DONE]\n");
        assert_eq!(d.next_event().unwrap(), None);
        assert!(d.has_partial());
    }

    #[test]
    fn invalid_utf8_and_oversized_lines_are_errors() {
        let mut d = SseDecoder::new();
        d.push(b"data: \xff\xfe\n\n");
        assert_eq!(d.next_event(), Err(DecodeError::InvalidUtf8));

        let mut d = SseDecoder::new();
        d.push(&vec![b'a'; MAX_EVENT_BYTES + 1]);
        assert!(matches!(d.next_event(), Err(DecodeError::TooLarge { .. })));
    }
}
