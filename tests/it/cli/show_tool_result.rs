//! `runtape show RUN@SEQ` of a step where a tool returned prints what the model is given: the
//! result (every line of it) or the error, with the effect it answers.

use std::path::Path;

use crate::support::cli::{run_id, runtape, temp_db, text};
use crate::support::spec::{SAFE, agent, scripted_as, tool};

/// Runs a spec whose agent calls `lines` (prints two lines) and then `broken` (exits 3), and
/// returns the run id.
fn run(root: &Path, db: &Path) -> String {
    let spec = root.join("spec.toml");
    std::fs::write(
        &spec,
        [
            "goal = \"look\"\n",
            &scripted_as("p", r#"{ tool_calls = [{ id = "c1", name = "lines" }] }, { tool_calls = [{ id = "c2", name = "broken" }] }, { text = "done" }"#),
            &tool("lines", r#"["sh", "-c", "printf 'first line\nsecond line'"]"#, SAFE),
            &tool("broken", r#"["sh", "-c", "echo 'no such city' >&2; exit 3"]"#, SAFE),
            &agent("a", "p", &["lines", "broken"], ""),
        ]
        .concat(),
    )
    .expect("spec");
    let o = runtape(db, &["run", spec.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    run_id(&o)
}

/// The seqs of `run`'s `tool_returned` steps.
fn returned(db: &Path, run: &str) -> Vec<u64> {
    let o = runtape(db, &["log", run, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|row| row["event"] == "tool_returned")
        .map(|row| row["seq"].as_u64().expect("seq"))
        .collect()
}

fn show(db: &Path, run: &str, seq: u64) -> String {
    let o = runtape(db, &["show", &format!("{run}@{seq}")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn show_of_a_tool_step_prints_its_result_or_error() {
    let (dir, db) = temp_db();
    let id = run(dir.path(), &db);
    let steps = returned(&db, &id);
    assert_eq!(steps.len(), 2, "{steps:?}");

    let ok = show(&db, &id, steps[0]);
    let result = ok
        .lines()
        .position(|l| l.starts_with("result  ") && l.ends_with(": first line"))
        .unwrap_or_else(|| panic!("no result line:\n{ok}"));
    assert_eq!(
        ok.lines().nth(result + 1),
        Some("        second line"),
        "{ok}"
    );

    let failed = show(&db, &id, steps[1]);
    assert!(
        failed
            .lines()
            .any(|l| l.starts_with("error   ") && l.contains("no such city")),
        "{failed}"
    );
}
