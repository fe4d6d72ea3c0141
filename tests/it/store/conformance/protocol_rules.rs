//! The store protocol's rules (`store::protocol`) as every store must apply them inside its own
//! transaction: a refused write is refused with the rule's error and changes nothing. These
//! cases cover the rules on every kind of write that carries them, beyond the first cases of
//! the suite: fencing of each lease-bearing write after a take-over, a head that does not
//! follow on a mark and on a release, an answered call among several to start, take-ups of
//! ended runs and of a gone holder's lease, and what a take-up leaves of a request.

use super::*;

/// Takes the run's lease for `owner`; the new epoch.
fn take_up(s: &dyn Store, id: &str, owner: &str) -> Result<u64, StoreError> {
    let now = wall_ms();
    match w(
        s,
        Write::AcquireLease {
            run: RunId::new(id),
            owner: owner.into(),
            now_ms: now,
            expires_ms: now + 60_000,
        },
    )? {
        Written::Lease(epoch) => Ok(epoch),
        other => panic!("a take-up answers with its epoch: {other:?}"),
    }
}

fn record(s: &dyn Store, id: &str) -> runtape::store::RunRecord {
    s.run(&RunId::new(id)).expect("reads").expect("exists")
}

fn mark(id: &str, epoch: u64, effects: &[EffectRef], head: Option<HeadRecord>) -> Write {
    Write::MarkStarted {
        run: RunId::new(id),
        epoch,
        effects: effects
            .iter()
            .map(|e| OutboxRecord::new(*e, OutboxStatus::Started, Some("k".into())))
            .collect(),
        expires_ms: wall_ms() + 60_000,
        head,
    }
}

pub(super) fn every_write_under_a_taken_over_lease_is_fenced(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    w(s, Write::Commit(Box::new(commit("r", 1, 1)))).expect("commits");
    let epoch = take_up(s, "r", "owner-a").expect("the holder takes it again");
    assert_eq!(epoch, 2);
    let before = record(s, "r");
    let stale: Vec<(&str, Write)> = vec![
        ("commit", Write::Commit(Box::new(commit("r", 1, 2)))),
        (
            "commits",
            Write::Commits(vec![commit("r", 1, 2), commit("r", 1, 3)]),
        ),
        (
            "mark",
            mark("r", 1, &[EffectRef { seq: 1, index: 0 }], None),
        ),
        (
            "renew",
            Write::RenewLease {
                run: RunId::new("r"),
                epoch: 1,
                expires_ms: wall_ms() + 600_000,
            },
        ),
        (
            "release",
            Write::ReleaseLease {
                run: RunId::new("r"),
                epoch: 1,
                status: RunStatus::Paused,
                head: None,
            },
        ),
    ];
    for (name, write) in stale {
        assert!(
            matches!(
                w(s, write),
                Err(StoreError::Fenced {
                    ours: 1,
                    current: 2,
                    ..
                })
            ),
            "a {name} under the old lease is fenced"
        );
    }
    let after = record(s, "r");
    assert_eq!(
        (
            after.seq,
            after.status,
            after.lease_owner,
            after.lease_epoch
        ),
        (
            before.seq,
            before.status,
            before.lease_owner,
            before.lease_epoch
        ),
        "fenced writes change nothing"
    );
    assert!(
        s.outbox(&RunId::new("r")).expect("reads").is_empty(),
        "a fenced mark starts nothing"
    );
    w(s, Write::Commit(Box::new(commit("r", 2, 2)))).expect("the new holder commits");
}

pub(super) fn a_mark_or_release_whose_head_does_not_follow_is_refused(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let h0 = head("h0", None);
    let other = head("other", None);
    let at = EffectRef { seq: 1, index: 0 };
    w(s, Write::Commit(Box::new(commit("r", 1, 1)))).expect("commits");
    let stale = mark("r", 1, &[at], Some(head("h1", Some(&other))));
    assert!(matches!(w(s, stale), Err(StoreError::StaleHead { .. })));
    assert!(
        s.outbox(&RunId::new("r")).expect("reads").is_empty(),
        "a mark with a stale head starts nothing"
    );
    w(s, mark("r", 1, &[at], Some(head("h1", Some(&h0))))).expect("marks");
    let h1 = head("h1", None);
    let release = |head| Write::ReleaseLease {
        run: RunId::new("r"),
        epoch: 1,
        status: RunStatus::Paused,
        head: Some(head),
    };
    assert!(matches!(
        w(s, release(head("h2", Some(&h0)))),
        Err(StoreError::StaleHead { .. })
    ));
    let rec = record(s, "r");
    assert_eq!(
        (rec.status, rec.lease_owner.as_deref()),
        (RunStatus::Running, Some("owner-a")),
        "a release with a stale head leaves the lease held"
    );
    w(s, release(head("h2", Some(&h1)))).expect("releases");
    let rec = record(s, "r");
    assert_eq!((rec.status, rec.lease_owner), (RunStatus::Paused, None));
    let stored = s.head(&RunId::new("r")).expect("reads").expect("head");
    assert_eq!(stored.body, head("h2", None).body);
}

