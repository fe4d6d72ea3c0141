//! One receipts export proves a whole delegation tree (revision 5), with the real binary on
//! real SQLite files: a child's result gets a receipt in its parent's chain naming where the
//! child's record starts and ends, `receipts export PARENT --recursive` writes every run's
//! receipts and head line in tree order, and `receipts verify` checks the file offline as one
//! tree — an edited, dropped, reordered or spliced receipt, a dropped child, or a child's tail
//! cut off fails with one line naming what. `verify --recursive` checks the same claim against
//! the database.

use crate::support;

use crate::support::cli::utf8;
use serde_json::Value;
use support::delegation::signed::*;
use support::delegation::*;

/// `receipts export RUN --recursive`, as its lines.
fn export_tree(t: &Team, run: &str) -> Vec<String> {
    let file = t.dir.path().join(format!("{run}.tree.jsonl"));
    let printed = ok(
        &t.db,
        &["receipts", "export", run, "--recursive", "-o", utf8(&file)],
    );
    assert!(printed.contains("and 2 runs below it"), "{printed}");
    std::fs::read_to_string(file)
        .expect("the export")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// [`team`] and its parent's tree, exported ([`export_tree`]).
fn exported_team() -> (Team, Vec<String>) {
    let t = team();
    let lines = export_tree(&t, &t.parent);
    (t, lines)
}

fn is_head(line: &str) -> bool {
    json(line)["type"] == "runtape.receipts.head"
}

/// The lines of `run`'s section: its receipts and its head line.
fn section(lines: &[String], run: &str) -> std::ops::Range<usize> {
    let start = lines
        .iter()
        .position(|l| run_of(l) == run || (is_head(l) && json(l)["head"]["run"] == run))
        .expect("a section of the run");
    let end = start
        + lines[start..]
            .iter()
            .position(|l| is_head(l))
            .expect("a head line")
        + 1;
    start..end
}

#[test]
fn a_recursive_export_holds_the_tree_and_verifies_offline_as_one() {
    let (t, lines) = exported_team();
    // The parent's section, then each child's, each closed by its head line.
    let heads: Vec<String> = lines
        .iter()
        .filter(|l| is_head(l))
        .map(|l| json(l)["head"]["run"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        heads,
        [
            t.parent.clone(),
            t.children[0].clone(),
            t.children[1].clone()
        ]
    );
    // The parent's receipt for each child's result names the child's last receipt.
    for child in &t.children {
        let named = lines
            .iter()
            .find(|l| json(l)["body"]["child"]["run_id"] == child.as_str())
            .expect("the parent names the child");
        assert_eq!(json(named)["body"]["kind"], "child");
        assert_eq!(run_of(named), t.parent);
        let child_lines = section(&lines, child);
        let last_receipt = &lines[child_lines.end - 2];
        assert_eq!(
            json(named)["body"]["child"]["receipt"],
            json(last_receipt)["seal"]["signature"]
        );
        // And the child's first receipt hangs from the anchor it names.
        assert_eq!(
            json(named)["body"]["child"]["anchor"],
            json(&lines[child_lines.start])["body"]["parent_sig"]
        );
    }
    let printed = t.verify(&lines).expect("the tree verifies");
    assert!(
        printed.contains("a tree of 3 runs") && printed.contains("complete"),
        "{printed}"
    );
    assert_eq!(
        printed.matches("which names where it ends").count(),
        2,
        "{printed}"
    );
    // The database agrees with what the parent named.
    ok(
        &t.db,
        &["verify", &t.parent, "--recursive", "--pubkey", &t.pubkey()],
    );
    // A plain export of the parent still verifies as one chain.
    assert!(t.verify(&t.export(&t.parent)).is_ok());
}

#[test]
fn an_edited_receipt_in_a_child_fails_naming_its_section() {
    let (t, mut lines) = exported_team();
    let child = section(&lines, &t.children[1]);
    let mut receipt = json(&lines[child.start]);
    receipt["body"]["usage"]["output_tokens"] = Value::from(1);
    lines[child.start] = receipt.to_string();
    let e = t.verify(&lines).expect_err("an edited receipt");
    assert!(
        e.contains(&format!("(run {})", t.children[1])) && e.contains("invalid signature"),
        "{e}"
    );
}

#[test]
fn a_dropped_child_fails_naming_it_and_the_parents_receipt() {
    let (t, mut lines) = exported_team();
    let child = section(&lines, &t.children[0]);
    lines.drain(child);
    let e = t.verify(&lines).expect_err("a child dropped");
    assert!(
        e.contains(&format!("names child run {}", t.children[0])) && e.contains("does not hold"),
        "{e}"
    );
}

#[test]
fn a_childs_tail_cut_off_fails_even_without_its_head_line() {
    let t = parallel_team_signed();
    let lines = export_tree(&t, &t.parent);
    let child = section(&lines, &t.children[0]);
    // The receipt cut, its head line kept: the child's own head catches it.
    let mut kept_head = lines.clone();
    kept_head.remove(child.end - 2);
    let e = t.verify(&kept_head).expect_err("a receipt cut");
    assert!(e.contains(&t.children[0]), "{e}");
    // The last child's last receipt and head line cut: only the parent's receipt says where
    // the child ends.
    let last = section(&lines, &t.children[1]);
    assert_eq!(last.end, lines.len(), "the last section");
    let mut cut = lines.clone();
    cut.drain(last.end - 2..last.end);
    let o = t.verify_output(&cut, &["--allow-headless"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("child run {}", t.children[1]))
            && e.contains("cut off its end")
            && e.contains(&format!("run {}'s receipt at seq", t.parent)),
        "{e}"
    );
}

#[test]
fn reordered_and_spliced_receipts_fail() {
    let (t, lines) = exported_team();
    // Two receipts of the parent swapped.
    let mut swapped = lines.clone();
    swapped.swap(0, 1);
    let e = t.verify(&swapped).expect_err("reordered");
    assert!(e.contains("section 0"), "{e}");
    // A child's section moved above its parent's.
    let mut moved = lines.clone();
    let child: Vec<String> = moved.drain(section(&lines, &t.children[1])).collect();
    for (i, l) in child.into_iter().enumerate() {
        moved.insert(i, l);
    }
    let e = t.verify(&moved).expect_err("a child above its parent");
    assert!(e.contains(&t.children[1]), "{e}");
    // Another tree's child (same key) in place of one of ours.
    let other = team_signed_like(Some(&t));
    let theirs = export_tree(&other, &other.parent);
    let mut spliced = lines.clone();
    let ours = section(&lines, &t.children[0]);
    let foreign: Vec<String> = theirs[section(&theirs, &other.children[0])].to_vec();
    spliced.splice(ours, foreign);
    let e = t.verify(&spliced).expect_err("spliced");
    assert!(
        e.contains(&other.children[0]) && e.contains("does not belong to this tree"),
        "{e}"
    );
}
