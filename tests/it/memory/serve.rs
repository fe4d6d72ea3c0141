//! `runtape serve`'s step inspector shows a run's memory at each step (revision 5), exactly as
//! `runtape show RUN@SEQ --json` does: the notes the agents could see, and the global writes
//! staged and not yet published.

use crate::support;

use serde_json::Value;
use support::serve::{run_spec, runtape, scratch_db, serve};

#[test]
fn the_step_inspector_shows_the_memory_at_each_step() {
    let (dir, db) = scratch_db();
    let run = run_spec(dir.path(), &db, "examples/memory.toml");
    let server = serve(dir.path(), &db);
    // Step 4 took the planner's notes; step 9 the writer's global write, staged.
    for (seq, shared, staged) in [
        (3, None, false),
        (4, Some("Lisbon"), false),
        (9, Some("Lisbon"), true),
    ] {
        let show: Value = serde_json::from_slice(
            &runtape(
                dir.path(),
                &db,
                &["show", &format!("{run}@{seq}"), "--json"],
            )
            .stdout,
        )
        .expect("show --json");
        let (status, step) = server.get(&format!("/api/runs/{run}/steps/{seq}"));
        assert_eq!(status, 200, "{step}");
        assert_eq!(step, show, "step {seq}");
        let memory = &step["state"]["run"]["memory"];
        assert_eq!(
            memory["shared"]["city"].as_str(),
            shared,
            "step {seq}: {memory}"
        );
        assert_eq!(
            memory["global"]["staged"]["last_offsite"]["value"].as_str(),
            staged.then_some("Lisbon"),
            "step {seq}: {memory}"
        );
    }
    // The end: published, nothing staged, the view holds the new version.
    let (_, last) = server.get(&format!("/api/runs/{run}/steps/latest"));
    let global = &last["state"]["run"]["memory"]["global"];
    assert!(global.get("staged").is_none(), "{global}");
    assert_eq!(global["read"]["last_offsite"]["version"], 1);
}
