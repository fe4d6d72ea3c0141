//! Sessions in every store (revision 5): each run of a session gets the next place, and a
//! taken place is refused.

use super::*;

/// A session's runs are numbered 1, 2, 3, … by the store: the next place is taken once, a
/// place taken (or past the next) is refused with nothing written, and the places read back.
pub(super) fn sessions_number_their_runs_and_refuse_a_taken_place(make: Maker) {
    let store = make();
    let placed = |id: &str, name: &str, index: u64| {
        let mut run = new_run(id, "owner-a", 60_000);
        run.session = Some(SessionLink {
            name: name.into(),
            index,
        });
        w(store.as_ref(), Write::CreateRun(run))
    };
    assert_eq!(placed("s1", "chat", 1), Ok(Written::Lease(1)));
    assert_eq!(placed("s2", "chat", 2), Ok(Written::Lease(1)));
    for (id, index) in [("s3", 2), ("s4", 4), ("s5", 1)] {
        assert!(
            matches!(
                placed(id, "chat", index),
                Err(StoreError::SessionTaken { latest: 2, .. })
            ),
            "place {index} of a session at 2"
        );
        assert_eq!(
            store.run(&RunId::new(id)).expect("reads"),
            None,
            "{id} not written"
        );
    }
    assert_eq!(placed("o1", "other", 1), Ok(Written::Lease(1)));
    create(store.as_ref(), "plain");
    // Two writers asking for the same next place at once: exactly one gets it.
    let racing: Vec<_> = ["r1", "r2"]
        .into_iter()
        .map(|id| {
            let mut run = new_run(id, "owner-b", 60_000);
            run.session = Some(SessionLink {
                name: "chat".into(),
                index: 3,
            });
            store.submit(Write::CreateRun(run))
        })
        .collect();
    let results: Vec<_> = rt().block_on(async {
        let mut out = Vec::new();
        for ack in racing {
            out.push(ack.await.expect("answered"));
        }
        out
    });
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    let winner = if results[0].is_ok() { "r1" } else { "r2" };
    let ids = |runs: Vec<(u64, RunId)>| -> Vec<(u64, String)> {
        runs.into_iter().map(|(i, r)| (i, r.to_string())).collect()
    };
    assert_eq!(
        ids(store.session_runs("chat").expect("reads")),
        vec![(1, "s1".into()), (2, "s2".into()), (3, winner.into())]
    );
    assert!(store.session_runs("nope").expect("reads").is_empty());
    let listed: Vec<(String, u64, String)> = store
        .sessions()
        .expect("reads")
        .into_iter()
        .map(|s| (s.name, s.runs, s.latest.to_string()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("chat".into(), 3, winner.into()),
            ("other".into(), 1, "o1".into())
        ]
    );
    assert_eq!(
        store.session_of(&RunId::new("s2")).expect("reads"),
        Some(SessionLink {
            name: "chat".into(),
            index: 2
        })
    );
    assert_eq!(store.session_of(&RunId::new("plain")).expect("reads"), None);
}
