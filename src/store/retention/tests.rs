use super::*;
use crate::machine::StateKind;

fn run(id: &str, status: RunStatus, updated_ms: u64) -> RunRecord {
    RunRecord {
        id: RunId::new(id),
        parent: None,
        spec: "{}".into(),
        setup: None,
        goal: "goal".into(),
        status,
        state_kind: StateKind::Done,
        seq: 3,
        lease_epoch: 1,
        lease_owner: None,
        lease_expires_ms: 0,
        control: None,
        created_ms: 0,
        updated_ms,
        cost_nanos: 0,
        unpriced_turns: 0,
        tokens: 0,
        outcome: None,
    }
}

const ENDED: [RunStatus; 3] = [
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

fn going(groups: &[Group]) -> Vec<Vec<&str>> {
    groups
        .iter()
        .filter(|g| g.kept.is_none())
        .map(|g| g.runs.iter().map(RunId::as_str).collect())
        .collect()
}

#[test]
fn a_tree_goes_whole_or_not_at_all() {
    let mut fork = run("f", RunStatus::Completed, 10);
    fork.parent = Some((RunId::new("a"), 2));
    let runs = vec![
        run("a", RunStatus::Completed, 10),
        run("a.2.0", RunStatus::Completed, 10),
        run("a.2.0.1.0", RunStatus::Failed, 10),
        fork,
        run("b", RunStatus::Completed, 10),
        run("b.1.0", RunStatus::Running, 10),
        run("c", RunStatus::Cancelled, 500),
    ];
    let groups = plan(&runs, &[], &ENDED, 100, 1_000);
    assert_eq!(going(&groups), vec![vec!["a", "a.2.0", "a.2.0.1.0", "f"]]);
    let kept: Vec<_> = groups.iter().filter_map(|g| g.kept.clone()).collect();
    assert_eq!(
        kept,
        vec![
            Kept::Live(RunId::new("b.1.0"), RunStatus::Running),
            Kept::Recent(RunId::new("c")),
        ]
    );
}

#[test]
fn a_leased_or_unasked_status_keeps_its_group_and_sessions_join() {
    let mut leased = run("l", RunStatus::Completed, 10);
    leased.lease_owner = Some("host:1".into());
    leased.lease_expires_ms = 2_000;
    let runs = vec![
        leased,
        run("s1", RunStatus::Completed, 10),
        run("s2", RunStatus::Failed, 10),
        run("x", RunStatus::Completed, 10),
    ];
    let links = [(RunId::new("s1"), RunId::new("s2"))];
    let groups = plan(&runs, &links, &[RunStatus::Completed], 100, 1_000);
    assert_eq!(going(&groups), vec![vec!["x"]]);
    let groups = plan(&runs, &links, &ENDED, 100, 1_000);
    assert_eq!(going(&groups), vec![vec!["s1", "s2"], vec!["x"]]);
}

#[test]
fn durations_and_statuses_parse_or_say_why_in_one_line() {
    assert_eq!(parse_age("30d"), Ok(30 * 86_400_000));
    assert_eq!(parse_age("90s"), Ok(90_000));
    for bad in ["", "30", "d", "3x", "-1d", "1.5h", "99999999999999999999d"] {
        let e = parse_age(bad).expect_err(bad);
        assert!(e.starts_with("--older-than") && !e.contains('\n'), "{e}");
    }
    assert_eq!(
        parse_statuses("completed, failed"),
        Ok(vec![RunStatus::Completed, RunStatus::Failed])
    );
    assert!(parse_statuses("running").is_err());
    assert!(parse_statuses("done").is_err());
}

#[test]
fn the_tombstone_chain_finds_an_edit_and_a_gap() {
    let proof = ChildProof {
        run: RunId::new("a"),
        seq: 3,
        chain: Digest::of(b"c"),
        anchor: None,
        receipt: None,
    };
    let prune = Prune {
        runs: ["a", "b", "c"]
            .iter()
            .map(|id| PruneRun {
                run: RunId::new(*id),
                parent: None,
                status: RunStatus::Completed,
                seq: 3,
                proof: proof.clone(),
                head: Digest::of(id.as_bytes()),
            })
            .collect(),
        now_ms: 5,
        by: "me".into(),
    };
    let records = prune.tombstones_after(None);
    assert_eq!(chain_fault(&records), None);
    let more = prune.tombstones_after(records.last());
    assert_eq!(more[0].id, 4);
    let mut gap = records.clone();
    gap.remove(1);
    assert!(chain_fault(&gap).expect("a gap").contains("tombstone 2"));
    let mut edited = records.clone();
    let text = String::from_utf8(edited[1].body.clone()).expect("JSON");
    edited[1].body = text.replace("completed", "cancelled").into_bytes();
    assert!(
        chain_fault(&edited)
            .expect("an edit")
            .contains("tombstone 2")
    );
}
