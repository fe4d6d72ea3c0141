//! SIGKILL at random instants around timer firing, on SQLite: four runs killed asleep (or
//! resting for a person under a deadline that escalates), then two `runtape worker` processes
//! racing for them, SIGKILLed together at a random instant 0.1–0.9 s after they start, eight
//! times over, then one worker to finish. Each run's timer fired exactly once (each deadline of
//! an escalation chain once: the escalation, then its approval), the non-idempotent call after
//! it was performed exactly once (a call cut by a kill is asked of its `reconcile` command,
//! never run blind), every run completed and `verify` passes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::cli::{scripted, start_json, wait_for_step, write};
use crate::support::pg::Reaper;
use crate::support::workers::{stop, wait_long};

use super::{TIMERS, fired, steps, verifies};

const RUNS: usize = 4;

/// Sleeps a second, then calls `effect` (non-idempotent: appends its idempotency key to
/// `effects.log` after 0.3 s; its reconcile command answers from that log), then
/// answers.
fn spec() -> String {
    let replies = "  { tool_calls = [ { name = \"sleep_for\", arguments = { seconds = 1 } } ] },\n  \
                   { tool_calls = [ { name = \"effect\", arguments = {} } ] },\n  \
                   { text = \"done\" },\n";
    acting_spec(
        "Act after a nap.",
        TIMERS,
        replies,
        "",
        "\"effect\", \"sleep_for\"",
    )
}

/// Calls `effect`, which needs an approval; nobody answers, so after 0.4 s the call is
/// escalated to `lead`, and 0.4 s later approved: it runs, then the agent answers.
fn escalating_spec() -> String {
    let replies = "  { tool_calls = [ { name = \"effect\", arguments = {} } ] },\n  \
                   { text = \"done\" },\n";
    let deadline = "[timers.deadlines]\neffect = { after_ms = 400, then = { escalate = { to = \"lead\", after_ms = 400, then = \"approve\" } } }\n";
    acting_spec(
        "Act once approved.",
        deadline,
        replies,
        "requires_approval = true\n",
        "\"effect\"",
    )
}

/// A spec with `timers` whose scripted agent `a` (300 ms a reply) gives `replies`, offered
/// `tools`, with the non-idempotent tool `effect` (appends its idempotency key to
/// `effects.log` after 0.3 s; its reconcile command answers from that log) and `effect_rest`.
fn acting_spec(goal: &str, timers: &str, replies: &str, effect_rest: &str, tools: &str) -> String {
    format!(
        "goal = \"{goal}\"\n{timers}\n{}\n{}[[agents]]\nid = \"a\"\nprovider = \"script\"\ntools = [{tools}]\non_in_doubt = \"reconcile\"\n",
        scripted(replies).replace("replies = [", "latency_ms = 300\nreplies = ["),
        crate::support::spec::tool(
            "effect",
            r#"["sh", "-c", "sleep 0.3; echo \"$RUNTAPE_IDEMPOTENCY_KEY\" >> effects.log; echo ok"]"#,
            &format!(
                r#"description = "a non-idempotent effect"
{effect_rest}reconcile = ["sh", "-c", "if grep -qx \"$RUNTAPE_IDEMPOTENCY_KEY\" effects.log 2>/dev/null; then echo '{{\"performed\": true, \"result\": \"ok\"}}'; else echo '{{\"performed\": false}}'; fi"]"#
            ),
        ),
    )
}

/// A small deterministic generator (xorshift), seeded from the process id and printed, so a
/// failing interleaving can be named.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The runs in `db` that have not ended.
fn unfinished(db: &Path, runs: &[String]) -> usize {
    runs.iter()
        .filter(|r| steps(db, r).last().is_none_or(|s| s["to"] != "done"))
        .count()
}

