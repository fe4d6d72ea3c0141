//! Shared by the `serve_*` tests: a real `runtape serve` on a free loopback port, a plain
//! HTTP/1.1 client over a TCP socket (so a test controls every header, reads event streams
//! line by line and can hang up mid-stream), and runs made with the real binary.
#![allow(dead_code, unreachable_pub)]

use crate::support::spec::{SAFE, agent, scripted_as, tool};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::write;
use serde_json::Value;

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_runtape")
}

/// A scratch directory with a copy of `examples/`.
pub fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    std::fs::create_dir_all(dir.path().join("examples")).expect("mkdir");
    for e in std::fs::read_dir(examples).expect("examples/") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_file() {
            std::fs::copy(e.path(), dir.path().join("examples").join(e.file_name()))
                .expect("copies an example");
        }
    }
    dir
}

/// A [`scratch`] directory and the path of a database in it (`runs.db`, not created yet).
pub fn scratch_db() -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    let db = dir.path().join("runs.db");
    (dir, db)
}

/// `runtape serve` in `dir` on `db` with no other arguments or variables.
pub fn serve(dir: &Path, db: &Path) -> Server {
    Server::start(dir, db, &[], &[])
}

/// The text at `key` of a JSON answer; a missing or non-text value fails the test, showing `v`.
pub fn field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no text `{key}` in {v}"))
}

/// `runtape serve ARGS` on a new, empty scratch database: the directory (the server's working
/// directory; keep it alive) and the server.
pub fn serve_empty(args: &[&str]) -> (tempfile::TempDir, Server) {
    let (dir, db) = scratch_db();
    let server = Server::start(dir.path(), &db, args, &[]);
    (dir, server)
}

/// A scratch database holding one run of `spec` (a path from the repository's root), and
/// `runtape serve` on it: the directory, the database, the run's id and the server.
pub fn serving(spec: &str) -> (tempfile::TempDir, PathBuf, String, Server) {
    let (dir, db, [run], server) = serving_runs([spec]);
    (dir, db, run, server)
}

/// [`serving`] with one run of each of `specs`, in order, before the server starts.
pub fn serving_runs<const N: usize>(
    specs: [&str; N],
) -> (tempfile::TempDir, PathBuf, [String; N], Server) {
    let (dir, db) = scratch_db();
    let runs = specs.map(|spec| run_spec(dir.path(), &db, spec));
    let server = serve(dir.path(), &db);
    (dir, db, runs, server)
}

