//! `invoke_agent {agent}` spans, exported by a real `runtape run` of `examples/team.toml` to
//! a real OTLP/HTTP receiver over `http/json`: the lead's activation holds its model calls
//! and the child runs it delegates (in the same trace), the handoff ends it and opens the
//! reviewer's, and every activation hangs under the run's span. The service is `runtape`
//! when `OTEL_SERVICE_NAME` is unset.

use crate::support;

use serde_json::json;
use support::otlp::{Span, content_types, receiver, service_names, spans};
use support::serve::{bin, scratch_db};

#[test]
fn agent_activations_nest_their_calls_child_runs_and_handoffs() {
    let (otlp, got) = receiver();
    let (dir, db) = scratch_db();
    let out = std::process::Command::new(bin())
        .args(["run", "examples/team.toml", "--json", "--db"])
        .arg(&db)
        .current_dir(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("RUNTAPE_DB")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = String::from_utf8_lossy(&out.stdout);
    let run = serde_json::from_str::<serde_json::Value>(first.lines().next().expect("a line"))
        .expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let kinds = content_types(&got, "/v1/traces");
    assert!(kinds.iter().all(|k| k == "application/json"), "{kinds:?}");
    assert!(
        service_names(&got, "/v1/traces")
            .iter()
            .all(|n| n == "runtape")
    );

    let all = spans(&got);
    let take_up = |id: &str| -> &Span {
        all.iter()
            .find(|s| s.name == "invoke_workflow runtape" && s.attrs["runtape.run.id"] == json!(id))
            .unwrap_or_else(|| panic!("no span for run {id}: {all:#?}"))
    };
    let root = take_up(&run);
    assert!(root.parent.is_empty());
    let activation = |name: &str, run: &str| -> &Span {
        let found: Vec<_> = all
            .iter()
            .filter(|s| {
                s.name == format!("invoke_agent {name}")
                    && s.attrs["gen_ai.conversation.id"] == json!(run)
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} in {run}: {all:#?}");
        found[0]
    };
    let lead = activation("lead", &run);
    assert_eq!(lead.parent, root.id);
    assert_eq!(lead.trace, root.trace);
    assert_eq!(lead.attrs["gen_ai.operation.name"], json!("invoke_agent"));
    assert_eq!(lead.attrs["gen_ai.agent.name"], json!("lead"));
    assert_eq!(
        lead.attrs["gen_ai.provider.name"],
        json!("runtape.scripted")
    );
    let reviewer = activation("reviewer", &run);
    assert_eq!(
        reviewer.parent, root.id,
        "a handoff opens a sibling activation"
    );
    assert_eq!(reviewer.trace, root.trace);

    let chats_under = |parent: &Span| {
        all.iter()
            .filter(|s| s.name.starts_with("chat ") && s.parent == parent.id)
            .count()
    };
    assert_eq!(chats_under(lead), 2, "the lead's two model calls");
    assert_eq!(chats_under(reviewer), 1);
    assert_eq!(chats_under(root), 0, "no model call outside an activation");

    // The two delegated children: in the run's trace, under the lead's activation, each with
    // its own agent's activation holding its model call.
    let children: Vec<&Span> = all
        .iter()
        .filter(|s| {
            s.name == "invoke_workflow runtape"
                && s.attrs["runtape.run.id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with(&format!("{run}.")))
        })
        .collect();
    assert_eq!(children.len(), 2, "{all:#?}");
    let mut agents = Vec::new();
    for child in children {
        assert_eq!(child.trace, root.trace, "a child is in its parent's trace");
        assert_eq!(
            child.parent, lead.id,
            "under the activation that delegated it"
        );
        let id = child.attrs["runtape.run.id"].as_str().expect("id");
        let inner: Vec<&Span> = all
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent ") && s.parent == child.id)
            .collect();
        assert_eq!(inner.len(), 1, "{id}: {inner:#?}");
        assert_eq!(chats_under(inner[0]), 1);
        agents.push(inner[0].name.clone());
        assert_eq!(take_up(id).id, child.id);
    }
    agents.sort();
    assert_eq!(agents, ["invoke_agent coder", "invoke_agent researcher"]);
}
