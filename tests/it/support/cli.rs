//! The one way the tests run the real `runtape` binary: with none of the variables from the
//! environment the tests run in that would change what it does (a developer's `RUNTAPE_DB`,
//! PostgreSQL password and TLS settings, receipt key, lease or writer settings, serve token or OpenTelemetry endpoint), and readers
//! of what it printed. Also where the repository's examples and fixtures are, and small waits
//! and signals for tests that drive processes.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Variables the binary reads that the tests' own environment must not decide.
const CLEARED: [&str; 13] = [
    "RUNTAPE_DB",
    "PGPASSWORD",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "RUNTAPE_RECEIPT_KEY",
    "RUNTAPE_LEASE_TTL_MS",
    "RUNTAPE_STOP_GRACE_MS",
    "RUNTAPE_DB_MAX_BYTES",
    "RUNTAPE_WRITER_NICE",
    "RUNTAPE_SERVE_TOKEN",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The binary under test, with [`CLEARED`] removed from its environment. Set a variable a test
/// needs with `.env(...)` on the result.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_runtape"));
    for var in CLEARED {
        c.env_remove(var);
    }
    c
}

/// `runtape --db DB`, to add arguments, variables or pipes to.
pub fn on(db: &Path) -> Command {
    let mut c = bin();
    c.arg("--db").arg(db);
    c
}

/// Runs `runtape --db DB ARGS…` to completion and returns what it did.
pub fn runtape(db: &Path, args: &[&str]) -> Output {
    on(db).args(args).output().expect("runs the binary")
}

/// [`runtape`] with `TEST_KEY=k-1` set: the key of the specs whose providers name
/// `api_key_env = "TEST_KEY"` (recorded-provider and mock-server tests).
pub fn runtape_keyed(db: &Path, args: &[&str]) -> Output {
    on(db)
        .env("TEST_KEY", "k-1")
        .args(args)
        .output()
        .expect("runs the binary")
}

