//! The guarded-tool keys of a spec file (see [`crate::machine::flow_policy`]), checked and
//! turned into a tool's [`ToolGuard`]:
//!
//! ```toml
//! [[tools]]
//! name = "read_inbox"
//! trust = "untrusted"            # its results may carry an outsider's words (default trusted)
//! confidentiality = "private"    # its results may not reach a `public` argument (default public)
//!
//! [[tools]]
//! name = "pay"
//! consequential = true           # runs only when decided from trusted context
//! on_untrusted = "ask"           # a blocked call asks a person ("deny", the default, refuses it)
//! arguments = { to = "trusted", memo = ["trusted", "public"] }
//!
//! [[tools]]
//! name = "read_bill"
//! trust = "untrusted"
//! hide = true                    # the model gets `$r1`, never the text (see machine::hidden)
//!
//! [[tools]]
//! name = "list_members"
//! echoes_arguments = false       # its answers never quote its arguments: an answer to a call
//!                                # passed an untrusted `$rN` stays trusted (default true)
//! ```
//!
//! The same `trust` and `confidentiality` keys label an `[[mcp]]` server's results (every tool
//! of it) and the `[retriever]`'s passages; `consequential`, `on_untrusted`, `arguments`,
//! `hide` and `echoes_arguments` go on one MCP tool in its `[mcp.tools.NAME]` table (see [`super::mcp`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::ConfigError;
use crate::machine::{
    ArgumentRule, Confidentiality, Integrity, Label, OnUntrusted, ToolGuard, did_you_mean,
};

/// An argument rule as written: one rule or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawRule {
    /// `"trusted"` or `"public"`.
    One(String),
    /// Both, or one in a list.
    Many(Vec<String>),
}

/// The guarded-tool keys of one `[[tools]]` entry.
#[derive(Debug, Default)]
pub(crate) struct RawToolGuard<'a> {
    pub(crate) trust: Option<Integrity>,
    pub(crate) confidentiality: Option<Confidentiality>,
    pub(crate) consequential: bool,
    pub(crate) on_untrusted: Option<OnUntrusted>,
    pub(crate) arguments: Option<&'a BTreeMap<String, RawRule>>,
    pub(crate) hide: bool,
    /// `echoes_arguments`: `Some(false)` declares its answers never quote its arguments.
    pub(crate) echoes_arguments: Option<bool>,
}

/// The label results carry, from `trust` and `confidentiality` (each defaulting to trusted,
/// public).
pub(crate) fn label(trust: Option<Integrity>, confidentiality: Option<Confidentiality>) -> Label {
    Label::new(
        trust.unwrap_or_default(),
        confidentiality.unwrap_or_default(),
    )
}

/// Checks that every argument rule of the tool at `path` names an argument its `schema`
/// lists (any name passes when the schema lists none). Call it once the schema is known: at
/// load for a `[[tools]]` entry, once the server listed its tools for an MCP one.
pub(crate) fn check_argument_names<'n>(
    path: &str,
    names: impl IntoIterator<Item = &'n String>,
    schema: &Value,
) -> Result<(), ConfigError> {
    let known: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    for name in names {
        if !known.is_empty() && !known.contains(&name.as_str()) {
            let hint = did_you_mean(name, known.iter().copied());
            return Err(ConfigError::invalid(
                format!("{path}.arguments.{name}"),
                format!(
                    "the tool's schema has no argument `{name}`{hint} – name one of: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the keys of the tool at `path` whose argument schema is `schema`: every argument
/// rule names `trusted` or `public`, and an argument the schema lists (when it lists any);
/// `on_untrusted` is said only where a rule can block.
pub(crate) fn compile(
    path: &str,
    raw: &RawToolGuard<'_>,
    schema: &Value,
) -> Result<ToolGuard, ConfigError> {
    let mut arguments = BTreeMap::new();
    check_argument_names(
        path,
        raw.arguments.into_iter().flat_map(|a| a.keys()),
        schema,
    )?;
    for (name, rule) in raw.arguments.into_iter().flatten() {
        let field = format!("{path}.arguments.{name}");
        let words: Vec<&str> = match rule {
            RawRule::One(w) => vec![w.as_str()],
            RawRule::Many(ws) => ws.iter().map(String::as_str).collect(),
        };
        let mut parsed = ArgumentRule::default();
        for w in &words {
            match *w {
                "trusted" => parsed.trusted = true,
                "public" => parsed.public = true,
                other => {
                    return Err(ConfigError::invalid(
                        field,
                        format!(
                            "unknown rule `{other}` – use \"trusted\" (must not come from untrusted data), \"public\" (may carry only public data), or both in a list"
                        ),
                    ));
                }
            }
        }
        if words.is_empty() {
            return Err(ConfigError::invalid(
                field,
                "an empty list constrains nothing – give \"trusted\", \"public\" or both",
            ));
        }
        arguments.insert(name.clone(), parsed);
    }
    if raw.on_untrusted.is_some() && !raw.consequential && arguments.is_empty() {
        return Err(ConfigError::invalid(
            format!("{path}.on_untrusted"),
            "on_untrusted applies to calls a rule blocks, and this tool has none – add consequential = true or arguments = { … }",
        ));
    }
    Ok(ToolGuard {
        results: label(raw.trust, raw.confidentiality),
        consequential: raw.consequential,
        on_untrusted: raw.on_untrusted.unwrap_or_default(),
        arguments,
        hide: raw.hide,
        no_echo: raw.echoes_arguments == Some(false),
    })
}
