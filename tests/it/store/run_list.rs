//! The run list's contract on every store ([`Store::run_page`], [`Store::run_stats`]): the
//! same runs, written through each store's writer (new runs, forks, child runs, commits that
//! end them, released leases, imports and a prune), list the same pages on SQLite and on
//! PostgreSQL — the same runs on each page, in the same order, with a next page on the same
//! pages — for every filter and sort, paged four runs at a time; and the runs each query
//! lists are exactly those the memory store lists, which filters every run with
//! [`RunQuery::matches`] and sorts them itself. The aggregates add up the same on all three.

use std::collections::BTreeMap;
use std::sync::Arc;

use runtape::exec::wall_ms;
use runtape::machine::{
    AgentSpec, ChildProof, Digest, EdgeId, EffectId, ErrorClass, Failure, Hlc, Outcome, RunId,
    RunSpec, Spec, StateKind,
};
use runtape::store::import::ImportedRun;
use runtape::store::retention::{Prune, PruneRun};
use runtape::store::{
    Commit, HeadRecord, MemoryStore, NewRun, PostgresStore, Relation, RunPage, RunQuery, RunSort,
    RunStatus, SqliteStore, StatusFilter, Store, Write, Written,
};

/// Runs written by the writer (besides the imported ones).
const RUNS: usize = 90;
/// Runs written elsewhere and imported.
const IMPORTED: usize = 3;
/// The runs pruned (on the stores that prune; the memory store is given the runs without them).
const PRUNED: [usize; 2] = [1, 2];

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn w(rt: &tokio::runtime::Runtime, store: &dyn Store, write: Write) -> Written {
    rt.block_on(runtape::store::write(store, write))
        .unwrap_or_else(|e| panic!("write: {e}"))
}

fn id(i: usize) -> RunId {
    RunId::new(format!("rl{i:03}"))
}

/// Run `i`'s stored spec: agent `planner` or `writer` by `i % 2`, tags `team=a|b|c` by
/// `i % 3` and `batch=N` by `i / 30` (none for every 10th), started by run `i - 1`'s
/// delegation for `i % 8 == 5`.
fn spec_of(i: usize) -> String {
    let agent = if i.is_multiple_of(2) {
        "planner"
    } else {
        "writer"
    };
    let tags: BTreeMap<String, String> = if i % 10 == 9 {
        BTreeMap::new()
    } else {
        [
            ("team".to_owned(), ["a", "b", "c"][i % 3].to_owned()),
            ("batch".to_owned(), (i / 30).to_string()),
        ]
        .into()
    };
    let mut spec = Spec {
        agents: vec![AgentSpec::new(
            agent,
            "p",
            if i % 4 < 2 { "m1" } else { "m2" },
        )],
        tags,
        ..Spec::default()
    };
    if i % 8 == 5 {
        spec.delegated_by = Some(EffectId {
            run: id(i - 1),
            seq: 1,
            index: 0,
        });
    }
    serde_json::to_string(&RunSpec::build(spec).expect("valid spec")).expect("encodes")
}

fn head(i: usize) -> HeadRecord {
    HeadRecord::new(format!("{{\"head\":{i}}}").into_bytes(), vec![1], None)
}

/// How run `i` stands once written.
enum End {
    Done(RunStatus, Outcome),
    /// Running under a live lease.
    Live,
    /// Running under a lease that lapsed.
    Lapsed,
    /// Running with no lease (queued).
    Queued,
}

fn end_of(i: usize) -> End {
    if i.is_multiple_of(7) {
        let class = if i.is_multiple_of(2) {
            ErrorClass::ToolFailed
        } else {
            ErrorClass::BadRequest
        };
        return End::Done(
            RunStatus::Failed,
            Outcome::Failed {
                error: Failure::new(class, format!("goal {i} was refused")),
            },
        );
    }
    match i % 11 {
        4 => return End::Live,
        8 => return End::Lapsed,
        10 => return End::Queued,
        _ => {}
    }
    if i % 7 == 3 {
        return End::Done(
            RunStatus::Cancelled,
            Outcome::Cancelled {
                reason: Some(format!("Stopped {i}")),
            },
        );
    }
    End::Done(
        RunStatus::Completed,
        Outcome::Completed {
            answer: Some(format!("Answer {i}")),
            output: None,
        },
    )
}