/// `runtape ARGS` in `dir` on `db`; stdout, stderr and the status.
pub fn runtape(dir: &Path, db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .arg("--db")
        .arg(db)
        .current_dir(dir)
        .env_remove("RUNTAPE_DB")
        .env_remove("RUNTAPE_RECEIPT_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("runs runtape")
}

/// Runs a spec with the CLI and returns the run id it printed.
pub fn run_spec(dir: &Path, db: &Path, spec: &str) -> String {
    let out = runtape(dir, db, &["run", spec, "--json"]);
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let v: Value = serde_json::from_str(&first).unwrap_or_else(|_| {
        panic!(
            "no run line from `run {spec}`: {first}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["id"].as_str().expect("id").to_owned()
}

/// A `runtape serve` process; stopped with SIGTERM when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub url: String,
    pub stderr: Option<std::process::ChildStderr>,
}

impl Server {
    /// `runtape serve --db DB --addr 127.0.0.1:0 EXTRA…` in `dir`, with `env` set; waits for
    /// the line that says where it listens.
    pub fn start(dir: &Path, db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--addr", "127.0.0.1:0"])
            .args(extra)
            .arg("--db")
            .arg(db)
            .current_dir(dir)
            .env_remove("RUNTAPE_DB")
            .env_remove("RUNTAPE_RECEIPT_KEY")
            .env_remove("RUNTAPE_SERVE_TOKEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starts runtape serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the first line");
        let url = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("runtape serve did not say where it listens: {line:?} {err}")
            })
            .to_owned();
        let addr: SocketAddr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("an address");
        let stderr = child.stderr.take();
        Server {
            child,
            addr,
            url,
            stderr,
        }
    }

    /// GET `path`; the status and the body parsed as JSON.
    pub fn get(&self, path: &str) -> (u16, Value) {
        let r = request(self.addr, "GET", path, &[], None);
        (r.status, r.json())
    }

    /// GET `path` with `Authorization: BEARER`.
    pub fn get_with(&self, path: &str, bearer: &str) -> (u16, Value) {
        let r = request(self.addr, "GET", path, &[("Authorization", bearer)], None);
        (r.status, r.json())
    }

    /// POST `body` (JSON) to `path` as a program would (no Origin).
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = request(
            self.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        );
        (r.status, r.json())
    }

    /// Polls `GET /api/runs/{run}` until `f` holds (at most `within`).
    pub fn wait_run(&self, run: &str, within: Duration, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (status, v) = self.get(&format!("/api/runs/{run}"));
            if status == 200 && f(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "run {run} never got there: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server with SIGTERM and returns its exit status and stderr.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let _ = crate::support::cli::try_signal(self.child.id(), "TERM");
        let status = self.child.wait().expect("waits");
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status.code(), err)
    }

    /// The server's resident memory now and at its peak, in KiB (Linux `/proc`).
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = crate::support::cli::try_signal(self.child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An answer read off the socket.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `error` line of a JSON error answer (`{"error": "…"}`); panics when there is none.
    pub fn error(&self) -> String {
        match self.json()["error"].as_str() {
            Some(e) => e.to_owned(),
            None => panic!("no error in the answer: {}", self.text()),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with exactly these headers (plus `Host` unless given, `Connection:
/// close` and `Content-Length`), the whole answer read.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("writes");
    if let Some(b) = body {
        // A server may answer (413) before reading a large body and close: not an error here.
        let _ = s.write_all(b);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_answer(&raw)
}

fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = end + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
}

/// One Server-Sent Event.
#[derive(Clone, Debug, Default)]
pub struct Sse {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// An open event stream, read event by event.
pub struct Stream {
    reader: BufReader<TcpStream>,
    pub status: u16,
}

impl Stream {
    /// Opens `GET path` as an event stream with `headers`.
    pub fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Stream {
        let s = TcpStream::connect(addr).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(60))).ok();
        let mut w = s.try_clone().expect("clone");
        let mut head =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes()).expect("writes");
        let mut reader = BufReader::new(s);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).expect("status line");
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                break;
            }
        }
        Stream { reader, status }
    }

    /// The next event (chunk framing skipped), or `None` when the stream ends or times out.
    pub fn next(&mut self) -> Option<Sse> {
        let mut ev = Sse::default();
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = line.trim_end_matches(['\r', '\n']);
            // Chunk sizes of the chunked encoding: hex digits alone on a line.
            if !line.is_empty()
                && !line.contains(':')
                && line.chars().all(|c| c.is_ascii_hexdigit())
            {
                continue;
            }
            if line.is_empty() {
                if !ev.data.is_empty() || !ev.event.is_empty() {
                    return Some(ev);
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => ev.event = value.to_owned(),
                "id" => ev.id = Some(value.to_owned()),
                "data" => {
                    if !ev.data.is_empty() {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(value);
                }
                _ => {}
            }
        }
    }

    /// Reads events until `f` accepts one (returned); panics when the stream ends or 60 s
    /// pass (keep-alive comments do not count as progress).
    pub fn until(&mut self, what: &str, f: impl Fn(&Sse) -> bool) -> (Sse, Vec<Sse>) {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(e) = self.next() {
            if f(&e) {
                return (e, seen);
            }
            seen.push(e);
            if Instant::now() > deadline {
                break;
            }
        }
        panic!(
            "the stream ended before {what}; saw {:?}",
            seen.iter().map(|e| (&e.event, &e.id)).collect::<Vec<_>>()
        );
    }
}

/// A spec in `dir` whose one tool call sleeps `secs` seconds.
pub fn slow_tool_spec(dir: &Path, secs: f64) -> PathBuf {
    tool_spec(dir, &format!("sleep {secs}; echo waited"))
}

/// A spec in `dir` whose agent calls one idempotent tool running `sh -c SCRIPT` in `dir`,
/// then answers.
pub fn tool_spec(dir: &Path, script: &str) -> PathBuf {
    write(
        dir,
        "slow.toml",
        &[
            "goal = \"wait a while\"\n",
            &scripted_as(
                "script",
                r#"{ text = "waiting", tool_calls = [{ name = "wait", arguments = {} }] }, { text = "done waiting" }"#,
            ),
            &tool(
                "wait",
                &format!(r#"["sh", "-c", "{script}"]"#),
                &format!("description = \"Waits\"\n{SAFE}"),
            ),
            &agent("waiter", "script", &["wait"], "system_prompt = \"You wait.\""),
        ]
        .concat(),
    )
}
