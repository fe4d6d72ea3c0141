//! The claim of a schedule's instants is a compare-and-swap on its cursor plus a unique key on
//! (schedule, instant): of many connections claiming the same instants from the same cursor at
//! once, exactly one succeeds, and an instant claimed (by `trigger` or a worker) cannot be
//! claimed again.

use std::sync::{Arc, Barrier};

use runtape::machine::RunId;
use runtape::store::schedules::{CursorMove, FireRecord, FireState, ScheduleRecord};
use runtape::store::{Durability, SqliteStore, Store};

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

#[test]
fn of_eight_racing_claims_of_the_same_instants_one_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("s.db");
    let store = SqliteStore::open(&db, Durability::Full).expect("opens");
    let book = store.schedules().expect("SQLite keeps schedules");
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
            let db = db.clone();
            std::thread::spawn(move || {
                // A store of its own per thread: a process of its own, as far as SQLite knows.
                let store = SqliteStore::open(&db, Durability::Full).expect("opens");
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
