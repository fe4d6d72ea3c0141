//! A run SIGKILLed while it sleeps, on the system clock. The due instant was committed with
//! the call, so whoever resumes the run knows when it wakes: resumed after that instant it
//! fires at once; resumed before it, it goes on waiting (and a process killed while waiting
//! leaves it asleep). However many processes take it up, `TimerFired` is committed once,
//! never before its due instant, and `verify` accepts the history.

use std::io::BufRead;
use std::time::Duration;

use serde_json::Value;

use crate::support::cli::{
    on, read_only, runtape, spawn_json, start_json, text, wait_for_step, wait_until, write,
};

use super::{ms_of, nap_spec, steps, the_timer};

const TIMERS: &str = "[timers]\nmax_sleep_ms = 7200000\n";

fn state_kind(db: &std::path::Path) -> String {
    read_only(db)
        .query_row("SELECT state_kind FROM runs", [], |r| r.get(0))
        .expect("reads")
}

fn fired(db: &std::path::Path, run: &str) -> Vec<Value> {
    steps(db, run)
        .into_iter()
        .filter(|s| s["event"] == "timer_fired")
        .collect()
}

/// Starts the nap run (`seconds` of sleep) on the system clock and SIGKILLs it as soon as the
/// transition taking the sleep call (step 3) is committed: the run and its timer's due
/// instant (HLC).
fn killed_asleep(dir: &std::path::Path, seconds: u64) -> (std::path::PathBuf, String, u64) {
    let spec = write(
        dir,
        "nap.toml",
        &nap_spec(
            TIMERS,
            &format!("{{ name = \"sleep_for\", arguments = {{ seconds = {seconds} }} }}"),
        ),
    );
    let db = dir.join("nap.db");
    let (mut child, mut lines, run) = start_json(&db, &spec);
    wait_for_step(&mut lines, 3);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(state_kind(&db), "calling_tools", "killed while asleep");
    assert!(fired(&db, &run).is_empty(), "killed before its due instant");
    let (_, due) = the_timer(&db, &run);
    (db, run, due)
}

#[test]
fn resumed_after_its_due_instant_a_killed_sleep_fires_once_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 2);
    // Let the due instant pass while nobody holds the run.
    let now = runtape::exec::wall_ms();
    std::thread::sleep(Duration::from_millis(ms_of(due).saturating_sub(now) + 50));

    let out = runtape(&db, &["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once");
    assert!(
        fired[0]["at_ms"]
            .as_u64()
            .is_some_and(|at| at >= ms_of(due)),
        "not before its due instant: {} < {}",
        fired[0],
        ms_of(due)
    );
    assert_eq!(steps(&db, &run).last().expect("steps")["to"], "done");
    let out = runtape(&db, &["verify", &run]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn resumed_before_its_due_instant_the_run_keeps_waiting_and_fires_once_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, run, due) = killed_asleep(dir.path(), 3600);

    // A resume an hour early waits again for the same instant (the timer is performed again
    // from the committed effect, its due instant unchanged), until it too is killed.
    // A short lease, so its keeper renews it often while the process waits.
    let (mut waiting, mut lines, _) = spawn_json(
        on(&db)
            .env("RUNTAPE_LEASE_TTL_MS", "300")
            .args(["resume", &run, "--json"])
            .stderr(std::process::Stdio::null()),
    );
    let mut line = String::new();
    let mut rearmed = None;
    while lines.read_line(&mut line).expect("reads") > 0 {
        let v: Value = serde_json::from_str(&line).expect("JSON line");
        if v["type"] == "timer.started" {
            rearmed = Some(v);
            break;
        }
        line.clear();
    }
    let rearmed = rearmed.expect("the resumed run waits on the timer again");
    assert_eq!(rearmed["due_ms"].as_u64(), Some(ms_of(due)), "{rearmed}");
    // Until the lease has been renewed twice after the timer was armed — long past the
    // moment a firing would have been committed — or the run moved on.
    let lease = |db: &std::path::Path| -> (i64, i64) {
        read_only(db)
            .query_row("SELECT lease_expires_ms, seq FROM runs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("reads")
    };
    let (armed_lease, _) = lease(&db);
    let mut renewals = 0;
    let mut last = armed_lease;
    wait_until("the lease is renewed twice or the run moves on", || {
        let (expires, seq) = lease(&db);
        if expires > last {
            renewals += 1;
            last = expires;
        }
        renewals >= 2 || seq > 3
    });
    waiting.kill().expect("SIGKILL");
    waiting.wait().expect("reaped");
    assert!(fired(&db, &run).is_empty(), "an hour early, nothing fired");
    assert_eq!(state_kind(&db), "calling_tools");

    // A clock that does not wait (`--stepped-clock`) stands for the hour passing: the run
    // wakes at once, its firing stamped at the due instant.
    let out = runtape(&db, &["resume", &run, "--stepped-clock"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let fired = fired(&db, &run);
    assert_eq!(fired.len(), 1, "fired once over three processes");
    assert_eq!(fired[0]["at_ms"].as_u64(), Some(ms_of(due)));
    let out = runtape(&db, &["verify", &run]);
    assert!(out.status.success(), "{}", text(&out));
}
