//! `runtape export` / `runtape import` between SQLite files: a delegation tree and a fork
//! move whole and read the same in the new database (`show`, `log`, `verify --recursive`
//! print the same); a second import changes nothing; a file changed anywhere (a run's goal, a
//! message blob) or a run id taken by another run is refused with nothing written; a run
//! exported, pruned and imported back verifies again. The real binary, real files.

use std::path::Path;

use crate::support::cli::{err, example, out, run_id, runtape, temp_db, text, utf8};
use crate::support::tamper::dump;

/// What `show`, `log` and `verify --recursive` print of `run` in `db`.
fn reads(db: &Path, run: &str) -> Vec<String> {
    [
        &["show", run, "--json"][..],
        &["show", &format!("{run}@3"), "--json"],
        &["log", run, "--json"],
        &["verify", run, "--recursive", "--json"],
    ]
    .iter()
    .map(|args| {
        let o = runtape(db, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        out(&o)
    })
    .collect()
}

fn edited(file: &Path, to: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("reads")).expect("json");
    edit(&mut doc);
    std::fs::write(to, doc.to_string()).expect("writes");
}

#[test]
fn a_run_tree_moves_between_databases_and_reads_the_same() {
    let (dir, a) = temp_db();
    let team = runtape(&a, &["run", utf8(&example("team.toml"))]);
    assert!(team.status.success(), "{}", text(&team));
    let lead = run_id(&team);
    let fork = runtape(&a, &["fork", &format!("{lead}@4")]);
    assert!(fork.status.success(), "{}", text(&fork));
    let fork = run_id(&fork);

    let file = dir.path().join("tree.json");
    let e = runtape(&a, &["export", &lead, "--out", utf8(&file)]);
    assert!(e.status.success(), "{}", text(&e));
    let ffile = dir.path().join("fork.json");
    let e = runtape(&a, &["export", &fork, "--out", utf8(&ffile)]);
    assert!(e.status.success(), "{}", text(&e));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("reads")).expect("json");
    assert_eq!(doc["format"], "runtape-archive");
    assert_eq!(doc["version"], 1);
    assert_eq!(
        doc["runs"].as_array().map(Vec::len),
        Some(3),
        "lead and two children"
    );

    let b = dir.path().join("b.db");
    for f in [&file, &ffile] {
        let i = runtape(&b, &["import", utf8(f)]);
        assert!(i.status.success(), "{}", text(&i));
    }
    assert_eq!(reads(&b, &lead), reads(&a, &lead));
    assert_eq!(reads(&b, &fork), reads(&a, &fork));

    // Importing again writes nothing.
    let before = dump(&b);
    let again = runtape(&b, &["import", utf8(&file), "--json"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(out(&again).contains("\"written\":[]"), "{}", out(&again));
    assert_eq!(dump(&b), before);

    // A file changed anywhere is refused, and nothing is written.
    let c = dir.path().join("c.db");
    let goal = dir.path().join("goal.json");
    edited(&file, &goal, |d| {
        d["runs"][0]["record"]["goal"] = "another goal".into()
    });
    let blob = dir.path().join("blob.json");
    edited(&file, &blob, |d| {
        let hex = d["blobs"][0]["bytes"].as_str().expect("hex").to_owned();
        let flipped = if hex.ends_with('0') { "1" } else { "0" };
        d["blobs"][0]["bytes"] = format!("{}{flipped}", &hex[..hex.len() - 1]).into();
    });
    for bad in [&goal, &blob] {
        let i = runtape(&c, &["import", utf8(bad)]);
        assert_eq!(i.status.code(), Some(1), "{}", text(&i));
        assert!(err(&i).contains("does not verify"), "{}", err(&i));
        let ls = runtape(&c, &["ls", "--json"]);
        assert_eq!(out(&ls), "", "nothing imported");
    }
    let junk = runtape(&c, &["import", utf8(&example("team.toml"))]);
    assert_eq!(junk.status.code(), Some(2), "{}", text(&junk));

    // A run id taken by another run: refused, nothing written.
    let d = dir.path().join("d.db");
    let other = runtape(
        &d,
        &["run", utf8(&example("quickstart.toml")), "--run-id", &lead],
    );
    assert!(other.status.success(), "{}", text(&other));
    let before = dump(&d);
    let i = runtape(&d, &["import", utf8(&file)]);
    assert_eq!(i.status.code(), Some(2), "{}", text(&i));
    assert!(err(&i).contains("other content"), "{}", err(&i));
    assert_eq!(dump(&d), before);

    // Archived, pruned, brought back: it verifies again.
    let p = runtape(&a, &["prune", "--older-than", "0s"]);
    assert!(p.status.success(), "{}", text(&p));
    assert_eq!(runtape(&a, &["verify", &lead]).status.code(), Some(5));
    let i = runtape(&a, &["import", utf8(&file)]);
    assert!(i.status.success(), "{}", text(&i));
    let v = runtape(&a, &["verify", &lead, "--recursive"]);
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn a_run_that_does_not_verify_is_not_exported() {
    let (dir, db) = temp_db();
    let o = runtape(&db, &["run", utf8(&example("quickstart.toml"))]);
    let run = run_id(&o);
    let conn = rusqlite::Connection::open(&db).expect("opens");
    conn.execute("UPDATE run_specs SET goal = 'edited'", [])
        .expect("edits");
    let file = dir.path().join("x.json");
    let e = runtape(&db, &["export", &run, "--out", utf8(&file)]);
    assert_eq!(e.status.code(), Some(1), "{}", text(&e));
    assert!(!file.exists(), "nothing written");
}
