//! Every command README.md and the manual (`src/guide/*.md`, in [`GUIDE`]'s order, after the
//! README) show is exercised. The `runtape …` lines of its `sh` blocks run, in
//! order, with the real binary in a scratch directory holding a copy of `examples/` (so
//! `./runtape.db`, the default database, is created there); each must exit with status 0, or
//! with the status its comment names as `(exit N)`. `RUN` and `FORK` stand for the ids the
//! latest `run`/`replay` and `fork` printed first (`RUN@3` a step of it, `RUN.3.0` a child run
//! it started); a line ending in `&` runs in the background
//! and must finish with status 0 (or its `(exit N)`) by the end. `runtape bench` lines run with `--quick` added
//! (the full sizes take minutes; the README's figures come from the full command). A
//! `runtape serve` line runs on a free port (`--addr 127.0.0.1:0` added), must say where it
//! listens, and must stop with status 0 on SIGTERM. The `cargo …`
//! lines are what `.ci/run` runs, so each must appear there. Any other command fails the test:
//! add a way to check it here first.

mod pointers;
mod walkthrough;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The manual's chapters, in the order their commands run (the order they stood in the README
/// before they moved): every `src/guide/*.md` must be listed here.
const GUIDE: [&str; 17] = [
    "concepts",
    "specs",
    "models",
    "tools",
    "delegation",
    "memory",
    "time",
    "serve",
    "eval",
    "cli",
    "embedding",
    "guarantees",
    "postgres",
    "performance",
    "developing",
    "guarded",
    "changelog",
];

/// README.md and then each chapter of the guide: (path from the crate root, text). Panics if a
/// chapter exists that [`GUIDE`] does not list, so no chapter's commands go unexecuted.
pub(crate) fn manual() -> Vec<(String, String)> {
    let mut on_disk: Vec<String> = std::fs::read_dir(manifest_dir().join("src/guide"))
        .expect("src/guide")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            name.strip_suffix(".md").map(str::to_owned)
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = GUIDE.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "GUIDE lists every chapter in src/guide");
    std::iter::once("README.md".to_owned())
        .chain(GUIDE.iter().map(|c| format!("src/guide/{c}.md")))
        .map(|path| {
            let text = std::fs::read_to_string(manifest_dir().join(&path)).expect(&path);
            (path, text)
        })
        .collect()
}

/// The README and the guide as one text, for claims that may stand in either.
pub(crate) fn manual_text() -> String {
    manual()
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The shown command lines of the README and every chapter, in order.
fn shown_in_manual() -> Vec<Shown> {
    let mut shown = Vec::new();
    for (path, text) in manual() {
        let first_block = shown.last().map_or(0, |s: &Shown| s.block + 1);
        shown.extend(shown_commands(&path, &text, first_block));
    }
    shown
}

/// A command line from a `sh` block: the command and its trailing comment.
#[derive(Debug)]
struct Shown {
    /// The file it stands in: `README.md` or `src/guide/CHAPTER.md`.
    file: String,
    line: usize,
    /// Which ```` ```sh ```` block (0, 1, …) the line stands in.
    block: usize,
    command: String,
    comment: String,
}

/// The command lines of every ```` ```sh ```` block, comment-only and blank lines left out.
fn shown_commands(file: &str, readme: &str, first_block: usize) -> Vec<Shown> {
    let mut shown = Vec::new();
    let mut in_sh = None::<bool>;
    let mut block = first_block;
    for (i, line) in readme.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_sh = match in_sh {
                None => Some(lang.trim() == "sh"),
                Some(sh) => {
                    block += usize::from(sh);
                    None
                }
            };
            continue;
        }
        if in_sh != Some(true) || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (command, comment) = split_comment(trimmed);
        shown.push(Shown {
            file: file.to_owned(),
            line: i + 1,
            block,
            command: command.trim().to_owned(),
            comment: comment.trim().to_owned(),
        });
    }
    shown
}

/// Splits `cmd args  # comment` at the first `#` that starts a word outside quotes.
fn split_comment(line: &str) -> (&str, &str) {
    let mut quote = None;
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev_space => return (&line[..i], &line[i + 1..]),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    (line, "")
}

