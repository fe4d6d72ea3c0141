//! What sits between a stdio server's stdout and the JSON-RPC reader: it passes whole lines
//! through, notes lines that are not JSON (a server printing garbage), and replaces a line
//! longer than [`MAX_MESSAGE_BYTES`] by a small JSON-RPC error for the same request id, so a
//! 50 MB answer fails its call at once instead of filling memory or leaving the call waiting.
//!
//! The id of an oversized answer is read from its first or last bytes (servers write it
//! first, `{"jsonrpc":"2.0","id":7,...`, or last, `...,"jsonrpc":"2.0","id":7}`); an oversized
//! line whose id cannot be found is dropped and counted, and its call ends at its timeout.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The largest message a server may send; a longer line is refused (see the module docs).
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// JSON-RPC error code of the error put in place of an oversized answer.
pub(crate) const OVERSIZED_CODE: i32 = -32099;

/// How much of each end of an oversized line is kept to find its id.
const KEEP: usize = 256;

/// What the tap has seen, for error messages.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Lines that were not JSON.
    pub(crate) garbage_lines: u64,
    /// The first of them, cut to 120 characters.
    pub(crate) first_garbage: Option<String>,
    /// Oversized lines, with their length in bytes.
    pub(crate) oversized: Vec<usize>,
}

/// Shared view of what a tap has seen.
pub(crate) type SeenHandle = Arc<Mutex<Seen>>;

/// Wraps a server's stdout (see the module docs).
pub(crate) struct Tap<R> {
    inner: R,
    out: VecDeque<u8>,
    line: Vec<u8>,
    /// Set while inside a line past the limit: its length so far, head and tail.
    over: Option<Oversized>,
    seen: SeenHandle,
    eof: bool,
    /// Counted here, in stream order, so a `notifications/tools/list_changed` sent before a
    /// call's answer is counted before the call returns (the SDK hands notifications to a
    /// task of their own, which may run later).
    list_changed: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// The method of the notification [`Tap::counting_list_changed`] counts.
const LIST_CHANGED: &[u8] = b"notifications/tools/list_changed";

struct Oversized {
    len: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
}

impl<R> Tap<R> {
    pub(crate) fn new(inner: R, seen: SeenHandle) -> Self {
        Tap {
            inner,
            out: VecDeque::new(),
            line: Vec::new(),
            over: None,
            seen,
            eof: false,
            list_changed: None,
        }
    }

    /// Also counts each `notifications/tools/list_changed` line into `counter` as it passes.
    pub(crate) fn counting_list_changed(
        mut self,
        counter: Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        self.list_changed = Some(counter);
        self
    }

    fn count_list_changed(&self, line: &[u8]) {
        let Some(counter) = &self.list_changed else {
            return;
        };
        if !line.windows(LIST_CHANGED.len()).any(|w| w == LIST_CHANGED) {
            return;
        }
        let is_it = serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| {
            v.get("method").and_then(serde_json::Value::as_str)
                == std::str::from_utf8(LIST_CHANGED).ok()
                && v.get("id").is_none()
        });
        if is_it {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.push_part(&rest[..i]);
                    self.end_line();
                    rest = &rest[i + 1..];
                }
                None => {
                    self.push_part(rest);
                    rest = &[];
                }
            }
        }
    }

    fn push_part(&mut self, part: &[u8]) {
        if let Some(over) = &mut self.over {
            over.len += part.len();
            keep_tail(&mut over.tail, part);
            return;
        }
        if self.line.len() + part.len() <= MAX_MESSAGE_BYTES {
            self.line.extend_from_slice(part);
            return;
        }
        let len = self.line.len() + part.len();
        let mut tail = VecDeque::with_capacity(KEEP);
        keep_tail(&mut tail, &self.line);
        keep_tail(&mut tail, part);
        let mut head = std::mem::take(&mut self.line);
        head.extend_from_slice(&part[..part.len().min(KEEP)]);
        head.truncate(KEEP);
        self.over = Some(Oversized { len, head, tail });
    }

    fn end_line(&mut self) {
        if let Some(over) = self.over.take() {
            let tail: Vec<u8> = over.tail.into_iter().collect();
            let id = request_id(&over.head, &tail);
            if let Ok(mut seen) = self.seen.lock() {
                seen.oversized.push(over.len);
            }
            if let Some(id) = id {
                let error = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": OVERSIZED_CODE,
                        "message": format!("runtape refused an answer of more than {} bytes", MAX_MESSAGE_BYTES),
                        "data": {"bytes": over.len},
                    }
                });
                self.out.extend(error.to_string().as_bytes());
                self.out.push_back(b'\n');
            }
            return;
        }
        let line = std::mem::take(&mut self.line);
        let trimmed = line.trim_ascii();
        let garbage =
            !trimmed.is_empty() && !trimmed.starts_with(b"{") && !trimmed.starts_with(b"[");
        if garbage && let Ok(mut seen) = self.seen.lock() {
            seen.garbage_lines += 1;
            if seen.first_garbage.is_none() {
                let text: String = String::from_utf8_lossy(trimmed).chars().take(120).collect();
                seen.first_garbage = Some(text);
            }
        }
        if !garbage {
            self.count_list_changed(trimmed);
        }
        self.out.extend(&line);
        self.out.push_back(b'\n');
    }
}

