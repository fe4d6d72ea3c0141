//! A delegated child's receipts hang under its parent's, with the real binary on real SQLite
//! files: the child's first receipt chains under the parent's receipt for the model turn that
//! asked for it, `receipts export CHILD` carries the parent's receipts through that anchor so
//! the file verifies offline as one chain, and tampering with, dropping or reordering a
//! receipt, or splicing in another run's child, fails with one line naming what.

use crate::support;

use serde_json::Value;
use support::delegation::signed::*;
use support::delegation::*;

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
