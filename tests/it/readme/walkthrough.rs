//! The README's five-minute tour as a person types it: the `runtape …` lines of its `sh`
//! blocks, in order, each as written (`RUN` and `FORK` replaced by the ids printed before, a
//! trailing `&` run in the background), in a scratch directory holding a copy of `examples/`,
//! and what each prints checked against what the README says it shows. The one change: `serve`
//! gets `--addr 127.0.0.1:0`, as port 7777 may be taken while tests run. A line this test does
//! not know fails it: say here what the new line shows.

use std::path::Path;
use std::process::{Child, Command};

use super::{Shown, expected_status, printed_id, scratch_dir, shown_commands, words};
use crate::support::cli::line_starting;
use crate::support::serve::request;

/// The `sh` lines of the README's tour: the section "A five-minute tour", up to the next one.
fn tour() -> Vec<Shown> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let start = readme
        .find("\n## A five-minute tour")
        .expect("the README has a tour");
    let end = readme[start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 1 + e);
    let above = readme[..start].lines().count();
    shown_commands("README.md", &readme[start..end], 0)
        .into_iter()
        .filter(|s| s.command.starts_with("runtape "))
        .map(|s| Shown {
            line: s.line + above,
            ..s
        })
        .collect()
}

/// The ids the tour has printed so far.
#[derive(Default)]
struct Ids {
    run: Option<String>,
    fork: Option<String>,
}

impl Ids {
    fn run(&self) -> &str {
        self.run.as_deref().expect("RUN was printed")
    }

    fn fork(&self) -> &str {
        self.fork.as_deref().expect("FORK was printed")
    }

    /// `word` with `RUN`/`FORK` (and `RUN@N`) replaced by the ids a person would paste.
    fn fill(&self, word: &str) -> String {
        for (name, id) in [("RUN", &self.run), ("FORK", &self.fork)] {
            if let Some(rest) = word.strip_prefix(name)
                && (rest.is_empty() || rest.starts_with('@'))
            {
                let id = id
                    .as_deref()
                    .unwrap_or_else(|| panic!("{name} before its id"));
                return format!("{id}{rest}");
            }
        }
        word.to_owned()
    }
}

fn must(what: &str, out: &str, wants: &[&str]) {
    for want in wants {
        assert!(out.contains(want), "{what}: no `{want}` in:\n{out}");
    }
}

#[test]
fn the_readme_tour_shows_what_the_readme_says_as_a_person_types_it() {
    let dir = scratch_dir();
    let mut ids = Ids::default();
    let mut background: Option<(String, Child, i32)> = None;
    let tour = tour();
    assert!(tour.len() >= 25, "the tour shrank to {} lines", tour.len());
    for s in &tour {
        let what = format!("README.md:{}: {}", s.line, s.command);
        let (command, in_background) = match s.command.strip_suffix('&') {
            Some(c) => (c.trim(), true),
            None => (s.command.as_str(), false),
        };
        let typed = command.strip_prefix("runtape ").expect("a runtape line");
        let mut args: Vec<String> = words(typed).iter().map(|w| ids.fill(w)).collect();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runtape"));
        cmd.current_dir(dir.path())
            .env_remove("RUNTAPE_DB")
            .env_remove("RUNTAPE_RECEIPT_KEY")
            .env_remove("RUNTAPE_SERVE_TOKEN");
        if typed == "serve" {
            args.extend(["--addr".into(), "127.0.0.1:0".into()]);
            serve_shows_the_runs(cmd.args(&args), &what);
            continue;
        }
        cmd.args(&args);
        if in_background {
            let (child, first) = super::spawn_first_line(&mut cmd, &what);
            ids.run = Some(printed_id(&first).unwrap_or_else(|| panic!("{what}: {first}")));
            background = Some((what, child, expected_status(&s.comment)));
            continue;
        }
        let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let all = format!("{stdout}{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            o.status.code(),
            Some(expected_status(&s.comment)),
            "{what}:\n{all}"
        );
        let first = stdout.lines().next().unwrap_or_default();
        if typed.starts_with("run ") || typed.starts_with("replay ") {
            ids.run = Some(printed_id(first).unwrap_or_else(|| panic!("{what}: {first}")));
        }
        if typed.starts_with("fork ") {
            ids.fork = Some(printed_id(first).unwrap_or_else(|| panic!("{what}: {first}")));
        }
        shows(typed, &stdout, &all, &ids, dir.path(), &what);
    }
    let (what, child, status) = background.expect("the tour runs one command in the background");
    let o = child.wait_with_output().expect("waits");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(status, 4, "{what}: the README says it pauses (exit 4)");
    assert_eq!(o.status.code(), Some(4), "{what}: paused:\n{out}");
    must(&what, &out, &["paused at step "]);
}

