//! PostgreSQL's writer commits the writes of many runs in one transaction, the runs' writes
//! at once (pipelined on one connection, `src/store/postgres/lanes.rs`). Grouping changes
//! nothing a single write is promised: a run whose lease was taken over has its own commit
//! refused and the others commit; a commit the database refuses fails alone; a connection
//! killed mid-batch writes nothing of the batch, reports it failed (or, once, tries it again
//! on a new connection), and leaves everything acknowledged before it in place.
//!
//! To know that the writes share one batch, each test holds the writer on a lock: a
//! transaction of its own locks a run's row, a write to that run is queued (the writer waits
//! for the lock in its batch), then the writes under test are queued behind it, and the lock
//! is let go. Everything queued while the writer waited is its next batch.

use super::*;
use support::pg::PgServer;

/// A transaction of the test's own on the database, holding what its statements locked until
/// it is ended.
struct Holder {
    client: tokio_postgres::Client,
}

impl Holder {
    /// Opens a transaction on `url` and runs `sql` in it.
    async fn hold(url: &str, sql: &str) -> Holder {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("the test's own connection");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("BEGIN; {sql}"))
            .await
            .expect("the holding transaction");
        Holder { client }
    }

    /// Ends the transaction (`COMMIT` or `ROLLBACK`), letting go of what it held.
    async fn end(self, how: &str) {
        self.client.batch_execute(how).await.expect("ends");
    }
}

