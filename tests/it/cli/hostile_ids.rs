//! Hostile run ids: every command that takes a run id, given a 100 KB id, an id with
//! newlines or control characters, or a well-shaped id no run has, answers with one short line
//! on stderr and exit 2, prints nothing on stdout, writes no file, and leaves the database's
//! bytes as they were. Usage errors from argument parsing are one line too.

use std::path::{Path, PathBuf};

use crate::support;
use support::cli::{db_files, run_id, runtape, temp_spec, utf8};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The database's content, byte for byte: the file and its write-ahead log (an empty log is
/// the same as none; the `-shm` index holds no data and is rebuilt from the log).
fn snapshot(db: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    db_files(db)
}

/// Folds the write-ahead log into the database file (what the last connection to close may
/// do at any time), so that what follows can be compared byte for byte.
fn settle(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("opens");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

/// A new directory with a database holding one finished run: the directory, the database and
/// the run's id.
fn database() -> (tempfile::TempDir, PathBuf, String) {
    let (dir, db, spec) = temp_spec(
        "spec.toml",
        &[
            "goal = \"g\"\n",
            &support::spec::scripted_as("s", r#"{ text = "ok" }"#),
            &support::spec::agent("a", "s", &[], ""),
        ]
        .concat(),
    );
    let o = runtape(&db, &["run", utf8(&spec)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = run_id(&o);
    settle(&db);
    (dir, db, run)
}

/// Every command that takes a run id, with `id` in the run's place.
fn commands(id: &str, good: &str, out: &str) -> Vec<Vec<String>> {
    let at = format!("{id}@3");
    [
        vec!["resume", id],
        vec!["pause", id],
        vec!["cancel", id],
        vec!["log", id],
        vec!["log", id, "--json"],
        vec!["show", &at],
        vec!["show", id, "--json"],
        vec!["fork", &at],
        vec!["diff", id, good],
        vec!["diff", good, id],
        vec!["verify", id],
        vec!["receipts", "export", id, "-o", out],
        vec!["cassette", "export", id, "-o", out],
    ]
    .into_iter()
    .map(|c| c.into_iter().map(str::to_owned).collect())
    .collect()
}

fn assert_refused(db: &Path, args: &[String], out: &Path, what: &str) {
    let before = snapshot(db);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = runtape(db, &refs);
    let err = text(&o.stderr);
    let shown = format!("{} {what}", args[0]);
    assert_eq!(o.status.code(), Some(2), "{shown}: {err}");
    assert!(
        err.ends_with('\n') && err.matches('\n').count() == 1,
        "{shown}: one line: {err:?}"
    );
    assert!(err.starts_with("error: "), "{shown}: {err}");
    assert!(
        err.chars().count() < 400,
        "{shown}: short ({} chars)",
        err.len()
    );
    assert!(o.stdout.is_empty(), "{shown}: {}", text(&o.stdout));
    assert!(!out.exists(), "{shown}: no file written");
    let after = snapshot(db);
    let changed: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, a)| {
            format!(
                "{} ({:?} -> {:?} bytes)",
                b.0.display(),
                b.1.as_ref().map(Vec::len),
                a.1.as_ref().map(Vec::len)
            )
        })
        .collect();
    assert!(
        changed.is_empty(),
        "{shown}: the database changed: {changed:?}"
    );
}

#[test]
fn every_run_id_command_refuses_hostile_ids_in_one_line_and_changes_nothing() {
    let (dir, db, good) = database();
    let out = dir.path().join("out.file");
    let out_arg = utf8(&out);
    let huge = "A".repeat(100 * 1024);
    let hostile = [
        (huge.as_str(), "with a 100 KB id"),
        ("abc\ndef\n\nerror: forged second line\n", "with newlines"),
        ("run\r\u{1b}[31mred\u{7}", "with control characters"),
        ("../../etc/passwd", "with a path"),
    ];
    for (id, what) in hostile {
        for args in commands(id, &good, out_arg) {
            assert_refused(&db, &args, &out, what);
        }
    }
    // Well-shaped but unknown: the lookup answers, still in one line.
    let unknown = "z".repeat(128);
    for args in commands(&unknown, &good, out_arg) {
        assert_refused(&db, &args, &out, "with an unknown id");
    }
}

#[test]
fn a_step_where_a_whole_run_is_meant_is_refused_and_changes_nothing() {
    let (dir, db, good) = database();
    let out = dir.path().join("out.file");
    let out_arg = utf8(&out);
    let at = format!("{good}@1");
    let cases: [(&[&str], &str); 8] = [
        (
            &["resume", &at],
            "resume goes on from where the run stopped",
        ),
        (&["pause", &at], "pause stops a run at its next step"),
        (&["cancel", &at], "cancel ends a whole run"),
        (&["diff", &at, &good], "diff compares whole runs"),
        (&["diff", &good, &at], "diff compares whole runs"),
        (&["verify", &at], "verify checks a whole run"),
        (
            &["receipts", "export", &at, "-o", out_arg],
            "an export holds a whole run's receipts",
        ),
        (
            &["cassette", "export", &at, "-o", out_arg],
            "a cassette holds a whole run's exchanges",
        ),
    ];
    for (args, what) in cases {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        assert_refused(&db, &args, &out, "with RUN@SEQ");
        let err = text(&runtape(&db, &args.iter().map(String::as_str).collect::<Vec<_>>()).stderr);
        assert!(
            err.contains(&format!("`{at}` names step 1, but {what}"))
                && err.contains(&format!("`runtape fork {at}`")),
            "{args:?}: says what the command does and where a step is taken: {err}"
        );
    }
    // The run itself is still what they act on.
    let o = runtape(&db, &["verify", &good]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn a_huge_id_is_quoted_cut_short_and_a_newline_is_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("none.db");
    let o = runtape(&db, &["log", &"B".repeat(100 * 1024)]);
    let err = text(&o.stderr);
    assert!(err.contains(&format!("`{}…`", "B".repeat(80))), "{err}");
    let o = runtape(&db, &["log", "a\nb"]);
    assert!(text(&o.stderr).contains("`a\\nb`"), "{}", text(&o.stderr));
    assert!(!db.exists(), "no database was created");
}

#[test]
fn argument_errors_are_one_line_with_the_help_to_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("none.db");
    for args in [
        &["log", "--jsn", "x"][..],
        &["resume"][..],
        &["no-such-command"][..],
        &["show", "r", "--json", "--json"][..],
    ] {
        let o = runtape(&db, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.matches('\n').count(), 1, "{args:?}: {err:?}");
        assert!(
            err.starts_with("error: ") && err.contains("--help"),
            "{err}"
        );
    }
    let o = runtape(&db, &["log", "--jsn", "x"]);
    assert!(
        text(&o.stderr).contains("`runtape log --help`") && text(&o.stderr).contains("--json"),
        "names the command and the tip: {}",
        text(&o.stderr)
    );
    // What clap lists on lines of their own joins the one line: the missing arguments, the
    // values a flag takes.
    let o = runtape(&db, &["memory", "show"]);
    assert!(
        text(&o.stderr)
            .contains("not provided: --name <NAME>, <KEY>; see `runtape memory show --help`"),
        "names every missing argument: {}",
        text(&o.stderr)
    );
    let o = runtape(&db, &["run", "--durability", "fast", "spec.toml"]);
    assert!(
        text(&o.stderr).contains("'fast'")
            && text(&o.stderr)
                .contains("[possible values: full, normal]; see `runtape run --help`"),
        "names the values it takes: {}",
        text(&o.stderr)
    );
    let help = runtape(&db, &["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("Exit status"));
}
