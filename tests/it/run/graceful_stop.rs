//! SIGTERM, SIGHUP and Ctrl-C stop a run gracefully, with real processes and real signals:
//! no new call starts, the call in flight finishes within the grace period and its result is
//! committed, the run pauses (lease released, status `paused`) and `runtape` exits 4. A call
//! that outlives the grace period is killed and is in doubt on resume. A second signal leaves
//! at once (exit 130).

use crate::support;

use std::io::Read;
use std::path::Path;

use crate::support::cli::{exit_and_stderr, temp_db};
use support::protocol::*;

/// Starts a charge run (the charge takes `then`), waits until the charge is in flight, and
/// sends `sig`; returns the run id and the process's exit code and stderr.
fn signal_mid_charge(
    dir: &Path,
    db: &Path,
    then: &str,
    sig: &str,
    grace_ms: Option<&str>,
) -> (String, Option<i32>, String) {
    let spec = charge_spec(dir, &ChargeSpec::running(then));
    let env: Vec<(&str, &str)> = grace_ms
        .map(|g| vec![("RUNTAPE_STOP_GRACE_MS", g)])
        .unwrap_or_default();
    let mut bg = start(db, &spec, &env);
    wait_until("the charge is in flight", || charge_lines(dir) >= 1);
    signal(bg.child.id(), sig);
    let (code, stderr) = exit_and_stderr(&mut bg.child);
    (bg.run, code, stderr)
}

/// The call in flight finishes within the grace period, is committed, the run pauses and the
/// process exits 4; `resume` completes it without charging again.
fn stops_gracefully(sig: &str) {
    let (dir, db) = temp_db();
    let (run, code, stderr) = signal_mid_charge(dir.path(), &db, "sleep 1", sig, None);
    assert_eq!(code, Some(4), "a paused run exits 4: {stderr}");
    assert!(
        stderr.contains(&format!("{sig}: stopping run {run}")),
        "{stderr}"
    );
    let row = run_row(&db, &run);
    assert_eq!(row.status, "paused", "{row:?}");
    assert_eq!(row.owner, None, "the lease is released");
    assert!(
        edges(&db).contains(&"calling_tools.returned.done".to_owned()),
        "the call's result was committed before pausing: {:?}",
        edges(&db)
    );
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("completed"), "{}", out(&o));
    assert_eq!(charge_lines(dir.path()), 1, "exactly one charge");
    assert!(runtape(&db, &["verify", &run]).status.success());
}

#[test]
fn sigterm_mid_call_commits_it_pauses_and_resume_completes() {
    stops_gracefully("TERM");
}

#[test]
fn sighup_mid_call_commits_it_pauses_and_resume_completes() {
    stops_gracefully("HUP");
}

#[test]
fn ctrl_c_mid_call_pauses_with_exit_4() {
    stops_gracefully("INT");
}

#[test]
fn a_call_longer_than_the_grace_period_is_killed_and_in_doubt_on_resume() {
    let (dir, db) = temp_db();
    let (run, code, stderr) = signal_mid_charge(
        dir.path(),
        &db,
        "echo $$ > tool.pid; exec sleep 120",
        "TERM",
        Some("200"),
    );
    let pid = std::fs::read_to_string(dir.path().join("tool.pid")).expect("the tool ran");
    let proc_dir = format!("/proc/{}", pid.trim());
    wait_until("the tool is killed (it would sleep 120 s)", || {
        // A killed child not yet reaped by anyone is a zombie: gone for our purpose.
        std::fs::read_to_string(format!("{proc_dir}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    });
    assert_eq!(code, Some(4), "{stderr}");
    let row = run_row(&db, &run);
    assert_eq!(row.status, "paused", "{row:?}");
    assert_eq!(
        row.state_kind, "calling_tools",
        "no result was committed for the killed call"
    );
    // The default policy fails a call in doubt.
    let o = runtape(&db, &["resume", &run]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(out(&o).contains("effect_in_doubt"), "{}", out(&o));
    assert_eq!(charge_lines(dir.path()), 1, "never performed again");
}

#[test]
fn a_second_signal_leaves_at_once() {
    let (dir, db) = temp_db();
    let spec = charge_spec(dir.path(), &ChargeSpec::running("sleep 30"));
    let mut bg = start(&db, &spec, &[("RUNTAPE_STOP_GRACE_MS", "60000")]);
    wait_until("the charge is in flight", || charge_lines(dir.path()) >= 1);
    signal(bg.child.id(), "TERM");
    let mut stderr = bg.child.stderr.take().expect("stderr");
    let mut seen = String::new();
    let mut buf = [0u8; 256];
    while !seen.contains("stopping run") {
        let n = stderr.read(&mut buf).expect("reads stderr");
        assert!(n > 0, "stderr closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    signal(bg.child.id(), "TERM");
    let status = bg.child.wait().expect("exits");
    assert_eq!(status.code(), Some(130), "{seen}");
    // Left as a crash leaves it: resume takes it over and finds the call in doubt.
    let o = runtape(&db, &["resume", &bg.run]);
    assert!(out(&o).contains("effect_in_doubt"), "{}", err(&o));
}
