//! Shared by the browser tests (`serve::browser`, `serve::accessibility`,
//! `serve::time_in_the_browser`): Debian's Chromium and the pinned npm modules that drive it
//! (`tests/browser/install.sh`), a scenario script of `tests/browser/` run with node against a
//! real `runtape serve`, and the runs whose views have to do with time (a sleeping run, an
//! approval under a deadline, a compensated saga, a schedule).
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::cli::{scripted, start_json, utf8, wait_for_step, write};
use crate::support::serve::{run_spec, runtape};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The browser and the npm modules a scenario drives it with.
pub struct Chromium {
    /// The browser binary (`$RUNTAPE_CHROMIUM`, else `/usr/bin/chromium`).
    pub binary: PathBuf,
    /// Where `tests/browser/install.sh` installed playwright-core and axe-core
    /// (`$RUNTAPE_BROWSER_TESTS`, else `target/browser-tests`).
    pub modules: PathBuf,
    /// Where scenarios write their screenshots (`target/browser-screenshots`, not committed).
    pub shots: PathBuf,
}

/// The browser and modules, or a failure naming the command that installs what is missing.
pub fn chromium() -> Chromium {
    let binary = std::env::var_os("RUNTAPE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        binary.exists(),
        "{} is missing: install Debian's Chromium (`apt-get install -y chromium`; .ci/run does) or set RUNTAPE_CHROMIUM",
        binary.display()
    );
    let modules = std::env::var_os("RUNTAPE_BROWSER_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("target/browser-tests"));
    for module in ["playwright-core", "axe-core"] {
        assert!(
            modules
                .join("node_modules")
                .join(module)
                .join("package.json")
                .exists(),
            "{module} is missing from {}: run `bash tests/browser/install.sh` (.ci/run does)",
            modules.display()
        );
    }
    let shots = manifest().join("target/browser-screenshots");
    std::fs::create_dir_all(&shots).expect("creates the screenshot folder");
    Chromium {
        binary,
        modules,
        shots,
    }
}

impl Chromium {
    /// Runs `tests/browser/SCRIPT` with node against the server at `url`, the run ids `runs`
    /// in `$RUNS`; what it printed and how it exited.
    pub fn drive(&self, script: &str, url: &str, runs: &Value) -> Output {
        Command::new("node")
            .arg(manifest().join("tests/browser").join(script))
            .env("BASE_URL", url)
            .env("RUNS", runs.to_string())
            .env("SHOTS", &self.shots)
            .env("CHROMIUM", &self.binary)
            .env("RUNTAPE_BROWSER_MODULES", &self.modules)
            .output()
            .expect("runs node (install Node.js)")
    }

    /// [`drive`](Self::drive), failing the test with the script's stderr unless it succeeded;
    /// the last line it printed, as JSON.
    pub fn drive_ok(&self, script: &str, url: &str, runs: &Value) -> Value {
        let out = self.drive(script, url, runs);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{}\nscreenshots in {}\n{stdout}",
            stderr.trim(),
            self.shots.display()
        );
        serde_json::from_str(stdout.lines().last().unwrap_or(""))
            .unwrap_or_else(|_| panic!("{script} printed no JSON line: {stdout}"))
    }
}

/// How long the sleeping run sleeps, s.
pub const SLEEP_S: u64 = 3600;

/// How long the approval's deadline gives a person, ms.
pub const DEADLINE_MS: u64 = 86_400_000;

/// The schedule [`timed_runs`] adds: weekdays at 09:00 in Paris.
pub const SCHEDULE: (&str, &str, &str) = ("mornings", "0 9 * * 1-5", "Europe/Paris");

/// Makes in `db` (a scratch database whose directory `dir` holds `examples/`) a completed run
/// (`done`) and a fork of it (`fork`), a run asleep for [`SLEEP_S`] whose process was killed
/// (`sleeping`), a run waiting for an approval under a [`DEADLINE_MS`] deadline that rejects
/// (`waiting`), a compensated saga (`saga`: steps 9 to 11 undo), and the schedule
/// [`SCHEDULE`]. Their ids, as the scenarios read them from `$RUNS`.
pub fn timed_runs(dir: &Path, db: &Path) -> Value {
    let done = run_spec(dir, db, "examples/quickstart.toml");
    let forked = runtape(
        dir,
        db,
        &[
            "fork",
            &format!("{done}@1"),
            "--edit",
            "user=How many words are in 'a b c'?",
        ],
    );
    let fork = crate::support::cli::first_id(&String::from_utf8_lossy(&forked.stdout));

    let nap = format!(
        "goal = \"Check back in an hour.\"\n[timers]\nmax_sleep_ms = 7200000\n{}\n[[agents]]\nid = \"napper\"\nprovider = \"script\"\n",
        scripted(&format!(
            "  {{ tool_calls = [ {{ name = \"sleep_for\", arguments = {{ seconds = {SLEEP_S} }} }} ] }},\n  {{ text = \"awake\" }},\n"
        ))
    );
    let nap = write(dir, "nap-hour.toml", &nap);
    let (mut child, mut lines, sleeping) = start_json(db, &nap);
    wait_for_step(&mut lines, 3);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let deploy = format!(
        "goal = \"Deploy 1.4.2 to production.\"\n[timers.deadlines]\ndeploy = {{ after_ms = {DEADLINE_MS}, then = \"reject\" }}\n{}\n\
         [[tools]]\nname = \"deploy\"\ndescription = \"Deploy a version\"\ncommand = [\"sh\", \"-c\", \"printf deployed\"]\nrequires_approval = true\n\n\
         [[agents]]\nid = \"operator\"\nprovider = \"script\"\ntools = [\"deploy\"]\n",
        scripted(
            "  { text = \"I'll deploy it.\", tool_calls = [ { name = \"deploy\", arguments = { version = \"1.4.2\" } } ] },\n  { text = \"done\" },\n"
        )
    );
    let deploy = write(dir, "deploy-deadline.toml", &deploy);
    let waiting = run_spec(dir, db, utf8(&deploy));

    let saga_spec = crate::support::saga::saga_spec(
        dir,
        &crate::support::saga::Saga {
            failing: None,
            idempotent: false,
            wait: false,
        },
    );
    let saga = run_spec(dir, db, utf8(&saga_spec));

    let (name, cron, tz) = SCHEDULE;
    let added = runtape(
        dir,
        db,
        &[
            "schedule",
            "add",
            name,
            "examples/quickstart.toml",
            "--cron",
            cron,
            "--tz",
            tz,
        ],
    );
    assert!(
        added.status.success(),
        "schedule add: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    json!({
        "done": done, "fork": fork, "sleeping": sleeping, "waiting": waiting, "saga": saga,
        "schedule": name,
    })
}