/// The writes of run `i` (created at `base + i` seconds), in order: its creation (a fork of
/// run `i - 3` for `i % 12 == 11`), one commit with its spend and maybe its end, and the
/// release of its lease unless it runs on.
fn writes_of(base: u64, i: usize) -> Vec<Write> {
    let created = base + i as u64 * 1000;
    // A live lease outlasts the test by far on either clock (PostgreSQL's runs from the
    // database's now, the others' from `created`, an hour ago).
    let lease = if matches!(end_of(i), End::Lapsed) {
        0
    } else {
        100 * 3_600_000
    };
    let mut new = NewRun::new(
        id(i),
        spec_of(i),
        format!("goal {i}"),
        "owner-list".into(),
        created,
        created + lease,
        head(i),
    );
    if i % 12 == 11 {
        new.parent = Some((id(i - 3), 1));
    }
    // Durations repeat (ties broken by creation), costs too.
    let now = created + ((i * 37) % 11) as u64 * 100;
    // A fork's own history goes on after the step it was forked at.
    let seq = if i % 12 == 11 { 2 } else { 1 };
    let mut c = Commit::new(id(i), 1, seq, EdgeId::CreatedStart, Hlc::from_ms(now), now);
    c.state_kind = StateKind::Preparing;
    c.event = format!("{{\"seq\":{i}}}").into_bytes();
    c.state_hash = Digest::of(&c.event);
    c.chain = Digest::of(&[&c.event[..], b"chain"].concat());
    c.cost_nanos = (i % 5) as u64 * 1_000_000;
    c.tokens = (i % 5) as u64 * 100;
    c.lease_expires_ms = now + lease;
    c.status = RunStatus::Running;
    if let End::Done(status, outcome) = end_of(i) {
        c.status = status;
        c.outcome = Some(serde_json::to_string(&outcome).expect("encodes"));
    }
    let mut out = vec![Write::CreateRun(new), Write::Commit(Box::new(c))];
    let release = match end_of(i) {
        End::Done(status, _) => Some(status),
        End::Queued => Some(RunStatus::Running),
        End::Live | End::Lapsed => None,
    };
    if let Some(status) = release {
        out.push(Write::ReleaseLease {
            run: id(i),
            epoch: 1,
            status,
            head: None,
        });
    }
    out
}

/// Writes run `i` through `store`'s writer ([`writes_of`]), one write after another.
fn write_run(rt: &tokio::runtime::Runtime, store: &dyn Store, base: u64, i: usize) {
    for write in writes_of(base, i) {
        w(rt, store, write);
    }
}

/// The runs `rl{RUNS}…` as another store holds them, to import.
fn to_import(rt: &tokio::runtime::Runtime, base: u64) -> Vec<ImportedRun> {
    let source = MemoryStore::new();
    (RUNS..RUNS + IMPORTED)
        .map(|i| {
            write_run(rt, &source, base, i);
            let record = source.run(&id(i)).expect("reads").expect("written");
            ImportedRun {
                head: source.head(&id(i)).expect("reads").expect("a head"),
                transitions: source.transitions(&id(i), 1, record.seq).expect("reads"),
                snapshots: Vec::new(),
                outbox: Vec::new(),
                session: None,
                blobs: Vec::new(),
                record,
            }
        })
        .collect()
}

/// Writes every run into `store`: through its writer, then the imports, then a prune of
/// [`PRUNED`] (a store that cannot prune is given the runs without them).
fn populate(store: &dyn Store, base: u64, prunes: bool) {
    let rt = rt();
    for i in 0..RUNS {
        if prunes || !PRUNED.contains(&i) {
            write_run(&rt, store, base, i);
        }
    }
    for run in to_import(&rt, base) {
        w(&rt, store, Write::Import(Box::new(run)));
    }
    if prunes {
        let runs = PRUNED
            .iter()
            .map(|i| PruneRun {
                run: id(*i),
                parent: None,
                status: RunStatus::Completed,
                seq: 1,
                proof: ChildProof {
                    run: id(*i),
                    seq: 1,
                    chain: Digest::of(b"chain"),
                    anchor: None,
                    receipt: None,
                },
                head: head(*i).body_digest(),
            })
            .collect();
        w(
            &rt,
            store,
            Write::Prune(Prune {
                runs,
                now_ms: wall_ms(),
                by: "owner-list".into(),
            }),
        );
    }
}

