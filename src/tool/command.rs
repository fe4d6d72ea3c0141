//! Command tools: a program run once per call, as declared by `kind = "command"` in a run
//! spec file.
//!
//! # The protocol
//!
//! For each call the program is started in its working directory (the spec file's directory)
//! with the call's arguments written to stdin as one JSON document, after which stdin is
//! closed. The environment is minimal — `PATH`, `HOME`, `LANG`, `LC_*`, `TMPDIR` and the like —
//! plus the variables the tool's [`env`](CommandConfig::env) names and the values its
//! [`env_set`](CommandConfig::env_set) gives (or, with [`env_all`](CommandConfig::env_all),
//! the engine's whole environment minus credentials; see [`super::env`]), plus the call's
//! context:
//!
//! | variable | value |
//! |---|---|
//! | `RUNTAPE_RUN_ID` | the run |
//! | `RUNTAPE_AGENT` | the agent that called |
//! | `RUNTAPE_CALL_ID` | the model's call id |
//! | `RUNTAPE_IDEMPOTENCY_KEY` | stable across retries and restarts of this call: use it to make a repeat a no-op |
//! | `RUNTAPE_TOOL` | the tool's name |
//! | `RUNTAPE_LEASE_EPOCH` | the lease epoch of the driver that started it (how a later driver finds it, see [`super::orphans`]) |
//!
//! Exit status 0: stdout (at most [`MAX_STDOUT_BYTES`]) is the result — the JSON value when it
//! parses as JSON, else the text with one trailing newline removed. Any other exit is an error
//! result fed back to the model, naming the status and the end of stderr (at most
//! [`STDERR_SNIPPET_CHARS`] characters).
//!
//! # Killing
//!
//! On Unix the program runs in its own process group. When the call times out
//! ([`CommandConfig::timeout_ms`]), its cancellation token fires, its output passes the cap,
//! or its future is dropped (the engine's own timeout, a cancelled run), the whole group is
//! sent `SIGKILL`, so shells and the children they started die too. A program that exits
//! normally leaves anything it started in the background alone. Programs left running by an
//! engine that was itself killed are found and killed by the next driver of the run, before it
//! performs anything ([`super::orphans`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use super::env::{EnvPolicy, EnvValue};
use super::{Tool, ToolContext, ToolError};

/// The most stdout a call may produce; a program that writes more is killed and the call
/// fails.
pub const MAX_STDOUT_BYTES: usize = 1 << 20;

/// How much of the end of stderr a failed call reports.
pub const STDERR_SNIPPET_CHARS: usize = 500;

/// How much of stderr is kept while it is drained (the snippet is taken from its end).
const STDERR_KEEP_BYTES: usize = 8 << 10;

/// A command tool as the setup stores it: everything needed to run it in any process.
/// Built by the spec file loader (`config`), or by hand to embed a program as a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    #[serde(default = "object_schema")]
    pub schema: Value,
    /// The program: an absolute path, or a bare name looked up on `PATH` when the call starts.
    /// A relative path with a separator is taken relative to [`dir`](Self::dir).
    pub program: String,
    /// Arguments passed to the program, before nothing else (the call's arguments go to
    /// stdin).
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory of every call: the spec file's directory, absolute.
    pub dir: PathBuf,
    /// How long a call may take before it is killed and fails; `None` leaves the limit to the
    /// engine's default tool timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Running it twice with the same idempotency key is safe (an interrupted call is simply
    /// run again on resume).
    #[serde(default)]
    pub idempotent: bool,
    /// It changes nothing (agents without an explicit grant are offered it).
    #[serde(default)]
    pub read_only: bool,
    /// Names of the engine's environment variables the program gets besides the minimal
    /// environment (names only: values are read when a call starts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Variables the spec sets for the program (`env = { NAME = "…" }`): a literal value, or
    /// the value of another of the engine's variables (see [`EnvValue`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_set: BTreeMap<String, EnvValue>,
    /// Pass the engine's whole environment, except credential-looking variables and the
    /// providers' key variables not named in [`env`](Self::env), and never the receipt
    /// signing key (see [`super::env`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub env_all: bool,
    /// For a non-idempotent tool: a program (and its arguments) that answers whether an
    /// interrupted call was performed. It is run like the tool itself — the call's arguments
    /// on stdin, the same `RUNTAPE_*` variables (`RUNTAPE_IDEMPOTENCY_KEY` names the call) —
    /// and prints `{"performed": true, "result": …}`, `{"performed": false}` or
    /// `{"performed": null}`. See [`Tool::reconcile`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<Vec<String>>,
    /// What the program may reach (`confine = { … }`): `None` runs it unconfined. Its
    /// reconcile program runs under the same confinement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confine: Option<super::confine::Confine>,
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

