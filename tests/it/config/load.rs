//! A complete spec file loads into the expected machine spec and setup, the setup survives
//! JSON, and a run of it completes on a fresh engine with a real command tool.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;

use crate::support::cli::write;
use crate::support::durable::ended;
use crate::support::machine::answered;
use runtape::config::{ProviderSetup, ScriptStep, Setup, load};
use runtape::exec::Engine;
use runtape::history;
use runtape::machine::*;
use runtape::store::RunStatus;
use runtape::tool::{Tool, ToolContext};
use serde_json::json;
use support::config::*;
use tokio_util::sync::CancellationToken;

fn fixture_dir() -> PathBuf {
    fixture("").canonicalize().expect("fixture dir")
}

#[test]
fn the_full_example_loads_into_the_expected_spec() {
    let file = load(&fixture("full.toml")).expect("loads");
    let spec = file.spec.spec();

    assert_eq!(spec.max_transitions, 200);
    assert_eq!(spec.on_exhausted, RunOnExhausted::Pause);
    assert_eq!(spec.limits.max_turns, Some(40));
    assert_eq!(spec.limits.max_cost_nanos, Some(250_000_000));
    assert_eq!(
        file.database,
        Some(fixture_dir().join("runs/full.db")),
        "relative to the spec file's directory"
    );

    let researcher = file
        .spec
        .agent(&AgentId::from("researcher"))
        .expect("agent");
    assert_eq!(researcher.system_prompt, "You research.");
    assert_eq!(
        researcher.routes,
        vec![
            Route {
                max_attempts: 2,
                backoff: Backoff {
                    initial_ms: 1,
                    max_ms: 5
                },
                ..Route::new("flaky", "primary-model")
            },
            Route {
                max_attempts: 1,
                ..Route::new("script", "backup-model")
            },
        ],
        "primary first, then the fallbacks"
    );
    assert_eq!(researcher.limits.max_turns, Some(20));
    assert_eq!(
        researcher.limits.max_tool_calls,
        Some(200),
        "default filled in"
    );
    assert_eq!(researcher.limits.max_cost_nanos, Some(100_000_000));
    assert_eq!(researcher.correction_budget, 2);
    assert_eq!(researcher.on_exhausted, OnExhausted::Handoff);

    let writer = file.spec.agent(&AgentId::from("writer")).expect("agent");
    assert_eq!(writer.routes, vec![Route::new("script", "scripted")]);
    assert_eq!(writer.on_in_doubt, OnInDoubt::Ask);
    assert_eq!(writer.tools, None);
    let granted: Vec<&str> = file
        .spec
        .granted(&AgentId::from("writer"))
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(granted, ["search"], "no grant: the read-only tools");

    let search = file.spec.tool("search").expect("tool");
    assert!(search.read_only && search.idempotent && !search.interactive);
    assert_eq!(search.schema["required"], json!(["q"]));
    let editor = file.spec.tool("ask_editor").expect("tool");
    assert!(editor.interactive, "kind = human");

    let plan = file.spec.plan();
    assert_eq!(plan.entry, AgentId::from("researcher"));
    assert_eq!(plan.exits, vec![AgentId::from("writer")]);
    assert_eq!(plan.max_agent_visits, 3);
    assert_eq!(
        plan.edges[0].when,
        When::Contains {
            text: "FOUND".into()
        }
    );
}

#[test]
fn the_setup_describes_providers_and_tools_and_survives_json() {
    let file = load(&fixture("full.toml")).expect("loads");
    let setup = &file.setup;
    assert_eq!(setup.spec_dir, fixture_dir());
    let names: Vec<&str> = setup.providers.iter().map(ProviderSetup::name).collect();
    assert_eq!(names, ["flaky", "script"]);
    let ProviderSetup::Scripted(script) = &setup.providers[1] else {
        panic!("scripted: {:?}", setup.providers[1]);
    };
    assert_eq!(script.replies.len(), 2);
    let ScriptStep::Reply { reply, .. } = &script.by_agent["writer"][0] else {
        panic!("a reply");
    };
    assert_eq!(reply.text.as_deref(), Some("the report"));
    let ScriptStep::Reply { reply, .. } = &script.replies[0] else {
        panic!("a reply");
    };
    assert_eq!(reply.tool_calls[0].arguments, json!({"q": "runtape"}));
    assert_eq!(reply.usage.map(|u| u.input_tokens), Some(10));

    assert_eq!(setup.tools.len(), 1, "human tools need no implementation");
    let tool = &setup.tools[0];
    assert_eq!(
        (tool.program.as_str(), tool.args.as_slice()),
        ("sh", &["-c".to_owned(), "cat".to_owned()][..])
    );
    assert_eq!(tool.dir, fixture_dir());
    assert_eq!(tool.timeout_ms, Some(10_000));

    let json = setup.to_json().expect("serialises");
    assert_eq!(&Setup::from_json(&json).expect("reads back"), setup);
    let newer = json.replacen("\"version\":1", "\"version\":99", 1);
    let e = Setup::from_json(&newer).expect_err("newer version");
    assert!(
        e.is_internal() && e.to_string().contains("version 99"),
        "{e}"
    );
}

