//! Shared support for the protocol tests that drive the real `runtape` binary: a spec whose
//! model asks for one non-idempotent "charge" (a command tool that appends its idempotency key
//! to `charges.log`), helpers to start, kill and resume runs, and readers of the database.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};

pub use super::cli::{bin, err, one_line, out, run_id, runtape, signal, text, wait_until, write};

/// What the charge tool does besides recording its key: a shell snippet run after the key is
/// appended (e.g. `sleep 1`).
pub struct ChargeSpec<'a> {
    /// Shell run after the charge is recorded.
    pub then: &'a str,
    /// The agent's `on_in_doubt`.
    pub on_in_doubt: &'a str,
    /// Model latency, ms.
    pub latency_ms: u64,
    /// Extra `[[tools]]` keys for the charge tool (e.g. `reconcile = [...]`).
    pub tool_extra: &'a str,
    /// Charges the model asks for, one per turn, before it answers.
    pub charges: usize,
}

impl Default for ChargeSpec<'_> {
    fn default() -> Self {
        ChargeSpec {
            then: "sleep 1",
            on_in_doubt: "fail",
            latency_ms: 0,
            tool_extra: "",
            charges: 1,
        }
    }
}

impl<'a> ChargeSpec<'a> {
    /// The default charge run, with `then` run after each charge is recorded.
    pub fn running(then: &'a str) -> Self {
        ChargeSpec {
            then,
            ..ChargeSpec::default()
        }
    }

    /// `charges` charges, one per model turn of `latency_ms`, with nothing run after each.
    pub fn paced(charges: usize, latency_ms: u64) -> Self {
        ChargeSpec {
            then: "",
            charges,
            latency_ms,
            ..ChargeSpec::default()
        }
    }
}

/// Writes `charge.toml` in `dir`: the scripted model asks for `charges` calls to the
/// non-idempotent tool `charge` (one per turn), then answers "done". Each call appends its
/// idempotency key to `dir/charges.log`, then runs `then`.
pub fn charge_spec(dir: &Path, c: &ChargeSpec<'_>) -> PathBuf {
    let mut replies: Vec<String> = (0..c.charges)
        .map(|i| {
            format!("{{ tool_calls = [{{ name = \"charge\", arguments = {{ n = {i} }}, id = \"c{i}\" }}] }}")
        })
        .collect();
    replies.push("{ text = \"done\" }".into());
    let spec = format!(
        "goal = \"charge the card\"\n\
         [[providers]]\nname = \"s\"\nkind = \"scripted\"\nlatency_ms = {latency}\nreplies = [{replies}]\n\
         [[tools]]\nname = \"charge\"\ndescription = \"charge the card\"\n\
         command = [\"sh\", \"-c\", \"echo \\\"$RUNTAPE_IDEMPOTENCY_KEY\\\" >> charges.log; {then}\"]\n\
         {extra}\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"charge\"]\non_in_doubt = \"{policy}\"\n",
        latency = c.latency_ms,
        replies = replies.join(", "),
        then = c.then,
        extra = c.tool_extra,
        policy = c.on_in_doubt,
    );

    write(dir, "charge.toml", &spec)
}

/// The idempotency keys the charge tool recorded, with how often each was performed.
pub fn charges(dir: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(dir.join("charges.log")).unwrap_or_default();
    let mut seen = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *seen.entry(line.to_owned()).or_insert(0) += 1;
    }
    seen
}

/// Lines of `charges.log` so far.
pub fn charge_lines(dir: &Path) -> usize {
    charges(dir).values().sum()
}

/// A `runtape run --json` in the background: the child, its run id, its stdout lines.
pub struct Background {
    /// The process.
    pub child: Child,
    /// The run it drives.
    pub run: String,
    /// The rest of its stdout.
    pub lines: BufReader<ChildStdout>,
}

/// Starts `runtape run --json SPEC` with `env`; returns once it printed the run id.
pub fn start(db: &Path, spec: &Path, env: &[(&str, &str)]) -> Background {
    let mut cmd = bin();
    cmd.arg("--db")
        .arg(db)
        .args(["run", "--json"])
        .arg(spec)
        .current_dir(spec.parent().expect("spec dir"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("first line");
    let v: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}"));
    Background {
        child,
        run: v["id"].as_str().expect("id").to_owned(),
        lines,
    }
}

/// Starts a charge run and SIGKILLs it once the charge has been performed: the call is left
/// `started` with no result (in doubt). Returns the run id.
pub fn run_killed_mid_charge(dir: &Path, db: &Path, spec: &Path) -> String {
    let mut bg = start(db, spec, &[]);
    wait_until("the charge is performed", || charge_lines(dir) >= 1);
    bg.child.kill().expect("SIGKILL");
    let _ = bg.child.wait();
    bg.run
}

/// The run's row: status, seq, lease epoch, lease owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// `runs.status`.
    pub status: String,
    /// `runs.seq`.
    pub seq: i64,
    /// `runs.lease_epoch`.
    pub epoch: i64,
    /// `runs.lease_owner`.
    pub owner: Option<String>,
    /// `runs.state_kind`.
    pub state_kind: String,
}

/// Reads the run's row.
pub fn run_row(db: &Path, run: &str) -> RunRow {
    let conn = crate::support::cli::read_only(db);
    conn.query_row(
        "SELECT status, seq, lease_epoch, lease_owner, state_kind FROM runs WHERE id = ?1",
        [run],
        |r| {
            Ok(RunRow {
                status: r.get(0)?,
                seq: r.get(1)?,
                epoch: r.get(2)?,
                owner: r.get(3)?,
                state_kind: r.get(4)?,
            })
        },
    )
    .expect("run row")
}

/// The run's committed seqs, in order.
pub fn seqs(db: &Path) -> Vec<i64> {
    let conn = crate::support::cli::read_only(db);
    crate::support::cli::column(&conn, "SELECT id & 4294967295 FROM transitions ORDER BY id")
}

/// The edges committed, in order.
pub fn edges(db: &Path) -> Vec<String> {
    let conn = crate::support::cli::read_only(db);
    conn.prepare("SELECT edge FROM transitions ORDER BY id")
        .expect("prepares")
        .query_map([], |r| Ok(edge_name(r.get_ref(0)?.as_bytes()?)))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// The persisted name of a stored edge (a code or, before schema 4, the name).
fn edge_name(stored: &[u8]) -> String {
    runtape::format::stored::stored_edge(stored)
        .expect("a stored edge")
        .as_str()
        .to_owned()
}

/// True when `owner` (`host:pid:nonce`) names a process that is still running here.
pub fn owner_alive(owner: &str) -> bool {
    owner
        .rsplit(':')
        .nth(1)
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}