/// Waits until one of this process's connections other than `except` (backends already
/// ended) waits for a lock: the writer reached the held row. Returns the waiting backends'
/// pids. A bound of a minute keeps a broken writer from hanging the test.
fn wait_for_lock_waits(server: &PgServer, except: &[String]) -> Vec<String> {
    let query = format!(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'runtape:{}' \
         AND wait_event_type = 'Lock'",
        std::process::id()
    );
    for _ in 0..6000 {
        let pids: Vec<String> = server
            .sql("postgres", &query)
            .lines()
            .map(str::to_owned)
            .filter(|pid| !except.contains(pid))
            .collect();
        if !pids.is_empty() {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the writer never waited for the held lock");
}

/// A fresh database with runs `ids` created (epoch 1, owner `owner-a`) and run `gate`, whose
/// row the tests lock to hold the writer.
fn runs(server: &PgServer, ids: &[String]) -> (String, PostgresStore) {
    let url = server.fresh_db();
    let store = PostgresStore::open(&url).expect("opens");
    for id in ids.iter().map(String::as_str).chain(["gate"]) {
        create(&store, id);
    }
    (url, store)
}

/// Queues a lease renewal of `gate` while the test holds its row, and waits until the writer
/// waits for it: writes queued from now until the hold ends form the writer's next batch.
fn hold_the_writer(
    rt: &tokio::runtime::Runtime,
    server: &PgServer,
    store: &PostgresStore,
    url: &str,
) -> (Holder, runtape::store::Ack) {
    let holder = rt.block_on(Holder::hold(
        url,
        "SELECT 1 FROM runtape.runs WHERE id = 'gate' FOR UPDATE",
    ));
    let renewal = store.submit(Write::RenewLease {
        run: RunId::new("gate"),
        epoch: 1,
        expires_ms: wall_ms() + 60_000,
    });
    wait_for_lock_waits(server, &[]);
    (holder, renewal)
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("g{i}")).collect()
}

fn transitions_of(store: &PostgresStore, id: &str) -> Vec<u64> {
    store
        .transitions(&RunId::new(id), 0, 100)
        .expect("reads")
        .iter()
        .map(|t| t.seq)
        .collect()
}

/// In one batch with the commits of seven runs (and a second commit of one of them), the
/// commit of a run whose lease another driver took is refused as fenced, naming both epochs,
/// and writes nothing; every other commit of the batch is durable.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_fenced_out_run_in_a_grouped_batch_is_refused_alone() {
    let server = PgServer::start();
    let runs_ = ids(8);
    let (url, store) = runs(&server, &runs_);
    // g3's lease expires and another driver takes it: g3's commits at epoch 1 are stale.
    store_expires_lease(&server, &url, "g3");
    let now = wall_ms();
    let taken = w(
        &store,
        Write::AcquireLease {
            run: RunId::new("g3"),
            owner: "owner-b".into(),
            now_ms: now,
            expires_ms: now + 60_000,
        },
    );
    assert_eq!(taken, Ok(Written::Lease(2)), "owner-b takes g3 over");

    let rt = rt();
    let batches = store
        .stats()
        .transactions
        .load(std::sync::atomic::Ordering::Relaxed);
    let (holder, renewal) = hold_the_writer(&rt, &server, &store, &url);
    let mut acks: Vec<(String, u64, runtape::store::Ack)> = Vec::new();
    for id in &runs_ {
        let c = commit(id, 1, 1);
        acks.push((id.clone(), 1, store.submit(Write::Commit(Box::new(c)))));
    }
    acks.push((
        "g5".into(),
        2,
        store.submit(Write::Commit(Box::new(commit("g5", 1, 2)))),
    ));
    let outcomes: Vec<(String, u64, Result<Written, StoreError>)> = rt.block_on(async {
        holder.end("COMMIT").await;
        renewal
            .await
            .expect("answered")
            .expect("the gate's renewal");
        let mut outcomes = Vec::new();
        for (id, seq, ack) in acks {
            outcomes.push((id, seq, ack.await.expect("answered")));
        }
        outcomes
    });
    assert_eq!(
        store
            .stats()
            .transactions
            .load(std::sync::atomic::Ordering::Relaxed)
            - batches,
        2,
        "the gate's renewal, then every queued commit in one batch"
    );
    for (id, seq, outcome) in &outcomes {
        if id == "g3" {
            assert!(
                matches!(
                    outcome,
                    Err(StoreError::Fenced {
                        ours: 1,
                        current: 2,
                        ..
                    })
                ),
                "the stale commit is refused as fenced: {outcome:?}"
            );
        } else {
            assert_eq!(outcome, &Ok(Written::Done), "{id} seq {seq} commits");
        }
    }
    assert_eq!(latest_seq(&store, "g3"), 0, "nothing of the fenced commit");
    assert!(transitions_of(&store, "g3").is_empty());
    for id in runs_.iter().filter(|id| *id != "g3") {
        let want: Vec<u64> = if id == "g5" { vec![1, 2] } else { vec![1] };
        assert_eq!(transitions_of(&store, id), want, "{id}");
        assert_eq!(latest_seq(&store, id), *want.last().expect("one"));
    }
}

/// Expires run `id`'s lease on the database's clock, as a dead driver's lease does.
fn store_expires_lease(server: &PgServer, url: &str, id: &str) {
    server.sql(
        PgServer::db_of(url),
        &format!("UPDATE runtape.runs SET lease_expires_ms = 0 WHERE id = '{id}'"),
    );
}