/// What the README says `typed` shows, checked on its output (`all`: stdout and stderr).
fn shows(typed: &str, stdout: &str, all: &str, ids: &Ids, dir: &Path, what: &str) {
    let run = ids.run();
    match typed {
        "run examples/quickstart.toml" => must(
            what,
            all,
            &[
                "completed: 8 steps",
                "answer: The clock tool gave the UTC time",
            ],
        ),
        "ls" => {
            let header = stdout.lines().next().unwrap_or_default();
            must(what, header, &["STATUS", "STEPS", "COST", "AGE", "GOAL"]);
            let row = |id: &str| line_starting(stdout, id).to_owned();
            must(what, &row(run), &["completed", "What time is it in UTC"]);
            if let Some(fork) = &ids.fork {
                must(
                    what,
                    &row(fork),
                    &[
                        "Count the words of 'a b c' instead.",
                        &format!("(fork of {run}@1)"),
                    ],
                );
            }
        }
        "log RUN" => {
            let lines: Vec<&str> = stdout.lines().collect();
            assert_eq!(
                lines.len(),
                9,
                "{what}: a header and one line per step:\n{stdout}"
            );
            must(
                what,
                stdout,
                &[
                    "tool result of utc_now",
                    "tool result of count_words",
                    "generating → finished",
                    "run completed with assistant's answer",
                ],
            );
            assert!(
                !stdout.contains("handoff"),
                "{what}: nothing was handed over:\n{stdout}"
            );
        }
        "show RUN@2" => must(
            what,
            stdout,
            &[
                &format!("run {run} step 2 of 8"),
                "event   proceed",
                "state   generating",
                "request to script/scripted — 2 messages, tools [utc_now, count_words]",
                "[0] system    You are a helpful assistant.",
                "[1] user      What time is it in UTC, and how many words are in 'runtape keeps every step'?",
            ],
        ),
        "verify RUN" | "verify RUN --pubkey receipts.key.pub" => {
            assert!(stdout.starts_with("OK: "), "{what}: {stdout}");
            must(
                what,
                stdout,
                &[&format!("transitions of {run} replay to the stored states")],
            );
            if typed.ends_with("--pubkey receipts.key.pub") {
                must(what, stdout, &["head signed by the trusted key"]);
            }
        }
        "fork RUN@1 --edit \"user=Count the words of 'a b c' instead.\"" => must(
            what,
            stdout,
            &[&format!("forked {run}@1 as run {}", ids.fork())],
        ),
        "diff RUN FORK" => {
            must(
                what,
                stdout,
                &[
                    "agree on steps 1..=1 and first differ at step 2",
                    &format!(
                        "{} edits: assistant's conversation goes on with user \"Count the words of 'a b c' instead.\"",
                        ids.fork()
                    ),
                ],
            );
            assert!(
                !stdout.contains("event/edits"),
                "{what}: in words:\n{stdout}"
            );
        }
        "show FORK@3" => must(
            what,
            stdout,
            &[
                "request to script/scripted",
                "[1] user      Count the words of 'a b c' instead.",
            ],
        ),
        "run examples/handoff.toml --json" => {
            let events: Vec<serde_json::Value> = stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
                .collect();
            assert!(
                events.iter().any(|e| e["edge"] == "handoff.proceed.next"),
                "{what}: a handoff:\n{stdout}"
            );
            let end = events.last().expect("events");
            assert_eq!(end["type"], "run.end", "{what}");
            assert_eq!(end["status"], "completed", "{what}");
        }
        "cassette export RUN -o handoff.cassette.json" => {
            must(
                what,
                stdout,
                &[&format!(
                    "wrote 4 model turns of {run} to handoff.cassette.json"
                )],
            );
            let text = std::fs::read_to_string(dir.join("handoff.cassette.json")).expect("written");
            serde_json::from_str::<serde_json::Value>(&text).expect("a JSON cassette");
        }
        "replay examples/handoff.toml --cassette handoff.cassette.json" => must(
            what,
            all,
            &[
                "completed: 14 steps",
                "replayed 4 of 4 recorded model turns",
            ],
        ),
        "run examples/approval.toml" => must(
            what,
            all,
            &[
                "waiting for a person",
                &format!("runtape resume {run} --approve"),
            ],
        ),
        "resume RUN --approve" => must(what, all, &["completed:"]),
        "cancel RUN --reason \"not today\"" => {
            must(what, all, &[&format!("cancelled {run} at step")])
        }
        "pause RUN" => must(what, all, &[&format!("paused {run} at step")]),
        "resume RUN" => must(what, all, &["completed:", "answer: There are 5 words."]),
        "keygen -o receipts.key" => {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("receipts.key"))
                .expect("the key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{what}");
            assert!(dir.join("receipts.key.pub").exists(), "{what}");
        }
        "run examples/quickstart.toml --receipt-key receipts.key" => {
            must(what, all, &["completed: 8 steps"])
        }
        "receipts export RUN -o receipts.jsonl" => must(
            what,
            stdout,
            &[&format!("wrote 4 receipts of {run}"), "(signed by "],
        ),
        "receipts verify receipts.jsonl --pubkey receipts.key.pub" => {
            must(what, stdout, &["OK: 4 receipts, signed by "])
        }
        other => panic!("{what}: the tour shows `runtape {other}`; say here what it shows"),
    }
}

/// `runtape serve`: it says where it listens, the page is there, its API lists every run the
/// tour made, and it stops on SIGTERM.
fn serve_shows_the_runs(cmd: &mut Command, what: &str) {
    let (child, first) = super::spawn_first_line(cmd, what);
    let url = first
        .strip_prefix("listening on http://")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{what}: {first}"));
    let addr = url.trim_end_matches('/').parse().expect("an address");
    let page = request(addr, "GET", "/", &[], None);
    assert_eq!(page.status, 200, "{what}");
    assert!(page.text().contains("<html"), "{what}: the page");
    let runs = request(addr, "GET", "/api/runs", &[], None);
    assert_eq!(runs.status, 200, "{what}");
    assert!(
        runs.json()["runs"].as_array().map(Vec::len) >= Some(8),
        "{what}: {}",
        runs.text()
    );
    crate::support::cli::try_signal(child.id(), "TERM").expect("sends SIGTERM");
    let o = child.wait_with_output().expect("waits");
    assert_eq!(o.status.code(), Some(0), "{what}");
}
