//! What the binary's front ends (`src/cli`, `src/serve`) share about the terminal and the
//! process: the exit statuses, a command's failure as one line ([`CliError`]), writing to
//! stdout and stderr (scrubbed of secrets, quiet when the reader has gone), and the stop
//! signals. It knows nothing about runs: that is [`runtape::ops`](crate::ops).
//!
//! The binary's own; not part of the library.

mod error;
mod out;
mod signals;

pub(crate) use error::CliError;
pub(crate) use out::{note, one_line, outln, print_json, say, say_json, say_line, stdout_closed};
pub(crate) use signals::StopSignals;

/// Exit status: the run completed (or the command did what was asked).
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: the run failed, was cancelled or ran out of budget; a check found a problem.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage, a bad spec or bad input (nothing was changed).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: an internal or storage error.
pub(crate) const EXIT_INTERNAL: u8 = 3;
/// Exit status: the run is paused and resumable — stopped by Ctrl-C, SIGTERM, SIGHUP,
/// `runtape pause`, or (with `--json`) a closed stdout.
pub(crate) const EXIT_PAUSED: u8 = 4;
/// Exit status: the run was removed by `runtape prune` (`verify` of a pruned run: its
/// tombstone holds, its history is gone).
pub(crate) const EXIT_PRUNED: u8 = 5;
/// Exit status: a second stop signal made the process leave at once (the run is left as a
/// crash leaves it; `runtape resume` continues it). 128 + SIGINT, as shells report it.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;
