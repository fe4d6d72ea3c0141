//! Writing for people and programs: results on stdout, notes and errors on stderr, each line
//! scrubbed of known secret values ([`crate::secrets`]); JSON lines safe for every reader.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use super::CliError;

/// The longest error line printed (longer ones are cut with `…`).
pub(crate) const MAX_ERROR_CHARS: usize = 2000;

/// Writes a line to stdout, scrubbed of known secret values ([`crate::secrets`]); when the
/// reader has gone away (`runtape log RUN | head`), exits quietly like other command-line
/// tools instead of failing.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let line = $crate::secrets::scrub_text(&line);
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}") {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}
pub(crate) use outln;

/// A message as the command line prints it: scrubbed of known secret values, control
/// characters escaped so it is one line, at most [`MAX_ERROR_CHARS`] characters.
pub(crate) fn one_line(message: &str) -> String {
    let message = crate::secrets::scrub_text(message);
    crate::text::one_line(message.trim_end(), MAX_ERROR_CHARS)
}

/// One JSON object on its own line, with integers JavaScript cannot hold exactly written as
/// strings ([`crate::ops::json::encode`]).
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let line = json_line(value)?;
    outln!("{line}");
    Ok(())
}

/// `value` as one line of JSON safe for every reader: integers beyond 2^53 (timestamps,
/// costs) become strings. The stored encodings are not touched: this is output only.
pub(crate) fn json_line(value: &impl serde::Serialize) -> Result<String, CliError> {
    crate::ops::json::encode(value)
        .map_err(|e| CliError::internal(format!("cannot encode output: {e}")))
}

/// Set once a write to stdout failed: its reader has gone away.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes one line to stdout. Returns false, and writes nothing from then on, once stdout is
/// closed (any write error means its reader has gone away). Never exits, never panics.
pub(crate) fn say_line(line: &str) -> bool {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return false;
    }
    let line = crate::secrets::scrub_text(line);
    let mut out = std::io::stdout().lock();
    let ok = writeln!(out, "{line}").and_then(|()| out.flush()).is_ok();
    if !ok {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
    ok
}

/// True once a write to stdout has failed.
pub(crate) fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// `say!("…", args)`: [`say_line`] with formatting, for statements.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = $crate::term::say_line(&format!($($arg)*));
    }};
}
pub(crate) use say;

/// One JSON object on its own line of stdout (dropped once stdout is closed), integers beyond
/// 2^53 written as strings ([`json_line`]).
pub(crate) fn say_json(value: &impl serde::Serialize) -> Result<bool, CliError> {
    let line = json_line(value)?;
    Ok(say_line(&line))
}

/// One line on stderr; a closed stderr (a hung-up terminal) is ignored, never a panic.
pub(crate) fn note(line: &str) {
    let line = crate::secrets::scrub_text(line);
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_printed_on_one_line_and_cut_short() {
        assert_eq!(one_line("two\nlines\n"), "two\\nlines");
        assert_eq!(
            one_line(&"y".repeat(5000)).chars().count(),
            MAX_ERROR_CHARS + 1
        );
    }
}
