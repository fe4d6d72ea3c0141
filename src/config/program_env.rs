//! `env` of a program in a spec file (`[[tools]]` command tools, `[retriever]`, stdio
//! `[[mcp]]` servers), checked at load. Two forms, as MCP clients write them:
//!
//! ```toml
//! env = ["GITHUB_TOKEN", "INDEX_PATH"]   # runtape's variables, passed by name
//! env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}", LOG_LEVEL = "debug" }
//! ```
//!
//! In the table, a value that is exactly `"${NAME}"` is runtape's variable `NAME`, read when
//! the program starts (so a key stays in the environment, never in the spec or the run);
//! any other value is passed as written and stored with the run, so it must not be a
//! credential: a credential-shaped name ([`looks_secret`](crate::secrets::looks_secret)) or a
//! value with URL credentials is refused, pointing at the `"${NAME}"` form. What a program
//! then receives is [`crate::tool::env`]'s policy.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};

use super::error::ConfigError;
use crate::secrets::is_variable_name;
use crate::tool::env::{EnvValue, SIGNING_KEY_ENV};

/// `env` as written: a list of names or a table of values.
#[derive(Debug)]
pub(crate) enum RawEnv {
    /// `env = ["NAME", …]`.
    Names(Vec<String>),
    /// `env = { NAME = "value" | "${VARIABLE}", … }`.
    Table(BTreeMap<String, String>),
}

impl<'de> Deserialize<'de> for RawEnv {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = RawEnv;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a list of variable names [\"NAME\", …] or a table { NAME = \"value\" }",
                )
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawEnv, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(RawEnv::Names(names))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEnv, A::Error> {
                let mut table = BTreeMap::new();
                while let Some((name, value)) = map.next_entry::<String, String>()? {
                    table.insert(name, value);
                }
                Ok(RawEnv::Table(table))
            }
        }
        de.deserialize_any(Either)
    }
}

/// A program's `env`, checked: names passed through and values set.
#[derive(Debug, Default)]
pub(crate) struct ProgramEnv {
    /// Runtape's variables passed under their own names.
    pub(crate) pass: Vec<String>,
    /// Variables set to a literal or to another of runtape's variables.
    pub(crate) set: BTreeMap<String, EnvValue>,
}

/// Checks the `env` of the program at `path` (`tools[2]`, `retriever`, `mcp[0]`).
pub(crate) fn compile(raw: Option<&RawEnv>, path: &str) -> Result<ProgramEnv, ConfigError> {
    match raw {
        None => Ok(ProgramEnv::default()),
        Some(RawEnv::Names(names)) => Ok(ProgramEnv {
            pass: names_of(names, path)?,
            set: BTreeMap::new(),
        }),
        Some(RawEnv::Table(table)) => table_of(table, path),
    }
}

/// An `env` list: variable names (never values), each once, never the receipt signing key's
/// variable.
fn names_of(names: &[String], path: &str) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (j, name) in names.iter().enumerate() {
        let field = format!("{path}.env[{j}]");
        if name.is_empty() || !is_variable_name(name) {
            // Not echoed: it may be a value pasted where a variable's name belongs.
            return Err(ConfigError::invalid(
                field,
                "each entry must be the NAME of an environment variable (letters, digits and `_`), never a value – write the variable's name",
            ));
        }
        refuse_signing_key(name, &field)?;
        if out.contains(name) {
            return Err(ConfigError::invalid(
                field,
                format!("`{name}` is listed twice – remove one"),
            ));
        }
        out.push(name.clone());
    }
    Ok(out)
}

