//! Forking a run at a step where its children were running, with the real binary on a real
//! SQLite file: live, the fork re-runs each child it inherited unanswered as a new child run
//! under its own id (the parent's children are never reused or touched); with `--tape`, the
//! children's recorded results are served and no child run is started (until the tape runs
//! out or stops matching; then the fork runs its own). Either way the
//! original tree is unchanged and the fork's tree verifies recursively.

use crate::support;

use std::path::Path;

use crate::support::cli::{temp_db, utf8};
use serde_json::Value;
use support::delegation::*;

/// What must not change in a tree: each run's id, status, steps, last update and final state
/// hash, in a fixed order.
type Fingerprint = Vec<(String, String, u64, u64, String)>;

/// The [`Fingerprint`] of the tree `root_id` heads.
fn fingerprint(db: &Path, root_id: &str) -> Fingerprint {
    let mut ids = vec![root_id.to_owned()];
    let mut children: Vec<String> = children_of(db, root_id)
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect();
    children.sort();
    ids.extend(children);
    let all = runs(db);
    ids.iter()
        .map(|id| {
            let r = all.iter().find(|r| r["id"] == id.as_str()).expect("listed");
            (
                id.clone(),
                r["status"].as_str().expect("status").to_owned(),
                r["steps"].as_u64().expect("steps"),
                r["updated_ms"].as_u64().expect("updated_ms"),
                final_hash(db, id),
            )
        })
        .collect()
}

/// Forks `parent` at `seq` with `flags` (`--live`, `--tape`, or none for the default); what
/// it printed and the fork's id.
fn fork_at(db: &Path, parent: &str, seq: u64, flags: &[&str]) -> (String, String) {
    let at = format!("{parent}@{seq}");
    let printed = ok(db, &[&["fork", at.as_str()], flags].concat());
    (printed, fork_id(db, parent))
}

/// The id of the fork of `parent` made last ([`fork_of`]).
fn fork_id(db: &Path, parent: &str) -> String {
    fork_of(db, parent)["id"].as_str().expect("id").to_owned()
}

/// The fork of `parent` made last.
fn fork_of(db: &Path, parent: &str) -> Value {
    runs(db)
        .into_iter()
        .filter(|r| r["parent"]["run"] == parent)
        .max_by_key(|r| r["created_ms"].as_u64())
        .expect("the fork is listed")
}

fn ok_lines(verified: &str) -> usize {
    verified.lines().filter(|l| l.starts_with("OK: ")).count()
}

/// The child-finished report of `run`'s transition `seq`.
fn report_at(db: &Path, run: &str, seq: u64) -> Value {
    let show: Value =
        serde_json::from_str(&ok(db, &["show", &format!("{run}@{seq}"), "--json"])).expect("json");
    assert_eq!(show["event"]["body"]["type"], "child_finished", "{show}");
    show["event"]["body"]["report"].clone()
}

/// The children run side by side, so either may end first: the index of the effect whose
/// result is step 4 of `run`, and the other one's.
fn first_ended(db: &Path, run: &str) -> (u64, u64) {
    let show: Value =
        serde_json::from_str(&ok(db, &["show", &format!("{run}@4"), "--json"])).expect("json");
    let ended = show["event"]["body"]["effect"]["index"]
        .as_u64()
        .expect("a child_finished event");
    (ended, 1 - ended)
}

/// Forks `run` at step 4, where one child's result is in the shared history and the other is
/// still out: the ended child's index, the other's, and the fork's id.
fn forked_after_one_child_ended(db: &Path, run: &str) -> (u64, u64, String) {
    let (ended, out_still) = first_ended(db, run);
    let (_, fork) = fork_at(db, run, 4, &[]);
    (ended, out_still, fork)
}

