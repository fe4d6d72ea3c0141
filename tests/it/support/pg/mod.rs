//! A real PostgreSQL server for tests: Debian's `postgresql` package (`initdb`, `pg_ctl` under
//! /usr/lib/postgresql/*/bin), started into a temporary data directory on a free loopback
//! port and stopped when the [`PgServer`] is dropped. The server refuses to run as root, so
//! under root it runs as `nobody`. Anything that goes wrong fails the test with one line saying
//! what and what to do (`apt-get install -y postgresql`, which `.ci/run` does).
//!
//! [`PgServer::start_tls`] starts one with TLS on, with the certificate, key, client CA and
//! `pg_hba.conf` lines a test gives; [`PgServer::sql`] then reaches it over its Unix socket, so
//! the TCP rules can be whatever the test needs.
//!
//! [`PgServer::restart`], [`PgServer::stop`] and [`PgServer::start_again`] take the server
//! down and up under running clients; [`proxy::Proxy`] cuts the network between one client
//! and the server.
#![allow(dead_code, unreachable_pub)]

pub mod proxy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A running server.
pub struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    run_as: Option<&'static str>,
    /// Where psql connects: 127.0.0.1, or the socket directory for a TLS server.
    psql_host: String,
    /// The server's options (`pg_ctl -o`), to start it again with.
    options: String,
}

/// TLS for a test server ([`PgServer::start_tls`]).
pub struct ServerTls {
    /// The server's certificate (PEM; the chain, leaf first).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// The CA client certificates are checked against (`ssl_ca_file`), if any.
    pub client_ca_pem: Option<String>,
    /// The `pg_hba.conf` lines after `local all all trust` (the TCP rules).
    pub hba: Vec<String>,
}

static DATABASES: AtomicU32 = AtomicU32::new(0);

fn fail(what: &str) -> ! {
    panic!("PostgreSQL test server: {what}");
}

/// The newest `/usr/lib/postgresql/VERSION/bin` that has `initdb`.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").exists().then_some((v, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => fail(
            "no server binaries under /usr/lib/postgresql/*/bin; install them with `apt-get install -y postgresql` (.ci/run does)",
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(&format!("no free loopback port ({e})")))
}

impl PgServer {
    /// Starts a fresh server (`initdb`, then `pg_ctl start`), waiting until it accepts
    /// connections. `fsync` is off: the tests check protocol behaviour, not power loss.
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// Starts a fresh server with TLS on (`ssl=on`), as `tls` says.
    pub fn start_tls(tls: &ServerTls) -> PgServer {
        PgServer::start_with(Some(tls))
    }

    fn start_with(tls: Option<&ServerTls>) -> PgServer {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("rt-pg")
            .tempdir()
            .unwrap_or_else(|e| fail(&format!("cannot make a temporary directory ({e})")));
        let run_as = is_root().then_some("nobody");
        if run_as.is_some() {
            let status = Command::new("chown")
                .args(["-R", "nobody", &dir.path().display().to_string()])
                .status();
            if !status.is_ok_and(|s| s.success()) {
                fail("cannot hand the data directory to user nobody (chown)");
            }
        }
        let psql_host = match tls {
            Some(_) => dir.path().display().to_string(),
            None => "127.0.0.1".to_owned(),
        };
        let mut server = PgServer {
            bin,
            dir,
            port: free_port(),
            run_as,
            psql_host,
            options: String::new(),
        };
        let data = server.data();
        server.tool_ok(
            "initdb",
            &[
                "-D",
                &data,
                "-A",
                "trust",
                "-U",
                "runtape",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            "initdb failed",
        );
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB",
            server.port,
            server.dir.path().display()
        );
        if let Some(tls) = tls {
            options.push_str(&server.set_up_tls(tls));
        }
        server.options = options;
        server.start_again();
        server
    }