pub(super) fn a_list_of_commits_is_refused_whole_for_a_stale_head_or_another_run(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    create(s, "q");
    let mut stale = vec![commit("r", 1, 1), commit("r", 1, 2)];
    stale[1].head = Some(head("h2", Some(&head("other", None))));
    assert!(matches!(
        w(s, Write::Commits(stale)),
        Err(StoreError::StaleHead { .. })
    ));
    let mixed = vec![commit("r", 1, 1), commit("q", 1, 2)];
    assert!(matches!(
        w(s, Write::Commits(mixed)),
        Err(StoreError::OutOfSequence { .. })
    ));
    assert_eq!(
        (latest_seq(s, "r"), latest_seq(s, "q")),
        (0, 0),
        "nothing of a refused list is written"
    );
    let mut ok = vec![commit("r", 1, 1), commit("r", 1, 2)];
    ok[1].head = Some(head("h2", Some(&head("h0", None))));
    w(s, Write::Commits(ok)).expect("commits");
    assert_eq!(latest_seq(s, "r"), 2);
}

pub(super) fn a_mark_with_one_answered_call_starts_none(make: Maker) {
    let store = make();
    let s = store.as_ref();
    create(s, "r");
    let (a, b, c) = (
        EffectRef { seq: 1, index: 0 },
        EffectRef { seq: 1, index: 1 },
        EffectRef { seq: 1, index: 2 },
    );
    w(s, Write::Commit(Box::new(commit("r", 1, 1)))).expect("commits");
    w(s, mark("r", 1, &[b], None)).expect("marks");
    let mut answer = commit("r", 1, 2);
    answer.resolves = Some(b);
    w(s, Write::Commit(Box::new(answer))).expect("answers");
    assert!(
        matches!(
            w(s, mark("r", 1, &[a, b, c], None)),
            Err(StoreError::AlreadyAnswered {
                seq: 1,
                index: 1,
                ..
            })
        ),
        "the answered call is named"
    );
    let outbox = s.outbox(&RunId::new("r")).expect("reads");
    assert_eq!(
        outbox.iter().map(|o| o.effect).collect::<Vec<_>>(),
        vec![b],
        "no call of a refused mark is started"
    );
    w(s, mark("r", 1, &[a, c], None)).expect("the unanswered ones start");
    assert_eq!(s.open_effects(&RunId::new("r")).expect("reads").len(), 2);
}

pub(super) fn ended_runs_are_not_taken_up_and_keep_their_end(make: Maker) {
    for end in [RunStatus::Failed, RunStatus::Cancelled] {
        let store = make();
        let s = store.as_ref();
        create(s, "r");
        w(
            s,
            Write::SetControl {
                run: RunId::new("r"),
                control: Some(Control::Pause),
            },
        )
        .expect("asks");
        let mut last = commit("r", 1, 1);
        last.status = end;
        w(s, Write::Commit(Box::new(last))).expect("commits");
        w(
            s,
            Write::ReleaseLease {
                run: RunId::new("r"),
                epoch: 1,
                status: RunStatus::Paused,
                head: None,
            },
        )
        .expect("releases");
        assert!(
            matches!(take_up(s, "r", "owner-b"), Err(StoreError::Finished { status, .. }) if status == end),
            "a {end:?} run is not taken up"
        );
        let rec = record(s, "r");
        assert_eq!((rec.status, rec.lease_epoch), (end, 1), "nor changed");
        w(
            s,
            Write::SetControl {
                run: RunId::new("r"),
                control: None,
            },
        )
        .expect("clearing a request of an ended run is allowed");
        assert_eq!(record(s, "r").control, None);
    }
}

pub(super) fn a_lease_of_a_gone_process_is_taken_and_a_cancel_survives_it(make: Maker) {
    let store = make();
    let s = store.as_ref();
    // A process of this host that has exited: its lease is free before it expires.
    let mut child = std::process::Command::new("true").spawn().expect("spawns");
    let pid = child.id();
    child.wait().expect("exits");
    let gone = format!("{}:{pid}:1", runtape::store::owner_host());
    let live = runtape::store::owner_id(7);
    w(s, Write::CreateRun(new_run("gone", &gone, 600_000))).expect("creates");
    w(
        s,
        Write::CreateRun(new_run("live", "elsewhere:1:1", 600_000)),
    )
    .expect("creates");
    let cancel = Some(Control::Cancel(Some("stop".into())));
    w(
        s,
        Write::SetControl {
            run: RunId::new("gone"),
            control: cancel.clone(),
        },
    )
    .expect("asks");
    assert_eq!(take_up(s, "gone", &live).expect("taken"), 2);
    let rec = record(s, "gone");
    assert_eq!(rec.lease_owner.as_deref(), Some(live.as_str()));
    assert_eq!(rec.control, cancel, "the cancel stands for the new holder");
    assert!(
        matches!(take_up(s, "live", &live), Err(StoreError::LeaseHeld { owner, .. }) if owner == "elsewhere:1:1"),
        "a holder on another host is never presumed gone"
    );
}
