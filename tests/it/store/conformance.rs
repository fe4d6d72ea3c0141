//! One store conformance suite, run against every store: SQLite, memory, and a real PostgreSQL
//! server. Each case is a function over a maker of fresh, empty stores; each store's test runs
//! every case. A case asserts the contract the executor relies on — sequencing, fencing by the
//! lease epoch, compare-and-swap leases, heads replaced only over the head read, all-or-none
//! multi-commits, outbox states, read-only views — so a store that breaks any of it fails here.

mod conversations;
mod global_memory;
mod grouped_commits;
mod protocol_rules;
use crate::support;
mod sessions;

use conversations::*;
use global_memory::*;
use protocol_rules::*;
use sessions::*;

use std::sync::Arc;
use std::time::Duration;

use runtape::exec::wall_ms;
use runtape::machine::{
    AgentId, Digest, EdgeId, EffectRef, Hlc, PublishOutcome, RunId, Staged, StateKind, Versioned,
};
use runtape::store::global_memory::{chain_link, publish_outcome};
use runtape::store::{
    Commit, Control, HeadRecord, MemoryStore, NewRun, OutboxRecord, OutboxStatus, PostgresStore,
    Publication, Removal, RunStatus, SessionLink, SqliteStore, Store, StoreError, Write, Written,
};

type Maker<'a> = &'a dyn Fn() -> Arc<dyn Store>;

