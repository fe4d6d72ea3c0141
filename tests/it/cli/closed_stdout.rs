//! `runtape run SPEC --json | head -3`: when the reader of stdout goes away, the run is not
//! left running and the command does not look like success. The first line that cannot be
//! written stops the run gracefully: it pauses, one line on stderr says so, and `runtape`
//! exits 4. `resume` then completes it.

use crate::support;
use crate::support::cli::on;

use std::io::BufRead;

use crate::support::cli::{exit_and_stderr, temp_db};
use support::protocol::*;

#[test]
fn a_closed_stdout_pauses_the_run_and_exits_4() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::paced(6, 100));
    let Background {
        mut child,
        run,
        mut lines,
    } = start(&db, &spec, &[]);
    // `head -3`: two more lines after the run id, then the pipe's read end is closed.
    for _ in 0..2 {
        let mut line = String::new();
        lines.read_line(&mut line).expect("reads a line");
    }
    drop(lines);
    let (code, stderr) = exit_and_stderr(&mut child);
    assert_eq!(code, Some(4), "not success: {stderr}");
    let line = one_line(&stderr);
    assert!(
        line.contains("stdout was closed") && line.contains(&format!("runtape resume {run}")),
        "{line}"
    );
    let row = run_row(&db, &run);
    assert_eq!(row.status, "paused", "{row:?}");
    assert_eq!(row.owner, None);
    assert!(charge_lines(dir.path()) < 6, "stopped before the end");

    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(run_row(&db, &run).status, "completed");
    let charges = charges(dir.path());
    assert_eq!(charges.len(), 6, "every charge once: {charges:?}");
    assert!(charges.values().all(|n| *n == 1), "{charges:?}");
}

/// The run id is printed once the run's row exists: a command given the id at once finds the
/// run (`runtape run … &` then `runtape pause ID`, as the README shows). Before, the id was
/// printed first and such a command could fail with "no run with id".
#[test]
fn the_printed_run_id_names_a_run_that_exists() {
    for _ in 0..5 {
        let (dir, db) = temp_db();
        let spec = charge_spec(dir.path(), &ChargeSpec::paced(2, 200));
        // `lines` is kept open until the run has paused: a closed stdout would pause it too.
        let Background {
            mut child,
            run,
            lines,
        } = start(&db, &spec, &[]);
        let o = runtape(&db, &["pause", &run]);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        assert_eq!(child.wait().expect("exits").code(), Some(4), "paused");
        drop(lines);
        assert_eq!(run_row(&db, &run).status, "paused");
    }
}

/// A stdout closed before the run id could be printed: the run was created, so it is
/// stopped gracefully like any run whose reader went away — paused, exit 4 — and `resume`
/// completes it.
#[test]
fn a_stdout_closed_before_the_id_is_printed_pauses_the_new_run() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::paced(2, 100));
    let mut child = on(&db)
        .args(["run", "--json"])
        .arg(&spec)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    drop(child.stdout.take());
    let (code, stderr) = exit_and_stderr(&mut child);
    assert_eq!(code, Some(4), "{stderr}");
    let line = one_line(&stderr);
    assert!(line.contains("stdout was closed"), "{line}");
    let ls = runtape(&db, &["ls", "--flat", "--json"]);
    let row: serde_json::Value =
        serde_json::from_str(out(&ls).lines().next().expect("one run")).expect("json");
    let run = row["id"].as_str().expect("id").to_owned();
    assert_eq!(run_row(&db, &run).status, "paused");
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(run_row(&db, &run).status, "completed");
    let charges = charges(dir.path());
    assert!(
        charges.values().all(|n| *n == 1),
        "every charge once: {charges:?}"
    );
}
