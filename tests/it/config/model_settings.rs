//! `[agents.model_settings]`, `output_schema` / `output_schema_file` and the new endpoints in
//! spec files: what loads into the spec, and every setting a route's provider cannot honour
//! refused at load with one line naming the field and the provider.

use crate::support;

use runtape::config::ProviderSetup;
use runtape::machine::{ReasoningEffort, ReasoningSettings};
use runtape::provider::http::ProviderKind;
use serde_json::json;
use support::config::*;

fn with_provider(kind: &str, agent_extra: &str) -> String {
    format!(
        "[[providers]]\nname = \"p\"\nkind = \"{kind}\"\nmodel = \"m\"\n\n\
         [[agents]]\nid = \"a\"\nprovider = \"p\"\n{agent_extra}\n"
    )
}

#[test]
fn settings_and_an_inline_schema_load_into_the_spec() {
    let f = SpecFile::new(&with_provider(
        "openai",
        r#"output_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
[agents.model_settings]
temperature = 0.2
top_p = 0.9
seed = 7
stop = ["\n\nEND"]
max_output_tokens = 2000
reasoning = { effort = "medium" }
parallel_tool_calls = false
strict_tools = true
"#,
    ));
    let file = f.load().expect("loads");
    let agent = &file.spec.spec().agents[0];
    let s = &agent.model_settings;
    assert_eq!(s.temperature, Some(0.2));
    assert_eq!(s.top_p, Some(0.9));
    assert_eq!(s.seed, Some(7));
    assert_eq!(s.stop, ["\n\nEND"]);
    assert_eq!(s.max_output_tokens, Some(2000));
    assert_eq!(
        s.reasoning,
        Some(ReasoningSettings {
            effort: ReasoningEffort::Medium,
            budget_tokens: None
        })
    );
    assert_eq!(s.parallel_tool_calls, Some(false));
    assert_eq!(s.strict_tools, Some(true));
    assert_eq!(
        agent.output_schema,
        Some(
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
        )
    );
}

#[test]
fn a_schema_file_is_read_relative_to_the_spec() {
    let f = SpecFile::new(&with_provider(
        "openai",
        "output_schema_file = \"schemas/city.json\"",
    ));
    std::fs::create_dir(f.dir.path().join("schemas")).unwrap();
    std::fs::write(
        f.dir.path().join("schemas/city.json"),
        r#"{"type":"object","required":["city"]}"#,
    )
    .unwrap();
    let file = f.load().expect("loads");
    assert_eq!(
        file.spec.spec().agents[0].output_schema,
        Some(json!({"type": "object", "required": ["city"]}))
    );
}

#[test]
fn schema_mistakes_are_one_line_each() {
    let openai = |agent: &str| SpecFile::new(&with_provider("openai", agent));
    let both = openai("output_schema = { type = \"object\" }\noutput_schema_file = \"x.json\"");
    let e = both.error().to_string();
    let inline = "agents[0].output_schema_file: give the output schema inline";
    assert!(e.contains(inline), "{e}");
    let missing = openai("output_schema_file = \"nope.json\"");
    let e = missing.error().to_string();
    assert!(
        e.contains("agents[0].output_schema_file: cannot read"),
        "{e}"
    );
    let invalid = openai("output_schema = { type = 5 }");
    let e = invalid.error().to_string();
    let not_a_schema =
        "agents[0].output_schema: output_schema of agent `a` is not a valid JSON Schema";
    assert!(e.contains(not_a_schema), "{e}");
    for e in [both.error(), missing.error(), invalid.error()] {
        assert!(!e.to_string().contains('\n'));
        assert!(!e.is_internal());
    }
}

#[test]
fn a_setting_the_provider_cannot_honour_is_refused_naming_both() {
    let cases = [
        (
            "anthropic",
            "seed = 1",
            "seed",
            "the Messages API has no seed",
        ),
        (
            "anthropic",
            "temperature = 1.5",
            "temperature",
            "from 0 to 1",
        ),
        (
            "anthropic",
            "temperature = 0.5\nreasoning = { effort = \"low\" }",
            "temperature",
            "cannot be combined with a temperature",
        ),
        (
            "openai-responses",
            "stop = [\"x\"]",
            "stop",
            "no stop sequences",
        ),
        ("openai-responses", "seed = 3", "seed", "no seed"),
        (
            "ollama",
            "parallel_tool_calls = false",
            "parallel_tool_calls",
            "cannot turn parallel tool calls off",
        ),
        (
            "ollama",
            "strict_tools = true",
            "strict_tools",
            "does not enforce tool schemas",
        ),
    ];
    for (kind, setting, field, why) in cases {
        let mut text = with_provider(kind, &format!("[agents.model_settings]\n{setting}"));
        if kind == "anthropic" {
            text = text.replace(
                "model = \"m\"",
                "model = \"m\"\napi_key_env = \"ANTHROPIC_API_KEY\"",
            );
        }
        let e = SpecFile::new(&text).error().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.contains(&format!(
                "agents[0].model_settings.{field}: provider `p` ({kind}) cannot honour `{field}`"
            )),
            "{kind} {setting}: {e}"
        );
        assert!(e.contains(why), "{e}");
        assert!(e.contains("remove it"), "{e}");
    }
}