/// A case's name and body.
type Case = (&'static str, fn(Maker));

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn w(store: &dyn Store, write: Write) -> Result<Written, StoreError> {
    rt().block_on(runtape::store::write(store, write))
}

fn head(tag: &str, replaces: Option<&HeadRecord>) -> HeadRecord {
    HeadRecord::new(
        format!("{{\"head\":\"{tag}\"}}").into_bytes(),
        tag.as_bytes().to_vec(),
        replaces.map(HeadRecord::body_digest),
    )
}

fn new_run(id: &str, owner: &str, ttl_ms: u64) -> NewRun {
    let now = wall_ms();
    let mut run = NewRun::new(
        RunId::new(id),
        "{\"spec\":true}".into(),
        format!("goal of {id}"),
        owner.into(),
        now,
        now + ttl_ms,
        head("h0", None),
    );
    run.setup = Some("{\"setup\":true}".into());
    run
}

fn commit(run: &str, epoch: u64, seq: u64) -> Commit {
    let now = wall_ms();
    let event = format!("{{\"seq\":{seq}}}").into_bytes();
    let mut c = Commit::new(
        RunId::new(run),
        epoch,
        seq,
        EdgeId::CreatedStart,
        Hlc::from_ms(now),
        now,
    );
    assert_eq!(c.state_kind, StateKind::Preparing);
    c.event = event.clone();
    c.state_hash = Digest::of(&event);
    c.chain = Digest::of(&[&event[..], b"chain"].concat());
    c.blobs = vec![(Digest::of(b"blob"), b"blob".to_vec())];
    c.snapshot = seq
        .is_multiple_of(2)
        .then(|| format!("{{\"state\":{seq}}}").into_bytes());
    c.cost_nanos = seq * 10;
    c.tokens = seq * 100;
    c.seal = Some(format!("seal{seq}").into_bytes());
    c.lease_expires_ms = now + 60_000;
    c
}

fn create(store: &dyn Store, id: &str) -> u64 {
    match w(store, Write::CreateRun(new_run(id, "owner-a", 60_000))) {
        Ok(Written::Lease(e)) => e,
        other => panic!("create {id}: {other:?}"),
    }
}

fn latest_seq(store: &dyn Store, id: &str) -> u64 {
    store
        .run(&RunId::new(id))
        .expect("reads")
        .expect("exists")
        .seq
}

// ---- the cases ----

fn a_new_run_reads_back_and_its_id_is_taken(make: Maker) {
    let store = make();
    assert_eq!(create(store.as_ref(), "r1"), 1, "the creator holds epoch 1");
    let rec = store
        .run(&RunId::new("r1"))
        .expect("reads")
        .expect("exists");
    assert_eq!(rec.goal, "goal of r1");
    assert_eq!(rec.status, RunStatus::Running);
    assert_eq!(rec.state_kind, StateKind::Created);
    assert_eq!((rec.seq, rec.lease_epoch), (0, 1));
    assert_eq!(rec.lease_owner.as_deref(), Some("owner-a"));
    assert!(rec.lease_expires_ms > wall_ms(), "the lease is live");
    assert_eq!(rec.setup.as_deref(), Some("{\"setup\":true}"));
    assert_eq!(
        store
            .head(&RunId::new("r1"))
            .expect("reads")
            .map(|h| h.body),
        Some(head("h0", None).body)
    );
    assert!(matches!(
        w(
            store.as_ref(),
            Write::CreateRun(new_run("r1", "owner-b", 1))
        ),
        Err(StoreError::DuplicateRun(_))
    ));
    assert!(store.run(&RunId::new("nope")).expect("reads").is_none());
    assert!(
        store
            .transitions(&RunId::new("nope"), 0, 10)
            .expect("reads")
            .is_empty()
    );
    assert!(matches!(
        w(
            store.as_ref(),
            Write::Commit(Box::new(commit("nope", 1, 1)))
        ),
        Err(StoreError::UnknownRun(_))
    ));
    assert_eq!(store.runs().expect("lists").len(), 1);
}

fn commits_are_sequenced_fenced_and_read_back(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    for seq in 1..=4 {
        w(s, Write::Commit(Box::new(commit("r", 1, seq)))).expect("commits");
    }
    assert!(matches!(
        w(s, Write::Commit(Box::new(commit("r", 1, 6)))),
        Err(StoreError::OutOfSequence {
            latest: 4,
            got: 6,
            ..
        })
    ));
    assert!(matches!(
        w(s, Write::Commit(Box::new(commit("r", 2, 5)))),
        Err(StoreError::Fenced {
            ours: 2,
            current: 1,
            ..
        })
    ));
    let run = RunId::new("r");
    let rows = s.transitions(&run, 2, 3).expect("reads");
    assert_eq!(rows.iter().map(|t| t.seq).collect::<Vec<_>>(), vec![2, 3]);
    let c3 = commit("r", 1, 3);
    assert_eq!(rows[1].event, c3.event);
    assert_eq!(rows[1].state_hash, c3.state_hash);
    assert_eq!(rows[1].chain, c3.chain);
    assert_eq!(rows[1].seal, c3.seal);
    assert_eq!(rows[1].state_kind, StateKind::Preparing);
    assert_eq!(
        s.snapshot_at_or_before(&run, 3).expect("reads"),
        Some((2, b"{\"state\":2}".to_vec()))
    );
    assert_eq!(
        s.snapshots(&run, 0, 10)
            .expect("reads")
            .iter()
            .map(|x| x.0)
            .collect::<Vec<_>>(),
        vec![2, 4]
    );
    assert_eq!(
        s.last_seal(&run, 3).expect("reads"),
        Some((3, b"seal3".to_vec()))
    );
    assert_eq!(
        s.blob(&Digest::of(b"blob")).expect("reads"),
        Some(b"blob".to_vec())
    );
    assert_eq!(s.blob(&Digest::of(b"absent")).expect("reads"), None);
    let rec = s.run(&run).expect("reads").expect("exists");
    assert_eq!((rec.seq, rec.tokens, rec.cost_nanos), (4, 400, 40));
}

fn consecutive_commits_are_all_or_none(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    w(s, Write::Commit(Box::new(commit("r", 1, 1)))).expect("commits");
    let gap = vec![commit("r", 1, 2), commit("r", 1, 3), commit("r", 1, 5)];
    assert!(w(s, Write::Commits(gap)).is_err());
    assert_eq!(
        latest_seq(s, "r"),
        1,
        "nothing of a refused list is written"
    );
    assert_eq!(
        s.transitions(&RunId::new("r"), 0, 10).expect("reads").len(),
        1
    );
    let ok = vec![commit("r", 1, 2), commit("r", 1, 3)];
    w(s, Write::Commits(ok)).expect("commits");
    assert_eq!(latest_seq(s, "r"), 3);
}

fn a_head_replaces_only_the_head_it_read(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let h0 = head("h0", None);
    let mut stale = commit("r", 1, 1);
    stale.head = Some(head("h1", Some(&head("other", None))));
    assert!(matches!(
        w(s, Write::Commit(Box::new(stale))),
        Err(StoreError::StaleHead { .. })
    ));
    assert_eq!(latest_seq(s, "r"), 0, "a stale head writes nothing");
    let mut fresh = commit("r", 1, 1);
    fresh.head = Some(head("h1", Some(&h0)));
    w(s, Write::Commit(Box::new(fresh))).expect("commits");
    let stored = s.head(&RunId::new("r")).expect("reads").expect("head");
    assert_eq!(stored.body, head("h1", None).body);
    assert_eq!(stored.seal, b"h1".to_vec());
}

fn leases_are_taken_by_compare_and_swap(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let acquire = |owner: &str, ttl: u64| {
        let now = wall_ms();
        Write::AcquireLease {
            run: RunId::new("r"),
            owner: owner.into(),
            now_ms: now,
            expires_ms: now + ttl,
        }
    };
    assert!(
        matches!(
            w(s, acquire("owner-b", 60_000)),
            Err(StoreError::LeaseHeld { .. })
        ),
        "a live lease of another owner is refused"
    );
    assert_eq!(
        w(s, acquire("owner-a", 300)).expect("the holder takes it again"),
        Written::Lease(2)
    );
    assert!(
        matches!(
            w(s, Write::Commit(Box::new(commit("r", 1, 1)))),
            Err(StoreError::Fenced {
                ours: 1,
                current: 2,
                ..
            })
        ),
        "the old epoch is fenced"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        w(s, acquire("owner-b", 60_000)).expect("an expired lease is taken over"),
        Written::Lease(3)
    );
    let rec = s.run(&RunId::new("r")).expect("reads").expect("exists");
    assert_eq!(rec.lease_owner.as_deref(), Some("owner-b"));
    assert_eq!(rec.lease_epoch, 3);
    let mut end = commit("r", 3, 1);
    end.status = RunStatus::Completed;
    end.outcome = Some("{\"completed\":true}".into());
    w(s, Write::Commit(Box::new(end))).expect("commits");
    assert!(
        matches!(
            w(s, acquire("owner-c", 1)),
            Err(StoreError::Finished {
                status: RunStatus::Completed,
                ..
            })
        ),
        "a finished run's lease is not taken"
    );
}

fn releases_are_fenced_and_never_undo_an_end(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let release = |epoch: u64, status: RunStatus| Write::ReleaseLease {
        run: RunId::new("r"),
        epoch,
        status,
        head: None,
    };
    assert!(matches!(
        w(s, release(7, RunStatus::Paused)),
        Err(StoreError::Fenced { .. })
    ));
    w(s, release(1, RunStatus::Paused)).expect("releases");
    let rec = s.run(&RunId::new("r")).expect("reads").expect("exists");
    assert_eq!((rec.status, rec.lease_owner), (RunStatus::Paused, None));
    w(s, release(1, RunStatus::Running)).expect("a second release is a no-op");
    assert_eq!(
        s.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .status,
        RunStatus::Paused
    );
    let renew = Write::RenewLease {
        run: RunId::new("r"),
        epoch: 1,
        expires_ms: wall_ms() + 60_000,
    };
    w(s, renew).expect("a renewal that raced the release is a no-op");
    let rec = s.run(&RunId::new("r")).expect("reads").expect("exists");
    assert_eq!(
        (rec.lease_owner, rec.lease_expires_ms),
        (None, 0),
        "a released lease stays released"
    );
    let now = wall_ms();
    let epoch = w(
        s,
        Write::AcquireLease {
            run: RunId::new("r"),
            owner: "b".into(),
            now_ms: now,
            expires_ms: now + 60_000,
        },
    )
    .expect("a released run is taken");
    let Written::Lease(epoch) = epoch else {
        panic!("{epoch:?}")
    };
    let mut end = commit("r", epoch, 1);
    end.status = RunStatus::Failed;
    w(s, Write::Commit(Box::new(end))).expect("commits");
    w(s, release(epoch, RunStatus::Paused)).expect("releases");
    assert_eq!(
        s.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .status,
        RunStatus::Failed,
        "a release never overwrites a terminal status"
    );
}

fn the_outbox_marks_calls_started_and_refuses_answered_ones(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let at = EffectRef { seq: 1, index: 0 };
    let mut c1 = commit("r", 1, 1);
    c1.outbox = vec![OutboxRecord::new(
        at,
        OutboxStatus::Pending,
        Some("key-1".into()),
    )];
    w(s, Write::Commit(Box::new(c1))).expect("commits");
    let run = RunId::new("r");
    assert_eq!(
        s.open_effects(&run).expect("reads")[0].status,
        OutboxStatus::Pending
    );
    let mark = |effect: EffectRef| Write::MarkStarted {
        run: RunId::new("r"),
        epoch: 1,
        effects: vec![OutboxRecord::new(
            effect,
            OutboxStatus::Started,
            Some("k".into()),
        )],
        expires_ms: wall_ms() + 60_000,
        head: None,
    };
    w(s, mark(at)).expect("marks");
    let open = s.open_effects(&run).expect("reads");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].status, OutboxStatus::Started);
    assert_eq!(open[0].idempotency_key.as_deref(), Some("key-1"));
    let other = EffectRef { seq: 1, index: 1 };
    w(s, mark(other)).expect("a mark creates a missing row");
    assert_eq!(s.outbox(&run).expect("reads").len(), 2);
    let mut c2 = commit("r", 1, 2);
    c2.resolves = Some(at);
    w(s, Write::Commit(Box::new(c2))).expect("commits");
    assert_eq!(s.open_effects(&run).expect("reads").len(), 1);
    assert!(
        matches!(
            w(s, mark(at)),
            Err(StoreError::AlreadyAnswered {
                seq: 1,
                index: 0,
                ..
            })
        ),
        "a call whose result is committed is not started again"
    );
    let mut fenced = mark(other);
    if let Write::MarkStarted { epoch, .. } = &mut fenced {
        *epoch = 9;
    }
    assert!(matches!(w(s, fenced), Err(StoreError::Fenced { .. })));
}

