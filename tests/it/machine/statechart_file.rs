//! `statechart.md` is generated from the transition table; these tests fail when they drift.

use std::process::Command;

#[test]
fn committed_statechart_matches_the_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/statechart.md");
    let committed = std::fs::read_to_string(path).expect("statechart.md exists at the top level");
    assert!(
        committed == runtape::machine::table::render_statechart(),
        "statechart.md is stale: run `cargo run -- statechart > statechart.md`"
    );
}

#[test]
fn statechart_check_exits_nonzero_on_a_stale_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("statechart.md");
    let bin = env!("CARGO_BIN_EXE_runtape");

    std::fs::write(&file, runtape::machine::table::render_statechart()).expect("write");
    let ok = Command::new(bin)
        .args(["statechart", "--check", "--file"])
        .arg(&file)
        .status()
        .expect("runs");
    assert_eq!(ok.code(), Some(0));

    std::fs::write(&file, "# an old chart\n").expect("write");
    let out = Command::new(bin)
        .args(["statechart", "--check", "--file"])
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("runtape statechart >"));
}

#[test]
fn every_state_appears_in_the_diagram() {
    let chart = runtape::machine::table::render_statechart();
    for kind in runtape::machine::StateKind::ALL {
        assert!(chart.contains(kind.name()), "{kind} missing");
    }
    for edge in runtape::machine::table::TABLE {
        assert!(
            chart.contains(&format!("`{}`", edge.id)),
            "{} missing",
            edge.id
        );
    }
}
