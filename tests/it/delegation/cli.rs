//! Delegation with the real binary on real SQLite files: the team example end to end (child
//! runs in parallel, a handoff, `ls` as a tree, `log` marks, `verify --recursive`), budgets
//! (carve-out, charge-back, a typed `budget_exhausted`), `max_depth`, and the cascade of a
//! cancel from another process.

use crate::support;

use crate::support::cli::{example, ran_example, temp_db, utf8};
use serde_json::Value;
use support::delegation::*;

fn tokens(r: &Value) -> u64 {
    r["tokens"].as_u64().expect("tokens")
}

#[test]
fn the_team_example_delegates_in_parallel_hands_over_and_shows_a_tree() {
    let (_dir, db, printed) = ran_example("team.toml");
    assert!(printed.contains("answer: APPROVED:"), "{printed}");

    let (parent, id) = root_and_id(&db, "the lead's run");
    assert_eq!(parent["status"], "completed");
    let children = children_of(&db, &id);
    assert_eq!(children.len(), 2, "one child per delegate call");
    let mut goals: Vec<&str> = children
        .iter()
        .map(|c| c["goal"].as_str().unwrap_or(""))
        .collect();
    goals.sort_unstable();
    assert_eq!(
        goals,
        [
            "Find what in the nightly export takes the time.",
            "Sketch a fix that batches the export writes."
        ]
    );
    for c in &children {
        assert_eq!(c["status"], "completed");
        // Both started by the same transition (one model turn): they ran side by side.
        assert_eq!(c["delegated_by"]["seq"], 3);
        assert!(
            c["id"]
                .as_str()
                .expect("id")
                .starts_with(&format!("{id}.3."))
        );
    }
    // Charge-back: the lead's three turns (360 + 550 + 440 tokens) plus its children's.
    let children_tokens: u64 = children.iter().map(tokens).sum();
    assert_eq!(children_tokens, 145 + 140);
    assert_eq!(tokens(&parent), 360 + 550 + 440 + children_tokens);

    // `ls` indents the children under the parent; `--flat` does not.
    let tree = ok(&db, &["ls"]);
    let lines: Vec<&str> = tree.lines().skip(1).collect();
    assert!(lines[0].starts_with(&id));
    assert!(lines[1].starts_with(&format!("└ {id}.3.0")), "{tree}");
    assert!(lines[2].starts_with(&format!("└ {id}.3.1")), "{tree}");
    let flat = ok(&db, &["ls", "--flat"]);
    assert!(flat.lines().skip(1).all(|l| !l.starts_with('└')), "{flat}");

    // `log PARENT` marks where each child started and ended; `log CHILD` works alone.
    let log = ok(&db, &["log", &id]);
    assert!(
        log.contains(&format!(
            "starts child {id}.3.0 (researcher), {id}.3.1 (coder)"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("child {id}.3.0 ended: answer: FINDINGS")),
        "{log}"
    );
    assert!(log.contains("transfer_to_reviewer"), "{log}");
    assert!(
        log.contains("run completed with reviewer's answer"),
        "{log}"
    );
    // Agents handed over here, so the state they finish in keeps its name.
    assert!(log.contains("generating → handoff"), "{log}");
    let child_log = ok(&db, &["log", &format!("{id}.3.1")]);
    assert!(child_log.contains("goal: Sketch a fix"), "{child_log}");

    // `verify --recursive` verifies all three, each child against its parent's effect.
    let verified = ok(&db, &["verify", &id, "--recursive"]);
    assert_eq!(
        verified.lines().filter(|l| l.starts_with("OK: ")).count(),
        3,
        "{verified}"
    );
    let alone = ok(&db, &["verify", &id]);
    assert_eq!(alone.lines().filter(|l| l.starts_with("OK: ")).count(), 1);
}

#[test]
fn a_child_out_of_its_carved_budget_is_a_typed_result_and_its_spend_is_charged() {
    let (dir, db) = temp_db();
    // The two children share a quarter of what the lead has left, each at most 1 turn: a
    // specialist that needs two turns runs out.
    let body = parallel_team(0).replace(
        "budget = { share = 0.5 }",
        "budget = { share = 0.25, max_turns = 1 }",
    );
    let spec = write(dir.path(), "team.toml", &body);
    let printed = ok(&db, &["run", utf8(&spec)]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    let (parent, id) = root_and_id(&db, "parent");
    let children = children_of(&db, &id);
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(c["status"], "failed", "out of its one turn");
        // One turn (a tool call), then no budget for the second.
        let one_turn = if c["goal"] == "List the tables." {
            35
        } else {
            36
        };
        assert_eq!(tokens(c), one_turn);
    }
    let log = ok(&db, &["log", &id]);
    assert_eq!(
        log.matches("ended: out of its turns budget").count(),
        2,
        "{log}"
    );
    // The model was told, typed, not silently: the result is the JSON outcome.
    for seq in [4, 5] {
        let show: Value =
            serde_json::from_str(&ok(&db, &["show", &format!("{id}@{seq}"), "--json"]))
                .expect("json");
        assert_eq!(
            show["event"]["body"]["report"]["outcome"],
            serde_json::json!({"status": "budget_exhausted", "budget": "turns"})
        );
    }
    let children_tokens: u64 = children.iter().map(tokens).sum();
    assert_eq!(tokens(&parent), 110 + 220 + children_tokens);
}

#[test]
fn a_delegate_call_past_max_depth_is_refused_to_the_model() {
    let (dir, db) = temp_db();
    // researcher may delegate to coder, but the lead allows only one level.
    let body = parallel_team(0)
        .replace(
            "[agents.delegation]\nbudget = { share = 0.5 }",
            "[agents.delegation]\nmax_depth = 1",
        )
        .replace(
            "id = \"researcher\"\nprovider = \"script\"\ntools = [\"note\"]",
            "id = \"researcher\"\nprovider = \"script\"\ntools = [\"note\"]\ndelegates = [\"coder\"]",
        )
        .replace(
            r#"{ id = "n1", name = "note", arguments = { text = "tables" } }"#,
            r#"{ id = "g1", name = "delegate_coder", arguments = { task = "Deeper." } }"#,
        );
    let spec = write(dir.path(), "deep.toml", &body);
    ok(&db, &["run", utf8(&spec)]);
    let all = runs(&db);
    assert_eq!(all.len(), 3, "the lead and its two children, no grandchild");
    let researcher = all
        .iter()
        .find(|r| r["goal"] == "List the tables.")
        .expect("researcher's run");
    let rid = researcher["id"].as_str().expect("id");
    assert_eq!(researcher["status"], "completed");
    assert!(children_of(&db, rid).is_empty());
    let show = ok(&db, &["show", &format!("{rid}@4"), "--json"]);
    assert!(show.contains("max_depth is 1"), "{show}");
}

#[test]
fn cancelling_a_parent_from_another_process_cancels_its_children() {
    let (dir, db) = temp_db();
    // Children whose model takes ten minutes: they are in flight until cancelled.
    let spec = write(dir.path(), "slow.toml", &parallel_team(600_000));
    let (mut driver, id) = drive_until_children(&db, &spec, 2);
    ok(&db, &["cancel", &id, "--reason", "enough"]);
    let status = driver.wait().expect("the driving process exits");
    assert!(!status.success(), "the run was cancelled");
    assert_eq!(root(&db).expect("parent")["status"], "cancelled");
    for c in children_of(&db, &id) {
        assert_eq!(c["status"], "cancelled", "{c}");
    }
    ok(&db, &["verify", &id, "--recursive"]);
}

#[test]
fn pausing_a_parent_pauses_its_children_and_resume_finishes_the_tree() {
    let (_dir, db, id, status) = paused_team();
    assert_eq!(status.code(), Some(4), "exit 4: paused");
    assert_eq!(root(&db).expect("parent")["status"], "paused");
    let children = children_of(&db, &id);
    for c in &children {
        assert_eq!(c["status"], "paused", "{c}");
    }
    let printed = ok(&db, &["resume", &id]);
    assert!(printed.contains("answer: PLAN:"), "{printed}");
    assert_eq!(
        children_of(&db, &id).len(),
        2,
        "the same two children, resumed"
    );
    for c in children_of(&db, &id) {
        assert_eq!(c["status"], "completed", "{c}");
    }
    ok(&db, &["verify", &id, "--recursive"]);
}

/// `runtape tools` shows the tools a model is offered beyond the declared ones: the lead's
/// delegates and handoff in the order a request lists them, and (examples/memory.toml) the
/// memory tools, each with its source.
#[test]
fn tools_lists_delegate_handoff_and_memory_tools_with_their_source() {
    let (_dir, db) = temp_db();
    // `name:source` of each tool `runtape tools` offers `agent` of `examples/SPEC`.
    let offered = |spec: &str, agent: &str| -> Vec<String> {
        ok(&db, &["tools", utf8(&example(spec)), "--json"])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
            .filter(|l| l["type"] == "tool" && l["agent"] == agent)
            .map(|l| {
                format!(
                    "{}:{}",
                    l["name"].as_str().unwrap_or_default(),
                    l["source"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    let lead = offered("team.toml", "lead");
    assert_eq!(
        lead,
        [
            "delegate_researcher:delegate",
            "delegate_coder:delegate",
            "transfer_to_reviewer:handoff"
        ]
    );
    let planner = offered("memory.toml", "planner");
    assert_eq!(
        planner,
        ["remember:memory", "recall:memory", "forget:memory"]
    );
}