fn keep_tail(tail: &mut VecDeque<u8>, bytes: &[u8]) {
    let start = bytes.len().saturating_sub(KEEP);
    tail.extend(&bytes[start..]);
    while tail.len() > KEEP {
        tail.pop_front();
    }
}

/// The top-level `"id"` of a JSON-RPC message, found where servers put it: right after the
/// opening brace (possibly after `"jsonrpc":"2.0"`), or as the last member.
fn request_id(head: &[u8], tail: &[u8]) -> Option<serde_json::Value> {
    static FIRST: std::sync::OnceLock<Option<regex::bytes::Regex>> = std::sync::OnceLock::new();
    static LAST: std::sync::OnceLock<Option<regex::bytes::Regex>> = std::sync::OnceLock::new();
    const ID: &str = r#"(-?[0-9]{1,18}|"(?:[^"\\]|\\.){0,128}")"#;
    let first = FIRST.get_or_init(|| {
        regex::bytes::Regex::new(&format!(
            r#"^\s*\{{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*{ID}"#
        ))
        .ok()
    });
    let last = LAST
        .get_or_init(|| regex::bytes::Regex::new(&format!(r#""id"\s*:\s*{ID}\s*\}}\s*$"#)).ok());
    [(first, head), (last, tail)]
        .into_iter()
        .filter_map(|(re, text)| re.as_ref()?.captures(text))
        .find_map(|c| serde_json::from_slice(c.get(1)?.as_bytes()).ok())
}

impl<R: AsyncRead + Unpin> AsyncRead for Tap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                let (a, b) = this.out.as_slices();
                let from_a = n.min(a.len());
                buf.put_slice(&a[..from_a]);
                buf.put_slice(&b[..n - from_a]);
                this.out.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 << 10];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let filled = read.filled();
                    if filled.is_empty() {
                        this.eof = true;
                        // A last line without a newline is passed on as it is.
                        if this.over.is_none() && !this.line.is_empty() {
                            let line = std::mem::take(&mut this.line);
                            this.out.extend(&line);
                        }
                    } else {
                        let bytes = filled.to_vec();
                        this.take(&bytes);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn through(input: Vec<u8>) -> (String, SeenHandle) {
        let seen = SeenHandle::default();
        let mut tap = Tap::new(&input[..], seen.clone());
        let mut out = Vec::new();
        tap.read_to_end(&mut out).await.expect("reads");
        (String::from_utf8(out).expect("utf8"), seen)
    }

    #[tokio::test]
    async fn lines_pass_through_and_garbage_is_noted() {
        let (out, seen) = through(b"{\"a\":1}\nhello world\n\n{\"b\":2}".to_vec()).await;
        assert_eq!(out, "{\"a\":1}\nhello world\n\n{\"b\":2}");
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.garbage_lines, 1);
        assert_eq!(seen.first_garbage.as_deref(), Some("hello world"));
    }

    #[tokio::test]
    async fn an_oversized_answer_becomes_an_error_for_its_id() {
        let big = "x".repeat(MAX_MESSAGE_BYTES + 10);
        let line = format!(
            "{{\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{big}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":7}}\n{{\"next\":true}}\n"
        );
        let (out, seen) = through(line.into_bytes()).await;
        let mut lines = out.lines();
        let error: serde_json::Value =
            serde_json::from_str(lines.next().expect("a line")).expect("json");
        assert_eq!(error["id"], 7);
        assert_eq!(error["error"]["code"], OVERSIZED_CODE);
        assert_eq!(lines.next(), Some("{\"next\":true}"));
        assert_eq!(seen.lock().expect("lock").oversized.len(), 1);
    }

    #[tokio::test]
    async fn an_id_at_the_front_is_found_and_nested_ids_are_not() {
        let big = "y".repeat(MAX_MESSAGE_BYTES);
        let front = format!("{{\"jsonrpc\":\"2.0\",\"id\":\"r-1\",\"result\":\"{big}\"}}\n");
        let (out, _) = through(front.into_bytes()).await;
        assert!(
            out.contains("\"id\":\"r-1\""),
            "{}",
            &out[..out.len().min(200)]
        );

        let nested = format!("{{\"result\":{{\"id\":5,\"t\":\"{big}\",\"id\":6}}}}\n");
        let (out, seen) = through(nested.into_bytes()).await;
        assert_eq!(out, "", "no top-level id: dropped");
        assert_eq!(seen.lock().expect("lock").oversized.len(), 1);
    }
}