#[tokio::test]
async fn the_full_example_runs_to_completion_with_its_command_tool() {
    let file = load(&fixture("full.toml")).expect("loads");
    let engine = Engine::in_memory();
    file.install(&engine).expect("installs");
    let setup_json = file.setup.to_json().expect("serialises");
    let run = RunId::new("config-full-run");
    let end = ended(
        engine
            .start(file.spec.clone(), "Find the notes.")
            .with_id(run.clone())
            .with_setup(setup_json.clone()),
    )
    .await;
    assert_eq!(end.status, RunStatus::Completed, "{end:?}");
    assert_eq!(
        end.state.outcome(),
        Some(&answered("the report")),
        "the FOUND answer took the edge to the writer"
    );

    let store = engine.store().as_ref();
    let record = history::record(store, &run).expect("recorded");
    assert_eq!(record.setup.as_deref(), Some(setup_json.as_str()));
    let convs = history::conversations(store, &end.state).expect("bodies");
    let researcher = &convs[&AgentId::from("researcher")];
    let result = researcher
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("the tool answered");
    assert!(!result.is_error, "{result:?}");
    let content = result.content.as_deref().unwrap_or_default();
    assert!(
        content.contains("\"q\"") && content.contains("runtape"),
        "`cat` echoed the arguments it got on stdin: {content}"
    );
}

#[test]
fn a_minimal_spec_gets_the_defaults() {
    let file = SpecFile::new(&format!(
        "{MINIMAL}\n{}",
        "[[tools]]\nname = \"w\"\ncommand = [\"sh\", \"-c\", \"true\"]\n"
    ))
    .load()
    .expect("loads");
    let spec = file.spec.spec();
    assert_eq!(spec.max_transitions, DEFAULT_MAX_TRANSITIONS);
    assert_eq!(spec.on_exhausted, RunOnExhausted::Fail);
    assert_eq!(spec.limits, Limits::default());
    let solo = &spec.agents[0];
    assert_eq!(solo.routes, vec![Route::new("local", "echo")]);
    assert_eq!(solo.correction_budget, DEFAULT_CORRECTION_BUDGET);
    assert_eq!(solo.on_in_doubt, OnInDoubt::Fail);
    assert_eq!(file.spec.plan(), &Plan::single(AgentId::from("solo")));
    assert_eq!(
        file.spec.granted(&AgentId::from("solo")).count(),
        0,
        "the only tool is not read-only"
    );
    let tool = file.spec.tool("w").expect("tool");
    assert!(!tool.read_only && !tool.idempotent && !tool.requires_approval);
    assert_eq!(tool.schema, json!({"type": "object"}));
    assert_eq!(file.database, None);
}

#[test]
fn http_providers_take_defaults_from_their_kind_and_agents_override_the_model() {
    let file = SpecFile::new(
        "[[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nmodel = \"claude-3-5-haiku-latest\"\n\n[[agents]]\nid = \"a\"\nprovider = \"claude\"\nmodel = \"claude-sonnet-4-5\"\n[[agents]]\nid = \"b\"\nprovider = \"claude\"\n",
    )
    .load()
    .expect("loads");
    let ProviderSetup::Http(http) = &file.setup.providers[0] else {
        panic!("http");
    };
    assert_eq!(http.base_url, "https://api.anthropic.com");
    assert_eq!(http.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    assert!(http.stream);
    assert_eq!(
        file.spec.spec().agents[0].routes[0].model,
        "claude-sonnet-4-5"
    );
    assert_eq!(
        file.spec.spec().agents[1].routes[0].model,
        "claude-3-5-haiku-latest"
    );
}

/// A relative program is stored absolute, so the setup works from any working directory.
#[tokio::test]
async fn a_relative_program_runs_from_the_spec_directory() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[[tools]]\nname = \"where\"\ncommand = [\"./bin/where.sh\", \"--flag\"]\n"
    ));
    let bin = f.dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let script = write(
        &bin,
        "where.sh",
        "#!/bin/sh\nprintf '%s %s' \"$(pwd)\" \"$1\"\n",
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let file = f.load().expect("loads");
    let dir = f.dir.path().canonicalize().expect("canonical");
    let config = &file.setup.tools[0];
    assert_eq!(PathBuf::from(&config.program), dir.join("./bin/where.sh"));
    let setup = Setup::from_json(&file.setup.to_json().expect("json")).expect("back");
    let tool = setup.command_tools().remove(0);
    let ctx = ToolContext {
        run_id: RunId::new("r"),
        agent: AgentId::from("solo"),
        call_id: "c".into(),
        idempotency_key: "k".into(),
        lease_epoch: 0,
        cancel: CancellationToken::new(),
    };
    let out = tool.invoke(json!({}), ctx).await.expect("runs");
    assert_eq!(out, json!(format!("{} --flag", dir.display())));
}

#[tokio::test]
async fn a_setup_installs_into_another_engine() {
    let file = load(&fixture("full.toml")).expect("loads");
    let setup = Setup::from_json(&file.setup.to_json().expect("json")).expect("back");
    let engine = Engine::in_memory();
    setup.install(&engine).expect("installs");
    let end = ended(engine.start(file.spec.clone(), "again")).await;
    assert_eq!(end.status, RunStatus::Completed);
    let _: Arc<dyn Tool> = Arc::new(setup.command_tools().remove(0));
}