impl CommandConfig {
    /// The environment policy its program starts with (see [`super::env`]), withholding
    /// nothing beyond the policy's own rules.
    pub fn env_policy(&self) -> EnvPolicy {
        EnvPolicy {
            pass: self.env.clone(),
            set: self.env_set.clone(),
            all: self.env_all,
            withheld: Vec::new(),
        }
    }

    /// The path to start: [`program`](Self::program) itself when it is absolute or a bare
    /// name, else joined to [`dir`](Self::dir).
    pub fn program_path(&self) -> PathBuf {
        let program = Path::new(&self.program);
        if program.is_absolute() || program.components().count() <= 1 {
            program.to_path_buf()
        } else {
            self.dir.join(program)
        }
    }
}

/// A [`Tool`] that runs a program per call (see the [module docs](self) for the protocol).
/// Register it with the engine under its name; the spec file loader does this for every
/// `kind = "command"` tool.
#[derive(Clone, Debug)]
pub struct CommandTool {
    config: CommandConfig,
    policy: EnvPolicy,
}

impl CommandTool {
    /// A tool running `config`'s program.
    pub fn new(config: CommandConfig) -> Self {
        let policy = config.env_policy();
        CommandTool { config, policy }
    }

    /// The same tool, never passing the variables `names` under
    /// [`env_all`](CommandConfig::env_all) unless its [`env`](CommandConfig::env) names them
    /// (the setup withholds its providers' key variables this way).
    pub fn without_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.policy
            .withheld
            .extend(names.into_iter().map(Into::into));
        self
    }

    /// What it runs.
    pub fn config(&self) -> &CommandConfig {
        &self.config
    }

    fn error(&self, what: impl std::fmt::Display) -> ToolError {
        ToolError::new(format!("command tool `{}` {what}", self.config.name))
    }

    async fn run(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let input = args.to_string().into_bytes();
        let env = self
            .policy
            .build(std::env::vars_os(), &self.config.name, &ctx);
        let program = self.config.program_path();
        let (started, argv) = match &self.config.confine {
            Some(confine) => confine.argv(&program, &self.config.args),
            None => (program.clone(), self.config.args.clone()),
        };
        let mut cmd = Command::new(&started);
        cmd.args(&argv)
            .current_dir(&self.config.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .env_clear()
            .envs(env);
        #[cfg(unix)]
        cmd.process_group(0);
        let spawned = match &self.config.confine {
            Some(confine) => super::confine::spawn(cmd, confine, &program),
            None => cmd
                .spawn()
                .map_err(|e| format!("could not start `{}`: {e}", program.display())),
        };
        let mut child = spawned.map_err(|e| self.error(e))?;
        let mut group = GroupGuard::new(child.id());
        let limit = self.config.timeout_ms.map(Duration::from_millis);
        let ended = {
            let io = collect(&mut child, input);
            let deadline = async {
                match limit {
                    // The engine's clock, inside a call it performs.
                    Some(limit) => crate::clock::current().sleep(limit).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                result = io => result.map_or_else(|ended| ended, Ended::Exited),
                () = ctx.cancel.cancelled() => Ended::Cancelled,
                () = deadline => Ended::TimedOut,
            }
        };
        let failure = match ended {
            Ended::Exited(out) => {
                group.disarm();
                return self.finish(out);
            }
            Ended::Overflow => self.error(format_args!(
                "wrote more than {} bytes to stdout and was killed – make it print less",
                MAX_STDOUT_BYTES
            )),
            Ended::Unreadable(e) => self.error(format_args!(
                "could not read its output ({e}) and was killed"
            )),
            Ended::Cancelled => self.error("was cancelled and killed"),
            Ended::TimedOut => self.error(format_args!(
                "timed out after {} ms and was killed",
                limit.map_or(0, |l| l.as_millis())
            )),
        };
        group.kill(&mut child).await;
        Err(failure)
    }

    fn finish(&self, out: Output) -> Result<Value, ToolError> {
        if out.status.success() {
            return Ok(stdout_value(&out.stdout));
        }
        let snippet = match stderr_snippet(&out.stderr) {
            s if s.is_empty() => " with nothing on stderr".to_owned(),
            s => format!(": {s}"),
        };
        Err(self.error(format_args!("failed ({}){snippet}", out.status)))
    }
}

impl Tool for CommandTool {
    super::described_by!(config);

    fn timeout(&self) -> Option<Duration> {
        self.config.timeout_ms.map(Duration::from_millis)
    }

    fn invoke<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(self.run(args, ctx))
    }

    fn reconcile<'a>(
        &'a self,
        args: Value,
        ctx: ToolContext,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        let (program, rest) = self.config.reconcile.as_deref()?.split_first()?;
        // The reconcile program runs exactly as a call of this tool would, environment and
        // all; only the program differs.
        let mut asker = self.clone();
        asker.config.name = format!("{} (reconcile)", self.config.name);
        asker.config.program = program.clone();
        asker.config.args = rest.to_vec();
        asker.config.reconcile = None;
        Some(Box::pin(async move { asker.run(args, ctx).await }))
    }
}

