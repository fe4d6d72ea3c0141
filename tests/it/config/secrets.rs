//! Keys stay out: a missing key variable is named and no variable's value is printed; the
//! setup, its JSON and the `Debug` of a loaded file hold variable names, never values; and
//! command tools do not inherit the providers' keys.
//!
//! The environment is process-wide (and setting it needs `unsafe`), so each scenario runs in
//! a child process of this test binary, started with the variables it needs.

use crate::support;
use crate::support::spec::{agent, provider, tool};

use std::process::Command;

use runtape::config::load;
use runtape::exec::Engine;
use runtape::machine::{AgentId, RunId};
use runtape::tool::{Tool, ToolContext};
use support::config::*;
use tokio_util::sync::CancellationToken;

/// A recognisable fake key.
const FAKE_KEY: &str = "sk-runtape-config-canary-93b1f0e4";
const KEY_VAR: &str = "RUNTAPE_TEST_CONFIG_OPENAI_KEY";
const OTHER_VAR: &str = "RUNTAPE_TEST_CONFIG_OTHER_SECRET";
const CHILD: &str = "RUNTAPE_CONFIG_SECRETS_CHILD";

fn spec() -> String {
    format!(
        "{}{}{}",
        provider(
            "openai",
            "openai",
            &format!("model = \"gpt-4o-mini\"\napi_key_env = \"{KEY_VAR}\""),
        ),
        tool(
            "peek",
            &format!(r#"["sh", "-c", "printf '%s' \"${{{KEY_VAR}-unset}}\""]"#),
            "read_only = true",
        ),
        agent("a", "openai", &[], ""),
    )
}

/// Runs test `name` in a child with `set` variables set and `unset` removed; its stdout.
fn in_child(name: &str, set: &[(&str, &str)], unset: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    let name = format!("{}::{name}", module_path!());
    cmd.args([
        crate::libtest_name(&name),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1");
    for (k, v) in set {
        cmd.env(k, v);
    }
    for k in unset {
        cmd.env_remove(k);
    }
    let out = cmd.output().expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The text between `<<` and `>>` after `tag`.
fn field<'a>(stdout: &'a str, tag: &str) -> &'a str {
    let start = stdout
        .find(&format!("{tag}<<"))
        .unwrap_or_else(|| panic!("no {tag} in {stdout}"))
        + tag.len()
        + 2;
    let len = stdout[start..].find(">>").expect("closed");
    &stdout[start..start + len]
}

/// In the child: load and install, print the error, and check it against every variable.
fn child_install_error() {
    let f = SpecFile::new(&spec());
    let file = f.load().expect("loads: keys are checked at install");
    let e = file.install(&Engine::in_memory()).expect_err("key missing");
    let text = e.to_string();
    let spec_path = f.path.display().to_string();
    for (name, value) in std::env::vars() {
        let shown = value.len() >= 8 && text.contains(&value) && !spec_path.starts_with(&value);
        assert!(!shown, "the error shows the value of {name}: {text}");
    }
    println!("ERROR<<{text}>> FIELD<<{}>>", e.field().unwrap_or_default());
}

#[test]
fn an_unset_key_variable_is_named_without_printing_any_value() {
    if std::env::var_os(CHILD).is_some() {
        return child_install_error();
    }
    let out = in_child(
        "an_unset_key_variable_is_named_without_printing_any_value",
        &[(OTHER_VAR, FAKE_KEY)],
        &[KEY_VAR],
    );
    let error = field(&out, "ERROR");
    assert!(
        error.ends_with(&format!(
            "runtape.toml:5:15: providers[0].api_key_env: provider `openai`: environment variable `{KEY_VAR}` is unset – export it with the API key"
        )),
        "{error}"
    );
    assert_eq!(field(&out, "FIELD"), "providers[0].api_key_env");
    assert!(!out.contains(FAKE_KEY), "{out}");
}

#[test]
fn an_empty_key_variable_is_named_as_empty() {
    if std::env::var_os(CHILD).is_some() {
        return child_install_error();
    }
    let out = in_child(
        "an_empty_key_variable_is_named_as_empty",
        &[(KEY_VAR, "  "), (OTHER_VAR, FAKE_KEY)],
        &[],
    );
    assert!(
        field(&out, "ERROR").ends_with(&format!(
            "providers[0].api_key_env: provider `openai`: environment variable `{KEY_VAR}` is empty – put the API key in it"
        )),
        "{out}"
    );
}

/// In the child, with the key set: install works, and nothing printable holds the key.
fn child_with_key() {
    let f = SpecFile::new(&spec());
    let file = f.load().expect("loads");
    file.install(&Engine::in_memory()).expect("the key is set");
    let json = file.setup.to_json().expect("json");
    println!("JSON<<{json}>>");
    println!("DEBUG_FILE<<{:?}>>", file);
    println!("DEBUG_SETUP<<{:?}>>", file.setup);
    let tool = file.setup.command_tools().remove(0);
    let ctx = ToolContext {
        run_id: RunId::new("r"),
        agent: AgentId::from("a"),
        call_id: "c".into(),
        idempotency_key: "k".into(),
        lease_epoch: 0,
        cancel: CancellationToken::new(),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let seen = rt.block_on(tool.invoke(serde_json::json!({}), ctx));
    println!("TOOL<<{seen:?}>>");
}

#[test]
fn the_setup_and_debug_output_hold_the_variable_name_never_the_key() {
    if std::env::var_os(CHILD).is_some() {
        return child_with_key();
    }
    let out = in_child(
        "the_setup_and_debug_output_hold_the_variable_name_never_the_key",
        &[(KEY_VAR, FAKE_KEY)],
        &[],
    );
    for tag in ["JSON", "DEBUG_FILE", "DEBUG_SETUP"] {
        let text = field(&out, tag);
        assert!(text.contains(KEY_VAR), "{tag} names the variable: {text}");
        assert!(!text.contains(FAKE_KEY), "{tag} leaks the key: {text}");
    }
    assert_eq!(
        field(&out, "TOOL"),
        "Ok(String(\"unset\"))",
        "command tools run without the providers' key variables"
    );
    assert!(!out.contains(FAKE_KEY), "{out}");
}

#[test]
fn a_key_written_where_its_variable_name_belongs_is_refused_without_echoing_it() {
    let f = SpecFile::new(&spec().replace(KEY_VAR, FAKE_KEY));
    let e = f.assert_error(
        "5:15: providers[0].api_key_env: this must be the NAME of an environment variable (letters, digits and `_`), never a key – put the key in a variable and write its name here",
    );
    assert!(!format!("{e} {e:?}").contains(FAKE_KEY));
    assert!(load(&f.path).is_err());
}
