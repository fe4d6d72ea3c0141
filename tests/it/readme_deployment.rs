//! The guide's minimal PostgreSQL deployment runs as shown: every `$ ` line of the first
//! ```` ```console ```` block of "Many workers on PostgreSQL" (`src/guide/postgres.md`) runs, in order, with `sh -c`,
//! against a real server — `RUNTAPE_DB` its URL, `SPECS` a directory holding `triage.toml`,
//! `RUNTAPE_SERVE_TOKEN` a token, the binary under test first on `PATH`. A line ending in `&`
//! runs in the background and is waited for as a person would (a worker until it says it
//! started, `serve` until it says where it listens); every other line must exit 0. Then the
//! queued run has completed through the worker and verifies, the probe said `ok`, the metrics
//! counted the claim, `ls --workers` listed the worker, and the page's API answers with the
//! token. `readme.rs` runs the `sh` blocks, which need no server.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::support::pg::{PgServer, Reaper};
use crate::support::spec;
use crate::support::workers::wait_long;

/// A spec that runs anywhere: a scripted model, no tools.
fn triage() -> String {
    [
        "goal = \"triage\"\n",
        &spec::scripted_as("s", r#"{ text = "routed to billing" }"#),
        &spec::agent("triage", "s", &[], ""),
    ]
    .concat()
}

const TOKEN: &str = "deployment-test-token";

/// The `$ ` lines of the deployment block, without their comments.
fn deployment_lines() -> Vec<String> {
    let readme = crate::readme::manual_text();
    let section = readme
        .split("# Many workers on PostgreSQL")
        .nth(1)
        .expect("the guide has a PostgreSQL chapter");
    let block = section
        .split("```console")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a console block");
    block
        .lines()
        .filter_map(|l| l.trim().strip_prefix("$ "))
        .map(|l| match l.find("  #") {
            Some(i) => l[..i].trim().to_owned(),
            None => l.trim().to_owned(),
        })
        .collect()
}

struct Shell<'a> {
    dir: &'a Path,
    env: Vec<(&'static str, String)>,
}

impl Shell<'_> {
    fn command(&self, line: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(line).current_dir(self.dir);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, line: &str) -> Output {
        let out = self.command(line).output().expect("sh runs");
        assert!(
            out.status.success(),
            "`{line}` exits 0: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Starts `line` in the background, its output to `name`.out / `name`.err.
    fn spawn(&self, line: &str, name: &str) -> Child {
        let out = std::fs::File::create(self.dir.join(format!("{name}.out"))).expect("file");
        let err = std::fs::File::create(self.dir.join(format!("{name}.err"))).expect("file");
        self.command(&format!("exec {line}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("starts")
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }
}

#[test]
#[ignore = "needs PostgreSQL server binaries and curl: tests/extras/install.sh postgres curl"]
fn the_readme_deployment_runs_as_shown() {
    let lines = deployment_lines();
    assert!(lines.len() >= 5, "{lines:?}");
    let server = PgServer::start();
    let url = server.fresh_db();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("resolves");
    let specs = dir.join("specs");
    std::fs::create_dir(&specs).expect("mkdir");
    std::fs::write(specs.join("triage.toml"), triage()).expect("writes the spec");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_runtape"))
        .parent()
        .expect("a directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let sh = Shell {
        dir: &dir,
        env: vec![
            ("RUNTAPE_DB", url.clone()),
            ("SPECS", specs.display().to_string()),
            ("RUNTAPE_SERVE_TOKEN", TOKEN.to_owned()),
            ("RUNTAPE_WORKER_POLL_MS", "50".to_owned()),
            ("PATH", path),
        ],
    };

    let mut background = Reaper(Vec::new());
    let mut run_id = None;
    let mut said = Vec::new();
    for line in &lines {
        let program = line.split_whitespace().next().unwrap_or_default();
        if let Some(line) = line.strip_suffix('&') {
            let line = line.trim();
            let (name, ready) = if line.starts_with("runtape worker") {
                ("worker", "\"event\":\"worker.started\"")
            } else if line.starts_with("runtape serve") {
                ("serve", "listening on http://")
            } else {
                panic!("no way to check the background line `{line}`: add one here");
            };
            background.0.push(sh.spawn(line, name));
            let child = background.0.last_mut().expect("just pushed");
            wait_long(&format!("`{line}` is up"), || {
                let exited = child.try_wait().expect("polls");
                assert!(
                    exited.is_none(),
                    "`{line}` exited ({exited:?}): {}",
                    sh.read(&format!("{name}.err"))
                );
                sh.read(&format!("{name}.out")).contains(ready)
            });
            continue;
        }
        assert!(
            program == "runtape" || program == "curl",
            "no way to check `{line}`: add one here"
        );
        if line.contains("/healthz") {
            // A probe is retried until the worker's heartbeat has landed, as an orchestrator's is.
            wait_long("the probe answers", || {
                sh.command(line)
                    .output()
                    .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
            });
        }
        let out = sh.run(line);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if line.contains("--detach") {
            run_id = Some(stdout.trim().to_owned());
        }
        said.push((line.clone(), stdout));
    }

    let run = run_id.expect("a line queued a run");
    wait_long("the worker has completed the run", || {
        let o = sh.run("runtape ls --json");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.contains(&run) && l.contains("\"status\":\"completed\""))
    });
    sh.run(&format!("runtape verify {run}"));
    let output_of = |part: &str| -> &str {
        said.iter()
            .find(|(l, _)| l.contains(part))
            .map(|(_, o)| o.as_str())
            .unwrap_or_else(|| panic!("a line with {part}"))
    };
    let health: serde_json::Value =
        serde_json::from_str(output_of("/healthz")).expect("/healthz answers JSON");
    assert_eq!(health["status"], "ok", "{health}");
    assert!(
        output_of("/metrics").contains("# TYPE runtape_worker_runs_claimed_total counter"),
        "{}",
        output_of("/metrics")
    );
    assert!(
        output_of("ls --workers").contains("live"),
        "{}",
        output_of("ls --workers")
    );
    let metrics = sh.run("curl -s http://127.0.0.1:9464/metrics");
    assert!(
        String::from_utf8_lossy(&metrics.stdout).contains("runtape_worker_runs_claimed_total 1"),
        "the worker claimed the queued run"
    );
    let api = sh.run(&format!(
        "curl -s -H 'Authorization: Bearer {TOKEN}' http://127.0.0.1:7777/api/runs/{run}"
    ));
    assert!(
        String::from_utf8_lossy(&api.stdout).contains(&run),
        "the page's API shows the run: {}",
        String::from_utf8_lossy(&api.stdout)
    );

    for child in &mut background.0 {
        let _ = crate::support::cli::try_signal(child.id(), "TERM");
        assert!(child.wait().expect("exits").success(), "stops with 0");
    }
}