/// Runs `runtape --db DB ARGS…`, killing it after `guard` (a regression then fails instead of
/// hanging the suite; the bound is far beyond what the behaviour needs).
pub fn runtape_within(db: &Path, args: &[&str], guard: Duration) -> Output {
    let child = on(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(guard) {
        Ok(out) => out.expect("waits"),
        Err(_) => {
            let _ = try_signal(pid, "KILL");
            panic!(
                "`runtape {}` did not finish within {guard:?}",
                args.join(" ")
            );
        }
    }
}

/// Starts every command at once (stdout and stderr piped), then waits for each: processes that
/// race for the same run. The outputs are in the commands' order.
pub fn all_at_once(commands: impl IntoIterator<Item = Command>) -> Vec<Output> {
    let children: Vec<Child> = commands
        .into_iter()
        .map(|mut c| {
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starts")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("exits"))
        .collect()
}

/// Starts `runtape --db DB run SPEC --json` (stderr discarded) and reads the first line it
/// prints: the process, the rest of its stdout, and the run id.
pub fn start_json(db: &Path, spec: &Path) -> (Child, BufReader<ChildStdout>, String) {
    let (child, stdout, line) = spawn_json(
        on(db)
            .args(["run", utf8(spec), "--json"])
            .stderr(Stdio::null()),
    );
    let run = line["id"].as_str().expect("id").to_owned();
    (child, stdout, run)
}

/// Spawns `cmd`, a `runtape … --json` set up by the caller (variables, stderr), with stdout
/// piped, and reads the first line it prints: the process, the rest of its stdout, and that
/// line as JSON (for `run`, the run line with the run id).
pub fn spawn_json(cmd: &mut Command) -> (Child, BufReader<ChildStdout>, serde_json::Value) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawns");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("reads");
    let line = serde_json::from_str(&first).expect("the first line is JSON");
    (child, stdout, line)
}

/// Reads a `run --json` driver's output until it has committed step `seq`; panics when the
/// run ends first.
pub fn wait_for_step(lines: &mut BufReader<ChildStdout>, seq: u64) {
    let mut line = String::new();
    while lines.read_line(&mut line).expect("reads") > 0 {
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
        if v["seq"].as_u64().is_some_and(|s| s >= seq) {
            return;
        }
        line.clear();
    }
    panic!("the run ended before step {seq}");
}

/// Writes `slow.toml` in `dir`: a run of `rounds` slow model turns (150 ms each), each calling
/// a `tick` tool (`cat`), then `done`: long enough to be paused, cancelled or killed midway.
pub fn slow_tick_spec(dir: &Path, rounds: usize) -> PathBuf {
    let replies: Vec<String> = (0..rounds)
        .map(|i| format!("{{ tool_calls = [{{ name = \"tick\", arguments = {{ n = {i} }} }}] }}"))
        .chain(std::iter::once("{ text = \"done\" }".to_owned()))
        .collect();
    let spec = format!(
        "goal = \"tick\"\n[[providers]]\nname = \"s\"\nkind = \"scripted\"\nlatency_ms = 150\nreplies = [{}]\n\
         [[tools]]\nname = \"tick\"\ndescription = \"tick\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nschema = {{ type = \"object\" }}\nread_only = true\nidempotent = true\n\
         [[agents]]\nid = \"a\"\nprovider = \"s\"\ntools = [\"tick\"]\n",
        replies.join(", ")
    );
    write(dir, "slow.toml", &spec)
}

/// Waits for `child` to exit; its exit code and what it wrote on stderr (piped).
pub fn exit_and_stderr(child: &mut Child) -> (Option<i32>, String) {
    let status = child.wait().expect("exits");
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("stderr is piped");
    std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("reads stderr");
    (status.code(), stderr)
}

/// Runs `runtape ARGS…` (no `--db`: commands that take none, or a database from `ARGS`).
pub fn bare(args: &[&str]) -> Output {
    bin().args(args).output().expect("runs the binary")
}

/// Runs `runtape --db DB ARGS…`, asserts it succeeded, and returns its stdout.
pub fn ok(db: &Path, args: &[&str]) -> String {
    let o = runtape(db, args);
    assert!(
        o.status.success(),
        "runtape {args:?} failed ({:?}): {}",
        o.status.code(),
        text(&o)
    );
    out(&o)
}

/// stdout as text.
pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// stdout then stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", out(o), err(o))
}

/// The last word of the first line of `stdout` (`started run ID`, `forked ... as run ID`).
pub fn first_id(stdout: &str) -> String {
    stdout
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .expect("a run id")
        .to_owned()
}

/// The first line of `text` that starts with `prefix` (a run's row in `ls`, by its id); panics
/// showing `text` when there is none.
pub fn line_starting<'a>(text: &'a str, prefix: &str) -> &'a str {
    match text.lines().find(|l| l.starts_with(prefix)) {
        Some(line) => line,
        None => panic!("no line starts with {prefix}:\n{text}"),
    }
}

/// The run id a command printed first ([`first_id`] of its stdout).
pub fn run_id(o: &Output) -> String {
    first_id(&out(o))
}

/// Every line of stdout as JSON (`--json` output); a line that is not JSON fails the test.
pub fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    out(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `(key, version, value, run)` of every version of every key of global memory `name`,
/// oldest first per key, read from the SQLite file `db`.
pub fn global_memory(db: &Path, name: &str) -> Vec<(String, u64, Option<String>, Option<String>)> {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let mut stmt = conn
        .prepare(
            "SELECT key, version, value, run_id FROM memory_global WHERE name = ?1 ORDER BY key, version",
        )
        .expect("prepares");
    stmt.query_map([name], |r| {
        Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get(2)?, r.get(3)?))
    })
    .expect("queries")
    .collect::<Result<_, _>>()
    .expect("reads")
}

/// `runtape cassette export RUN -o TO` on `db`.
pub fn export(db: &Path, run: &str, to: &Path) -> Output {
    runtape(db, &["cassette", "export", run, "-o", utf8(to)])
}

/// Exports `run`'s cassette to `to` (which must succeed) and returns it as JSON.
pub fn exported(db: &Path, run: &str, to: &Path) -> serde_json::Value {
    let e = export(db, run, to);
    assert_eq!(e.status.code(), Some(0), "{}", text(&e));
    serde_json::from_str(&std::fs::read_to_string(to).expect("the cassette")).expect("JSON")
}

