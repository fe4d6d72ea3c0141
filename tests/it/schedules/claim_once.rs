//! The claim of a schedule's instants is a compare-and-swap on its cursor plus a unique key on
//! (schedule, instant): of many connections claiming the same instants from the same cursor at
//! once, exactly one succeeds, and an instant claimed (by `trigger` or a worker) cannot be
//! claimed again. On a SQLite file (`BEGIN IMMEDIATE`) and on PostgreSQL (the schedule's row
//! locked `FOR UPDATE`, the key taken `ON CONFLICT DO NOTHING`).

use std::sync::{Arc, Barrier};

use runtape::machine::RunId;
use runtape::store::schedules::{CursorMove, FireRecord, FireState, ScheduleRecord};
use runtape::store::{Durability, PostgresStore, SqliteStore, Store};

use crate::support::pg::PgServer;

fn schedule() -> ScheduleRecord {
    ScheduleRecord {
        name: "hourly".into(),
        spec_path: "/nowhere/report.toml".into(),
        cron: "0 * * * *".into(),
        tz: "UTC".into(),
        goal: None,
        overlap: "skip".into(),
        catch_up: "all".into(),
        paused: false,
        cursor_ms: 0,
        created_ms: 0,
    }
}

fn fire(instant_ms: u64) -> FireRecord {
    FireRecord {
        schedule: "hourly".into(),
        instant_ms,
        run: RunId::new(format!("hourly-{instant_ms}")),
        state: FireState::Pending,
        manual: false,
        fired_ms: 1,
    }
}

/// A store of its own on the database under test: a process of its own, as far as the
/// database knows.
type Open = Arc<dyn Fn() -> Box<dyn Store> + Send + Sync>;

#[test]
fn of_eight_racing_claims_of_the_same_instants_one_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("s.db");
    eight_race(Arc::new(move || {
        Box::new(SqliteStore::open(&db, Durability::Full).expect("opens"))
    }));
}

#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn of_eight_racing_claims_in_postgresql_one_wins() {
    let server = PgServer::start();
    let url = server.fresh_db();
    eight_race(Arc::new(move || {
        Box::new(PostgresStore::open(&url).expect("opens"))
    }));
}

fn eight_race(open: Open) {
    let store = open();
    let book = store.schedules().expect("the database keeps schedules");
    assert!(book.add(&schedule()).expect("adds"));
    assert!(
        !book.add(&schedule()).expect("reads"),
        "a name is added once"
    );
    drop(book);
    let barrier = Arc::new(Barrier::new(8));
    let won: Vec<bool> = (0..8)
        .map(|_| {
            let barrier = barrier.clone();
            let open = open.clone();
            std::thread::spawn(move || {
                let store = open();
                let book = store.schedules().expect("schedules");
                barrier.wait();
                book.claim(
                    "hourly",
                    Some(CursorMove {
                        from: 0,
                        to: 7_200_000,
                    }),
                    &[fire(3_600_000), fire(7_200_000)],
                )
                .expect("claims or loses")
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let book = store.schedules().expect("schedules");
    let fires = book.fires("hourly").expect("reads");
    assert_eq!(
        fires.iter().map(|f| f.instant_ms).collect::<Vec<_>>(),
        [3_600_000, 7_200_000],
        "each instant once"
    );
    assert_eq!(book.all().expect("reads")[0].cursor_ms, 7_200_000);
    // The same instant again, with the cursor moved as it now reads: the key refuses it.
    assert!(
        !book
            .claim(
                "hourly",
                Some(CursorMove {
                    from: 7_200_000,
                    to: 7_200_000
                }),
                &[fire(7_200_000)]
            )
            .expect("reads"),
        "an instant claimed is not claimed again"
    );
    // A paused schedule claims nothing.
    assert!(book.set_paused("hourly", true).expect("pauses"));
    assert!(
        !book
            .claim(
                "hourly",
                Some(CursorMove {
                    from: 7_200_000,
                    to: 10_800_000
                }),
                &[fire(10_800_000)]
            )
            .expect("reads")
    );
    assert_eq!(book.fires("hourly").expect("reads").len(), 2);
}
