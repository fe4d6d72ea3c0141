//! The stdio side of a connection: starting a server as a child process in its own process
//! group, keeping what it shows besides its answers (stderr, non-JSON stdout) for error
//! messages, and stopping it (grace, `SIGTERM`, grace, `SIGKILL`, always reaped).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::config::McpServerConfig;
use super::connection::{Failure, SHUTDOWN_GRACE};
use super::tap::{MAX_MESSAGE_BYTES, SeenHandle};
use crate::tool::env::EnvPolicy;

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 8;

/// What a server showed besides its answers: stderr and non-JSON stdout.
#[derive(Default)]
pub(crate) struct Diagnostics {
    pub(crate) seen: SeenHandle,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The task draining stderr; it ends when the server closes stderr.
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Diagnostics {
    /// Keeps the last lines of `stderr` (drained so the server never blocks on it).
    pub(crate) fn watch_stderr(&self, stderr: Option<tokio::process::ChildStderr>) {
        let Some(stderr) = stderr else { return };
        let kept = self.stderr.clone();
        let task = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line: String = line.chars().take(300).collect();
                if line.trim().is_empty() {
                    continue;
                }
                if let Ok(mut kept) = kept.lock() {
                    kept.push_back(line);
                    while kept.len() > STDERR_LINES {
                        kept.pop_front();
                    }
                }
            }
        });
        if let Ok(mut reader) = self.reader.lock() {
            *reader = Some(task);
        }
    }

    /// Waits a moment for the last of stderr of a server that has exited.
    pub(crate) async fn settle(&self) {
        let task = self.reader.lock().ok().and_then(|mut r| r.take());
        if let Some(task) = task {
            let _ = crate::clock::timeout(Duration::from_millis(500), task).await;
        }
    }

    /// One line about a failed start: what happened, what was seen, what to do.
    pub(crate) fn explain(
        &self,
        why: Failure,
        status: Option<std::process::ExitStatus>,
        config: &McpServerConfig,
    ) -> String {
        let head = match (&why, status) {
            (Failure::TimedOut(limit), _) => format!(
                "did not answer `initialize` within {} ms",
                limit.as_millis()
            ),
            (Failure::Refused(_), Some(status)) => format!("exited during startup ({status})"),
            (Failure::Refused(reason), None) => format!("failed to initialise: {reason}"),
        };
        let garbage = self
            .seen
            .lock()
            .map(|s| s.garbage_lines > 0)
            .unwrap_or(false);
        let advice = match (&why, status) {
            _ if garbage => {
                "a stdio server must write only JSON-RPC messages to stdout (logs belong on stderr)"
                    .to_owned()
            }
            (Failure::TimedOut(_), _) => format!(
                "check that `{}` is an MCP server, or raise `init_timeout_ms`",
                config.describe()
            ),
            (Failure::Refused(_), Some(_)) => {
                format!("check that `{}` runs on its own", config.describe())
            }
            (Failure::Refused(_), None) => "check the server's URL or command".to_owned(),
        };
        format!("{head}{} – {advice}", self.note(None))
    }

    /// `; it exited (…); its stdout had N lines that are not JSON-RPC (first: `…`); stderr: …`,
    /// or empty.
    pub(crate) fn note(&self, status: Option<std::process::ExitStatus>) -> String {
        let mut out = String::new();
        if let Some(status) = status {
            out.push_str(&format!("; it exited ({status})"));
        }
        if let Ok(seen) = self.seen.lock() {
            if seen.garbage_lines > 0 {
                out.push_str(&format!(
                    "; its stdout had {} line(s) that are not JSON-RPC (first: `{}`)",
                    seen.garbage_lines,
                    seen.first_garbage.as_deref().unwrap_or("")
                ));
            }
            if let Some(len) = seen.oversized.last() {
                out.push_str(&format!(
                    "; it sent a message of {len} bytes (the limit is {MAX_MESSAGE_BYTES})"
                ));
            }
        }
        if let Ok(lines) = self.stderr.lock()
            && !lines.is_empty()
        {
            let text = lines.iter().cloned().collect::<Vec<_>>().join(" | ");
            out.push_str(&format!("; stderr: {}", tail_chars(&text, 400)));
        }
        out
    }
}

fn tail_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_owned();
    }
    let tail: String = s.chars().skip(count - n).collect();
    format!("…{tail}")
}

pub(crate) fn one_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    tail_chars(&flat, 300)
}

/// A stdio server's process.
pub(crate) struct ChildProcess {
    pub(crate) child: tokio::sync::Mutex<Child>,
    pub(crate) pgid: Option<i32>,
}

impl ChildProcess {
    /// Its exit status if it has exited or exits within a moment.
    pub(crate) async fn exit_status_soon(&self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.lock().await;
        match crate::clock::timeout(Duration::from_millis(300), child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => None,
        }
    }

    /// Grace, `SIGTERM` to the group, grace, `SIGKILL`; always reaps.
    pub(crate) async fn stop(&self) {
        let mut child = self.child.lock().await;
        if let Ok(Ok(_)) = crate::clock::timeout(SHUTDOWN_GRACE, child.wait()).await {
            return;
        }
        self.signal(nix::sys::signal::Signal::SIGTERM);
        if let Ok(Ok(_)) = crate::clock::timeout(SHUTDOWN_GRACE, child.wait()).await {
            return;
        }
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = child.kill().await;
    }

    /// `SIGKILL` to the group at once, and reap (a server that failed to start).
    pub(crate) async fn stop_now(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.get_mut().kill().await;
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
        }
    }
}

/// Starts a stdio server in its own process group, with the environment `policy` chooses
/// from the engine's (see [`crate::tool::env`]), under `confine` when it has one (see
/// [`crate::tool::confine`]).
pub(crate) fn spawn(
    program: &str,
    args: &[String],
    dir: &Path,
    policy: &EnvPolicy,
    confine: Option<&crate::tool::confine::Confine>,
) -> Result<Child, String> {
    let path = program_path(program, dir);
    let (started, argv) = match confine {
        Some(confine) => confine.argv(&path, args),
        None => (path.clone(), args.to_vec()),
    };
    let mut cmd = Command::new(&started);
    cmd.args(&argv)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env_clear()
        .envs(policy.environment(std::env::vars_os()));
    #[cfg(unix)]
    cmd.process_group(0);
    if let Some(confine) = confine {
        return crate::tool::confine::spawn(cmd, confine, &path)
            .map_err(|e| format!("cannot start `{}` confined: {e}", path.display()));
    }
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "cannot start `{}`: no such program (looked on PATH and in {}) – install it or fix `command`",
                program,
                dir.display()
            )
        } else {
            format!("cannot start `{}`: {e} – fix `command`", path.display())
        }
    })
}

/// A bare name or an absolute path as is; a relative path with a separator from `dir`.
fn program_path(program: &str, dir: &Path) -> PathBuf {
    let p = Path::new(program);
    if p.is_absolute() || p.components().count() <= 1 {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}