/// Lowers an exported cassette to version 1 with every integrity field removed (`cassetteId`,
/// `envelopeHash`, each entry's `responseHash`): the downgrade a reader must refuse unless told
/// to accept an unverified cassette. Returns the entries, for a test that edits them too.
pub fn downgraded(cassette: &mut serde_json::Value) -> &mut Vec<serde_json::Value> {
    cassette["version"] = 1.into();
    let envelope = cassette.as_object_mut().expect("a cassette is an object");
    envelope.remove("cassetteId");
    envelope.remove("envelopeHash");
    let entries = cassette["entries"].as_array_mut().expect("entries");
    for entry in entries.iter_mut() {
        entry.as_object_mut().expect("entry").remove("responseHash");
    }
    entries
}

/// Exactly one line of text on stderr (the documented shape of every error).
pub fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr:?}");
    lines[0]
}

/// `path` as UTF-8 (test paths are).
pub fn utf8(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// A scratch directory and the path of a database in it (`runs.db`, not created yet).
pub fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    (dir, db)
}

/// A scratch database (as [`temp_db`]) where `runtape run examples/NAME` succeeded: the
/// directory, the database and what the run printed.
pub fn ran_example(name: &str) -> (tempfile::TempDir, PathBuf, String) {
    let (dir, db) = temp_db();
    let printed = ok(&db, &["run", utf8(&example(name))]);
    (dir, db, printed)
}

/// A fresh directory holding a database path and the spec `name` written with `text`: the
/// directory (removed on drop), the database and the spec.
pub fn temp_spec(name: &str, text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, db) = temp_db();
    let spec = write(dir.path(), name, text);
    (dir, db, spec)
}

/// The repository's `examples/NAME`.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// The repository's `tests/fixtures/PATH`.
pub fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// A private copy of the fixture database `tests/fixtures/PATH` in `dir` (`dir/old.db`), so a
/// test never changes the committed file.
pub fn fixture_copy(dir: &Path, path: &str) -> PathBuf {
    let db = dir.join("old.db");
    std::fs::copy(fixture(path), &db).expect("copies the fixture");
    db
}

/// Writes `body` to `dir/name` (a spec, a script) and returns its path.
pub fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap_or_else(|e| panic!("writes {}: {e}", path.display()));
    path
}

/// Waits (up to a minute) until `cond` holds, checking every few ms.
pub fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_every(what, Duration::from_millis(3), cond);
}

/// Waits (up to a minute) until `cond` holds, checking it every `every` (for a `cond` that
/// costs a process or a query).
pub fn wait_until_every(what: &str, every: Duration, cond: impl FnMut() -> bool) {
    wait_until_within(what, Duration::from_secs(60), every, cond);
}

/// Waits up to `within` until `cond` holds, checking it every `every`.
pub fn wait_until_within(
    what: &str,
    within: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(every);
    }
}

/// Sends `signal` (TERM, HUP, STOP, CONT, INT, KILL) to `pid`; panics when it cannot (the
/// process is gone). See [`try_signal`].
pub fn signal(pid: u32, signal: &str) {
    let sent = try_signal(pid, signal);
    assert!(sent.is_ok(), "kill -s {signal} {pid}: {sent:?}");
}

/// Sends `signal` (TERM, HUP, STOP, CONT, INT, KILL) to `pid` with the kill(2) system call
/// (nix's safe wrapper), for a stop that may find the process already gone. No `kill` program
/// and no shell: a machine with only Rust may lack procps, and a signal that is never sent
/// turns a test into a wait for its own timeout (a server's drop waited 20 s for each).
pub fn try_signal(pid: u32, signal: &str) -> nix::Result<()> {
    use nix::errno::Errno;
    let signal: nix::sys::signal::Signal =
        format!("SIG{signal}").parse().map_err(|_| Errno::EINVAL)?;
    let pid = i32::try_from(pid).map_err(|_| Errno::ESRCH)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
}