fn control_requests_reach_unfinished_runs_only(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let set = |c: Option<Control>| Write::SetControl {
        run: RunId::new("r"),
        control: c,
    };
    w(s, set(Some(Control::Pause))).expect("sets");
    assert_eq!(
        s.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .control,
        Some(Control::Pause)
    );
    let why = Some("budget review: stop".to_owned());
    w(s, set(Some(Control::Cancel(why.clone())))).expect("sets");
    assert_eq!(
        s.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .control,
        Some(Control::Cancel(why)),
        "a cancel request keeps its reason"
    );
    let acquire = |s: &dyn Store, owner: &str| {
        let now = wall_ms();
        w(
            s,
            Write::AcquireLease {
                run: RunId::new("r"),
                owner: owner.into(),
                now_ms: now,
                expires_ms: now + 60_000,
            },
        )
        .expect("acquires");
        s.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .control
    };
    // A cancel no driver acted on stays for whoever takes the run up next.
    assert_eq!(
        acquire(s, "owner-a"),
        Some(Control::Cancel(Some("budget review: stop".to_owned()))),
        "taking the lease keeps a pending cancel"
    );
    // A pause was for the driver that held the run: the next taker drops it.
    w(s, set(Some(Control::Pause))).expect("sets");
    assert_eq!(
        acquire(s, "owner-a"),
        None,
        "taking the lease drops a pending pause"
    );
    let mut end = commit("r", 3, 1);
    end.status = RunStatus::Cancelled;
    w(s, Write::Commit(Box::new(end))).expect("commits");
    assert!(matches!(
        w(s, set(Some(Control::Cancel(None)))),
        Err(StoreError::Finished { .. })
    ));
}