/// Every query the list is checked with.
fn queries(planner_spec: &str, base: u64) -> Vec<(String, RunQuery)> {
    let q = RunQuery::default;
    let mut out: Vec<(&str, RunQuery)> = vec![
        ("everything", q()),
        (
            "oldest first",
            RunQuery {
                ascending: true,
                ..q()
            },
        ),
        (
            "completed",
            RunQuery {
                status: Some(StatusFilter::Stored(RunStatus::Completed)),
                ..q()
            },
        ),
        (
            "failed",
            RunQuery {
                status: Some(StatusFilter::Stored(RunStatus::Failed)),
                ..q()
            },
        ),
        (
            "cancelled",
            RunQuery {
                status: Some(StatusFilter::Stored(RunStatus::Cancelled)),
                ..q()
            },
        ),
        (
            "running",
            RunQuery {
                status: Some(StatusFilter::Stored(RunStatus::Running)),
                ..q()
            },
        ),
        (
            "queued",
            RunQuery {
                status: Some(StatusFilter::Queued),
                ..q()
            },
        ),
        (
            "interrupted",
            RunQuery {
                status: Some(StatusFilter::Interrupted),
                ..q()
            },
        ),
        (
            "agent",
            RunQuery {
                agent: Some("writer".into()),
                ..q()
            },
        ),
        (
            "spec",
            RunQuery {
                spec: Some(planner_spec[..10].to_owned()),
                ..q()
            },
        ),
        (
            "time range",
            RunQuery {
                created_from_ms: Some(base + 20_000),
                created_to_ms: Some(base + 55_000),
                ..q()
            },
        ),
        (
            "cost range",
            RunQuery {
                cost_min: Some(1_000_000),
                cost_max: Some(3_000_000),
                ..q()
            },
        ),
        (
            "duration range",
            RunQuery {
                duration_min_ms: Some(300),
                duration_max_ms: Some(700),
                ..q()
            },
        ),
        (
            "roots",
            RunQuery {
                relation: Some(Relation::Root),
                ..q()
            },
        ),
        (
            "forks",
            RunQuery {
                relation: Some(Relation::Fork),
                ..q()
            },
        ),
        (
            "children",
            RunQuery {
                relation: Some(Relation::Child),
                ..q()
            },
        ),
        (
            "forks of rl020",
            RunQuery {
                parent: Some(id(20)),
                ..q()
            },
        ),
        (
            "children of rl012",
            RunQuery {
                parent: Some(id(12)),
                ..q()
            },
        ),
        (
            "a tag",
            RunQuery {
                tags: vec![("team".into(), "b".into())],
                ..q()
            },
        ),
        (
            "two tags",
            RunQuery {
                tags: vec![("team".into(), "a".into()), ("batch".into(), "1".into())],
                ..q()
            },
        ),
        (
            "text in an answer",
            RunQuery {
                text: Some("answer 1".into()),
                ..q()
            },
        ),
        (
            "text in a failure's reason",
            RunQuery {
                text: Some("tool_failed".into()),
                ..q()
            },
        ),
        (
            "text in a cancellation",
            RunQuery {
                text: Some("stopped".into()),
                ..q()
            },
        ),
        (
            "text in a goal",
            RunQuery {
                text: Some("goal 4".into()),
                ..q()
            },
        ),
        (
            "text in an id",
            RunQuery {
                text: Some("rl09".into()),
                ..q()
            },
        ),
        (
            "text taken literally",
            RunQuery {
                text: Some("%".into()),
                ..q()
            },
        ),
        (
            "costliest",
            RunQuery {
                sort: RunSort::Cost,
                ..q()
            },
        ),
        (
            "cheapest",
            RunQuery {
                sort: RunSort::Cost,
                ascending: true,
                ..q()
            },
        ),
        (
            "longest",
            RunQuery {
                sort: RunSort::Duration,
                ..q()
            },
        ),
        (
            "shortest",
            RunQuery {
                sort: RunSort::Duration,
                ascending: true,
                ..q()
            },
        ),
        (
            "costliest completed planner runs of team c",
            RunQuery {
                sort: RunSort::Cost,
                status: Some(StatusFilter::Stored(RunStatus::Completed)),
                agent: Some("planner".into()),
                tags: vec![("team".into(), "c".into())],
                ..q()
            },
        ),
        (
            "shortest roots in a time range",
            RunQuery {
                sort: RunSort::Duration,
                ascending: true,
                relation: Some(Relation::Root),
                created_from_ms: Some(base + 10_000),
                ..q()
            },
        ),
    ];
    for (_, q) in &mut out {
        q.limit = 4;
    }
    out.into_iter().map(|(n, q)| (n.to_owned(), q)).collect()
}