/// A spec for agent `a`: a scripted model giving `replies` (TOML inline tables, one a line)
/// and one read-only, idempotent tool, `echo` (`cat`); `agent` adds lines to the agent's table.
pub fn echo_spec(goal: &str, replies: &str, agent: &str) -> String {
    format!(
        r#"goal = "{goal}"
[[providers]]
name = "s"
kind = "scripted"
replies = [
{replies}
]
[[tools]]
name = "echo"
description = "says what it is given"
command = ["cat"]
read_only = true
idempotent = true
[[agents]]
id = "a"
provider = "s"
tools = ["echo"]
{agent}"#
    )
}

/// `verify` passes for each of `signed` with the fixture `pubkey` (a path under
/// tests/fixtures) and for each of `unsigned` without one.
pub fn all_verify(db: &Path, pubkey: &str, signed: &[&str], unsigned: &[&str]) {
    let pubkey = fixture(pubkey);
    for run in signed {
        let out = ok(db, &["verify", run, "--pubkey", utf8(&pubkey)]);
        assert!(out.starts_with("OK"), "{out}");
    }
    for run in unsigned {
        let out = ok(db, &["verify", run]);
        assert!(out.starts_with("OK"), "{out}");
    }
}

/// A scripted model named `script` giving `replies` (TOML inline tables, one a line, each
/// ending in a comma), as a spec's `[[providers]]` table.
pub fn scripted(replies: &str) -> String {
    format!("[[providers]]\nname = \"script\"\nkind = \"scripted\"\nreplies = [\n{replies}]\n")
}

/// The bytes of SQLite database `db` and of its write-ahead log (`None` for a missing or
/// empty file), to compare before and after a command that must write nothing.
pub fn db_files(db: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    ["", "-wal"]
        .iter()
        .map(|s| {
            let p = PathBuf::from(format!("{}{s}", db.display()));
            let bytes = std::fs::read(&p).ok().filter(|b| !b.is_empty());
            (p, bytes)
        })
        .collect()
}

/// Runs `runtape keygen -o PATH`, checks it succeeded, and returns the key file's text.
pub fn keygen(path: &Path) -> String {
    let o = bin()
        .arg("keygen")
        .arg("-o")
        .arg(path)
        .output()
        .expect("keygen");
    assert!(o.status.success(), "{}", text(&o));
    std::fs::read_to_string(path).expect("key file")
}

/// The first column of every row `sql` selects on `conn`, in order.
pub fn column<T: rusqlite::types::FromSql>(conn: &rusqlite::Connection, sql: &str) -> Vec<T> {
    conn.prepare(sql)
        .expect("prepares")
        .query_map([], |r| r.get(0))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// The first two columns of every row `sql` selects on `conn`, in order.
pub fn pairs<A: rusqlite::types::FromSql, B: rusqlite::types::FromSql>(
    conn: &rusqlite::Connection,
    sql: &str,
) -> Vec<(A, B)> {
    conn.prepare(sql)
        .expect("prepares")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// Runs `runtape --db DB replay SPEC --cassette CASSETTE ARGS…`.
pub fn replay(db: &Path, spec: &str, cassette: &str, args: &[&str]) -> Output {
    runtape(
        db,
        &[&["replay", spec, "--cassette", cassette], args].concat(),
    )
}

/// Runs `runtape --db DB replay SPEC --cassette CASSETTE --stepped-clock`: a replay on a
/// virtual clock, so two replays of one cassette store the same history.
pub fn replay_stepped(db: &Path, spec: &str, cassette: &str) -> Output {
    replay(db, spec, cassette, &["--stepped-clock"])
}

/// [`replay_stepped`] into a fresh database `DIR/fresh.db`, which must succeed: the database
/// and what the replay printed.
pub fn replay_fresh(dir: &Path, spec: &str, cassette: &str) -> (PathBuf, String) {
    let fresh = dir.join("fresh.db");
    let o = replay_stepped(&fresh, spec, cassette);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    (fresh, out(&o))
}

/// A read-only connection to SQLite database `db`, to look at what a run stored without
/// taking part in its writes.
pub fn read_only(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("opens")
}