/// How the wait for a call's program ended.
enum Ended {
    Exited(Output),
    Overflow,
    Unreadable(std::io::Error),
    Cancelled,
    TimedOut,
}

/// A finished program's status and output.
struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Feeds stdin, drains stdout (capped) and stderr (keeping its end) at once, so a program
/// that writes before it reads cannot deadlock against us; then waits for the exit.
async fn collect(child: &mut Child, input: Vec<u8>) -> Result<Output, Ended> {
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (_, stdout, stderr) =
        futures_util::future::try_join3(feed(stdin, input), read_capped(stdout), read_tail(stderr))
            .await?;
    let status = child.wait().await.map_err(Ended::Unreadable)?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Writes the arguments and closes stdin. A program that exits without reading them is not
/// an error (its exit status says how it went).
async fn feed(stdin: Option<ChildStdin>, input: Vec<u8>) -> Result<(), Ended> {
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    }
    Ok(())
}

async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> Result<Vec<u8>, Ended> {
    let mut out = Vec::new();
    let Some(pipe) = pipe else { return Ok(out) };
    // One byte past the cap tells "exactly at the cap" from "over it".
    let mut limited = pipe.take(MAX_STDOUT_BYTES as u64 + 1);
    limited
        .read_to_end(&mut out)
        .await
        .map_err(Ended::Unreadable)?;
    if out.len() > MAX_STDOUT_BYTES {
        return Err(Ended::Overflow);
    }
    Ok(out)
}

async fn read_tail(pipe: Option<impl AsyncRead + Unpin>) -> Result<Vec<u8>, Ended> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return Ok(kept);
    };
    let mut buf = [0u8; 4096];
    loop {
        let n = pipe.read(&mut buf).await.map_err(Ended::Unreadable)?;
        if n == 0 {
            return Ok(kept);
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * STDERR_KEEP_BYTES {
            kept.drain(..kept.len() - STDERR_KEEP_BYTES);
        }
    }
}

/// The result of a successful call: JSON when stdout parses, else its text without one
/// trailing newline.
fn stdout_value(stdout: &[u8]) -> Value {
    if let Ok(value) = serde_json::from_slice::<Value>(stdout) {
        return value;
    }
    let mut text = String::from_utf8_lossy(stdout).into_owned();
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Value::String(text)
}

/// The last [`STDERR_SNIPPET_CHARS`] characters of stderr on one line, `…` in front when cut.
fn stderr_snippet(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = flat.chars().count();
    if count <= STDERR_SNIPPET_CHARS {
        return flat;
    }
    let tail: String = flat
        .chars()
        .skip(count - (STDERR_SNIPPET_CHARS - 1))
        .collect();
    format!("…{tail}")
}

/// Kills the program's process group if the call is abandoned before the program was seen
/// to exit: explicitly on timeout, cancellation or overflow, and on drop when the call's
/// future is dropped mid-flight. Until the program is reaped its pid (the group's id) cannot
/// be reused, so the signal cannot reach an unrelated group.
struct GroupGuard {
    pgid: Option<u32>,
}

impl GroupGuard {
    fn new(pid: Option<u32>) -> Self {
        GroupGuard {
            pgid: if cfg!(unix) { pid } else { None },
        }
    }

    /// The program exited and was reaped: nothing to kill.
    fn disarm(&mut self) {
        self.pgid = None;
    }

    /// Kills the group, then the program itself, and reaps it.
    async fn kill(&mut self, child: &mut Child) {
        if let Some(pgid) = self.pgid.take() {
            super::signal::kill_group(pgid);
        }
        let _ = child.kill().await;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // `kill_on_drop` kills and reaps the program itself; its group goes here.
        if let Some(pgid) = self.pgid.take() {
            super::signal::kill_group(pgid);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stdout_is_json_when_it_parses_else_text() {
        assert_eq!(stdout_value(b"{\"a\":1}\n"), json!({"a": 1}));
        assert_eq!(stdout_value(b"42"), json!(42));
        assert_eq!(stdout_value(b"hello\n\n"), Value::from("hello\n"));
        assert_eq!(stdout_value(b"line\r\n"), Value::from("line"));
        assert_eq!(stdout_value(b""), Value::from(""));
    }

    #[test]
    fn relative_programs_resolve_against_the_directory() {
        let path = |program: &str| {
            let json = json!({"name": "t", "program": program, "dir": "/specs"});
            let config: CommandConfig = serde_json::from_value(json).expect("a config");
            config.program_path()
        };
        assert_eq!(path("sh"), PathBuf::from("sh"));
        assert_eq!(path("/bin/sh"), PathBuf::from("/bin/sh"));
        assert_eq!(path("tools/x.py"), PathBuf::from("/specs/tools/x.py"));
    }
}
