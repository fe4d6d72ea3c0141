//! A database holding a finished delegation tree (examples/team.toml: a lead and two child
//! runs), a finished single run with a fork, a finished run of examples/approval.toml and
//! another waiting for a person (the two share message blobs the first stored). `prune --dry-run` lists the finished trees and writes nothing;
//! `prune` removes exactly them, leaves a tombstone per run that `verify` reports as pruned
//! (exit 5) and `ls --all` lists, and the waiting run is untouched: it verifies and goes on
//! to complete. An edited tombstone is reported as tampering. The real binary, a real file.

use std::path::Path;

use crate::support::cli::{err, example, json_lines, out, run_id, runtape, temp_db, text, utf8};
use crate::support::delegation::children_of;
use crate::support::tamper::dump;

/// Every row of the tables [`dump`] leaves out that a prune writes.
fn full_dump(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).expect("opens");
    let mut all = dump(db);
    for sql in [
        "SELECT session || ':' || idx || ':' || run FROM session_runs ORDER BY session, idx",
        "SELECT id || ':' || run_id || ':' || hex(body) || ':' || hex(chain) FROM pruned_runs ORDER BY id",
    ] {
        for row in crate::support::cli::column::<String>(&conn, sql) {
            all.push_str(&row);
            all.push('\n');
        }
    }
    all
}

fn ids(db: &Path) -> Vec<String> {
    json_lines(&runtape(db, &["ls", "--json", "--flat"]))
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn prune_removes_finished_trees_only_and_leaves_tombstones_that_verify_reads() {
    let (_dir, db) = temp_db();
    let team = runtape(&db, &["run", example("team.toml").to_str().expect("utf-8")]);
    assert!(team.status.success(), "{}", text(&team));
    let lead = run_id(&team);
    let children: Vec<String> = children_of(&db, &lead)
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(children.len(), 2, "the lead delegated to two children");
    let single = runtape(
        &db,
        &["run", example("quickstart.toml").to_str().expect("utf-8")],
    );
    assert!(single.status.success(), "{}", text(&single));
    let single = run_id(&single);
    let fork = runtape(&db, &["fork", &format!("{single}@1")]);
    assert!(fork.status.success(), "{}", text(&fork));
    // Two runs of one spec share their first messages' blobs, stored once by the first: that
    // one is approved and ends (and goes), the other waits (and stays, able to read them).
    let approval = example("approval.toml");
    let approved = run_id(&runtape(&db, &["run", utf8(&approval)]));
    let a = runtape(&db, &["resume", &approved, "--approve"]);
    assert!(a.status.success(), "{}", text(&a));
    let waiting = run_id(&runtape(&db, &["run", utf8(&approval)]));
    let all_before = ids(&db);
    assert_eq!(all_before.len(), 7, "{all_before:?}");

    // Bad input: one line, nothing written.
    let before = full_dump(&db);
    for args in [
        &["prune", "--older-than", "30"][..],
        &["prune", "--older-than", "3 days"],
        &["prune", "--older-than", "0s", "--status", "running"],
        &["prune", "--older-than", "0s", "--status", "finished"],
    ] {
        let o = runtape(&db, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert_eq!(err(&o).trim().lines().count(), 1, "{args:?}: {}", err(&o));
    }
    assert_eq!(full_dump(&db), before, "bad input wrote nothing");

    // A window the runs are inside of: nothing goes.
    let o = runtape(&db, &["prune", "--older-than", "1d"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(full_dump(&db), before, "a run within the window stays");

    // The dry run lists both finished trees and changes nothing.
    let dry = runtape(&db, &["prune", "--older-than", "0s", "--dry-run", "--json"]);
    assert!(dry.status.success(), "{}", text(&dry));
    let report: serde_json::Value = serde_json::from_str(&out(&dry)).expect("json");
    assert_eq!(report["runs"], 6, "{report}");
    assert_eq!(report["kept"], 1, "{report}");
    assert_eq!(full_dump(&db), before, "a dry run wrote nothing");

    let pruned = runtape(&db, &["prune", "--older-than", "0s"]);
    assert!(pruned.status.success(), "{}", text(&pruned));
    assert!(out(&pruned).contains("pruned 6 runs"), "{}", out(&pruned));
    assert_eq!(
        ids(&db),
        vec![waiting.clone()],
        "only the waiting run is left"
    );

    // Each pruned run: verify says pruned, in one line, exit 5.
    for run in [&lead, &children[0], &children[1], &single, &approved] {
        let v = runtape(&db, &["verify", run]);
        assert_eq!(v.status.code(), Some(5), "{run}: {}", text(&v));
        assert!(err(&v).contains("was pruned (completed"), "{}", err(&v));
        assert_eq!(err(&v).trim().lines().count(), 1, "{}", err(&v));
    }
    let v = runtape(&db, &["verify", &lead, "--recursive"]);
    assert_eq!(v.status.code(), Some(5), "{}", text(&v));
    // A run that never existed is still unknown, not pruned.
    let v = runtape(&db, &["verify", "nosuchrun"]);
    assert_eq!(v.status.code(), Some(2), "{}", text(&v));

    // ls --all lists the pruned runs from their tombstones.
    let listed = json_lines(&runtape(&db, &["ls", "--all", "--json"]));
    let pruned_ids: Vec<&str> = listed
        .iter()
        .filter(|r| r["status"] == "pruned")
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(pruned_ids.len(), 6, "{listed:?}");
    for run in [&lead, &children[0], &children[1], &single] {
        assert!(
            pruned_ids.contains(&run.as_str()),
            "{run} in {pruned_ids:?}"
        );
    }

    // The waiting run lost nothing: it verifies and completes.
    let v = runtape(&db, &["verify", &waiting]);
    assert!(v.status.success(), "{}", text(&v));
    let r = runtape(&db, &["resume", &waiting, "--approve"]);
    assert!(r.status.success(), "{}", text(&r));
    let v = runtape(&db, &["verify", &waiting]);
    assert!(v.status.success(), "{}", text(&v));

    // An edited tombstone is tampering, not pruning.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    conn.execute(
        "UPDATE pruned_runs SET body = replace(body, 'completed', 'failed') WHERE id = 2",
        [],
    )
    .expect("edits");
    let v = runtape(&db, &["verify", &lead]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(err(&v).contains("tampered"), "{}", err(&v));
}
