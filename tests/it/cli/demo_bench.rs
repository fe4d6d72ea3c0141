//! `runtape demo` and `runtape bench`, as a newcomer and a capacity planner meet them: the demo
//! narrates a crash, a resume, a listing, an earlier step, a fork and two verifications, and
//! leaves a database the printed commands work on; the bench reports every workload.

use crate::support::cli::{bare, pairs, temp_db, utf8};
use std::path::Path;

#[test]
fn the_demo_crashes_resumes_forks_and_verifies_a_run() {
    let (dir, db) = temp_db();
    let o = bare(&["demo", "--db", utf8(&db)]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for beat in [
        "1. start and crash",
        "killed at step",
        "2. resume",
        "completed at step",
        "3. list",
        "4. go back",
        "request to script/scripted",
        "5. fork",
        "first differ at step",
        "6. verify",
    ] {
        assert!(stdout.contains(beat), "the demo shows `{beat}`:\n{stdout}");
    }
    assert_eq!(
        stdout.matches("\nOK: ").count(),
        2,
        "the run and its fork both verify:\n{stdout}"
    );

    // The database it leaves holds both runs, completed, and `log` works on them.
    let conn = rusqlite::Connection::open(&db).expect("the demo's database");
    let statuses: Vec<(String, String)> = pairs(&conn, "SELECT id, status FROM runs ORDER BY id");
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    assert!(
        statuses.iter().all(|(_, s)| s == "completed"),
        "{statuses:?}"
    );
    let log = bare(&["--db", utf8(&db), "log", &statuses[0].0]);
    assert!(log.status.success());

    // The lines it closes with run as printed, in a shell where `runtape` is on no PATH (as
    // after `cargo run`): each names the program by a path that exists.
    let explore: Vec<&str> = stdout
        .split("Explore it yourself:")
        .nth(1)
        .expect("the demo closes with commands to explore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(explore.len(), 4, "log, show, fork, rm: {explore:?}");
    let me = Path::new(env!("CARGO_BIN_EXE_runtape"))
        .canonicalize()
        .expect("the binary");
    assert!(
        explore[..3]
            .iter()
            .all(|l| l.starts_with(&*me.to_string_lossy())),
        "{explore:?}"
    );
    for line in explore {
        let o = std::process::Command::new("sh")
            .args(["-c", line])
            .env("PATH", "/usr/bin:/bin")
            .current_dir(dir.path())
            .output()
            .expect("runs sh");
        assert!(
            o.status.success(),
            "`{line}`: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// `runtape bench --quick --json` with `extra` arguments, in a scratch directory of its own:
/// the report, once the command has succeeded and removed its scratch databases.
fn quick_bench(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let scratch = dir.path().join("bench");
    let mut args = vec!["bench", "--quick", "--json", "--dir", utf8(&scratch)];
    args.extend_from_slice(extra);
    let o = bare(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !Path::new(&scratch).exists()
            || std::fs::read_dir(&scratch)
                .map(|d| d.count() == 0)
                .unwrap_or(true),
        "the scratch databases are removed"
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object on stdout")
}

#[test]
fn a_quick_bench_reports_every_workload() {
    let v = quick_bench(&[]);
    assert_eq!(v["type"], "bench");
    let positive = |pointer: &str| {
        let x = v
            .pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{pointer} missing: {v}"));
        assert!(x > 0.0, "{pointer} = {x}");
    };
    for p in [
        "/raw/full_per_s",
        "/raw/normal_per_s",
        "/w1/per_s",
        "/w1/bytes_per_transition",
        "/w1/fraction_of_raw",
        "/w2/per_s",
        "/w3/resume_process_ms",
        "/w3/resume_in_process_ms",
        "/w3/log_process_ms",
        "/w3/verify_process_ms",
        "/travel/log_ms",
        "/travel/show_ms",
        "/travel/verify_ms",
        "/w4/per_s",
        "/resume/short_ms",
        "/resume/long_ms",
        "/resume/ratio",
        "/resume/cli_short_ms",
        "/resume/cli_long_ms",
        "/resume/cli_ratio",
        "/w1_normal/per_s",
        "/w5/wall_ms",
        "/w5/ideal_ms",
        "/w5/per_s",
        "/w5/commits_per_s",
        "/w5/transitions_per_fsync",
        "/w5/peak_rss",
        "/w5/bytes_per_transition",
        "/w5/written_per_transition",
    ] {
        positive(p);
    }
    assert_eq!(
        v["w1"]["transitions"],
        3 * 20 + 4,
        "20 rounds: 3 per round + 4"
    );
    assert_eq!(
        v["w1_normal"]["transitions"], v["w1"]["transitions"],
        "the same run at NORMAL"
    );
    assert_eq!(v["w5"]["runs"], 20, "the quick W5 is tiny");
    assert_eq!(
        v["w5"]["transitions"],
        20 * (3 * 3 + 4),
        "20 runs of 3 rounds, every one finished"
    );
    assert_eq!(
        v["w5"]["replies"],
        20 * 4,
        "every model reply is followed to its durable commit"
    );
    assert!(
        v["w5"]["wall_ms"].as_f64() >= v["w5"]["ideal_ms"].as_f64(),
        "no run finishes before its model latency: {}",
        v["w5"]
    );
    assert_eq!(v["growth"].as_array().map(Vec::len), Some(2));
}

#[test]
fn bad_bench_arguments_are_refused_in_one_line_naming_what_is_allowed() {
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["bench", "--only", "nosuch"],
            &[
                "'nosuch'",
                "--only",
                "[possible values: raw, w1, growth, w2, w3, w4, travel, resume, w5]",
            ],
        ),
        (&["bench", "--runs", "0"], &["--runs", "must be at least 1"]),
        (&["bench", "--reps", "0"], &["--reps", "must be at least 1"]),
        // A `--db` value that happens to be a subcommand's name is not taken for one.
        (
            &["--db", "run", "bench", "--reps", "0"],
            &["--reps", "must be at least 1"],
        ),
    ];
    for (args, names) in cases {
        let o = bare(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing is measured");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        for name in names {
            assert!(err.contains(name), "{args:?}: {name} in {err}");
        }
        assert!(
            err.trim_end().ends_with("see `runtape bench --help`"),
            "{args:?}: points at the subcommand's help: {err}"
        );
    }
}

#[test]
fn a_workload_is_named_in_any_case_and_only_it_is_measured() {
    let v = quick_bench(&["--only", "RAW"]);
    assert!(v["raw"]["full_per_s"].as_f64() > Some(0.0), "{v}");
    assert_eq!(v["w1"]["transitions"], 0, "W1 was not asked for: {v}");
    assert_eq!(v["w4"]["transitions"], 0, "W4 was not asked for: {v}");
    assert_eq!(v["w5"]["runs"], 0, "W5 was not asked for: {v}");
}
