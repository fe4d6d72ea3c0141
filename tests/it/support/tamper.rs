//! A database to tamper with, written by the real binary: a long run with a non-idempotent
//! command tool and signed receipts (76 transitions, a snapshot at seq 64, outbox rows done),
//! a fork of it, a run killed while a non-idempotent call was running (an outbox row left
//! `started`), a run that published two keys to global memory `team`, one of which was
//! then removed by hand (`runtape memory rm`, signed with the key), and three runs that took
//! notes and wait for a person to approve a `deploy` call: one signed, one unsigned, and a
//! signed one past its first snapshot. Built once per test binary; each test works on its own
//! copy. What is edited, and how, is [`super::tamper_catalogue`].

#![allow(dead_code)]

use crate::support::spec::{agent, scripted_as, tool};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub(crate) use super::cli::{first_id, ok, runtape, temp_db, text, utf8};

/// The pristine database and what is in it.
pub(crate) struct Fixture {
    /// Keeps the directory alive.
    _dir: tempfile::TempDir,
    /// The directory holding the specs, keys and the database.
    pub(crate) dir: PathBuf,
    /// The database (WAL checkpointed: the file alone is the whole database).
    pub(crate) db: PathBuf,
    /// The receipt signing key.
    pub(crate) key: PathBuf,
    /// Its public half.
    pub(crate) pubkey: String,
    /// The long, signed, completed run.
    pub(crate) long: String,
    /// A fork of it at [`FORK_SEQ`].
    pub(crate) fork: String,
    /// The run killed while its non-idempotent call ran.
    pub(crate) killed: String,
    /// The first run of session `tamper`.
    pub(crate) session_first: String,
    /// The second, which goes on from the first.
    pub(crate) session_second: String,
    /// The run that published `a` and `b` to global memory `team` (`b` removed since).
    pub(crate) memory: String,
    /// A run `runtape prune` removed before the others were made: only its tombstone is left.
    pub(crate) pruned: String,
    /// Signed, waiting for approval of `deploy` after [`WAITING_NOTES`] notes.
    pub(crate) waiting: String,
    /// The same, unsigned.
    pub(crate) waiting_unsigned: String,
    /// Signed, waiting for approval of `deploy` after 24 notes: past the snapshot at seq 64.
    pub(crate) waiting_long: String,
}

/// Notes the short waiting runs take before asking to deploy.
pub(crate) const WAITING_NOTES: usize = 12;

/// Transitions of the long run.
pub(crate) const LONG_STEPS: u64 = 76;
/// Where the fork branches off.
pub(crate) const FORK_SEQ: u64 = 10;

fn long_spec() -> String {
    notes_spec(24, true, 0)
}

/// A spec whose scripted model (`latency_ms` a reply; with token usage and a cost on each
/// reply when `usage`) asks for `steps` calls of the non-idempotent tool `note`, one a turn,
/// then answers "all noted".
pub(crate) fn notes_spec(steps: usize, usage: bool, latency_ms: u64) -> String {
    let usage = if usage {
        ", usage = { input = 10, output = 5 }"
    } else {
        ""
    };
    let cost = if usage.is_empty() {
        ""
    } else {
        ", cost_usd = 0.0001"
    };
    let mut replies = note_replies(steps, usage, cost);
    replies.push_str(&format!("  {{ text = \"all noted\"{usage} }},\n"));
    let latency = if latency_ms > 0 {
        format!("latency_ms = {latency_ms}\n")
    } else {
        String::new()
    };
    format!(
        r#"goal = "Note things down."

[[providers]]
name = "script"
kind = "scripted"
{latency}replies = [
{replies}]

[[tools]]
name = "note"
description = "Append a note"
command = ["sh", "-c", "cat >> notes.log; echo ok"]
schema = {{ type = "object" }}
idempotent = false

[[agents]]
id = "scribe"
system_prompt = "Take notes."
provider = "script"
tools = ["note"]
"#
    )
}

/// The model's replies asking for `steps` calls of `note`, one a turn, each carrying `usage`
/// and `cost` (TOML fields after a comma, or nothing).
fn note_replies(steps: usize, usage: &str, cost: &str) -> String {
    let mut replies = String::new();
    for i in 0..steps {
        replies.push_str(&format!(
            "  {{ text = \"step {i}\", tool_calls = [ {{ name = \"note\", arguments = {{ n = {i} }} }} ]{usage}{cost} }},\n"
        ));
    }
    replies
}

