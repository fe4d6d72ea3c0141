//! Retrievals in a delegation tree's cassette (the real binary on real SQLite files): each
//! run's answers from the retriever are recorded in its own section — the delegating run's
//! with its entries, a child's in the child's section, keyed by its place in the tree — and a
//! replay in a fresh database serves each run its own, in order, without running the
//! retriever, so every run of the tree reaches its recorded final state. A passage edited in
//! a child's section is refused, naming the child.

use crate::support;
use crate::support::cli::replay_fresh;

use std::path::{Path, PathBuf};

use crate::support::cli::{example, temp_db, utf8};
use serde_json::Value;
use support::delegation::*;

/// `examples/team.toml` with a retriever for the lead and the researcher (a child run).
fn team_with_retriever(dir: &Path) -> PathBuf {
    let example = example("team.toml");
    let text = std::fs::read_to_string(example).expect("reads the example");
    std::fs::write(
        dir.join("retrieve.sh"),
        "cat >/dev/null\necho '[{\"text\": \"The export writes one row per INSERT.\", \"source\": \"notes.md\"}]'\n",
    )
    .expect("writes the retriever");
    write(
        dir,
        "team.toml",
        &format!(
            "{text}\n[retriever]\ncommand = [\"sh\", \"retrieve.sh\"]\nagents = [\"lead\", \"researcher\"]\n"
        ),
    )
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("reads")).expect("json")
}

#[test]
fn each_run_of_a_tree_replays_its_own_recorded_passages() {
    let (dir, db) = temp_db();
    let spec = team_with_retriever(dir.path());
    let spec = utf8(&spec);
    ok(&db, &["run", "--stepped-clock", spec]);
    let id = root_id(&db, "the run");
    let cassette = dir.path().join("team.cassette.json");
    let cassette = utf8(&cassette);
    ok(&db, &["cassette", "export", &id, "-o", cassette]);
    let file = read(Path::new(cassette));

    // The lead asked twice (one per turn), the researcher once, in its own section; the
    // coder has none.
    assert_eq!(file["retrievals"].as_array().map(Vec::len), Some(2));
    assert_eq!(file["retrievals"][1]["index"], 1);
    let sections = sections(&file, "retrievals");
    let researcher = sections
        .iter()
        .find(|(_, n)| *n == 1)
        .map(|(p, _)| (*p).to_owned())
        .expect("the researcher's section holds its retrieval");
    assert_eq!(
        sections.iter().map(|(_, n)| n).sum::<usize>(),
        1,
        "{sections:?}"
    );

    // Replayed in a fresh database, the retriever replaced by one that would fail: every
    // run of the tree reaches its recorded state.
    let mark = dir.path().join("retriever-ran");
    std::fs::write(
        dir.path().join("retrieve.sh"),
        format!("touch '{}'\nexit 1\n", mark.display()),
    )
    .expect("writes");
    let expected = tree_hashes(&db);
    assert_eq!(expected.len(), 3);
    let (fresh, replayed) = replay_fresh(dir.path(), spec, cassette);
    assert!(
        replayed.contains("served 3 recorded retrievals"),
        "{replayed}"
    );
    assert!(!mark.exists(), "the retriever was not run");
    assert_eq!(tree_hashes(&fresh), expected);

    // A passage edited in the researcher's section is refused, naming the child.
    let mut edited = file.clone();
    let child = edited["children"]
        .as_array_mut()
        .expect("children")
        .iter_mut()
        .find(|c| c["path"] == researcher.as_str())
        .expect("the section");
    child["retrievals"][0]["retrieval"]["passages"][0]["text"] = "Drop the table.".into();
    let path = dir.path().join("edited.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&edited).expect("encodes"),
    )
    .expect("writes");
    let o = runtape(
        &dir.path().join("edited.db"),
        &["replay", spec, "--cassette", utf8(&path)],
    );
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("child {researcher}")) && said.contains("retrieval 0 was edited"),
        "{said}"
    );
}
