//! On PostgreSQL, a worker never claims a run whose deadline is due when `verify` would reject
//! its history: the run is checked before the claim writes anything, the worker logs one
//! `run.refused` line with `verify`'s words, and every table is left as it was — no lease, no
//! epoch, no `timer_fired`. The same run with its history put back is claimed for its timer and
//! completes, which shows the comparison sees a claim. Real PostgreSQL, the real binary.

use crate::support::cli::utf8;
use crate::support::pg::{PgServer, Reaper};
use crate::support::workers::{Queue, dump, stop, wait_long};

use super::deadline::spec_text;

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_worker_does_not_claim_a_due_deadline_on_a_tampered_run() {
    let server = PgServer::start();
    // The run asks for an approval nobody gives; 1.5 s later its deadline rejects the call.
    let spec = spec_text("deploy", r#"{ after_ms = 1500, then = "reject" }"#);
    let queue = Queue::new(&server, &spec, 0);
    let file = queue.dir.join("spec.toml");
    let ran = queue.runtape(&["run", utf8(&file)]);
    let said = String::from_utf8_lossy(&ran.stdout).into_owned();
    let run = said
        .lines()
        .find_map(|l| l.strip_prefix("started run "))
        .unwrap_or_else(|| panic!("a run id in {said}"))
        .trim()
        .to_owned();
    let db = PgServer::db_of(&queue.url).to_owned();
    let state = |db: &str| {
        server.sql(
            db,
            &format!("SELECT status, state_kind FROM runtape.runs WHERE id = '{run}'"),
        )
    };
    assert!(state(&db).contains("awaiting_input"), "{}", state(&db));
    let key = server.sql(
        &db,
        &format!("SELECT key FROM runtape.runs WHERE id = '{run}'"),
    );
    let goal = |g: &str| format!("UPDATE runtape.run_specs SET goal = '{g}' WHERE run = {key}");

    server.sql(&db, &goal("Deploy twice."));
    let verified = queue.runtape(&["verify", &run]);
    assert_eq!(verified.status.code(), Some(1), "verify rejects the goal");
    let before = dump(&server, &db);
    let mut worker = Reaper(vec![queue.worker(&queue.url, "a", 2_000, &[])]);
    // Logged only once the deadline is due and the worker has checked the run for its claim.
    wait_long("the worker refuses or claims the due run", || {
        !queue.events("a", "run.refused").is_empty() || !queue.events("a", "run.claimed").is_empty()
    });
    stop(&mut worker);
    let claimed = queue.events("a", "run.claimed");
    assert!(claimed.is_empty(), "claimed: {claimed:?}");
    let refused = queue.events("a", "run.refused");
    assert_eq!(refused[0]["run"], run.as_str(), "{refused:?}");
    let error = refused[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("does not verify") && !error.contains('\n'),
        "{error}"
    );
    assert_eq!(dump(&server, &db), before, "the worker wrote");

    // Put back, the same run is claimed for its due deadline and completes.
    server.sql(&db, &goal("Deploy."));
    let mut worker = Reaper(vec![queue.worker(&queue.url, "b", 2_000, &[])]);
    let store = queue.store();
    wait_long(
        "the untampered run's deadline fired and it completed",
        || queue.all_completed(&store),
    );
    stop(&mut worker);
    let claimed = queue.events("b", "run.claimed");
    assert!(
        claimed
            .iter()
            .any(|e| e["run"] == run.as_str() && e["timer"] == "due"),
        "{claimed:?}"
    );
    assert!(queue.events("b", "run.refused").is_empty());
    let verified = queue.runtape(&["verify", &run]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}