/// A scratch database where the parallel team ran to its end: the directory, the database, the
/// parent's id and the tree's [`fingerprint`].
fn finished_team() -> (tempfile::TempDir, std::path::PathBuf, String, Fingerprint) {
    let (dir, db) = temp_db();
    let db = db.as_path();
    let spec = write(dir.path(), "team.toml", &parallel_team(0));
    let printed = ok(db, &["run", utf8(&spec)]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    let id = root(db).expect("the lead's run")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(children_of(db, &id).len(), 2);
    let before = fingerprint(db, &id);
    (dir, db.to_owned(), id, before)
}

#[test]
fn a_live_fork_where_children_were_running_reruns_them_under_its_own_id() {
    let (_dir, db, id, before) = finished_team();

    // Step 3 is the model turn that started both children.
    let printed = ok(&db, &["fork", &format!("{id}@3"), "--live"]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    let fork = fork_of(&db, &id);
    let fid = fork["id"].as_str().expect("id").to_owned();
    assert_eq!(fork["status"], "completed");
    let mut children: Vec<Value> = children_of(&db, &fid);
    children.sort_by_key(|c| c["id"].as_str().map(str::to_owned));
    let ids: Vec<&str> = children
        .iter()
        .map(|c| c["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, [format!("{fid}.3.0"), format!("{fid}.3.1")]);
    for (c, goal) in children
        .iter()
        .zip(["List the tables.", "Write the script."])
    {
        assert_eq!(c["status"], "completed", "{c}");
        assert_eq!(c["goal"], goal);
        assert_eq!(c["steps"], 7, "a whole new run, not the parent's child");
    }
    // The fork's tree: its two children and their results, verified against its effects.
    let verified = ok(&db, &["verify", &fid, "--recursive"]);
    assert_eq!(ok_lines(&verified), 3, "{verified}");
    let log = ok(&db, &["log", &fid]);
    assert!(
        log.contains(&format!("child {fid}.3.0 ended: answer: TABLES")),
        "{log}"
    );
    // The original tree is untouched.
    assert_eq!(fingerprint(&db, &id), before);
    assert_eq!(children_of(&db, &id).len(), 2);
    assert_eq!(ok_lines(&ok(&db, &["verify", &id, "--recursive"])), 3);
}

#[test]
fn a_live_fork_after_one_child_ended_reruns_only_the_other() {
    let (_dir, db, id, before) = finished_team();

    let (ended, out_still, fid) = forked_after_one_child_ended(&db, &id);
    let children = children_of(&db, &fid);
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0]["id"], format!("{fid}.3.{out_still}"));
    assert_ne!(ended, out_still);
    assert_eq!(children[0]["status"], "completed");
    // The inherited result is the parent's child's; the re-run one is the fork's own.
    assert_eq!(report_at(&db, &fid, 4), report_at(&db, &id, 4));
    let verified = ok(&db, &["verify", &fid, "--recursive"]);
    assert_eq!(ok_lines(&verified), 2, "{verified}");
    assert_eq!(fingerprint(&db, &id), before);
}

#[test]
fn a_tape_fork_serves_the_childrens_recorded_results_and_starts_no_child() {
    let (_dir, db, id, before) = finished_team();

    let (printed, fid) = fork_at(&db, &id, 3, &["--tape"]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    assert!(
        children_of(&db, &fid).is_empty(),
        "served from the tape: no child was run"
    );
    for seq in [4, 5] {
        assert_eq!(report_at(&db, &fid, seq), report_at(&db, &id, seq));
    }
    // Matching its parent all the way, the fork reaches the parent's final state.
    assert_eq!(final_hash(&db, &fid), final_hash(&db, &id));
    let verified = ok(&db, &["verify", &fid, "--recursive"]);
    assert_eq!(ok_lines(&verified), 1, "{verified}");
    assert_eq!(fingerprint(&db, &id), before);
}

#[test]
fn a_live_fork_of_a_paused_tree_leaves_the_paused_children_as_they_are() {
    let (_dir, db, id, status) = paused_team();
    assert_eq!(status.code(), Some(4), "exit 4: paused");
    let before = fingerprint(&db, &id);
    assert!(
        before.iter().all(|(_, status, ..)| status == "paused"),
        "{before:?}"
    );

    // The parent's children are paused mid-way; the fork must run its own, not take these up.
    let (printed, fid) = fork_at(&db, &id, 3, &[]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    let children = children_of(&db, &fid);
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(c["status"], "completed", "{c}");
        assert!(
            c["id"]
                .as_str()
                .expect("id")
                .starts_with(&format!("{fid}.3.")),
            "{c}"
        );
    }
    assert_eq!(ok_lines(&ok(&db, &["verify", &fid, "--recursive"])), 3);
    assert_eq!(
        fingerprint(&db, &id),
        before,
        "the paused tree is untouched"
    );

    // With `--tape`: the parent recorded no child result, so the tape runs out at once and
    // the fork goes live, running children of its own.
    let (printed, tid) = fork_at(&db, &id, 3, &["--tape"]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    assert_ne!(tid, fid);
    let taped = children_of(&db, &tid);
    assert_eq!(taped.len(), 2, "{taped:?}");
    assert!(
        taped.iter().all(|c| c["status"] == "completed"),
        "{taped:?}"
    );
    assert_eq!(ok_lines(&ok(&db, &["verify", &tid, "--recursive"])), 3);
    assert_eq!(
        fingerprint(&db, &id),
        before,
        "the paused tree is untouched"
    );

    // And it still resumes to its own end.
    let printed = ok(&db, &["resume", &id]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    assert_eq!(ok_lines(&ok(&db, &["verify", &id, "--recursive"])), 3);
}

#[test]
fn a_run_posing_as_a_forks_child_for_a_result_it_inherited_does_not_verify() {
    let (_dir, db, id, _) = finished_team();
    // The ended child's result is inherited: the fork never starts a child for it.
    let (ended, _, fid) = forked_after_one_child_ended(&db, &id);
    assert_eq!(ok_lines(&ok(&db, &["verify", &fid, "--recursive"])), 2);

    // A copy of the parent's child whose result was inherited, relinked to the fork's effect.
    let conn = rusqlite::Connection::open(&db).expect("opens");
    let columns = "status, state_kind, seq, lease_epoch, lease_owner, lease_expires_ms, control, \
                   updated_ms, cost_nanos, tokens, unpriced_turns";
    let copied = conn
        .execute(
            &format!(
                "INSERT INTO runs (id, {columns}) SELECT ?1, {columns} FROM runs WHERE id = ?2"
            ),
            rusqlite::params![format!("{fid}.3.{ended}"), format!("{id}.3.{ended}")],
        )
        .expect("inserts");
    assert_eq!(copied, 1);
    let copied = conn
        .execute(
            "INSERT INTO run_specs (run, parent_id, fork_seq, spec, setup, goal, created_ms, outcome) \
             SELECT last_insert_rowid(), parent_id, fork_seq, replace(spec, ?1, ?2), setup, goal, created_ms, outcome \
             FROM run_specs WHERE run = (SELECT key FROM runs WHERE id = ?3)",
            rusqlite::params![
                format!("\"{id}\""),
                format!("\"{fid}\""),
                format!("{id}.3.{ended}"),
            ],
        )
        .expect("inserts");
    assert_eq!(copied, 1);
    drop(conn);
    assert!(
        children_of(&db, &fid)
            .iter()
            .any(|c| c["id"] == format!("{fid}.3.{ended}")),
        "the forged run claims the fork as its parent"
    );

    let o = runtape(&db, &["verify", &fid, "--recursive"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "run {fid}.3.{ended} does not verify as a child of {fid}"
        )) && err.contains("answered before the fork point"),
        "{err}"
    );
}
