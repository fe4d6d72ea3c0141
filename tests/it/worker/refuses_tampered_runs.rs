//! A `runtape worker` never claims a run `verify` would reject: it checks what it would act on
//! (the same check `resume`, `fork` and `cancel` make, `ledger::check_continuable`) before
//! its claim writes anything, logs one `run.refused` line with `verify`'s words, and leaves
//! every table as it was. The run: a few notes, then a non-idempotent call that was running
//! when its driving process was killed (so the run is queued for any worker: `running`, its
//! lease holder gone). The same run untampered is claimed, which shows the comparison sees a
//! claim. Real PostgreSQL, the real binary.

use crate::support::spec::{agent, tool};
use crate::support::tamper::{CHARGE_CALL, stuck_charge};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::support::cli::{bin, first_id, utf8, wait_until};
use crate::support::pg::{PgServer, Reaper};
use crate::support::workers::{dump, events};

const SPEC: &str = r#"goal = "Note three things, then charge the card."
[[providers]]
name = "s"
kind = "scripted"
replies = [
  { text = "step 0", tool_calls = [{ name = "note", arguments = { n = 0 } }] },
  { text = "step 1", tool_calls = [{ name = "note", arguments = { n = 1 } }] },
  { text = "step 2", tool_calls = [{ name = "note", arguments = { n = 2 } }] },
"#;

/// Three notes (a non-idempotent tool appending to `notes.log`), then one charge that waits
/// for `release`.
fn charge_spec() -> String {
    let note =
        "description = \"Append a note\"\nschema = { type = \"object\" }\nidempotent = false";
    [
        SPEC,
        "  ",
        CHARGE_CALL,
        ",\n  { text = \"Charged.\" },\n]\n",
        &tool("note", r#"["sh", "-c", "cat >> notes.log; echo ok"]"#, note),
        &stuck_charge(),
        &agent("a", "s", &["note", "charge"], ""),
    ]
    .concat()
}

fn runtape(url: &str) -> Command {
    let mut c = bin();
    c.args(["--db", url]);
    c
}

/// A worker polling every 50 ms in `dir` (where the spec's tools write), its stdout and
/// stderr in `dir/LOG.log`.
fn worker(url: &str, dir: &Path, log: &str) -> Child {
    let out = std::fs::File::create(dir.join(format!("{log}.log"))).expect("log file");
    let err = out.try_clone().expect("log file");
    runtape(url)
        .args(["worker", "--spec-dir"])
        .arg(dir)
        .env("RUNTAPE_WORKER_POLL_MS", "50")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("starts a worker")
}

/// The `event` lines of the worker log `dir/LOG.log` naming `run`.
fn logged(dir: &Path, log: &str, event: &str, run: &str) -> Vec<serde_json::Value> {
    events(dir, log, event)
        .into_iter()
        .filter(|v| v["run"] == run)
        .collect()
}

/// A database holding one queued run with history (its driver killed while its call ran):
/// its name, the run's id and its key.
fn killed_run(server: &PgServer, dir: &Path) -> (String, String, i64) {
    let url = server.fresh_db();
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, charge_spec()).expect("writes the spec");
    let mut driver = runtape(&url)
        .args(["run", utf8(&spec)])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    wait_until("the charge has started", || dir.join("started").exists());
    driver.kill().expect("kills the driver");
    let out = driver.wait_with_output().expect("waits");
    std::fs::write(dir.join("release"), "").expect("releases the orphaned call");
    let run = first_id(&String::from_utf8_lossy(&out.stdout));
    let db = PgServer::db_of(&url).to_owned();
    let key: i64 = server
        .sql(
            &db,
            &format!("SELECT key FROM runtape.runs WHERE id = '{run}'"),
        )
        .parse()
        .expect("a key");
    (db, run, key)
}

/// A copy of database `of`, once no process holds a connection to it.
fn copy_of(server: &PgServer, of: &str, name: &str) -> String {
    wait_until("the template database is free", || {
        server
            .sql(
                "postgres",
                &format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{of}'"),
            )
            .trim()
            == "0"
    });
    server.sql("postgres", &format!("CREATE DATABASE {name} TEMPLATE {of}"));
    name.to_owned()
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_never_claims_a_run_verify_would_reject_and_writes_nothing() {
    let server = PgServer::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("resolves");
    let (fixture, run, k) = killed_run(&server, &dir);
    let rows = format!("id BETWEEN {} AND {}", k << 32, (k << 32) | 0xffff_ffff);
    let tampers = [
        (
            "a model turn's receipt seal stripped",
            format!(
                "UPDATE runtape.transitions SET seal = NULL WHERE id = (SELECT max(id) FROM runtape.transitions WHERE {rows} AND seal IS NOT NULL)"
            ),
        ),
        (
            "the stored effects of the step that asked for the charge",
            format!(
                "UPDATE runtape.transitions SET effects = effects || '\\x20'::bytea WHERE id = (SELECT max(id) FROM runtape.transitions WHERE {rows} AND length(effects) > 0)"
            ),
        ),
        (
            "an early step's time",
            format!(
                "UPDATE runtape.transitions SET at = at + 65536 WHERE id = {}",
                (k << 32) | 2
            ),
        ),
        (
            "an early step's chain link",
            format!(
                "UPDATE runtape.transitions SET chain = decode(repeat('00', 32), 'hex') WHERE id = {}",
                (k << 32) | 2
            ),
        ),
        (
            "a forged outbox row",
            format!(
                "INSERT INTO runtape.outbox (run, seq, idx, status, idempotency_key) VALUES ({k}, 1, 0, 'pending', 'forged')"
            ),
        ),
        (
            "the started charge made to look as if it never started",
            format!(
                "UPDATE runtape.outbox SET status = 'pending' WHERE run = {k} AND status = 'started'"
            ),
        ),
        (
            "the goal",
            format!("UPDATE runtape.run_specs SET goal = 'Charge twice.' WHERE run = {k}"),
        ),
    ];
    for (i, (what, sql)) in tampers.iter().enumerate() {
        let db = copy_of(&server, &fixture, &format!("tampered{i}"));
        server.sql(&db, sql);
        let before = dump(&server, &db);
        let log = format!("worker{i}");
        let url = server.url(&db);
        let verified = runtape(&url).args(["verify", &run]).output().expect("runs");
        assert_eq!(verified.status.code(), Some(1), "{what}: verify rejects it");
        let mut w = Reaper(vec![worker(&url, &dir, &log)]);
        wait_until(&format!("the worker refuses {what}"), || {
            !logged(&dir, &log, "run.refused", &run).is_empty()
        });
        let _ = w.0[0].kill();
        let _ = w.0[0].wait();
        let refused = logged(&dir, &log, "run.refused", &run);
        let error = refused[0]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("does not verify") && !error.contains('\n'),
            "{what}: {error}"
        );
        assert!(
            logged(&dir, &log, "run.claimed", &run).is_empty(),
            "{what}: claimed"
        );
        assert_eq!(dump(&server, &db), before, "{what}: the worker wrote");
    }

    // Untampered, the same run is claimed and taken up: the comparison above sees a claim.
    let db = copy_of(&server, &fixture, "pristine");
    let before = dump(&server, &db);
    let log = "pristine";
    let url = server.url(&db);
    let mut w = Reaper(vec![worker(&url, &dir, log)]);
    wait_until("the worker claims the untampered run", || {
        !logged(&dir, log, "run.claimed", &run).is_empty()
    });
    let _ = w.0[0].kill();
    let _ = w.0[0].wait();
    assert!(logged(&dir, log, "run.refused", &run).is_empty());
    assert_ne!(dump(&server, &db), before, "a claim writes the lease");
}