/// Takes `n` notes, then asks to deploy version 6.6.6, which a person must approve.
fn waiting_spec(n: usize) -> String {
    let replies = note_replies(
        n,
        ", usage = { input = 10, output = 5 }",
        ", cost_usd = 0.0001",
    );
    format!(
        r#"goal = "Note things down, then deploy."

[[providers]]
name = "script"
kind = "scripted"
replies = [
{replies}  {{ text = "Deploying.", tool_calls = [ {{ name = "deploy", arguments = {{ version = "6.6.6" }} }} ] }},
  {{ text = "Deployed." }},
]

[[tools]]
name = "note"
description = "Append a note"
command = ["sh", "-c", "cat >> notes.log; echo ok"]
schema = {{ type = "object" }}
idempotent = false

[[tools]]
name = "deploy"
description = "Deploy a version (a person approves each call)"
command = ["sh", "-c", "touch DEPLOYED; echo deployed"]
schema = {{ type = "object" }}
requires_approval = true
idempotent = false

[[agents]]
id = "scribe"
system_prompt = "Take notes, then deploy."
provider = "script"
tools = ["note", "deploy"]
"#
    )
}

const CHAT_SPEC: &str = r#"
[[providers]]
name = "script"
kind = "scripted"
replies = [{ text = "Hello." }, { text = "Hello again." }]

[[agents]]
id = "assistant"
system_prompt = "Be brief."
provider = "script"
"#;

/// The reply that calls [`stuck_charge`] once, for 100 cents.
pub(crate) const CHARGE_CALL: &str =
    r#"{ text = "Charging.", tool_calls = [{ name = "charge", arguments = { cents = 100 } }] }"#;

/// The tool `charge` (not idempotent): touches `started`, then waits until `release` exists
/// in its directory before it says "charged", so a test can tamper while it is in flight.
pub(crate) fn stuck_charge() -> String {
    tool(
        "charge",
        r#"["sh", "-c", "touch started; while [ ! -e release ]; do sleep 0.05; done; echo charged"]"#,
        "description = \"Charge a card (not idempotent)\"\nschema = { type = \"object\" }\nidempotent = false",
    )
}

fn stuck_spec() -> String {
    [
        "goal = \"Charge the card.\"\n",
        &scripted_as(
            "script",
            &format!(r#"{CHARGE_CALL}, {{ text = "Charged." }}"#),
        ),
        &stuck_charge(),
        &agent(
            "cashier",
            "script",
            &["charge"],
            "system_prompt = \"Charge once.\"",
        ),
    ]
    .concat()
}

fn memory_spec() -> String {
    let remember = r#"{ tool_calls = [
      { name = "remember", arguments = { key = "a", value = "alpha", scope = "global" } },
      { name = "remember", arguments = { key = "b", value = "beta", scope = "global" } },
  ] }, { text = "Remembered." }"#;
    [
        "goal = \"Remember two things.\"\n[memory]\nglobal = \"team\"\n",
        &scripted_as("script", remember),
        &agent("keeper", "script", &[], "system_prompt = \"Keep notes.\""),
    ]
    .concat()
}

