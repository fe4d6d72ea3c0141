//! `replay SPEC --cassette` and `fork --tape` start no MCP server, so they do not need its
//! program: a run records its calls to a stdio server found on `PATH`; with the server no
//! longer on `PATH`, the cassette replays and the run forks from its tape, both to the
//! recorded answer. `run` still refuses a missing program with one line at
//! `mcp[0].command[0]` before anything is written. The server is a `sh` script
//! ([`sh_server`]), so the test needs nothing beyond the build.

use crate::support::cli::on;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::{err, out, run_id};
use crate::support::mcp::{canonical_tempdir, script, sh_server};

const SERVER: &str = "runtape-test-clock-server";

/// A spec in `root` whose agent asks the `clock` server (started as the bare name [`SERVER`])
/// for the time (its tool `dump`), then answers with it.
fn spec(root: &Path) -> PathBuf {
    let spec = root.join("clock.toml");
    std::fs::write(
        &spec,
        format!(
            r#"goal = "what time is it?"
[[mcp]]
name = "clock"
command = ["{SERVER}"]

[[providers]]
name = "p"
kind = "scripted"
replies = [{{ tool_calls = [{{ id = "c1", name = "clock__dump" }}] }}, {{ text = "It is 12:00." }}]

[[agents]]
id = "a"
provider = "p"
tools = ["clock__*"]
"#
        ),
    )
    .expect("spec");
    spec
}

/// `runtape --db DB ARGS…` with `PATH` set to `path`.
fn runtape_with_path(db: &Path, path: &str, args: &[&str]) -> Output {
    on(db).args(args).env("PATH", path).output().expect("runs")
}

fn ok(o: &Output, what: &str) -> String {
    assert_eq!(o.status.code(), Some(0), "{what}: {}{}", out(o), err(o));
    out(o)
}

#[test]
fn replay_and_tape_fork_need_no_mcp_server_program() {
    let (_dir, root) = canonical_tempdir();
    let servers = root.join("bin");
    std::fs::create_dir(&servers).expect("bin dir");
    script(&servers, SERVER, &sh_server("the time", "text=12:00"));
    let spec = spec(&root);
    let spec_arg = spec.to_str().expect("utf8");
    let plain_path = std::env::var("PATH").expect("PATH");
    let with_server = format!("{}:{plain_path}", servers.to_str().expect("utf8"));

    // Recorded with the server on PATH: the model asked it for the time.
    let db = root.join("runs.db");
    let recorded = runtape_with_path(&db, &with_server, &["run", "--stepped-clock", spec_arg]);
    let printed = ok(&recorded, "run");
    assert!(printed.contains("answer: It is 12:00."), "{printed}");
    let run = run_id(&recorded);
    let tape = root.join("clock.cassette.json");
    ok(
        &runtape_with_path(
            &db,
            &plain_path,
            &[
                "cassette",
                "export",
                &run,
                "-o",
                tape.to_str().expect("utf8"),
            ],
        ),
        "export",
    );

    // The server is not on PATH now: `run` refuses the spec and writes nothing…
    let fresh = root.join("fresh.db");
    let refused = runtape_with_path(&fresh, &plain_path, &["run", spec_arg]);
    assert_eq!(refused.status.code(), Some(2), "{}", err(&refused));
    assert!(
        err(&refused).contains(&format!(
            "mcp[0].command[0]: MCP server `clock`: program `{SERVER}` is not on PATH"
        )),
        "{}",
        err(&refused)
    );
    assert!(!fresh.exists(), "nothing was written");

    // …but the cassette replays, and the run forks from its tape, starting no server.
    let replayed = ok(
        &runtape_with_path(
            &fresh,
            &plain_path,
            &[
                "replay",
                "--stepped-clock",
                spec_arg,
                "--cassette",
                tape.to_str().expect("utf8"),
            ],
        ),
        "replay",
    );
    assert!(replayed.contains("answer: It is 12:00."), "{replayed}");
    let forked = ok(
        &runtape_with_path(&db, &plain_path, &["fork", &format!("{run}@1"), "--tape"]),
        "fork --tape",
    );
    assert!(forked.contains("answer: It is 12:00."), "{forked}");
}
