//! `runtape diff` between child runs, with the real binary on real SQLite files: two siblings
//! (first difference at their tasks), the same child in a run and in its fork (alike apart from
//! times and ids), and `diff PARENT FORK --recursive`, which pairs the two trees' children by
//! their place and says where each pair parts or which side alone has one.

use crate::support;

use std::path::Path;

use crate::support::cli::{temp_db, utf8};
use serde_json::Value;
use support::delegation::*;

/// A finished parallel team in `db`: its root id.
fn finished(dir: &Path, db: &Path) -> String {
    let spec = write(dir, "team.toml", &parallel_team(0));
    ok(db, &["run", utf8(&spec)]);
    root(db).expect("the lead's run")["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// Forks `run` at `seq` with `edits`, waits for it to end, and returns its id.
fn fork(db: &Path, at: &str, edits: &[&str]) -> String {
    let mut args = vec!["fork", at];
    for e in edits {
        args.extend(["--edit", e]);
    }
    let printed = ok(db, &args);
    printed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("forked {at} as run ")))
        .unwrap_or_else(|| panic!("a fork id in {printed}"))
        .trim()
        .to_owned()
}

fn diff_json(db: &Path, args: &[&str]) -> Value {
    let mut all = vec!["diff"];
    all.extend(args);
    all.push("--json");
    serde_json::from_str(&ok(db, &all)).expect("one JSON object")
}

#[test]
fn siblings_first_differ_at_their_tasks() {
    let (dir, db) = temp_db();
    let id = finished(dir.path(), &db);
    let (a, b) = (format!("{id}.3.0"), format!("{id}.3.1"));
    let printed = ok(&db, &["diff", &a, &b]);
    assert!(printed.contains("first differ at step 1"), "{printed}");
    assert!(
        printed.contains(r#"event/goal: "List the tables." ≠ "Write the script.""#),
        "{printed}"
    );
    assert!(
        printed.contains(r#"state/run/active: "researcher" ≠ "coder""#),
        "{printed}"
    );
    let d = diff_json(&db, &[&a, &b]);
    assert_eq!(d["first_difference"]["seq"], 1);
    assert_eq!(d["first_difference"]["changes"][0]["at"], "event/goal");
    assert_eq!(
        (d["common"].as_u64(), d["alike"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn the_same_child_in_a_run_and_its_fork_is_alike_and_the_trees_pair_up() {
    let (dir, db) = temp_db();
    let id = finished(dir.path(), &db);
    // At step 3 both children were asked for and neither had answered: the fork runs both
    // again, live, under its own id.
    let live = fork(&db, &format!("{id}@3"), &[]);
    let (a, b) = (format!("{id}.3.0"), format!("{live}.3.0"));
    let printed = ok(&db, &["diff", &a, &b]);
    assert!(
        printed.contains("take the same 7 steps apart from times and ids"),
        "{printed}"
    );
    let d = diff_json(&db, &[&a, &b]);
    assert!(d["first_difference"].is_null(), "{d}");
    assert_eq!(d["alike"], 7);

    // The coder's result replaced at the fork point: that fork starts only the researcher.
    let edited = fork(&db, &format!("{id}@3"), &["tool:d2=SCRIPT: by hand"]);
    let printed = ok(&db, &["diff", &id, &edited, "--recursive"]);
    let lines: Vec<&str> = printed.lines().collect();
    assert!(
        lines[0].contains("first differ at step 4") && printed.contains("edited"),
        "{printed}"
    );
    assert!(printed.contains("child 3.0:\n"), "{printed}");
    assert!(
        printed.contains(&format!("{id}.3.0 and {edited}.3.0 take the same")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("child 3.1: only below {id} ({id}.3.1)")),
        "{printed}"
    );
    let t = diff_json(&db, &[&id, &edited, "--recursive"]);
    let children = t["children"].as_array().expect("children");
    assert_eq!(children.len(), 2);
    assert_eq!(children[1]["path"], "3.1");
    assert!(children[1]["b"].is_null() && children[1]["diff"].is_null());
}