fn leases_of_many_runs_read_in_one_call(make: Maker) {
    let store = make();
    let s = store.as_ref();
    let ids: Vec<RunId> = (0..120).map(|i| RunId::new(format!("run-{i}"))).collect();
    for id in &ids {
        create(s, id.as_str());
    }
    assert!(s.leases(&[]).expect("reads nothing").is_empty());
    // One run taken over (epoch 2), one with a pause pending, one unknown id asked for.
    w(
        s,
        Write::ReleaseLease {
            run: ids[7].clone(),
            epoch: 1,
            status: RunStatus::Paused,
            head: None,
        },
    )
    .expect("releases");
    let now = wall_ms();
    w(
        s,
        Write::AcquireLease {
            run: ids[7].clone(),
            owner: "owner-b".into(),
            now_ms: now,
            expires_ms: now + 60_000,
        },
    )
    .expect("takes over");
    w(
        s,
        Write::SetControl {
            run: ids[11].clone(),
            control: Some(Control::Pause),
        },
    )
    .expect("asks to pause");
    let mut asked = ids.clone();
    asked.push(RunId::new("no-such-run"));
    let mut got = s.leases(&asked).expect("reads");
    got.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    assert_eq!(got.len(), ids.len(), "every existing run, no unknown one");
    for lease in &got {
        let record = s.run(&lease.id).expect("reads").expect("exists");
        assert_eq!(lease.lease_epoch, record.lease_epoch, "{}", lease.id);
        assert_eq!(lease.control, record.control, "{}", lease.id);
        // PostgreSQL gives expiries on this process's clock, read a moment apart.
        assert!(
            lease.lease_expires_ms.abs_diff(record.lease_expires_ms) < 5_000,
            "{}: {} vs {}",
            lease.id,
            lease.lease_expires_ms,
            record.lease_expires_ms
        );
    }
    let of = |i: usize| got.iter().find(|l| l.id == ids[i]).expect("listed").clone();
    assert_eq!(of(7).lease_epoch, 2, "the takeover shows");
    assert_eq!(of(11).control, Some(Control::Pause), "the request shows");
    assert_eq!(of(12).control, None);
    assert_eq!(of(12).lease_epoch, 1);
    assert!(
        of(12).lease_expires_ms > now,
        "a live lease has an expiry ahead"
    );
}

