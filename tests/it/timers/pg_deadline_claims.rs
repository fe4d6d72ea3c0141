//! On PostgreSQL, workers claim a run whose deadline is due the way they claim runnable runs:
//! runs resting `awaiting_input` under a deadline (`[timers.deadlines]`) are not in the queue,
//! yet when the deadline passes one worker claims each (`FOR UPDATE SKIP LOCKED`, the lease's
//! epoch bumped) and fires it; two workers racing for three such runs commit one `TimerFired`
//! a run, each run claimed for its timer once, and every run verifies. Real PostgreSQL, the
//! real binary.

use crate::support::pg::{PgServer, Reaper};
use crate::support::workers::{Queue, stop, wait_long};

use super::deadline::spec_text;

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn two_workers_fire_each_due_deadline_once() {
    let server = PgServer::start();
    // Each run asks for an approval nobody gives; 1.5 s later its deadline rejects the call.
    let spec = spec_text("deploy", r#"{ after_ms = 1500, then = "reject" }"#);
    let queue = Queue::new(&server, &spec, 3);
    let mut workers = Reaper(vec![
        queue.worker(&queue.url, "a", 2_000, &[]),
        queue.worker(&queue.url, "b", 2_000, &[]),
    ]);
    let store = queue.store();
    wait_long("every run's deadline fired and it completed", || {
        queue.all_completed(&store)
    });
    stop(&mut workers);

    let due_claims: Vec<serde_json::Value> = ["a", "b"]
        .iter()
        .flat_map(|w| queue.events(w, "run.claimed"))
        .filter(|e| e["timer"] == "due")
        .collect();
    for run in &queue.runs {
        let log = queue.runtape(&["log", "--json", run]);
        let fired = String::from_utf8_lossy(&log.stdout)
            .lines()
            .filter(|l| l.contains("\"event\":\"timer_fired\""))
            .count();
        assert_eq!(fired, 1, "run {run}: its deadline fired once");
        let claims = due_claims.iter().filter(|e| e["run"] == *run).count();
        assert_eq!(
            claims, 1,
            "run {run} claimed for its timer once: {due_claims:?}"
        );
        let v = queue.runtape(&["verify", run]);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    }
}
