//! `runtape run SPEC --json | head -3`: when the reader of stdout goes away, the run is not
//! left running and the command does not look like success. The first line that cannot be
//! written stops the run gracefully: it pauses, one line on stderr says so, and `runtape`
//! exits 4. `resume` then completes it.

mod protocol_support;

use std::io::BufRead;

use protocol_support::*;

#[test]
fn a_closed_stdout_pauses_the_run_and_exits_4() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let spec = charge_spec(
        dir.path(),
        &ChargeSpec {
            then: "",
            charges: 6,
            latency_ms: 100,
            ..ChargeSpec::default()
        },
    );
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
    let status = child.wait().expect("exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("reads stderr");
    assert_eq!(status.code(), Some(4), "not success: {stderr}");
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