fn build() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_path_buf();
    let db = d.join("runs.db");
    let key = d.join("receipts.key");
    let k = utf8(&key).to_owned();
    ok(&db, &["keygen", "-o", &k]);
    let pubkey = format!("{k}.pub");
    // A run pruned while it was the only one, so its tombstone is the first and the others stay.
    std::fs::write(d.join("pruned.toml"), CHAT_SPEC).expect("writes");
    let pruned_spec = d.join("pruned.toml");
    let pruned = first_id(&ok(
        &db,
        &["run", utf8(&pruned_spec), "Hi.", "--receipt-key", &k],
    ));
    let out = ok(&db, &["prune", "--older-than", "0s"]);
    assert!(out.contains(&format!("pruned {pruned}")), "{out}");
    std::fs::write(d.join("long.toml"), long_spec()).expect("writes");
    std::fs::write(d.join("stuck.toml"), stuck_spec()).expect("writes");

    let long_spec = d.join("long.toml");
    let out = ok(&db, &["run", utf8(&long_spec), "--receipt-key", &k]);
    let long = first_id(&out);
    let out = ok(
        &db,
        &["fork", &format!("{long}@{FORK_SEQ}"), "--receipt-key", &k],
    );
    let fork = first_id(&out);

    // A run killed while its non-idempotent call runs: the call's row stays `started`.
    let stuck = d.join("stuck.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_runtape"))
        .env_remove("RUNTAPE_DB")
        .env_remove("RUNTAPE_RECEIPT_KEY")
        .arg("--db")
        .arg(&db)
        .args(["run", utf8(&stuck), "--receipt-key", &k])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    // The tool touches `started` only after its `started` mark is durable.
    let mut waited = 0;
    while !d.join("started").exists() {
        assert!(waited < 6000, "the tool never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
        waited += 1;
    }
    child.kill().expect("kills");
    let killed_out = child.wait_with_output().expect("waits");
    std::fs::write(d.join("release"), "").expect("releases the orphaned tool");
    let killed = first_id(&String::from_utf8_lossy(&killed_out.stdout));

    // Two runs of a session, the second going on from the first.
    std::fs::write(d.join("chat.toml"), CHAT_SPEC).expect("writes");
    let chat = d.join("chat.toml");
    let chat = utf8(&chat);
    let session_first = first_id(&ok(
        &db,
        &[
            "run",
            chat,
            "Hi.",
            "--session",
            "tamper",
            "--receipt-key",
            &k,
        ],
    ));
    let session_second = first_id(&ok(
        &db,
        &[
            "run",
            chat,
            "Hi again.",
            "--session",
            "tamper",
            "--receipt-key",
            &k,
        ],
    ));
    // A run that publishes to global memory, then a removal by hand.
    std::fs::write(d.join("memory.toml"), memory_spec()).expect("writes");
    let memory_spec = d.join("memory.toml");
    let out = ok(&db, &["run", utf8(&memory_spec), "--receipt-key", &k]);
    let memory = first_id(&out);
    ok(
        &db,
        &[
            "memory",
            "rm",
            "b",
            "--name",
            "team",
            "--yes",
            "--receipt-key",
            &k,
        ],
    );

    // Runs that wait for a person to approve their deploy.
    let mut waiting_runs = Vec::new();
    for (name, n, signed) in [
        ("waiting.toml", WAITING_NOTES, true),
        ("waiting_unsigned.toml", WAITING_NOTES, false),
        ("waiting_long.toml", 24, true),
    ] {
        std::fs::write(d.join(name), waiting_spec(n)).expect("writes");
        let spec = d.join(name);
        let mut args = vec!["run", utf8(&spec)];
        if signed {
            args.extend(["--receipt-key", &k]);
        }
        let out = ok(&db, &args);
        assert!(out.contains("waiting for a person"), "{out}");
        waiting_runs.push(first_id(&out));
    }
    let [waiting, waiting_unsigned, waiting_long] =
        <[String; 3]>::try_from(waiting_runs).expect("three runs");

    let conn = rusqlite::Connection::open(&db).expect("opens");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoints");
    let started: i64 = conn
        .query_row(
            "SELECT count(*) FROM outbox WHERE status = 'started'",
            [],
            |r| r.get(0),
        )
        .expect("reads");
    assert_eq!(started, 1, "the killed run left its call started");
    drop(conn);
    Fixture {
        dir: d,
        _dir: dir,
        db,
        key,
        pubkey,
        long,
        fork,
        killed,
        session_first,
        session_second,
        memory,
        pruned,
        waiting,
        waiting_unsigned,
        waiting_long,
    }
}

/// The pristine fixture, built on first use.
pub(crate) fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(build)
}

/// A private copy of the pristine database in a new directory (kept alive by the returned
/// guard), opened for editing.
pub(crate) fn copy() -> (tempfile::TempDir, PathBuf) {
    let f = fixture();
    let (dir, db) = temp_db();
    std::fs::copy(&f.db, &db).expect("copies");
    (dir, db)
}

/// The run's row key.
pub(crate) fn key_of(conn: &rusqlite::Connection, run: &str) -> i64 {
    conn.query_row("SELECT key FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .expect("run row")
}

/// The row id of seq `seq` of the run with key `key`.
pub(crate) fn row(key: i64, seq: u64) -> i64 {
    (key << 32) | seq as i64
}

/// Every row of every table an action on a run writes (runs, transitions, snapshots, blobs,
/// outbox, run specs), as text: compare it before and after for "nothing was written".
pub(crate) fn dump(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let mut out = String::new();
    for table in [
        "runs",
        "transitions",
        "snapshots",
        "blobs",
        "outbox",
        "run_specs",
    ] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1"))
            .expect("prepares");
        let n = stmt.column_count();
        let mut rows = stmt.query([]).expect("reads");
        while let Some(r) = rows.next().expect("row") {
            for i in 0..n {
                out.push_str(&format!("{:?}|", r.get_ref(i).expect("value")));
            }
            out.push('\n');
        }
    }
    out
}

/// Replaces `from` by `to` (keep them the same length, so only the bytes change) in `column`
/// of every row of `table` in the SQLite file `db` that holds it, as someone editing the file
/// would; returns how many rows changed.
pub(crate) fn replace_stored(db: &Path, table: &str, column: &str, from: &str, to: &str) -> usize {
    let conn = rusqlite::Connection::open(db).expect("opens the database");
    conn.execute(
        &format!(
            "UPDATE {table} SET {column} = replace({column}, CAST(?1 AS BLOB), CAST(?2 AS BLOB)) \
             WHERE instr({column}, CAST(?1 AS BLOB)) > 0"
        ),
        [from, to],
    )
    .expect("edits the rows")
}