/// Shell words: whitespace-separated, with single or double quotes grouping. Anything that
/// needs a real shell (pipes, variables, escapes, redirections) is refused, so the README stays
/// copy-pasteable and this test stays honest about what it ran.
fn words(command: &str) -> Vec<String> {
    assert!(
        !command.contains(['|', '$', '\\', '>', '<', ';', '`']),
        "README command needs a shell feature this test does not emulate: {command}"
    );
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in command.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(
        quote.is_none(),
        "unbalanced quote in README command: {command}"
    );
    if started {
        out.push(word);
    }
    out
}

/// The exit status a comment announces as `(exit N)`, else 0.
fn expected_status(comment: &str) -> i32 {
    comment
        .split("(exit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(|n| n.trim().parse().expect("`(exit N)` holds a number"))
        .unwrap_or(0)
}

/// The run id a `run`, `replay` or `fork` printed on its first line.
fn printed_id(first_line: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(first_line) {
        return v["id"].as_str().map(str::to_owned);
    }
    let id = first_line.trim().rsplit(' ').next()?;
    (first_line.starts_with("started run ")
        || first_line.starts_with("replaying run ")
        || first_line.starts_with("forked "))
    .then(|| id.to_owned())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creates the directory");
    for entry in std::fs::read_dir(from).expect("reads examples/") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copies an example");
        }
    }
}

/// examples/mcp.toml starts the filesystem server tests/extras/install.sh mcp put in
/// target/mcp-servers (.ci/run installs it before the tests): the scratch directory gets a
/// link to it at the same relative place.
fn link_mcp_servers(scratch: &Path) {
    let servers = std::env::var_os("RUNTAPE_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target/mcp-servers"));
    assert!(
        servers.join("node_modules").is_dir(),
        "{} is missing – run tests/extras/install.sh mcp (examples/mcp.toml needs it)",
        servers.display()
    );
    std::fs::create_dir_all(scratch.join("target")).expect("creates target/");
    std::os::unix::fs::symlink(&servers, scratch.join("target/mcp-servers"))
        .expect("links the MCP servers");
}

/// Whether a README block needs the Node.js MCP reference servers (it runs
/// `examples/mcp.toml`, which starts one).
fn needs_mcp_servers(shown: &[Shown], block: usize) -> bool {
    shown
        .iter()
        .any(|s| s.block == block && s.command.contains("examples/mcp.toml"))
}

#[test]
fn every_runtape_command_in_the_readme_runs_as_documented() {
    let shown = shown_in_manual();
    let tour: Vec<&Shown> = shown
        .iter()
        .filter(|s| !needs_mcp_servers(&shown, s.block))
        .collect();
    let dir = scratch_dir();
    let ran = run_commands(&tour, dir.path());
    assert!(ran >= 20, "the README's tour shrank to {ran} commands");
    assert!(
        dir.path().join("runtape.db").exists(),
        "the commands used ./runtape.db by default"
    );
}

/// The README's blocks that run `examples/mcp.toml`, against the reference servers
/// `tests/extras/install.sh mcp` installs.
#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn the_readme_mcp_commands_run_as_documented() {
    let shown = shown_in_manual();
    let mcp: Vec<&Shown> = shown
        .iter()
        .filter(|s| needs_mcp_servers(&shown, s.block))
        .collect();
    let dir = scratch_dir();
    link_mcp_servers(dir.path());
    let ran = run_commands(&mcp, dir.path());
    assert!(
        ran >= 4,
        "the README's MCP example shrank to {ran} commands"
    );
}

/// A scratch directory holding copies of `examples/` and `statechart.md`, where the README's
/// commands run (so `./runtape.db`, the default database, is created there).
///
/// One change to the copies: `slow.toml`'s model thinks for 4 s instead of the 20 s a person
/// needs to type `runtape pause RUN`, since `pause` waits for that turn to end; the tests issue
/// the pause as soon as the run has printed its id.
fn scratch_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(
        &manifest_dir().join("examples"),
        &dir.path().join("examples"),
    );
    let slow = dir.path().join("examples/slow.toml");
    let spec = std::fs::read_to_string(&slow).expect("examples/slow.toml");
    assert!(
        spec.contains("latency_ms = 20000"),
        "examples/slow.toml no longer thinks for 20 s: change scratch_dir to match"
    );
    std::fs::write(
        &slow,
        spec.replace("latency_ms = 20000", "latency_ms = 4000"),
    )
    .expect("writes slow.toml");
    std::fs::copy(
        manifest_dir().join("statechart.md"),
        dir.path().join("statechart.md"),
    )
    .expect("copies statechart.md");
    dir
}