fn a_read_only_view_sees_one_moment(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    w(s, Write::Commit(Box::new(commit("r", 1, 1)))).expect("commits");
    let Some(view) = s.snapshot().expect("a view") else {
        return; // the memory store has no views: reads are made on the store itself
    };
    w(s, Write::Commit(Box::new(commit("r", 1, 2)))).expect("commits meanwhile");
    assert_eq!(
        view.run(&RunId::new("r"))
            .expect("reads")
            .expect("exists")
            .seq,
        1
    );
    assert_eq!(
        view.transitions(&RunId::new("r"), 0, 9)
            .expect("reads")
            .len(),
        1
    );
    assert_eq!(latest_seq(s, "r"), 2, "the store itself moved on");
    drop(view);
    assert_eq!(latest_seq(s, "r"), 2);
}

fn writes_of_many_runs_at_once_are_all_durable(make: Maker) {
    let store = make();
    let runs = 10;
    let steps = 20;
    for r in 0..runs {
        create(store.as_ref(), &format!("run{r}"));
    }
    // Every run's commits are queued at once; each run's own are in order.
    rt().block_on(async {
        let mut acks = Vec::new();
        for seq in 1..=steps {
            for r in 0..runs {
                let c = commit(&format!("run{r}"), 1, seq);
                acks.push(store.submit(Write::Commit(Box::new(c))));
            }
        }
        for ack in acks {
            ack.await.expect("answered").expect("durable");
        }
    });
    for r in 0..runs {
        let id = format!("run{r}");
        assert_eq!(latest_seq(store.as_ref(), &id), steps);
        let seqs: Vec<u64> = store
            .transitions(&RunId::new(&id), 0, 1000)
            .expect("reads")
            .iter()
            .map(|t| t.seq)
            .collect();
        assert_eq!(seqs, (1..=steps).collect::<Vec<_>>());
    }
    assert!(store.size_bytes().expect("measures") > 0);
}

