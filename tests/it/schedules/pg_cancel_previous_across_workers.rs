//! On PostgreSQL, `--overlap cancel-previous` reaches across worker processes: worker `a`
//! fires a schedule's instant and drives its run, which waits in a long tool call; worker `b`
//! fires the next instant (a trigger, while `a` is held with SIGSTOP so it cannot fire it
//! itself), asks the live run to cancel and queues its own. Once `a` goes on, its lease
//! keeper reads the cancel from the run's row: the previous run ends cancelled with the
//! schedule's reason, its tool call cut short; the new run completes. Each instant fired
//! once, by one worker; each run claimed once; both verify. Real PostgreSQL, the real binary.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{ok, signal, wait_until_every, write};
use crate::support::pg::{PgServer, Reaper, worker};
use crate::support::workers::{events, stop};

use super::{pg_fires, runs};

/// A spec whose agent calls `gather`, then answers `reported`; `gather` waits ten minutes the
/// first time it runs in `dir` (it makes `dir/held`), and returns at once afterwards.
fn spec(dir: &Path) -> std::path::PathBuf {
    let held = dir.join("held");
    write(
        dir,
        "report.toml",
        &format!(
            "goal = \"Write the morning report.\"\n{}\n[[tools]]\nname = \"gather\"\n\
             description = \"Gather the figures\"\n\
             command = [\"sh\", \"-c\", \"if mkdir '{}' 2>/dev/null; then sleep 600; fi; echo figures\"]\n\
             schema = {{ type = \"object\" }}\nread_only = true\nidempotent = true\n\n\
             [[agents]]\nid = \"reporter\"\nprovider = \"script\"\ntools = [\"gather\"]\n",
            crate::support::cli::scripted(
                "  { tool_calls = [ { name = \"gather\", arguments = {} } ] },\n  { text = \"reported\" },\n"
            ),
            held.display()
        ),
    )
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_due_instant_cancels_the_previous_run_another_worker_drives() {
    let server = PgServer::start();
    let (url, _tmp, d) = super::pg_scratch(&server);
    let db = Path::new(&url);
    let spec = spec(&d);
    // Leases long enough that `a`, held stopped, keeps its run: nobody takes it over.
    let lease = [("RUNTAPE_LEASE_TTL_MS", "120000")];
    let mut workers = Reaper(vec![worker(&url, &d, "a.log", &[], &lease)]);
    super::add_daily_cancelling(db, &spec, "last");
    wait_until_every(
        "worker a drives the first run into its long tool call",
        Duration::from_millis(50),
        || !events(&d, "a", "run.claimed").is_empty() && d.join("held").exists(),
    );
    let fires = pg_fires(&server, &url);
    assert_eq!(fires.len(), 1, "{fires:?}");
    let first = fires[0].2.clone();
    assert_eq!(events(&d, "a", "run.claimed")[0]["run"], first.as_str());

    // `a` is held while the next instant comes due, so `b` is the one that fires it.
    let a = workers.0[0].id();
    signal(a, "STOP");
    workers.0.push(worker(&url, &d, "b.log", &[], &lease));
    ok(db, &["schedule", "trigger", "daily"]);
    let control = || {
        server.sql(
            PgServer::db_of(&url),
            &format!("SELECT coalesce(control, '') FROM runtape.runs WHERE id = '{first}'"),
        )
    };
    wait_until_every(
        "worker b asked the first run to cancel",
        Duration::from_millis(50),
        || control().trim().starts_with("cancel"),
    );
    signal(a, "CONT");
    let status = |run: &str| {
        runs(db)
            .into_iter()
            .find(|r| r["id"] == run)
            .map(|r| r["status"].as_str().unwrap_or_default().to_owned())
    };
    wait_until_every(
        "the first run cancelled and the second completed",
        Duration::from_millis(100),
        || {
            let fires = pg_fires(&server, &url);
            status(&first).as_deref() == Some("cancelled")
                && fires.len() == 2
                && status(&fires[1].2).as_deref() == Some("completed")
        },
    );
    stop(&mut workers);

    let fires = pg_fires(&server, &url);
    assert_eq!(fires.len(), 2, "{fires:?}");
    assert!(fires.iter().all(|f| f.3 == "started"), "{fires:?}");
    let second = fires[1].2.clone();
    assert_ne!(first, second);
    // Each instant fired once, the second by `b` while `a` drove the first run.
    let fired = |w: &str| -> Vec<String> {
        events(&d, w, "schedule.fired")
            .iter()
            .map(|e| e["run"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(fired("a"), vec![first.clone()], "a fired the first instant");
    assert_eq!(fired("b"), vec![second.clone()], "b fired the second");
    // Each run claimed once, the first by `a` only (never taken over).
    let claims = |w: &str, run: &str| {
        events(&d, w, "run.claimed")
            .iter()
            .filter(|c| c["run"] == run)
            .count()
    };
    assert_eq!((claims("a", &first), claims("b", &first)), (1, 0));
    assert_eq!(claims("a", &second) + claims("b", &second), 1);

    let listed = runs(db);
    let row = |run: &str| {
        listed
            .iter()
            .find(|r| r["id"] == run)
            .cloned()
            .expect("listed")
    };
    assert_eq!(row(&first)["status"], "cancelled");
    assert!(
        row(&first)["reason"]
            .as_str()
            .is_some_and(|r| r.contains("schedule daily fired again")),
        "{}",
        row(&first)
    );
    assert_eq!(row(&second)["status"], "completed");
    // The cancel cut the first run's tool call short: it never returned.
    let log = ok(db, &["log", "--json", &first]);
    assert!(!log.contains("\"tool_returned\""), "{log}");
    for run in [&first, &second] {
        ok(db, &["verify", run]);
    }
}
