//! A delegated child's receipts hang under its parent's, with the real binary on real SQLite
//! files: the child's first receipt chains under the parent's receipt for the model turn that
//! asked for it, `receipts export CHILD` carries the parent's receipts through that anchor so
//! the file verifies offline as one chain, and tampering with, dropping or reordering a
//! receipt, or splicing in another run's child, fails with one line naming what.

mod delegation_support;

use std::path::{Path, PathBuf};

use delegation_support::*;
use serde_json::Value;

/// The team example (a lead delegating to two specialists in one turn), run with a signing key.
struct Team {
    dir: tempfile::TempDir,
    db: PathBuf,
    key: PathBuf,
    parent: String,
    children: Vec<String>,
}

fn team() -> Team {
    team_signed_like(None)
}

/// The team example, signed with `like`'s key when given (else a new one).
fn team_signed_like(like: Option<&Team>) -> Team {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("runs.db");
    let key = dir.path().join("receipt.key");
    match like {
        Some(other) => {
            std::fs::copy(&other.key, &key).expect("copies the key");
            std::fs::copy(other.pubkey(), format!("{}.pub", key.display()))
                .expect("copies the public key");
        }
        None => {
            ok(&db, &["keygen", "-o", key.to_str().expect("utf-8")]);
        }
    }
    let seed = std::fs::read_to_string(&key).expect("the key file");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/team.toml");
    let o = runtape(&db)
        .env("RUNTAPE_RECEIPT_KEY", seed)
        .args(["run", example.to_str().expect("utf-8")])
        .output()
        .expect("runtape runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let parent = root(&db).expect("the lead's run")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let mut children: Vec<String> = children_of(&db, &parent)
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect();
    children.sort();
    assert_eq!(children.len(), 2, "two children in parallel");
    Team {
        dir,
        db,
        key,
        parent,
        children,
    }
}

impl Team {
    fn pubkey(&self) -> String {
        format!("{}.pub", self.key.display())
    }

    /// `receipts export RUN`, as its lines (receipts, then the head line).
    fn export(&self, run: &str) -> Vec<String> {
        let file = self.dir.path().join(format!("{run}.jsonl"));
        ok(
            &self.db,
            &[
                "receipts",
                "export",
                run,
                "-o",
                file.to_str().expect("utf-8"),
            ],
        );
        std::fs::read_to_string(file)
            .expect("the export")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `receipts verify` over `lines` written to a file: Ok(stdout) or Err(stderr).
    fn verify(&self, lines: &[String]) -> Result<String, String> {
        let file = self.dir.path().join("check.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").expect("writes the bundle");
        let o = out(
            &self.db,
            &[
                "receipts",
                "verify",
                file.to_str().expect("utf-8"),
                "--pubkey",
                &self.pubkey(),
            ],
        );
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        if o.status.success() {
            Ok(stdout)
        } else {
            assert_eq!(
                o.status.code(),
                Some(1),
                "a bundle that does not verify exits 1"
            );
            assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
            Err(stderr)
        }
    }
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).expect("a JSON line")
}

fn run_of(line: &str) -> String {
    json(line)["body"]["run_id"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn link(line: &str) -> String {
    json(line)["seal"]["signature"]
        .as_str()
        .expect("signed")
        .to_owned()
}

fn parent_sig(line: &str) -> Option<String> {
    json(line)["body"]["parent_sig"].as_str().map(str::to_owned)
}

/// The index of the first receipt of `run` in `lines`.
fn first_of(lines: &[String], run: &str) -> usize {
    lines
        .iter()
        .position(|l| run_of(l) == run)
        .expect("a receipt of the run")
}

#[test]
fn each_of_two_parallel_children_chains_under_the_parents_receipt_and_verifies() {
    let t = team();
    let parent_lines = t.export(&t.parent);
    assert!(t.verify(&parent_lines).is_ok(), "the parent's own export");
    assert!(
        parent_sig(&parent_lines[0]).is_none(),
        "a run nobody delegated starts its chain at null"
    );
    for child in &t.children {
        let lines = t.export(child);
        let printed = t.verify(&lines).expect("the child's export verifies");
        assert!(printed.starts_with("OK: "), "{printed}");
        assert!(printed.contains("complete"), "{printed}");
        let start = first_of(&lines, child);
        assert!(start > 0, "the parent's receipts come first");
        // The anchor is the parent's receipt for the turn that asked for the child: the same
        // line, byte for byte, as in the parent's own export.
        let anchor = &lines[start - 1];
        assert_eq!(run_of(anchor), t.parent);
        assert!(parent_lines.contains(anchor), "the parent's own receipt");
        assert_eq!(parent_sig(&lines[start]), Some(link(anchor)));
        assert_eq!(json(anchor)["body"]["kind"], "model");
        // Everything before the child's receipts is the parent's chain through the anchor.
        assert_eq!(lines[..start], parent_lines[..start]);
        // The child alone, in the database, still verifies as a chain anchored in the parent.
        ok(&t.db, &["verify", child, "--pubkey", &t.pubkey()]);
    }
    let anchors: Vec<String> = t
        .children
        .iter()
        .map(|c| {
            let lines = t.export(c);
            parent_sig(&lines[first_of(&lines, c)]).expect("anchored")
        })
        .collect();
    assert_eq!(
        anchors[0], anchors[1],
        "both children were asked for in one turn, so both hang from its receipt"
    );
}

#[test]
fn tampering_dropping_and_reordering_a_childs_receipt_fail_naming_the_receipt() {
    let t = team();
    let child = &t.children[0];
    let lines = t.export(child);
    let start = first_of(&lines, child);

    let mut edited = lines.clone();
    let mut receipt = json(&edited[start]);
    receipt["body"]["response_hash"] = Value::String("0".repeat(64));
    edited[start] = receipt.to_string();
    let err = t.verify(&edited).expect_err("an edited child receipt");
    assert!(
        err.contains("signature does not verify") || err.contains("signature"),
        "{err}"
    );
    assert!(err.contains(&format!("line {}", start + 1)), "{err}");

    let mut dropped_anchor = lines.clone();
    dropped_anchor.remove(start - 1);
    let err = t
        .verify(&dropped_anchor)
        .expect_err("the parent's anchor dropped");
    assert!(err.contains("chain break"), "{err}");

    let mut dropped_child = lines.clone();
    dropped_child.remove(start);
    let err = t
        .verify(&dropped_child)
        .expect_err("a child receipt dropped");
    assert!(err.contains("does not verify"), "{err}");

    let mut reordered = lines.clone();
    reordered.swap(start - 1, start);
    let err = t
        .verify(&reordered)
        .expect_err("a child receipt moved before its anchor");
    assert!(
        err.contains("out of place") || err.contains("chain break"),
        "{err}"
    );
}

#[test]
fn another_runs_child_spliced_under_the_parent_fails_at_its_first_receipt() {
    let one = team();
    let other = team_signed_like(Some(&one));
    let mine = one.export(&one.children[0]);
    let theirs = other.export(&other.children[0]);
    let start = first_of(&mine, &one.children[0]);
    let their_start = first_of(&theirs, &other.children[0]);
    assert_eq!(start, their_start, "the scripted runs have the same shape");
    // Our parent's receipts, then the other run's child (with its head line, so counts and
    // the end still match): only the anchor betrays the splice.
    let mut spliced: Vec<String> = mine[..start].to_vec();
    spliced.extend_from_slice(&theirs[their_start..]);
    assert!(one.verify(&theirs).is_ok(), "one key signed both");
    let err = one.verify(&spliced).expect_err("a spliced child");
    assert!(err.contains("chain break"), "{err}");
    assert!(err.contains(&format!("line {}", start + 1)), "{err}");
}