fn every_case(make: Maker) {
    let cases: &[Case] = &[
        ("new run", a_new_run_reads_back_and_its_id_is_taken),
        ("commits", commits_are_sequenced_fenced_and_read_back),
        ("conversations", a_conversation_reads_back_whole_in_one_walk),
        ("all or none", consecutive_commits_are_all_or_none),
        ("heads", a_head_replaces_only_the_head_it_read),
        ("leases", leases_are_taken_by_compare_and_swap),
        ("releases", releases_are_fenced_and_never_undo_an_end),
        (
            "outbox",
            the_outbox_marks_calls_started_and_refuses_answered_ones,
        ),
        ("control", control_requests_reach_unfinished_runs_only),
        (
            "fenced writes",
            every_write_under_a_taken_over_lease_is_fenced,
        ),
        (
            "heads of marks and releases",
            a_mark_or_release_whose_head_does_not_follow_is_refused,
        ),
        (
            "refused lists",
            a_list_of_commits_is_refused_whole_for_a_stale_head_or_another_run,
        ),
        (
            "answered among several",
            a_mark_with_one_answered_call_starts_none,
        ),
        (
            "ended take-ups",
            ended_runs_are_not_taken_up_and_keep_their_end,
        ),
        (
            "gone holders",
            a_lease_of_a_gone_process_is_taken_and_a_cancel_survives_it,
        ),
        ("views", a_read_only_view_sees_one_moment),
        ("leases of many runs", leases_of_many_runs_read_in_one_call),
        ("many runs", writes_of_many_runs_at_once_are_all_durable),
        (
            "global memory",
            global_memory_publishes_all_or_none_and_once,
        ),
        ("global memory cap", a_publish_past_the_cap_is_refused_whole),
        (
            "memory removals",
            removals_are_recorded_chained_and_refused_without_a_value,
        ),
        (
            "sessions",
            sessions_number_their_runs_and_refuse_a_taken_place,
        ),
    ];
    for (name, case) in cases {
        eprintln!("case: {name}");
        case(make);
    }
}

#[test]
fn sqlite_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = std::sync::atomic::AtomicU32::new(0);
    every_case(&|| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.path().join(format!("s{i}.db"));
        Arc::new(SqliteStore::open(&path, runtape::store::Durability::Normal).expect("opens"))
    });
}

#[test]
fn memory_passes_the_conformance_suite() {
    every_case(&|| Arc::new(MemoryStore::new()));
}