/// The pages of one query: the ids of each page's runs and whether it names a next page.
type Pages = Vec<(Vec<String>, bool)>;

/// Each page of `q` on `store`, following the cursors.
fn pages(store: &dyn Store, q: &RunQuery) -> Pages {
    let mut out = Vec::new();
    let mut q = q.clone();
    loop {
        let RunPage { runs, next } = store.run_page(&q, wall_ms()).expect("a page");
        out.push((
            runs.iter().map(|r| r.id.to_string()).collect(),
            next.is_some(),
        ));
        match next {
            Some(c) => q.after = Some(c),
            None => return out,
        }
        assert!(out.len() < 1000, "the cursor does not advance");
    }
}

/// Every run `pages` listed, in order.
fn listed(pages: &Pages) -> Vec<String> {
    pages.iter().flat_map(|(ids, _)| ids.clone()).collect()
}

/// Checks `store` against the memory store holding the same runs, and returns its pages of
/// every query (to compare with another store's).
fn check_against_memory(store: &dyn Store, base: u64) -> Vec<(String, Pages)> {
    let memory = MemoryStore::new();
    populate(&memory, base, false);
    let planner_spec = store
        .run(&id(0))
        .expect("reads")
        .expect("run 0")
        .spec_digest();
    let mut out = Vec::new();
    for (name, q) in queries(&planner_spec, base) {
        let got = pages(store, &q);
        let want = listed(&pages(&memory, &q));
        assert_eq!(listed(&got), want, "{name}: the runs listed, in order");
        out.push((name, got));
    }
    // Every kind of filter picked some runs and left others out.
    let every = out[0].1.iter().map(|(ids, _)| ids.len()).sum::<usize>();
    assert_eq!(every, RUNS + IMPORTED - PRUNED.len());
    for (name, got) in &out[2..] {
        let n = listed(got).len();
        assert!(
            n > 0 || name.starts_with("text taken"),
            "{name} lists nothing"
        );
        assert!(n < every || name.contains("est"), "{name} lists everything");
    }
    for since in [0, base + 30_000] {
        assert_eq!(
            store.run_stats(since, 10_000).expect("stats"),
            memory.run_stats(since, 10_000).expect("stats"),
            "run_stats since {since}"
        );
    }
    out
}

fn base() -> u64 {
    // Whole buckets of 10 s from here, whatever the clock.
    (wall_ms() - 3_600_000) / 10_000 * 10_000
}

#[test]
fn sqlite_lists_the_run_list_as_the_memory_store_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(
        &dir.path().join("list.db"),
        runtape::store::Durability::Normal,
    )
    .expect("opens");
    let base = base();
    populate(&store, base, true);
    check_against_memory(&store, base);
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_lists_the_same_pages_as_sqlite() {
    let server = crate::support::pg::PgServer::start();
    let pg = PostgresStore::open(&server.fresh_db()).expect("opens");
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite: Arc<dyn Store> = Arc::new(
        SqliteStore::open(
            &dir.path().join("list.db"),
            runtape::store::Durability::Normal,
        )
        .expect("opens"),
    );
    let base = base();
    populate(&pg, base, true);
    populate(sqlite.as_ref(), base, true);
    let on_pg = check_against_memory(&pg, base);
    let on_sqlite = check_against_memory(sqlite.as_ref(), base);
    for ((name, pg_pages), (_, sqlite_pages)) in on_pg.iter().zip(&on_sqlite) {
        assert_eq!(pg_pages, sqlite_pages, "{name}: page by page");
    }
    for since in [0, base + 30_000] {
        assert_eq!(
            pg.run_stats(since, 10_000).expect("stats"),
            sqlite.run_stats(since, 10_000).expect("stats"),
        );
    }
}

