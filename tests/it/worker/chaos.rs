//! Many workers on one PostgreSQL database, killed at random: four `runtape worker`
//! processes drive 200 queued runs while workers are SIGKILLed and restarted. Every run
//! completes, `verify` passes for every one, no idempotency key of the non-idempotent tool is
//! performed twice, and no committed step is lost (each history is whole: seqs 1..N, chain
//! and states replayed by verify).
//!
//! Each run calls a non-idempotent tool three times; the tool appends its idempotency key to
//! `effects.log`. A worker killed mid-call leaves the call started: whoever takes the run over
//! first kills the orphaned program (same host), then asks the tool's `reconcile` command,
//! which answers from `effects.log` — so a call is performed again only if it never was.

use crate::support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runtape::machine::RunId;
use runtape::receipt::ReceiptSigner;
use runtape::store::{PostgresStore, RunStatus, Store};

const RUNS: usize = 200;
const WORKERS: usize = 4;
const KILLS: usize = 10;
const WORKER_ARGS: [&str; 2] = ["--concurrency", "10"];
const WORKER_ENV: [(&str, &str); 1] = [("RUNTAPE_LEASE_TTL_MS", "3000")];

/// A small deterministic generator (xorshift), seeded from the process id: which worker dies
/// when differs between runs of the test, and the seed is printed.
struct Dice(u64);

impl Dice {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn statuses(store: &PostgresStore) -> std::collections::BTreeMap<&'static str, usize> {
    let mut by = std::collections::BTreeMap::new();
    for r in store.runs().expect("lists") {
        *by.entry(r.status.as_str()).or_insert(0) += 1;
    }
    by
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn four_workers_killed_at_random_complete_every_run_once() {
    let server = support::pg::PgServer::start();
    let url = server.fresh_db();
    let dir: PathBuf = tempfile::tempdir().expect("tempdir").keep();
    let dir = dir.canonicalize().expect("resolves");
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, support::pg::effects_spec(3, 15, "sleep 0.02; "))
        .expect("writes the spec");

    // Queue the runs (what `runtape run spec.toml --detach` does, in-process for speed).
    let store = Arc::new(PostgresStore::open(&url).expect("opens"));
    let file = runtape::config::load(&spec).expect("loads the spec");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let signer = Arc::new(ReceiptSigner::unsigned());
    for i in 0..RUNS {
        rt.block_on(runtape::worker::enqueue(
            store.as_ref(),
            signer.clone(),
            RunId::new(format!("chaos{i:03}")),
            &file.spec,
            "three effects",
            file.setup.to_json().expect("setup"),
        ))
        .expect("queues");
    }

    let seed = u64::from(std::process::id()) | 1;
    eprintln!("chaos seed {seed}");
    let mut dice = Dice(seed);
    let mut gens = [0usize; WORKERS];
    let mut workers = support::pg::Reaper(
        (0..WORKERS)
            .map(|n| {
                support::pg::worker(
                    &url,
                    &dir,
                    &format!("worker{n}.0.log"),
                    &WORKER_ARGS,
                    &WORKER_ENV,
                )
            })
            .collect(),
    );
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let by = statuses(&store);
        let completed = by.get("completed").copied().unwrap_or(0);
        if completed == RUNS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "runs did not all complete in time: {by:?} (logs in {})",
            dir.display()
        );
        if kills < KILLS && completed >= kills * RUNS / (KILLS + 2) {
            let victim = dice.next(WORKERS as u64) as usize;
            workers.0[victim].kill().expect("SIGKILL");
            let _ = workers.0[victim].wait();
            kills += 1;
            gens[victim] += 1;
            std::thread::sleep(Duration::from_millis(dice.next(300)));
            workers.0[victim] = support::pg::worker(
                &url,
                &dir,
                &format!("worker{victim}.{}.log", gens[victim]),
                &WORKER_ARGS,
                &WORKER_ENV,
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        kills, KILLS,
        "every planned kill happened while runs were in flight"
    );

    // Queued at epoch 1, claimed (2) and taken up (3) by one worker; a takeover adds two more.
    let taken_over = store
        .runs()
        .expect("lists")
        .iter()
        .filter(|r| r.lease_epoch >= 5)
        .count();
    eprintln!("{taken_over} runs were taken over from a killed worker");
    assert!(taken_over > 0, "the kills landed on runs in flight");

    // Every run: completed, verified (chain, states, heads, outbox), whole history.
    for r in store.runs().expect("lists") {
        assert_eq!(r.status, RunStatus::Completed, "{}", r.id);
        let report = runtape::history::verify(store.as_ref(), &r.id, None).expect("reads");
        assert!(report.is_ok(), "verify {}: {:?}", r.id, report.err());
        let seqs: Vec<u64> = store
            .transitions(&r.id, 0, u64::MAX)
            .expect("reads")
            .iter()
            .map(|t| t.seq)
            .collect();
        assert_eq!(
            seqs,
            (1..=r.seq).collect::<Vec<_>>(),
            "{}: no step lost",
            r.id
        );
    }

    // Every call performed exactly once.
    let log = std::fs::read_to_string(dir.join("effects.log")).expect("effects happened");
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for key in log.lines() {
        *seen.entry(key).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "performed twice: {twice:?}");
    assert_eq!(seen.len(), RUNS * 3, "three effects per run");

    // Drain the survivors: SIGTERM, exit 0.
    for w in &workers.0 {
        let _ = crate::support::cli::try_signal(w.id(), "TERM");
    }
    for w in &mut workers.0 {
        let status = w.wait().expect("exits");
        assert!(status.success(), "a drained worker exits 0: {status:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