/// A store that wraps another and forwards its reads (`forward_store_reads!`, as `TimedStore`
/// and the crash tests' wrapper do) behaves as the store it wraps: every read of every case
/// goes through the forwarding, every write through the timing.
#[test]
fn a_timed_store_over_memory_passes_the_conformance_suite() {
    every_case(&|| {
        Arc::new(runtape::store::TimedStore::new(
            Arc::new(MemoryStore::new()),
        ))
    });
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_passes_the_conformance_suite() {
    let server = support::pg::PgServer::start();
    every_case(&|| Arc::new(PostgresStore::open(&server.fresh_db()).expect("opens")));
}

/// The lease is judged by the database's clock, not the writer's: a process whose clock is an
/// hour behind still gets a lease that lasts its length, and one whose clock is an hour ahead
/// cannot make a live lease look expired.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_leases_follow_the_database_clock() {
    let server = support::pg::PgServer::start();
    let store = PostgresStore::open(&server.fresh_db()).expect("opens");
    let hour = 3_600_000;
    let mut new = new_run("r", "slow-clock", 0);
    new.now_ms -= hour;
    new.lease_expires_ms = new.now_ms + 60_000;
    assert_eq!(
        w(&store, Write::CreateRun(new)).expect("creates"),
        Written::Lease(1)
    );
    let rec = store.run(&RunId::new("r")).expect("reads").expect("exists");
    let left = rec.lease_expires_ms.saturating_sub(wall_ms());
    assert!(
        (50_000..=61_000).contains(&left),
        "the row reports the lease's length on this process's clock: {left} ms left"
    );
    let now = wall_ms() + hour;
    let refused = w(
        &store,
        Write::AcquireLease {
            run: RunId::new("r"),
            owner: "fast-clock".into(),
            now_ms: now,
            expires_ms: now + 60_000,
        },
    );
    assert!(
        matches!(refused, Err(StoreError::LeaseHeld { .. })),
        "a clock an hour ahead does not expire a live lease: {refused:?}"
    );
}

/// Many processes opening one fresh database at once (workers starting together) create its
/// schema once: each waits for the migration lock and then sees the tables the first one
/// made. (Before, a waiter looked the tables up in its stale catalog cache, found none, and
/// failed with "relation meta already exists".) Rounds of eight connections, each its own
/// server backend, as processes have.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_opens_racing_on_a_fresh_database_create_the_schema_once() {
    let server = support::pg::PgServer::start();
    for round in 0..5 {
        let url = server.fresh_db();
        let gate = Arc::new(std::sync::Barrier::new(8));
        let opened: Vec<Result<(), String>> = (0..8)
            .map(|_| {
                let (url, gate) = (url.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.wait();
                    PostgresStore::open(&url)
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("the thread ends"))
            .collect();
        assert!(
            opened.iter().all(Result::is_ok),
            "round {round}: {opened:?}"
        );
    }
}

/// Opening refuses a database written by a newer runtape and writes nothing; a URL that does
/// not parse, or a server that is not there, is one clear line.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_open_errors_are_one_clear_line() {
    let server = support::pg::PgServer::start();
    let url = server.fresh_db();
    drop(PostgresStore::open(&url).expect("creates the schema"));
    let db = support::pg::PgServer::db_of(&url).to_owned();
    server.sql(
        &db,
        "UPDATE runtape.meta SET value = 99 WHERE name = 'schema_version'",
    );
    let e = PostgresStore::open(&url).expect_err("newer");
    assert!(
        matches!(e, StoreError::NewerSchema { found: 99, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("upgrade runtape"), "{e}");
    assert_eq!(
        server.sql(
            &db,
            "SELECT value FROM runtape.meta WHERE name = 'schema_version'"
        ),
        "99",
        "nothing was written"
    );
    let e = PostgresStore::open("postgres://runtape:hunter2@127.0.0.1:1/x").expect_err("no server");
    let text = e.to_string();
    assert!(text.contains("cannot connect"), "{text}");
    assert!(
        !text.contains("hunter2"),
        "the password is never shown: {text}"
    );
    assert!(!text.contains('\n'), "{text}");
    let e = PostgresStore::open("postgres://runtape@127.0.0.1:1/x?sslmode=on").expect_err("tls");
    assert!(e.to_string().contains("sslmode `on` is not one of"), "{e}");
    let e = PostgresStore::open(&server.url("no_such_db")).expect_err("missing database");
    assert!(e.to_string().contains("create the database"), "{e}");
}