    /// Starts the server (again, after [`stop`](Self::stop)) with the options it was made
    /// with, waiting until it accepts connections.
    pub fn start_again(&self) {
        let data = self.data();
        let log = format!("{}/server.log", self.dir.path().display());
        let out = self.tool(
            "pg_ctl",
            &["-D", &data, "-o", &self.options, "-l", &log, "-w", "start"],
        );
        if !out.status.success() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            fail(&format!(
                "the server did not start: {} {}",
                String::from_utf8_lossy(&out.stderr).trim(),
                log.lines().last().unwrap_or_default()
            ));
        }
    }

    /// Stops the server (`pg_ctl stop -m fast`: every connection is ended, nothing is lost),
    /// waiting until it is down.
    pub fn stop(&self) {
        let data = self.data();
        let stop = ["-D", &data, "-m", "fast", "-w", "stop"];
        self.tool_ok("pg_ctl", &stop, "the server did not stop");
    }

    /// Restarts the server under its clients (`pg_ctl restart -m fast`: every connection is
    /// ended, then the server comes back on the same port), waiting until it is up again.
    pub fn restart(&self) {
        let data = self.data();
        let log = format!("{}/server.log", self.dir.path().display());
        let restart = [
            "-D",
            &data,
            "-o",
            &self.options,
            "-l",
            &log,
            "-m",
            "fast",
            "-w",
            "restart",
        ];
        self.tool_ok("pg_ctl", &restart, "the server did not restart");
    }

    /// Writes the TLS files and `pg_hba.conf` into the data directory (owned by the server's
    /// user, the key 0600 as the server requires); returns the server options that use them.
    fn set_up_tls(&self, tls: &ServerTls) -> String {
        let data = self.data();
        let write = |name: &str, text: &str| {
            let path = format!("{data}/{name}");
            std::fs::write(&path, text)
                .unwrap_or_else(|e| fail(&format!("cannot write {path} ({e})")));
            path
        };
        let cert = write("server.crt", &tls.cert_pem);
        let key = write("server.key", &tls.key_pem);
        let mut hba = String::from("local all all trust\n");
        for line in &tls.hba {
            hba.push_str(line);
            hba.push('\n');
        }
        write("pg_hba.conf", &hba);
        let mut options = format!(" -c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}");
        if let Some(ca) = &tls.client_ca_pem {
            let ca = write("client-ca.crt", ca);
            options.push_str(&format!(" -c ssl_ca_file={ca}"));
        }
        let status = Command::new("chmod").args(["600", &key]).status();
        if !status.is_ok_and(|s| s.success()) {
            fail("cannot make the server's key 0600 (chmod)");
        }
        if let Some(user) = self.run_as {
            let status = Command::new("chown").args(["-R", user, &data]).status();
            if !status.is_ok_and(|s| s.success()) {
                fail("cannot hand the TLS files to the server's user (chown)");
            }
        }
        options
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    /// Runs the server program `name ARGS…` as [`tool`](Self::tool) does; fails the test with
    /// `failed` and the program's stderr when it does not succeed.
    fn tool_ok(&self, name: &str, args: &[&str], failed: &str) {
        let out = self.tool(name, args);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            fail(&format!("{failed}: {}", stderr.trim()));
        }
    }

    /// Runs a server program from the package's bin directory (as `nobody` under root).
    fn tool(&self, name: &str, args: &[&str]) -> Output {
        let program = self.bin.join(name);
        let mut cmd = match self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        cmd.args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| fail(&format!("cannot run {name} ({e})")))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://runtape@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database; returns its URL.
    pub fn fresh_db(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Runs `sql` in database `db` with psql; returns its unaligned, tuples-only output.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                &self.psql_host,
                "-p",
                &self.port.to_string(),
                "-U",
                "runtape",
                "-d",
                db,
                "-v",
                "ON_ERROR_STOP=1",
                "-Atc",
                sql,
            ])
            .output()
            .unwrap_or_else(|e| fail(&format!("cannot run psql ({e})")));
        assert!(
            out.status.success(),
            "psql `{sql}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The database name in `url`.
    pub fn db_of(url: &str) -> &str {
        url.rsplit('/').next().unwrap_or_default()
    }

    /// Ends every connection of process `pid` to the server (its application name is
    /// `runtape:PID`): what a network partition does to it. Returns how many were ended.
    pub fn terminate_connections_of(&self, pid: u32) -> usize {
        let n = self.sql(
            "postgres",
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'runtape:{pid}'"
            ),
        );
        n.parse().unwrap_or(0)
    }

    /// The data directory (for a test that needs the server's log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self.tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }
}

/// Child processes killed (SIGKILL) when dropped, so a failing test leaves none behind.
pub struct Reaper(pub Vec<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `runtape --db URL worker --spec-dir DIR EXTRA…`, polling every 50 ms, with `env` set; its
/// stdout and stderr go to `dir/LOG`.
pub fn worker(url: &str, dir: &Path, log: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let out = std::fs::File::create(dir.join(log)).expect("log file");
    let err = out.try_clone().expect("log file");
    super::cli::bin()
        .args(["--db", url, "worker", "--spec-dir"])
        .arg(dir)
        .args(extra)
        .env("RUNTAPE_WORKER_POLL_MS", "50")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("starts a worker")
}

/// A spec whose scripted model (`latency_ms` a reply) asks for `effects` calls of the
/// non-idempotent tool `effect`, one a turn, then answers "done"; `effect` runs `before`, then
/// appends its idempotency key to `effects.log`, and its reconcile command answers from that
/// log (`on_in_doubt = "reconcile"`).
pub fn effects_spec(effects: usize, latency_ms: u64, before: &str) -> String {
    let words = ["no", "one", "two", "three", "four", "five"];
    let calls: String = (1..=effects)
        .map(|n| {
            format!("  {{ tool_calls = [{{ name = \"effect\", arguments = {{ n = {n} }} }}] }},\n")
        })
        .collect();
    format!(
        r#"goal = "{count} effects"
[[providers]]
name = "s"
kind = "scripted"
latency_ms = {latency_ms}
replies = [
{calls}  {{ text = "done" }},
]
{effect}{agent}"#,
        count = words[effects],
        effect = crate::support::spec::tool(
            "effect",
            &format!(
                r#"["sh", "-c", "{before}echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log; echo ok"]"#
            ),
            r#"description = "a non-idempotent effect"
reconcile = ["sh", "-c", "if grep -qx \"$RUNTAPE_IDEMPOTENCY_KEY\" effects.log 2>/dev/null; then echo '{\"performed\": true, \"result\": \"ok\"}'; else echo '{\"performed\": false}'; fi"]"#,
        ),
        agent = crate::support::spec::agent("a", "s", &["effect"], "on_in_doubt = \"reconcile\""),
    )
}
