//! Global memory in every store (revision 5): publishes are all or none and applied once,
//! first publisher wins, the byte cap is held at the publish, removals are chained and signed.

use super::*;

fn staged(base: u64, value: Option<&str>) -> Staged {
    Staged {
        base,
        value: value.map(str::to_owned),
        by: AgentId::from("a"),
    }
}

pub(super) fn publication(
    run: &str,
    epoch: u64,
    seq: u64,
    writes: &[(&str, u64, Option<&str>)],
) -> Publication {
    Publication::new(
        RunId::new(run),
        epoch,
        EffectRef { seq, index: 0 },
        "team".into(),
        writes
            .iter()
            .map(|(k, base, v)| ((*k).to_owned(), staged(*base, *v)))
            .collect(),
    )
}

fn latest(store: &dyn Store) -> Vec<(String, u64, Option<String>)> {
    store
        .memory_rows("team", true)
        .expect("reads")
        .into_iter()
        .map(|r| (r.key, r.version, r.value))
        .collect()
}

pub(super) fn global_memory_publishes_all_or_none_and_once(make: Maker) {
    let store = make();
    let store = store.as_ref();
    let e1 = create(store, "r1");
    let e2 = create(store, "r2");
    let first = publication("r1", e1, 7, &[("a", 0, Some("1")), ("b", 0, Some("2"))]);
    w(store, Write::PublishMemory(first.clone())).expect("publishes");
    assert_eq!(
        latest(store),
        [
            ("a".into(), 1, Some("1".into())),
            ("b".into(), 1, Some("2".into()))
        ]
    );
    let outcome = publish_outcome(store, &first).expect("reads");
    assert_eq!(
        outcome,
        PublishOutcome::Published {
            versions: [("a".to_owned(), 1), ("b".to_owned(), 1)]
                .into_iter()
                .collect()
        }
    );
    // Performed again (a crash before its answer was committed): nothing more is written.
    w(store, Write::PublishMemory(first.clone())).expect("publishes again");
    assert_eq!(store.memory_rows("team", false).expect("reads").len(), 2);
    assert_eq!(publish_outcome(store, &first).expect("reads"), outcome);
    let mine = store
        .memory_published(&RunId::new("r1"), EffectRef { seq: 7, index: 0 })
        .expect("reads");
    assert_eq!(mine.len(), 2);
    assert!(
        mine.iter()
            .all(|r| r.run == Some(RunId::new("r1")) && r.removal.is_none())
    );

    // Another run based on the old version of `a`: nothing of it is written, `c` neither.
    let stale = publication("r2", e2, 5, &[("a", 0, Some("x")), ("c", 0, Some("y"))]);
    w(store, Write::PublishMemory(stale.clone())).expect("a refusal is not an error");
    assert_eq!(latest(store).len(), 2, "c was not written: all or none");
    assert_eq!(
        publish_outcome(store, &stale).expect("reads"),
        PublishOutcome::Conflict {
            keys: [(
                "a".to_owned(),
                Versioned {
                    version: 1,
                    value: Some("1".into())
                }
            )]
            .into_iter()
            .collect()
        }
    );
    // Based on what is there now, it applies; forgetting writes a version without a value.
    let fresh = publication("r2", e2, 9, &[("a", 1, None), ("c", 0, Some("y"))]);
    w(store, Write::PublishMemory(fresh)).expect("publishes");
    assert_eq!(
        latest(store),
        [
            ("a".into(), 2, None),
            ("b".into(), 1, Some("2".into())),
            ("c".into(), 1, Some("y".into()))
        ]
    );
    let all: Vec<(String, u64)> = store
        .memory_rows("team", false)
        .expect("reads")
        .into_iter()
        .map(|r| (r.key, r.version))
        .collect();
    assert_eq!(
        all,
        [
            ("a".into(), 1),
            ("a".into(), 2),
            ("b".into(), 1),
            ("c".into(), 1)
        ]
    );
    // A stale lease writes nothing.
    let fenced = publication("r1", e1 + 5, 11, &[("z", 0, Some("z"))]);
    assert!(matches!(
        w(store, Write::PublishMemory(fenced)),
        Err(StoreError::Fenced { .. })
    ));
    assert!(store.memory_rows("other", false).expect("reads").is_empty());
    assert_eq!(store.memory_names().expect("reads"), ["team"]);
    assert!(!latest(store).iter().any(|(k, _, _)| k == "z"));
}

