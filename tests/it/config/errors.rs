//! Every bad spec file is refused before anything runs, with one line naming the file, the
//! line and column, the field, what is wrong and what to do.

use crate::support;

use proptest::prelude::*;
use support::config::*;

const SEARCH_TOOL: &str = r#"
[[tools]]
name = "search"
command = ["sh", "-c", "cat"]
read_only = true
"#;

#[test]
fn text_that_is_not_toml_points_at_the_syntax_error() {
    let f = SpecFile::new("[[agents]\nid = \"a\"\n");
    f.assert_error(
        "1:10: not valid TOML: unclosed array table, expected `]` – fix the syntax here",
    );
}

#[test]
fn an_unknown_field_suggests_the_closest_name() {
    let f = SpecFile::new(&format!("{MINIMAL}sytem_prompt = \"You help.\"\n"));
    let e = f.assert_error(
        "8:1: agents[0].sytem_prompt: unknown field `sytem_prompt` (did you mean `system_prompt`?) – fix its name or remove it",
    );
    assert_eq!(e.field(), Some("agents[0].sytem_prompt"));
    assert_eq!(e.location().map(|l| (l.line, l.column)), Some((8, 1)));
}

#[test]
fn a_value_of_the_wrong_type_names_the_expected_type() {
    let f = SpecFile::new(&format!("{MINIMAL}[agents.budget]\nmax_turns = \"ten\"\n"));
    f.assert_error(
        "9:13: agents[0].budget.max_turns: invalid type: string \"ten\", expected a non-negative integer – fix the value",
    );
}

#[test]
fn an_unknown_choice_lists_the_valid_ones() {
    let f = SpecFile::new(&format!("{MINIMAL}on_in_doubt = \"retyr\"\n"));
    f.assert_error(
        "8:15: agents[0].on_in_doubt: unknown value `retyr` (did you mean `retry`?) – use one of `fail`, `retry`, `ask`, `reconcile`",
    );
}

#[test]
fn a_missing_required_field_is_named() {
    let f =
        SpecFile::new("[[providers]]\nname = \"p\"\nkind = \"echo\"\n\n[[agents]]\nid = \"a\"\n");
    f.assert_error("5:1: agents[0].provider: missing field `provider` – add it");
}

#[test]
fn http_to_a_remote_host_is_refused_and_loopback_is_accepted() {
    let spec = |url: &str| {
        format!(
            "[[providers]]\nname = \"remote\"\nkind = \"openai\"\nmodel = \"m\"\napi_key_env = \"\"\nbase_url = \"{url}\"\n\n[[agents]]\nid = \"a\"\nprovider = \"remote\"\n"
        )
    };
    let f = SpecFile::new(&spec("http://example.com/v1"));
    let e = f.assert_error(
        "6:12: providers[0].base_url: provider `remote`: `http://example.com/v1` uses http:// for a non-loopback host – use https:// (plain http is allowed only for 127.0.0.0/8, ::1 and localhost)",
    );
    assert_eq!(e.field(), Some("providers[0].base_url"));
    for ok in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434",
        "http://[::1]:8000/v1",
        "https://example.com/v1",
    ] {
        let file = SpecFile::new(&spec(ok)).load();
        assert!(
            file.is_ok(),
            "{ok}: {:?}",
            file.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn a_grant_of_an_unknown_tool_suggests_the_closest_tool() {
    let f = SpecFile::new(&format!("{MINIMAL}tools = [\"serch\"]\n{SEARCH_TOOL}"));
    f.assert_error(
        "8:10: agents[0].tools[0]: agent `solo` is granted unknown tool `serch` (did you mean `search`?) – define it under [[tools]] or remove it from the agent's `tools`",
    );
}

#[test]
fn an_unreachable_exit_points_at_the_exit() {
    let f = SpecFile::new(
        r#"[[providers]]
name = "p"
kind = "echo"

[[agents]]
id = "a"
provider = "p"
[[agents]]
id = "b"
provider = "p"
[[agents]]
id = "c"
provider = "p"

[plan]
entry = "a"
exits = ["b", "c"]
[[plan.edges]]
from = "a"
to = "b"
"#,
    );
    f.assert_error(
        "17:15: plan.exits[1]: exit `c` is unreachable from entry `a`; add an edge that leads to it",
    );
}

#[test]
fn a_command_that_is_not_on_path_is_refused_at_load() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[[tools]]\nname = \"search\"\ncommand = [\"runtape-no-such-program-4711\", \"--x\"]\n"
    ));
    f.assert_error(
        "11:12: tools[0].command[0]: tool `search`: program `runtape-no-such-program-4711` is not on PATH – install it, fix the path (relative paths start at the spec file's directory), or make it executable",
    );
}

#[test]
fn a_relative_program_that_does_not_exist_names_where_it_was_looked_for() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[[tools]]\nname = \"search\"\ncommand = [\"tools/search.py\"]\n"
    ));
    let dir = f.dir.path().canonicalize().expect("canonical");
    f.assert_error(&format!(
        "11:12: tools[0].command[0]: tool `search`: program `tools/search.py` does not exist (looked at {}) – install it, fix the path (relative paths start at the spec file's directory), or make it executable",
        dir.join("tools/search.py").display()
    ));
}