/// A commit the database itself refuses (here: two outbox rows for one call, a unique key
/// broken) fails alone: the batch is tried again without it and the other runs' commits in it
/// are durable; nothing of the failed one is written.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_commit_the_database_refuses_fails_alone_in_a_grouped_batch() {
    let server = PgServer::start();
    let runs_ = ids(6);
    let (url, store) = runs(&server, &runs_);
    let rt = rt();
    let (holder, renewal) = hold_the_writer(&rt, &server, &store, &url);
    let mut acks = Vec::new();
    for id in &runs_ {
        let mut c = commit(id, 1, 1);
        if id == "g2" {
            let call =
                OutboxRecord::new(EffectRef { seq: 1, index: 0 }, OutboxStatus::Pending, None);
            c.outbox = vec![call.clone(), call];
        }
        acks.push((id.clone(), store.submit(Write::Commit(Box::new(c)))));
    }
    let outcomes: Vec<(String, Result<Written, StoreError>)> = rt.block_on(async {
        holder.end("COMMIT").await;
        renewal
            .await
            .expect("answered")
            .expect("the gate's renewal");
        let mut outcomes = Vec::new();
        for (id, ack) in acks {
            outcomes.push((id, ack.await.expect("answered")));
        }
        outcomes
    });
    for (id, outcome) in &outcomes {
        if id == "g2" {
            assert!(outcome.is_err(), "the broken commit fails: {outcome:?}");
            assert!(
                !matches!(outcome, Err(StoreError::Fenced { .. } | StoreError::Closed)),
                "{outcome:?}"
            );
        } else {
            assert_eq!(outcome, &Ok(Written::Done), "{id} commits");
            assert_eq!(transitions_of(&store, id), vec![1], "{id}");
        }
    }
    assert!(
        transitions_of(&store, "g2").is_empty(),
        "nothing of g2's commit"
    );
    assert!(store.outbox(&RunId::new("g2")).expect("reads").is_empty());
}

/// The writer's connection is killed while a grouped batch is half applied (the other runs'
/// statements done, one run's blob insert waiting for a row another transaction holds): the
/// batch is tried once more on a new connection, and when that one is killed too, every write
/// of the batch is reported failed and none of it is in the database — while every commit
/// acknowledged before is. Queued again, each commit is written once.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn a_grouped_batch_killed_midway_writes_nothing_and_loses_nothing_acknowledged() {
    let server = PgServer::start();
    let runs_ = ids(6);
    let (url, store) = runs(&server, &runs_);
    for id in &runs_ {
        w(&store, Write::Commit(Box::new(commit(id, 1, 1)))).expect("acknowledged");
    }
    let held_blob = Digest::of(b"held blob");
    let second = |id: &str| {
        let mut c = commit(id, 1, 2);
        if id == "g5" {
            c.blobs.push((held_blob, b"held blob".to_vec()));
        }
        Write::Commit(Box::new(c))
    };
    // Another transaction inserted g5's blob and has not ended: g5's insert waits for it.
    let rt = rt();
    let blob_holder = rt.block_on(Holder::hold(
        &url,
        &format!(
            "INSERT INTO runtape.blobs (hash, bytes) VALUES ('\\x{}'::bytea, 'x')",
            held_blob
                .0
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    ));
    let (holder, renewal) = hold_the_writer(&rt, &server, &store, &url);
    let acks: Vec<_> = runs_.iter().map(|id| store.submit(second(id))).collect();
    rt.block_on(async {
        holder.end("COMMIT").await;
        renewal
            .await
            .expect("answered")
            .expect("the gate's renewal");
    });
    let kill = |pids: Vec<String>| {
        for pid in pids {
            server.sql("postgres", &format!("SELECT pg_terminate_backend({pid})"));
        }
    };
    // Killed mid-batch, then again on the connection it was tried again on.
    let first = wait_for_lock_waits(&server, &[]);
    kill(first.clone());
    kill(wait_for_lock_waits(&server, &first));
    let outcomes: Vec<Result<Written, StoreError>> = rt.block_on(async {
        let mut outcomes = Vec::new();
        for ack in acks {
            outcomes.push(ack.await.expect("answered"));
        }
        outcomes
    });
    assert!(
        outcomes.iter().all(Result::is_err),
        "no write of the killed batch is acknowledged: {outcomes:?}"
    );
    for id in &runs_ {
        assert_eq!(
            transitions_of(&store, id),
            vec![1],
            "{id}: the acknowledged commit is kept, nothing of the killed batch is"
        );
        assert_eq!(latest_seq(&store, id), 1);
    }
    rt.block_on(blob_holder.end("ROLLBACK"));
    for id in &runs_ {
        w(&store, second(id)).expect("queued again, it commits");
        assert_eq!(transitions_of(&store, id), vec![1, 2], "{id}: once each");
    }
}