/// The cap is held against the memory as it stands: keys plus values (bytes, not
/// characters) of every key's latest version, with the writes applied.
pub(super) fn a_publish_past_the_cap_is_refused_whole(make: Maker) {
    let store = make();
    let store = store.as_ref();
    let e1 = create(store, "r1");
    let e2 = create(store, "r2");
    // 1 + 6 bytes ("é" is two bytes), and 1 + 3.
    let first =
        publication("r1", e1, 7, &[("a", 0, Some("ééé")), ("b", 0, Some("xyz"))]).capped(12);
    assert_eq!(
        w(store, Write::PublishMemory(first)).expect("publishes"),
        Written::Done
    );
    // 11 bytes held; adding `c` (2 bytes) and growing `b` would make 14 > 12: refused whole,
    // `b`'s change not written either.
    let over = publication("r2", e2, 5, &[("b", 1, Some("xyzw")), ("c", 0, Some("1"))]).capped(12);
    assert_eq!(
        w(store, Write::PublishMemory(over)).expect("a refusal is not an error"),
        Written::MemoryOverCap(runtape::store::global_memory::OverCap {
            cap: 12,
            holds: 11,
            would_hold: 14,
        })
    );
    assert_eq!(
        latest(store),
        [
            ("a".into(), 1, Some("ééé".into())),
            ("b".into(), 1, Some("xyz".into()))
        ]
    );
    // Shrinking `a` to make room fits: 1 + 1 + 4 + 2 = 8.
    let fits = publication(
        "r2",
        e2,
        9,
        &[
            ("a", 1, Some("e")),
            ("b", 1, Some("xyzw")),
            ("c", 0, Some("1")),
        ],
    )
    .capped(12);
    assert_eq!(
        w(store, Write::PublishMemory(fits)).expect("publishes"),
        Written::Done
    );
    assert_eq!(latest(store).len(), 3);
    // A memory already past a (smaller) cap still takes writes that do not grow it.
    let shrink = publication("r1", e1, 11, &[("b", 2, None)]).capped(4);
    assert_eq!(
        w(store, Write::PublishMemory(shrink)).expect("publishes"),
        Written::Done
    );
    // A moved key is a conflict first, whatever the sizes.
    let stale = publication("r1", e1, 13, &[("a", 1, Some(&"z".repeat(50)))]).capped(12);
    assert_eq!(
        w(store, Write::PublishMemory(stale.clone())).expect("a refusal is not an error"),
        Written::Done
    );
    assert!(matches!(
        publish_outcome(store, &stale).expect("reads"),
        PublishOutcome::Conflict { .. }
    ));
}

pub(super) fn removals_are_recorded_chained_and_refused_without_a_value(make: Maker) {
    let store = make();
    let store = store.as_ref();
    let e = create(store, "r1");
    w(
        store,
        Write::PublishMemory(publication(
            "r1",
            e,
            3,
            &[("a", 0, Some("1")), ("b", 0, Some("2"))],
        )),
    )
    .expect("publishes");
    let rm = |key: &str| {
        w(
            store,
            Write::RemoveMemory(Removal::new(
                "team".into(),
                key.into(),
                "me@here".into(),
                42,
            )),
        )
    };
    rm("a").expect("removes");
    assert!(
        matches!(rm("a"), Err(StoreError::NoMemoryKey { .. })),
        "already removed"
    );
    assert!(matches!(rm("zzz"), Err(StoreError::NoMemoryKey { .. })));
    // The second removal is signed: its seal is stored and holds over its chain link.
    let signer = Arc::new(runtape::receipt::ReceiptSigner::from_signing_key(
        runtape::receipt::SigningKey::from_bytes(&[9; 32]),
    ));
    w(
        store,
        Write::RemoveMemory(
            Removal::new("team".into(), "b".into(), "me@here".into(), 43).signed_by(signer.clone()),
        ),
    )
    .expect("removes");
    let records = store.memory_removals().expect("reads");
    assert_eq!(
        records[0].seal, None,
        "made without a key: hash-chained only"
    );
    let seal = records[1].seal.as_deref().expect("signed");
    assert_eq!(
        runtape::receipt::check_removal_seal(
            &records[1].chain,
            seal,
            signer.verifying_key().as_ref()
        )
        .ok()
        .as_deref(),
        signer.key_id()
    );
    assert_eq!(records.iter().map(|r| r.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        records[0].chain,
        chain_link(&Digest::ZERO, &records[0].body)
    );
    assert_eq!(
        records[1].chain,
        chain_link(&records[0].chain, &records[1].body)
    );
    let body = records[0].decode().expect("decodes");
    assert_eq!(
        (body.key.as_str(), body.version, body.by.as_str()),
        ("a", 2, "me@here")
    );
    let a2 = store
        .memory_rows("team", false)
        .expect("reads")
        .into_iter()
        .find(|r| r.key == "a" && r.version == 2)
        .expect("the removal's row");
    assert_eq!((a2.value, a2.removal, a2.run), (None, Some(1), None));
}

/// Two connections (as two processes have) publishing to one global memory key at once:
/// exactly one publish applies, the other is refused whole — no error, no half write —
/// whichever commits first.
#[test]
#[ignore = "needs PostgreSQL server binaries: tests/extras/install.sh postgres"]
fn postgres_publishes_from_two_connections_take_turns() {
    let server = support::pg::PgServer::start();
    let url = server.fresh_db();
    let a: Arc<dyn Store> = Arc::new(PostgresStore::open(&url).expect("opens"));
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&url).expect("opens"));
    let ea = create(a.as_ref(), "ra");
    let eb = create(b.as_ref(), "rb");
    for round in 0..20u64 {
        // a also writes a key of its own, which must be written exactly when its `k` is.
        let own = format!("a{round}");
        let pa = publication(
            "ra",
            ea,
            round + 1,
            &[("k", round, Some("from a")), (own.as_str(), 0, Some("a"))],
        );
        let pb = publication("rb", eb, round + 1, &[("k", round, Some("from b"))]);
        let (sa, sb) = (a.clone(), b.clone());
        let ta = std::thread::spawn(move || w(sa.as_ref(), Write::PublishMemory(pa)));
        let tb = std::thread::spawn(move || w(sb.as_ref(), Write::PublishMemory(pb)));
        ta.join().expect("joins").expect("a's publish is no error");
        tb.join().expect("joins").expect("b's publish is no error");
        let rows = a.memory_rows("team", false).expect("reads");
        let k: Vec<&runtape::store::GlobalRow> = rows.iter().filter(|r| r.key == "k").collect();
        assert_eq!(k.len() as u64, round + 1, "exactly one of the two applied");
        let a_won = k.last().and_then(|r| r.value.as_deref()) == Some("from a");
        assert_eq!(rows.iter().any(|r| r.key == own), a_won, "all or none");
    }
}