#[test]
fn a_duplicate_agent_id_points_at_the_second_one() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[[agents]]\nid = \"solo\"\nprovider = \"local\"\n"
    ));
    f.assert_error("10:6: agents[1].id: duplicate agent id `solo` – give each agent a unique id");
}

#[test]
fn a_negative_or_nan_cost_cap_is_refused() {
    let f = SpecFile::new(&format!("{MINIMAL}[agents.budget]\nmax_cost_usd = -1.5\n"));
    f.assert_error(
        "9:16: agents[0].budget.max_cost_usd: max_cost_usd must be a number of US dollars between 0 and 1000000000 (got -1.5) – fix the value",
    );
    let f = SpecFile::new(&format!("[run.budget]\nmax_cost_usd = nan\n{MINIMAL}"));
    f.assert_error(
        "2:16: run.budget.max_cost_usd: max_cost_usd must be a number of US dollars between 0 and 1000000000 (got NaN) – fix the value",
    );
}

#[test]
fn an_agent_naming_an_unknown_provider_suggests_the_closest() {
    let f = SpecFile::new(
        "[[providers]]\nname = \"local\"\nkind = \"echo\"\n\n[[agents]]\nid = \"a\"\nprovider = \"locl\"\n",
    );
    f.assert_error(
        "7:12: agents[0].provider: agent `a` uses unknown provider `locl` (did you mean `local`?) – define it under [[providers]] or fix the name",
    );
}

#[test]
fn a_duplicate_provider_name_is_refused() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[[providers]]\nname = \"local\"\nkind = \"echo\"\n"
    ));
    f.assert_error(
        "10:8: providers[1].name: duplicate provider name `local` – give each provider a unique name",
    );
}

#[test]
fn a_fallback_error_points_into_the_fallback() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}[[agents.fallbacks]]\nprovider = \"local\"\nmax_attempts = 0\n"
    ));
    f.assert_error(
        "10:16: agents[0].fallbacks[0].max_attempts: max_attempts must be between 1 and 100 (got 0) – change the value",
    );
}

#[test]
fn a_bad_condition_lists_the_forms() {
    let f = SpecFile::new(&format!(
        "{MINIMAL}\n[plan]\nentry = \"solo\"\nexits = [\"solo\"]\n[[plan.edges]]\nfrom = \"solo\"\nto = \"solo\"\nwhen = {{ startswith = \"x\" }}\n"
    ));
    f.assert_error(
        "15:8: plan.edges[0].when: `when` must be \"always\", { contains = \"…\" }, { regex = \"…\" } or { json_pointer = \"/…\", equals = … } – use one of these",
    );
}

#[test]
fn a_missing_file_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent.toml");
    let e = runtape::config::load(&path).expect_err("no file");
    assert!(!e.is_internal());
    assert_eq!(
        e.to_string(),
        format!(
            "{}: cannot read the spec file: No such file or directory (os error 2) – check the path",
            path.display()
        )
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Hostile text never panics the loader, and every refusal is one line.
    #[test]
    fn hostile_text_gets_a_one_line_error(text in "(\\PC|[\\[\\]{}=\"\\.\\n])*") {
        let f = SpecFile::new(&text);
        if let Err(e) = f.load() {
            prop_assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    /// Cutting a valid file anywhere never panics either.
    #[test]
    fn truncated_specs_get_a_one_line_error(cut in 0usize..2000) {
        let full = std::fs::read_to_string(fixture("full.toml")).expect("fixture");
        let mut end = cut.min(full.len());
        while !full.is_char_boundary(end) {
            end -= 1;
        }
        let f = SpecFile::new(&full[..end]);
        if let Err(e) = f.load() {
            prop_assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}

#[test]
fn a_confinement_naming_a_missing_path_or_a_zero_limit_is_refused_in_one_line() {
    let tool = |confine: &str| {
        format!(
            "{MINIMAL}tools = [\"peek\"]\n\n[[tools]]\nname = \"peek\"\ncommand = [\"cat\"]\nconfine = {confine}\n"
        )
    };
    let missing = SpecFile::new(&tool("{ read = [\"no-such-dir\"] }"));
    let e = missing.error();
    let said = e.to_string();
    assert!(
        said.contains("tools[0].confine")
            && said.contains("no-such-dir` does not exist")
            && !said.contains('\n'),
        "{said}"
    );
    let zero = SpecFile::new(&tool("{ cpu_seconds = 0 }"));
    let said = zero.error().to_string();
    assert!(
        said.contains("cpu_seconds and memory_mb must be at least 1"),
        "{said}"
    );
    let unknown = SpecFile::new(&tool("{ raed = [\".\"] }"));
    let said = unknown.error().to_string();
    assert!(said.contains("unknown field `raed`"), "{said}");
}