/// Writes runs `0..count` ([`writes_of`]) into `store`, a chunk of runs at a time, each
/// chunk's creations, then commits, then releases submitted together (the writer groups them).
fn write_many(store: &dyn Store, base: u64, count: usize) {
    let rt = rt();
    let chunk = 2_000;
    for from in (0..count).step_by(chunk) {
        let runs: Vec<Vec<Write>> = (from..(from + chunk).min(count))
            .map(|i| writes_of(base, i))
            .collect();
        for phase in 0..3 {
            let acks: Vec<_> = runs
                .iter()
                .filter_map(|ws| ws.get(phase).cloned())
                .map(|write| store.submit(write))
                .collect();
            for ack in acks {
                rt.block_on(ack)
                    .unwrap_or(Err(runtape::store::StoreError::Closed))
                    .unwrap_or_else(|e| panic!("write: {e}"));
            }
        }
    }
}

/// The median of three timings of `f`, ms.
fn median_ms<T>(mut f: impl FnMut() -> T) -> f64 {
    let mut ms: Vec<f64> = (0..3)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[1]
}

/// Prints the run list's timings on `store` holding `count` runs: the first page, filtered
/// pages, the 51st page by cursor, and the aggregates, each the median of three.
fn measure(name: &str, store: &dyn Store, count: usize) {
    let page = |q: &RunQuery| store.run_page(q, wall_ms()).expect("a page");
    let q = |f: &dyn Fn(&mut RunQuery)| {
        let mut q = RunQuery {
            limit: 50,
            ..RunQuery::default()
        };
        f(&mut q);
        q
    };
    let cases: Vec<(&str, RunQuery)> = vec![
        ("first page", q(&|_| {})),
        (
            "failed",
            q(&|q| q.status = Some(StatusFilter::Stored(RunStatus::Failed))),
        ),
        (
            "writer, team=c, completed",
            q(&|q| {
                q.agent = Some("writer".into());
                q.tags = vec![("team".into(), "c".into())];
                q.status = Some(StatusFilter::Stored(RunStatus::Completed));
            }),
        ),
        (
            "text `answer 4242`",
            q(&|q| q.text = Some("answer 4242".into())),
        ),
        (
            "costliest, cost >= 2e6",
            q(&|q| {
                q.sort = RunSort::Cost;
                q.cost_min = Some(2_000_000);
            }),
        ),
        (
            "shortest first",
            q(&|q| {
                q.sort = RunSort::Duration;
                q.ascending = true;
            }),
        ),
    ];
    for (what, q) in cases {
        let first = median_ms(|| page(&q));
        // The cursor at the end of page 50, then page 51 timed.
        let mut deep = q.clone();
        for _ in 0..50 {
            match page(&deep).next {
                Some(c) => deep.after = Some(c),
                None => break,
            }
        }
        let deep_ms = median_ms(|| page(&deep));
        eprintln!(
            "{name} {count} runs: `{what}`: first page {first:.1} ms, page 51 {deep_ms:.1} ms"
        );
    }
    let stats = median_ms(|| store.run_stats(0, 3_600_000).expect("stats"));
    eprintln!("{name} {count} runs: run_stats {stats:.1} ms");
}

/// Measures the run list at 100,000 runs (`RUNTAPE_LIST_RUNS` to change it) on SQLite and on
/// PostgreSQL: writes them through each store's writer, then prints the first page, filtered
/// pages and page 51 of several queries, and the aggregates, each the median of three. Asserts
/// nothing about time.
/// `cargo test --release --test it -- --include-ignored store::run_list::measure --nocapture`
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres (and minutes)"]
fn measure_run_pages_at_100000_runs_on_both_stores() {
    let count: usize = std::env::var("RUNTAPE_LIST_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let base = base() - count as u64 * 1000;
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStore::open(
        &dir.path().join("list.db"),
        runtape::store::Durability::Normal,
    )
    .expect("opens");
    let t = std::time::Instant::now();
    write_many(&sqlite, base, count);
    eprintln!(
        "sqlite: wrote {count} runs in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    measure("sqlite", &sqlite, count);
    drop(sqlite);
    let server = crate::support::pg::PgServer::start();
    let url = server.fresh_db();
    let pg = PostgresStore::open(&url).expect("opens");
    let t = std::time::Instant::now();
    write_many(&pg, base, count);
    eprintln!(
        "postgres: wrote {count} runs in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // The statistics autovacuum would have gathered by now on a database in use.
    server.sql(crate::support::pg::PgServer::db_of(&url), "VACUUM ANALYZE");
    measure("postgres", &pg, count);
}
