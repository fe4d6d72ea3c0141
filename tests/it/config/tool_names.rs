//! Tool names are checked when a spec is loaded against what every model provider accepts
//! (`^[a-zA-Z0-9_-]{1,64}$`): a name a provider would refuse mid-run is refused up front, in
//! one line naming the field. A spec stored with a run is not checked again, so runs started
//! before the rule still read.

use crate::support;

use runtape::machine::{AgentSpec, RunSpec, Spec, SpecError, ToolSpec, is_valid_tool_name};
use support::config::*;

fn spec_with_tool(name: &str) -> String {
    format!(
        "{MINIMAL}tools = [\"{name}\"]\n\n[[tools]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", \"cat\"]\n"
    )
}

#[test]
fn the_providers_rule_is_exactly_one_to_64_letters_digits_underscores_and_dashes() {
    for good in ["a", "read_file", "fs__read-text", "Z9", &"x".repeat(64)] {
        assert!(is_valid_tool_name(good), "{good}");
    }
    for bad in ["", "a.b", "a b", "dé", "a/b", "a\nb", &"x".repeat(65)] {
        assert!(!is_valid_tool_name(bad), "{bad:?}");
    }
}

#[test]
fn a_name_with_a_dot_is_refused_at_load_naming_the_field() {
    let f = SpecFile::new(&spec_with_tool("files.read"));
    f.assert_error(
        "11:8: tools[0].name: tool name `files.read` is not 1 to 64 letters, digits, `_` or `-`, which model providers require – rename it",
    );
}

#[test]
fn a_name_past_64_characters_is_refused_and_64_are_accepted() {
    let long = "t".repeat(65);
    let e = SpecFile::new(&spec_with_tool(&long)).error();
    assert!(e.to_string().contains("tools[0].name"), "{e}");
    let ok = SpecFile::new(&spec_with_tool(&"t".repeat(64)));
    assert!(ok.load().is_ok());
}

#[test]
fn a_stored_spec_is_read_by_the_rules_it_was_stored_under() {
    let spec = Spec {
        agents: vec![AgentSpec::new("a", "p", "m")],
        tools: vec![ToolSpec::new("old.style", "a tool from before the rule")],
        ..Spec::default()
    };
    assert!(matches!(
        RunSpec::build(spec.clone()),
        Err(SpecError::BadToolName { .. })
    ));
    let stored = serde_json::to_string(&spec).expect("encodes");
    let read: RunSpec = serde_json::from_str(&stored).expect("a stored spec still reads");
    assert!(read.tool("old.style").is_some());
}
