//! Killing the tool programs an earlier driver of a run left running.
//!
//! A driver kills its own programs when a call times out, is cancelled or is abandoned
//! ([`super::command`]). A driver that is itself killed (`kill -9`, a crash, a power cut on a
//! VM that comes back) cannot: its programs, and anything they started, keep running, and a
//! resumed run would perform the same calls again next to them. So every command tool's
//! program carries its run and the lease epoch of the driver that started it in its
//! environment (`RUNTAPE_RUN_ID`, `RUNTAPE_LEASE_EPOCH`), which its children inherit; and a
//! driver that takes a run up calls [`reap`] after it has won the lease and before it performs
//! anything. `reap` finds every live process of this user whose environment names the run with
//! an older epoch, kills its process group and itself with `SIGKILL`, and waits until they are
//! gone.
//!
//! This reads `/proc`, so it works on Linux; elsewhere it finds nothing (programs of a killed
//! engine are then left to the operator). A process that cleared its environment and left the
//! tool's process group is not found. Killed processes whose parent died are reaped by the
//! system's init (or the nearest subreaper), not by runtape.

use std::time::Duration;

use crate::machine::RunId;

/// How long [`reap`] waits for killed processes to be gone before it lets the driver go on.
pub const REAP_WAIT: Duration = Duration::from_secs(5);

/// How often [`reap`] looks again while it waits.
const REAP_POLL: Duration = Duration::from_millis(10);

/// What [`reap`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Processes found and killed.
    pub killed: usize,
    /// Of those, how many were still alive when [`REAP_WAIT`] ran out (normally 0).
    pub still_alive: usize,
}

/// Kills every process left by a driver of `run` whose lease epoch is below `epoch` (see the
/// [module docs](self)), with its process group, and waits up to [`REAP_WAIT`] until they are
/// gone. Call it right after taking the run's lease at `epoch`, before performing any of the
/// run's effects. Never fails: what cannot be read or signalled is skipped.
pub async fn reap(run: &RunId, epoch: u64) -> Reaped {
    let mut seen = std::collections::BTreeSet::new();
    // Real processes die on real time: the system's clock, whatever the engine's.
    let clock = crate::clock::system();
    let deadline = clock.now() + REAP_WAIT;
    loop {
        let left = scan::orphans(run.as_str(), epoch);
        if left.is_empty() {
            return Reaped {
                killed: seen.len(),
                still_alive: 0,
            };
        }
        for orphan in &left {
            seen.insert(orphan.pid);
            if orphan.pgid == orphan.pid || !scan::exists(orphan.pgid) {
                super::signal::kill_group(orphan.pgid);
            }
            super::signal::kill_process(orphan.pid);
        }
        if clock.now() >= deadline {
            tracing::warn!(
                run = %run,
                left = left.len(),
                "tool processes of an earlier driver did not exit after SIGKILL"
            );
            return Reaped {
                killed: seen.len(),
                still_alive: left.len(),
            };
        }
        clock.sleep(REAP_POLL).await;
    }
}

/// A live process carrying the markers of an earlier driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Orphan {
    pid: u32,
    pgid: u32,
}

#[cfg(target_os = "linux")]
mod scan {
    use super::super::env::{EPOCH_ENV, RUN_ID_ENV};
    use super::Orphan;

    /// Live (not zombie) processes other than this one whose environment names `run` with an
    /// epoch below `epoch`.
    pub(super) fn orphans(run: &str, epoch: u64) -> Vec<Orphan> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut out = Vec::new();
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            // Unreadable for other users' processes, empty for zombies: both are skipped.
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if !marked(&environ, run, epoch) {
                continue;
            }
            if let Some((state, pgid)) = stat(pid)
                && !matches!(state, 'Z' | 'X' | 'x')
            {
                out.push(Orphan { pid, pgid });
            }
        }
        out
    }

    /// True when `/proc/PID` exists.
    pub(super) fn exists(pid: u32) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    /// True when the NUL-separated `environ` holds `RUNTAPE_RUN_ID=run` and a
    /// `RUNTAPE_LEASE_EPOCH` below `epoch`.
    pub(super) fn marked(environ: &[u8], run: &str, epoch: u64) -> bool {
        let mut run_matches = false;
        let mut older = false;
        for var in environ.split(|&b| b == 0) {
            let Some(eq) = var.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (&var[..eq], &var[eq + 1..]);
            if name == RUN_ID_ENV.as_bytes() {
                run_matches = value == run.as_bytes();
            } else if name == EPOCH_ENV.as_bytes() {
                older = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|e| e < epoch);
            }
        }
        run_matches && older
    }

    /// The state letter and process group of `pid`, from `/proc/PID/stat` (the fields after
    /// the command name, which may itself hold spaces and parentheses).
    fn stat(pid: u32) -> Option<(char, u32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let _ppid = fields.next()?;
        let pgid = fields.next()?.parse().ok()?;
        Some((state, pgid))
    }
}

#[cfg(not(target_os = "linux"))]
mod scan {
    use super::Orphan;

    pub(super) fn orphans(_run: &str, _epoch: u64) -> Vec<Orphan> {
        Vec::new()
    }

    pub(super) fn exists(_pid: u32) -> bool {
        true
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::scan::marked;

    #[test]
    fn only_older_epochs_of_the_same_run_are_marked() {
        let env = b"PATH=/bin\0RUNTAPE_RUN_ID=run-1\0RUNTAPE_LEASE_EPOCH=3\0";
        assert!(marked(env, "run-1", 4));
        assert!(!marked(env, "run-1", 3), "the current driver's own");
        assert!(!marked(env, "run-12", 9), "another run");
        assert!(!marked(b"RUNTAPE_RUN_ID=run-1\0", "run-1", 9), "no epoch");
        assert!(!marked(b"RUNTAPE_LEASE_EPOCH=1\0", "run-1", 9), "no run");
    }
}