/// Checks that each of the [`RUNS`] runs performed its effect once: one idempotency key a run
/// in `dir/effects.log`, each once (`seed` names the kill instants).
fn acted_once_each(dir: &Path, seed: u64) {
    let log = std::fs::read_to_string(dir.join("effects.log")).unwrap_or_default();
    let mut performed = BTreeMap::new();
    for key in log.lines().filter(|l| !l.is_empty()) {
        *performed.entry(key.to_owned()).or_insert(0) += 1;
    }
    assert_eq!(performed.len(), RUNS, "one effect per run: {performed:?}");
    assert!(
        performed.values().all(|n| *n == 1),
        "no effect performed twice (seed {seed}): {performed:?}"
    );
}

/// Races two workers for `runs` in `db` (their spec in `dir`), SIGKILLing both at a random
/// instant 0.1–0.9 s after they start, up to eight times while a run is unfinished, then lets
/// one worker finish every run. Returns the seed of the kill instants.
fn kill_rounds(db: &Path, dir: &Path, runs: &[String]) -> u64 {
    let seed = u64::from(std::process::id()) | 1;
    eprintln!("worker_chaos seed {seed}");
    let mut dice = Dice(seed);
    let mut round = 0;
    while unfinished(db, runs) > 0 && round < 8 {
        let workers = Reaper(vec![
            super::worker_wakes::started(db, dir, &format!("w{round}a"), &[]),
            super::worker_wakes::started(db, dir, &format!("w{round}b"), &[]),
        ]);
        std::thread::sleep(Duration::from_millis(100 + dice.below(800)));
        // SIGKILL, both (the Reaper kills what it holds).
        drop(workers);
        round += 1;
    }
    eprintln!("worker_chaos: {round} rounds of kills");
    let mut last = Reaper(vec![super::worker_wakes::started(db, dir, "last", &[])]);
    wait_long("every run ended", || unfinished(db, runs) == 0);
    stop(&mut last);

    seed
}

#[test]
fn workers_killed_at_random_around_firing_fire_each_timer_once_and_act_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let spec = write(dir, "nap.toml", &spec());
    let db = dir.join("nap.db");
    let runs: Vec<String> = (0..RUNS)
        .map(|_| {
            let (mut child, mut lines, run) = start_json(&db, &spec);
            wait_for_step(&mut lines, 3);
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
            run
        })
        .collect();

    let seed = kill_rounds(&db, dir, &runs);

    acted_once_each(dir, seed);
    let edges: Vec<String> = runs
        .iter()
        .flat_map(|r| steps(&db, r))
        .filter_map(|s| s["edge"].as_str().map(str::to_owned))
        .collect();
    eprintln!(
        "worker_chaos: {} in-doubt steps",
        edges.iter().filter(|e| e.contains("doubt")).count()
    );
    for run in &runs {
        assert_eq!(
            fired(&db, run).len(),
            1,
            "{run}'s timer fired once (seed {seed})"
        );
        verifies(&db, run);
    }
}

#[test]
fn workers_killed_at_random_around_an_escalation_fire_each_deadline_once_and_act_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let spec = write(dir, "escalate.toml", &escalating_spec());
    let db = dir.join("escalate.db");
    // Each run asks for its approval and rests: its process exits, nobody holds it.
    let runs: Vec<String> = (0..RUNS)
        .map(|_| {
            let out = crate::support::cli::runtape(&db, &["run", crate::support::cli::utf8(&spec)]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                crate::support::cli::text(&out)
            );
            crate::support::cli::run_id(&out)
        })
        .collect();
    let seed = kill_rounds(&db, dir, &runs);

    acted_once_each(dir, seed);
    for run in &runs {
        let edges: Vec<Value> = fired(&db, run).iter().map(|s| s["edge"].clone()).collect();
        assert_eq!(
            edges,
            vec![
                Value::from("awaiting_input.deadline.escalate"),
                Value::from("awaiting_input.deadline.run"),
            ],
            "{run}: escalated once, then approved once (seed {seed})"
        );
        verifies(&db, run);
    }
}
