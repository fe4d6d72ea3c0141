//! `compensate = { tool, arguments }` on `[[tools]]` and `[mcp.tools.NAME]`: each tool's
//! declared undo, checked at load (the undo's tool exists, every argument template parses;
//! see [`crate::machine::saga`]) and gathered by tool name into the spec.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::ConfigError;
use super::file::RawFile;
use crate::machine::Compensation;
use crate::machine::saga::template;

/// `compensate = { tool = "…", arguments = { … } }`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCompensate {
    pub(crate) tool: String,
    pub(crate) arguments: Option<Value>,
}

/// Every tool's undo, by the name the tool is offered under (`SERVER__TOOL` for MCP tools).
/// A compensation without `[run] on_failure = "compensate"` is kept (a fork or a later spec
/// may turn it on) but never performed.
pub(crate) fn compile(raw: &RawFile) -> Result<BTreeMap<String, Compensation>, ConfigError> {
    let mut out = BTreeMap::new();
    let known = |name: &str| {
        raw.tools.iter().any(|t| t.name == name)
            || name.split_once("__").is_some_and(|(server, tool)| {
                !tool.is_empty() && raw.mcp.iter().any(|m| m.name == server)
            })
    };
    let declared = raw
        .tools
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            t.compensate
                .as_ref()
                .map(|c| (format!("tools[{i}].compensate"), t.name.clone(), c))
        })
        .chain(raw.mcp.iter().enumerate().flat_map(|(i, m)| {
            m.tools.iter().filter_map(move |(name, t)| {
                t.compensate.as_ref().map(|c| {
                    (
                        format!("mcp[{i}].tools.{name}.compensate"),
                        format!("{}__{name}", m.name),
                        c,
                    )
                })
            })
        }));
    for (at, name, c) in declared {
        if !known(&c.tool) {
            return Err(ConfigError::invalid(
                format!("{at}.tool"),
                format!(
                    "`{}` is not a tool of this spec – name a [[tools]] entry or an MCP tool as SERVER__TOOL",
                    c.tool
                ),
            ));
        }
        let arguments = c
            .arguments
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default()));
        if !arguments.is_object() {
            return Err(ConfigError::invalid(
                format!("{at}.arguments"),
                "must be a table of the undo's arguments",
            ));
        }
        template::check(&arguments)
            .map_err(|e| ConfigError::invalid(format!("{at}.arguments"), e))?;
        out.insert(
            name,
            Compensation {
                tool: c.tool.clone(),
                arguments,
            },
        );
    }
    Ok(out)
}