#[test]
fn a_fallback_route_that_cannot_honour_a_setting_is_refused_too() {
    let text = "[[providers]]\nname = \"main\"\nkind = \"openai\"\nmodel = \"m\"\n\
                [[providers]]\nname = \"local\"\nkind = \"ollama\"\nmodel = \"llama\"\n\
                [[agents]]\nid = \"a\"\nprovider = \"main\"\n\
                [[agents.fallbacks]]\nprovider = \"local\"\n\
                [agents.model_settings]\nparallel_tool_calls = false\n";
    let e = SpecFile::new(text).error().to_string();
    assert!(
        e.contains("provider `local` (ollama) cannot honour `parallel_tool_calls`"),
        "{e}"
    );
}

#[test]
fn out_of_range_settings_are_refused_for_every_provider() {
    for (setting, field) in [
        ("temperature = 2.5", "temperature"),
        ("top_p = 0", "top_p"),
        ("stop = [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop"),
        ("max_output_tokens = 0", "max_output_tokens"),
        (
            "reasoning = { effort = \"low\", budget_tokens = 100 }",
            "reasoning.budget_tokens",
        ),
    ] {
        let e = SpecFile::new(&format!("{MINIMAL}[agents.model_settings]\n{setting}\n"))
            .error()
            .to_string();
        assert!(
            e.contains(&format!("agents[0].model_settings.{field}")),
            "{setting}: {e}"
        );
        assert!(!e.contains('\n'));
    }
    let e = SpecFile::new(&format!(
        "{MINIMAL}[agents.model_settings]\neffort = \"high\"\n"
    ))
    .error()
    .to_string();
    assert!(e.contains("unknown field `effort`"), "{e}");
}

#[test]
fn azure_needs_its_deployment_url_and_takes_an_api_version() {
    let ok = SpecFile::new(
        "[[providers]]\nname = \"az\"\nkind = \"azure\"\nmodel = \"gpt-4o\"\n\
         base_url = \"https://res.openai.azure.com/openai/deployments/gpt-4o\"\napi_version = \"2024-10-21\"\n\
         [[agents]]\nid = \"a\"\nprovider = \"az\"\n",
    );
    let file = ok.load().expect("loads");
    let ProviderSetup::Http(http) = &file.setup.providers[0] else {
        panic!("an HTTP provider");
    };
    assert_eq!(http.kind, ProviderKind::AzureOpenAi);
    assert_eq!(http.api_key_env.as_deref(), Some("AZURE_OPENAI_API_KEY"));
    assert_eq!(http.api_version.as_deref(), Some("2024-10-21"));

    let no_url = SpecFile::new(
        "[[providers]]\nname = \"az\"\nkind = \"azure\"\nmodel = \"gpt-4o\"\n[[agents]]\nid = \"a\"\nprovider = \"az\"\n",
    );
    let e = no_url.error().to_string();
    assert!(e.contains("providers[0].base_url"), "{e}");
    assert!(e.contains("Azure OpenAI needs the deployment URL"), "{e}");

    let stray = SpecFile::new(
        "[[providers]]\nname = \"o\"\nkind = \"openai\"\nmodel = \"m\"\napi_version = \"1\"\n[[agents]]\nid = \"a\"\nprovider = \"o\"\n",
    );
    let e = stray.error().to_string();
    assert!(
        e.contains("providers[0].api_version: `api_version` applies only to azure"),
        "{e}"
    );
}

#[test]
fn the_responses_api_is_a_provider_kind() {
    let f = SpecFile::new(&with_provider("openai-responses", ""));
    let file = f.load().expect("loads");
    let ProviderSetup::Http(http) = &file.setup.providers[0] else {
        panic!("an HTTP provider");
    };
    assert_eq!(http.kind, ProviderKind::OpenAiResponses);
    assert_eq!(http.base_url, "https://api.openai.com/v1");
}

/// `examples/mcp.toml` starts a Node.js server, and loading a spec checks that each program
/// it names is on PATH: it loads in its own test, in the tier that has Node.js.
const NEEDS_NODE: &str = "mcp.toml";

#[test]
fn every_example_spec_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut loaded = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "toml")
            && path.file_name().is_some_and(|n| n != NEEDS_NODE)
        {
            runtape::config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            loaded += 1;
        }
    }
    assert!(loaded >= 11, "{loaded} example specs");
}

#[test]
#[ignore = "needs the Node.js MCP reference servers: tests/extras/install.sh mcp"]
fn the_mcp_example_spec_loads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(NEEDS_NODE);
    let file = runtape::config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        file.setup.mcp.len(),
        1,
        "examples/mcp.toml declares one server"
    );
}