/// Runs the `runtape …` lines of `shown` in order in `dir`, as the module doc says; returns
/// how many ran.
fn run_commands(shown: &[&Shown], dir: &Path) -> usize {
    let mut run: Option<String> = None;
    let mut fork: Option<String> = None;
    let mut background: Vec<(String, Child, i32)> = Vec::new();
    let mut ran = 0;
    for s in shown.iter().filter(|s| s.command.starts_with("runtape ")) {
        let what = format!("{}:{}: {}", s.file, s.line, s.command);
        let (command, in_background) = match s.command.strip_suffix('&') {
            Some(c) => (c.trim(), true),
            None => (s.command.as_str(), false),
        };
        let mut args: Vec<String> = words(command)
            .into_iter()
            .skip(1)
            .map(|w| {
                let fill = |name: &str, id: &Option<String>| {
                    let rest = w.strip_prefix(name)?;
                    // `RUN@3` is a step of it, `RUN.3.0` a child run it started.
                    (rest.is_empty() || rest.starts_with('@') || rest.starts_with('.')).then(|| {
                        let id = id.as_ref().unwrap_or_else(|| {
                            panic!("{what}: {name} used before any was printed")
                        });
                        format!("{id}{rest}")
                    })
                };
                fill("RUN", &run)
                    .or_else(|| fill("FORK", &fork))
                    .unwrap_or(w.clone())
            })
            .collect();
        let sub = args.first().cloned().unwrap_or_default();
        if sub == "bench" && !args.iter().any(|a| a == "--quick") {
            args.push("--quick".into());
        }
        if sub == "serve" {
            args.extend(["--addr".into(), "127.0.0.1:0".into()]);
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runtape"));
        cmd.args(&args)
            .current_dir(dir)
            .env_remove("RUNTAPE_DB")
            .env_remove("RUNTAPE_RECEIPT_KEY");
        ran += 1;

        if sub == "serve" {
            let (child, first) = spawn_first_line(&mut cmd, &what);
            assert!(
                first.starts_with("listening on http://127.0.0.1:"),
                "{what}: {first}"
            );
            crate::support::cli::try_signal(child.id(), "TERM").expect("sends SIGTERM");
            let out = child.wait_with_output().expect("waits");
            assert_eq!(
                out.status.code(),
                Some(expected_status(&s.comment)),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        }

        if in_background {
            let (child, first) = spawn_first_line(&mut cmd, &what);
            let id = printed_id(&first).unwrap_or_else(|| panic!("{what}: no run id in {first}"));
            run = Some(id);
            background.push((what, child, expected_status(&s.comment)));
            continue;
        }

        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(expected_status(&s.comment)),
            "{what}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        if out.status.success() {
            assert!(
                !stderr.contains("error:"),
                "{what}: succeeded but reported an error:\n{stderr}"
            );
        }
        let first = stdout.lines().next().unwrap_or_default();
        match sub.as_str() {
            "run" | "replay" => {
                run = Some(printed_id(first).unwrap_or_else(|| panic!("{what}: no id: {first}")))
            }
            "fork" => {
                fork = Some(printed_id(first).unwrap_or_else(|| panic!("{what}: no id: {first}")))
            }
            _ => {}
        }
    }
    for (what, child, expected) in background {
        let out = child.wait_with_output().expect("waits");
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{what}: the background run ended with {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ran
}

#[test]
fn every_cargo_command_in_the_readme_is_run_by_ci() {
    let ci = std::fs::read_to_string(manifest_dir().join(".ci/run")).expect(".ci/run");
    let ci_lines: Vec<String> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let mut cargo = 0;
    for s in shown_in_manual() {
        let first = s.command.split_whitespace().next().unwrap_or_default();
        match first {
            "runtape" => {}
            "cargo" | "tests/extras/install.sh" => {
                cargo += 1;
                let want = words(&s.command).join(" ");
                assert!(
                    ci_lines.iter().any(|l| l.contains(&want)),
                    "{}:{}: `{want}` is shown but .ci/run does not run it",
                    s.file,
                    s.line
                );
            }
            other => panic!(
                "{}:{}: `{other}` commands are not checked by any test: {}",
                s.file, s.line, s.command
            ),
        }
    }
    assert!(
        cargo >= 3,
        "the README shows the demo, test and example commands"
    );
}

#[test]
fn the_readme_first_screen_shows_the_demo_and_the_test_commands() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README.md");
    let first_screen: String = readme.lines().take(25).collect::<Vec<_>>().join("\n");
    assert!(first_screen.contains("cargo run -- demo"));
    assert!(first_screen.contains("cargo test"));
}

#[test]
fn every_subcommand_is_in_the_readme_and_has_help() {
    let readme = manual_text();
    let help = Command::new(env!("CARGO_BIN_EXE_runtape"))
        .arg("--help")
        .output()
        .expect("runs --help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for code in ["0  ", "1  ", "2  ", "3  ", "4  ", "130  "] {
        assert!(
            help.contains(&format!("\n  {code}")),
            "--help documents exit status {code}"
        );
    }
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("a command list")
        .split("Options:")
        .next()
        .expect("command list ends")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 17, "{commands:?}");
    for c in commands {
        assert!(
            readme.contains(&format!("`runtape {c}")),
            "neither the README nor the guide's command table has `runtape {c}`"
        );
        let sub = Command::new(env!("CARGO_BIN_EXE_runtape"))
            .args([c, "--help"])
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&sub.stdout);
        assert!(sub.status.success(), "{c} --help");
        assert!(text.contains("Usage: runtape "), "{c} --help: {text}");
    }
}

