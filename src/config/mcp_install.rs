//! `[[mcp]] install`: how to install a server's program, named in the one line a spec gets
//! when the server cannot be started. A stdio server run by an interpreter (`node
//! server.js`) whose script is missing is refused before it is started, naming the script and
//! the install command, instead of with the interpreter's stack trace.
//!
//! ```toml
//! [[mcp]]
//! name = "fs"
//! command = ["node", "../target/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "."]
//! install = "tests/extras/install.sh mcp"   # optional: what to run when it is missing
//! ```

use std::collections::BTreeMap;

use super::error::ConfigError;
use super::mcp::{McpSetup, RawMcp};
use crate::tool::mcp::McpTransport;

/// The servers' install commands, by server name. Call it at load; an empty or multi-line
/// `install` is refused at `mcp[I].install`.
pub(crate) fn hints(raw: &[RawMcp]) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (i, m) in raw.iter().enumerate() {
        let Some(install) = &m.install else { continue };
        if install.trim().is_empty() || install.contains('\n') {
            return Err(ConfigError::invalid(
                format!("mcp[{i}].install"),
                "`install` is one line: the command that installs the server's program",
            ));
        }
        out.insert(m.name.clone(), install.trim().to_owned());
    }
    Ok(out)
}

/// `advice` for a server that cannot be started, with its install command when the spec
/// gives one.
pub(crate) fn advise(advice: &str, install: Option<&String>) -> String {
    match install {
        Some(install) => format!("install it with `{install}`, or fix the command"),
        None => advice.to_owned(),
    }
}

/// Script files an interpreter runs when they are its first argument.
const SCRIPT_EXTENSIONS: &[&str] = &["js", "mjs", "cjs", "ts", "py", "rb", "pl", "sh"];

/// The script a stdio server's program is asked to run, when its first argument names one
/// (`node dist/index.js`, `python3 server.py`) that does not exist where the server would
/// start (the spec's folder): `(argument index, the script)`. Options first (`node --require
/// x server.js`, `python -m module`) are not looked into.
pub(crate) fn missing_script(setup: &McpSetup) -> Option<(usize, String)> {
    let McpTransport::Stdio { args, dir, .. } = &setup.server.transport else {
        return None;
    };
    let first = args.first()?;
    let is_script = !first.starts_with('-')
        && std::path::Path::new(first)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| SCRIPT_EXTENSIONS.contains(&e));
    (is_script && !dir.join(first).exists()).then(|| (1, first.clone()))
}