/// An `env` table: `NAME = "${VARIABLE}"` entries read runtape's variables, others are
/// literal configuration.
fn table_of(table: &BTreeMap<String, String>, path: &str) -> Result<ProgramEnv, ConfigError> {
    let mut out = ProgramEnv::default();
    for (name, value) in table {
        if name.is_empty() || !is_variable_name(name) {
            // Not echoed, like a list entry.
            return Err(ConfigError::invalid(
                format!("{path}.env"),
                "each key must be the NAME of an environment variable (letters, digits and `_`) – fix it",
            ));
        }
        let field = format!("{path}.env.{name}");
        refuse_signing_key(name, &field)?;
        if let Some(source) = reference(value) {
            if !is_variable_name(source) || source.is_empty() {
                return Err(ConfigError::invalid(
                    field,
                    "`${…}` must hold the NAME of one of runtape's environment variables (letters, digits and `_`) – fix it",
                ));
            }
            refuse_signing_key(source, &field)?;
            if source == name {
                out.pass.push(name.clone());
            } else {
                out.set
                    .insert(name.clone(), EnvValue::FromEnv(source.to_owned()));
            }
            continue;
        }
        if value.contains("${") {
            return Err(ConfigError::invalid(
                field,
                "a value is passed as written and `${…}` inside it is not expanded – write \"${VARIABLE}\" alone to pass one of runtape's variables",
            ));
        }
        if crate::secrets::looks_secret(name) {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "`{name}` looks like a credential, and a value written here is stored with every run – keep it in runtape's environment and write {name} = \"${{{name}}}\""
                ),
            ));
        }
        if crate::secrets::carries_url_credentials(value) {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "the value carries a user name or password in a URL, which would be stored with every run – keep it in runtape's environment and write {name} = \"${{VARIABLE}}\""
                ),
            ));
        }
        out.set.insert(name.clone(), EnvValue::Value(value.clone()));
    }
    Ok(out)
}

/// `NAME` when `value` is exactly `${NAME}`.
fn reference(value: &str) -> Option<&str> {
    value.strip_prefix("${")?.strip_suffix('}')
}

fn refuse_signing_key(name: &str, field: &str) -> Result<(), ConfigError> {
    if name == SIGNING_KEY_ENV {
        return Err(ConfigError::invalid(
            field,
            format!(
                "`{SIGNING_KEY_ENV}` holds the receipt signing key, which no program may get – remove it"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, &str)]) -> RawEnv {
        RawEnv::Table(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn refusal(raw: RawEnv) -> String {
        compile(Some(&raw), "mcp[0]")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_table_reads_variables_by_reference_and_keeps_literals() {
        let env = compile(
            Some(&table(&[
                ("GITHUB_TOKEN", "${GITHUB_TOKEN}"),
                ("GITHUB_PERSONAL_ACCESS_TOKEN", "${GH_PAT}"),
                ("LOG_LEVEL", "debug"),
            ])),
            "mcp[0]",
        )
        .expect("valid");
        assert_eq!(env.pass, ["GITHUB_TOKEN"]);
        assert_eq!(
            env.set["GITHUB_PERSONAL_ACCESS_TOKEN"],
            EnvValue::FromEnv("GH_PAT".into())
        );
        assert_eq!(env.set["LOG_LEVEL"], EnvValue::Value("debug".into()));
    }

    #[test]
    fn credentials_written_as_values_and_the_signing_key_are_refused() {
        let e = refusal(table(&[("GITHUB_TOKEN", "ghp_pasted_value")]));
        assert!(e.contains("looks like a credential"), "{e}");
        assert!(e.contains("GITHUB_TOKEN = \"${GITHUB_TOKEN}\""), "{e}");
        assert!(!e.contains("ghp_pasted_value"), "never echoed: {e}");
        let e = refusal(table(&[("DB", "postgres://u:hunter22@db/x")]));
        assert!(e.contains("user name or password in a URL"), "{e}");
        assert!(!e.contains("hunter22"), "{e}");
        let e = refusal(table(&[("X", "prefix-${HOME}")]));
        assert!(e.contains("not expanded"), "{e}");
        for raw in [
            table(&[("KEY", "${RUNTAPE_RECEIPT_KEY}")]),
            table(&[("RUNTAPE_RECEIPT_KEY", "${RUNTAPE_RECEIPT_KEY}")]),
            RawEnv::Names(vec!["RUNTAPE_RECEIPT_KEY".into()]),
        ] {
            let e = refusal(raw);
            assert!(e.contains("no program may get"), "{e}");
        }
        let e = refusal(table(&[("bad name", "x")]));
        assert!(e.contains("each key must be the NAME"), "{e}");
        let e = refusal(table(&[("X", "${not a name}")]));
        assert!(e.contains("`${…}` must hold the NAME"), "{e}");
    }
}