/// Starts `cmd` with its output piped and reads the first line it prints.
fn spawn_first_line(cmd: &mut Command, what: &str) -> (std::process::Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut first)
        .expect("reads the first line");
    (child, first)
}

/// Runs the example `name` (which the README names, as `examples/NAME.rs`) on a new database
/// file, as the README says to, and checks it exits 0: what it printed, the database and the
/// folder holding it. `cargo test` builds examples next to the test binaries.
fn run_example(name: &str) -> (String, PathBuf, tempfile::TempDir) {
    let readme = manual_text();
    assert!(readme.contains(&format!("examples/{name}.rs")));
    let deps = std::env::current_exe().expect("test binary path");
    let exe: PathBuf = deps
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        exe.exists(),
        "{} was not built by cargo test",
        exe.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join(format!("{name}.db"));
    let out = Command::new(&exe)
        .arg(&db)
        .output()
        .expect("runs the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, db, dir)
}

/// The example the README points embedders at runs offline, completes its run on the file
/// it is given, and verifies it. `cargo test` builds examples next to the test binaries.
#[test]
fn the_embedding_example_runs_a_custom_tool_durably() {
    let (stdout, db, _dir) = run_example("embed");
    assert!(stdout.contains("calls reserve"), "{stdout}");
    assert!(
        stdout.contains(
            r#"answer: Reservations: {"item":"tea","left":3,"reserved":2}; only 4 cups left"#
        ),
        "the tool's result and its error both reached the model: {stdout}"
    );
    assert!(
        stdout.contains("verified: 8 transitions replay, 4 receipts check"),
        "{stdout}"
    );
    let conn = rusqlite::Connection::open(&db).expect("the example kept its database");
    let status: String = conn
        .query_row("SELECT status FROM runs", [], |r| r.get(0))
        .expect("one run");
    assert_eq!(status, "completed");
}

/// The example of the operations the command line is built on runs offline: it starts a run on
/// the file it is given, pauses it from another task, resumes it, forks it with an edit, shows
/// a step and verifies both runs, all through `runtape::ops`.
#[test]
fn the_ops_example_pauses_resumes_forks_and_verifies_through_ops() {
    let (stdout, db, _dir) = run_example("ops");
    let run = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("started run "))
        .and_then(|l| l.split(' ').next())
        .expect("the run id first")
        .to_owned();
    for want in [
        format!("paused {run} at step "),
        "the run rests paused".to_owned(),
        "resumed: answer to: Which colour?".to_owned(),
        format!("forked {run}@1 as run "),
        ": answer to: Which shape?".to_owned(),
        "preparing.edit, then preparing".to_owned(),
        format!("verified {run}: "),
    ] {
        assert!(stdout.contains(&want), "no `{want}` in: {stdout}");
    }
    assert_eq!(stdout.matches("transitions replay").count(), 2, "{stdout}");
    let conn = rusqlite::Connection::open(&db).expect("the example kept its database");
    let statuses: Vec<String> = conn
        .prepare("SELECT status FROM runs")
        .expect("prepares")
        .query_map([], |r| r.get(0))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads");
    assert_eq!(statuses, ["completed", "completed"]);
}
