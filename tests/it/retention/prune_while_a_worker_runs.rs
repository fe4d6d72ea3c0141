//! `runtape prune` while a real `runtape worker` drives runs on the same SQLite file: three
//! runs asleep (their driving processes killed) are woken by the worker when due, go on, and
//! rest waiting for a person; prunes made all the while remove the finished delegation tree
//! in the file and nothing of the sleepers — each is still stored, its timer fired once, and
//! it verifies. The worker logs no error and drains on SIGTERM.

use std::process::Stdio;

use crate::support::cli::{
    example, json_lines, on, runtape, scripted, start_json, text, utf8, wait_for_step, wait_until,
    write,
};
use crate::support::pg::Reaper;

/// Sleeps `seconds`, then asks a person, then would answer `done`.
fn sleep_then_ask(seconds: u64) -> String {
    let replies = format!(
        "  {{ tool_calls = [ {{ name = \"sleep_for\", arguments = {{ seconds = {seconds} }} }} ] }},\n  {{ tool_calls = [ {{ name = \"ask\", arguments = {{ question = \"which region?\" }} }} ] }},\n  {{ text = \"done\" }},\n"
    );
    format!(
        "goal = \"Check back later.\"\n[timers]\nmax_sleep_ms = 7200000\n\n{}\n[[tools]]\nname = \"ask\"\ndescription = \"Ask a person\"\nkind = \"human\"\n\n[[agents]]\nid = \"napper\"\nprovider = \"script\"\ntools = [\"sleep_for\", \"ask\"]\n",
        scripted(&replies)
    )
}

fn status_of(db: &std::path::Path, run: &str) -> Option<String> {
    json_lines(&runtape(db, &["ls", "--json", "--flat"]))
        .into_iter()
        .find(|r| r["id"] == run)
        .map(|r| r["status"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn prune_while_a_worker_wakes_runs_loses_nothing_of_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("w.db");
    let spec = write(dir.path(), "nap.toml", &sleep_then_ask(2));
    let mut sleepers = Vec::new();
    for _ in 0..3 {
        let (mut child, mut lines, run) = start_json(&db, &spec);
        wait_for_step(&mut lines, 3);
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        sleepers.push(run);
    }
    let team = runtape(&db, &["run", utf8(&example("team.toml"))]);
    assert!(team.status.success(), "{}", text(&team));
    let lead = crate::support::cli::run_id(&team);

    let log = std::fs::File::create(dir.path().join("worker.log")).expect("log");
    let worker = on(&db)
        .arg("worker")
        .env("RUNTAPE_WORKER_POLL_MS", "50")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("starts a worker");
    let pid = worker.id();
    let mut reaper = Reaper(vec![worker]);

    let mut prunes = 0;
    wait_until("every sleeper rests waiting for a person", || {
        let p = runtape(&db, &["prune", "--older-than", "0s"]);
        assert!(p.status.success(), "{}", text(&p));
        prunes += 1;
        sleepers
            .iter()
            .all(|r| status_of(&db, r).as_deref() == Some("awaiting_input"))
    });
    assert!(prunes >= 1);

    let v = runtape(&db, &["verify", &lead]);
    assert_eq!(
        v.status.code(),
        Some(5),
        "the finished tree went: {}",
        text(&v)
    );
    for run in &sleepers {
        let v = runtape(&db, &["verify", run]);
        assert!(v.status.success(), "{run}: {}", text(&v));
        let steps = json_lines(&runtape(&db, &["log", run, "--json"]));
        let fired = steps.iter().filter(|s| s["event"] == "timer_fired").count();
        assert_eq!(fired, 1, "{run}: {steps:?}");
    }

    // SIGTERM drains the worker; it exits 0 and logged no error.
    let term = crate::support::cli::try_signal(pid, "TERM");
    assert!(term.is_ok(), "SIGTERM reaches the worker: {term:?}");
    let status = reaper.0[0].wait().expect("the worker exits");
    let logged = std::fs::read_to_string(dir.path().join("worker.log")).expect("log");
    assert!(status.success(), "{status:?}: {logged}");
    assert!(!logged.contains("\"error\""), "{logged}");
}
