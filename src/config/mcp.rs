//! `[[mcp]]` entries: the servers a spec file names, checked at load, and — once the servers
//! have been started and listed their tools — the MCP tools and expanded grants folded into
//! the spec (see [`crate::tool::mcp`]).
//!
//! ```toml
//! [[mcp]]
//! name = "fs"                        # tools are offered as fs__TOOL
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "./sandbox"]
//! init_timeout_ms = 30000            # optional: start + initialize + tools/list
//! timeout_ms = 60000                 # optional: default limit of a call to its tools
//! trust = "untrusted"                # optional: its results are untrusted (guarded tools;
//!                                    # also confidentiality = "private")
//! env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}", LOG_LEVEL = "debug" }
//!                                    # optional: what it gets besides the minimal environment
//!                                    # (or env = ["NAME", …]; env_all = true), see tool::env
//! [mcp.tools.write_file]             # optional per-tool overrides (the server's name)
//! requires_approval = false          # also read_only, idempotent, timeout_ms
//! consequential = true               # guarded tools: also on_untrusted, arguments = { … }, hide,
//!                                    # echoes_arguments
//!
//! [[mcp]]
//! name = "web"
//! url = "https://tools.example.com/mcp"   # Streamable HTTP; http:// only for loopback
//! headers_env = { Authorization = "WEB_MCP_TOKEN" }  # values read at connect time
//! ```
//!
//! Agents grant MCP tools by their offered name (`fs__read_text_file`) or all tools of a
//! server (`fs__*`); an agent without `tools` gets every read-only tool, MCP ones included.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{At, ConfigError};
use super::program;
use crate::machine::{SpecError, did_you_mean};
use crate::tool::mcp::naming::{self, SEPARATOR};
use crate::tool::mcp::{
    Listed, McpServerConfig, McpToolInfo, McpToolOverride, McpToolPolicy, McpTransport,
};

/// `[[mcp]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    pub(crate) name: String,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) url: Option<String>,
    pub(crate) headers_env: Option<BTreeMap<String, String>>,
    pub(crate) env: Option<super::program_env::RawEnv>,
    pub(crate) env_all: Option<bool>,
    /// What its program may reach (see [`crate::tool::confine`]); paths relative to the spec.
    pub(crate) confine: Option<crate::tool::confine::Confine>,
    pub(crate) init_timeout_ms: Option<u64>,
    pub(crate) timeout_ms: Option<u64>,
    /// How to install the server's program (see [`super::mcp_install`]); not stored.
    pub(crate) install: Option<String>,
    #[serde(default)]
    pub(crate) tools: BTreeMap<String, RawMcpTool>,
    /// The label its tools' results carry (see [`super::guard`]).
    pub(crate) trust: Option<crate::machine::Integrity>,
    pub(crate) confidentiality: Option<crate::machine::Confidentiality>,
}

/// `[mcp.tools.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpTool {
    read_only: Option<bool>,
    idempotent: Option<bool>,
    requires_approval: Option<bool>,
    timeout_ms: Option<u64>,
    /// Its undo (see [`super::compensate`]).
    pub(crate) compensate: Option<super::compensate::RawCompensate>,
    /// Guarded tools (see [`super::guard`]): checked like a `[[tools]]` entry's, with the
    /// argument names checked once the server has listed the tool's schema ([`apply`]).
    #[serde(default)]
    consequential: bool,
    on_untrusted: Option<crate::machine::OnUntrusted>,
    arguments: Option<BTreeMap<String, super::guard::RawRule>>,
    #[serde(default)]
    hide: bool,
    echoes_arguments: Option<bool>,
}

/// One server in the stored setup: how to reach it and the tools of it the run was offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSetup {
    /// The server.
    pub server: McpServerConfig,
    /// Its tools as listed when the run started (empty until the servers are listed).
    #[serde(default)]
    pub tools: Vec<McpToolInfo>,
}

/// The error for server `name` whose program cannot be started, at `field`.
fn missing_program(field: &str, name: &str, reason: &str) -> ConfigError {
    missing(field, name, reason, None)
}

/// [`missing_program`], naming the server's install command when the spec gives one.
fn missing(field: &str, name: &str, reason: &str, install: Option<&String>) -> ConfigError {
    let advice = super::mcp_install::advise("install it or fix the command", install);
    ConfigError::invalid(field, format!("MCP server `{name}`: {reason} – {advice}"))
}

/// Checks that the program of every stdio server in `servers` exists and may be run, as
/// [`program::resolve`] does for a command tool at load, and that the script an interpreter
/// is asked to run exists ([`super::mcp_install::missing_script`]); call it just before
/// starting the servers. The error names the first that does not, at `mcp[I].command[N]`,
/// with the server's command in `install` (by server name) when there is one.
pub(crate) fn check_programs(
    servers: &[McpSetup],
    install: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (i, m) in servers.iter().enumerate() {
        let name = &m.server.name;
        if let McpTransport::Stdio { program, dir, .. } = &m.server.transport {
            program::resolve(program, dir).map_err(|reason| {
                missing(
                    &format!("mcp[{i}].command[0]"),
                    name,
                    &reason,
                    install.get(name),
                )
            })?;
        }
        if let Some((at, script)) = super::mcp_install::missing_script(m) {
            return Err(missing(
                &format!("mcp[{i}].command[{at}]"),
                name,
                &format!("`{script}` does not exist"),
                install.get(name),
            ));
        }
    }
    Ok(())
}

/// Checks every `[[mcp]]` entry and turns it into a server config; a stdio server's program
/// is named but not looked for (see [`check_programs`]).
pub(crate) fn compile(raw: &[RawMcp], spec_dir: &Path) -> Result<Vec<McpSetup>, ConfigError> {
    let mut out: Vec<McpSetup> = Vec::with_capacity(raw.len());
    for (i, m) in raw.iter().enumerate() {
        let path = format!("mcp[{i}]");
        if let Some(why) = naming::check_server_name(&m.name) {
            return Err(ConfigError::invalid(
                format!("{path}.name"),
                format!("{why} – rename it"),
            ));
        }
        if out.iter().any(|s| s.server.name == m.name) {
            return Err(ConfigError::invalid(
                format!("{path}.name"),
                format!(
                    "duplicate MCP server name `{}` – give each server a unique name",
                    m.name
                ),
            ));
        }
        for (field, value) in [
            ("init_timeout_ms", m.init_timeout_ms),
            ("timeout_ms", m.timeout_ms),
        ] {
            if value == Some(0) {
                return Err(ConfigError::invalid(
                    format!("{path}.{field}"),
                    format!("{field} must be at least 1 – give it in milliseconds"),
                ));
            }
        }
        let transport = match (&m.command, &m.url) {
            (Some(command), None) => {
                if m.headers_env.is_some() {
                    return Err(ConfigError::invalid(
                        format!("{path}.headers_env"),
                        "`headers_env` is for servers reached by `url` – remove it",
                    ));
                }
                let Some((program, args)) = command.split_first() else {
                    return Err(ConfigError::invalid(
                        format!("{path}.command"),
                        "the command is empty – write command = [\"program\", \"arg\", …]",
                    ));
                };
                // Whether the program exists is checked when the server is about to be
                // started ([`check_programs`]): a replay from a cassette starts none.
                let program = program::started_as(program, spec_dir).map_err(|reason| {
                    missing_program(&format!("{path}.command[0]"), &m.name, &reason)
                })?;
                let env = super::program_env::compile(m.env.as_ref(), &path)?;
                McpTransport::Stdio {
                    program,
                    args: args.to_vec(),
                    dir: spec_dir.to_path_buf(),
                    env: env.pass,
                    env_set: env.set,
                    env_all: m.env_all.unwrap_or(false),
                    confine: super::compile::confinement(&path, m.confine.as_ref(), spec_dir)?,
                }
            }
            (None, Some(url)) => {
                for (field, set) in [
                    ("env", m.env.is_some()),
                    ("env_all", m.env_all.is_some()),
                    ("confine", m.confine.is_some()),
                ] {
                    if set {
                        return Err(ConfigError::invalid(
                            format!("{path}.{field}"),
                            format!(
                                "`{field}` is for servers started as a program (`command`); one reached by `url` gets no environment – remove it, or send credentials with `headers_env`"
                            ),
                        ));
                    }
                }
                check_url(url).map_err(|why| ConfigError::invalid(format!("{path}.url"), why))?;
                let headers_env = m.headers_env.clone().unwrap_or_default();
                for (header, var) in &headers_env {
                    let valid_header = !header.is_empty()
                        && header
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                    if !valid_header || var.trim().is_empty() {
                        return Err(ConfigError::invalid(
                            format!("{path}.headers_env"),
                            format!(
                                "`{header} = \"{var}\"`: write HEADER = \"ENV_VARIABLE_NAME\" (the variable's name, never its value)"
                            ),
                        ));
                    }
                }
                McpTransport::Http {
                    url: url.clone(),
                    headers_env,
                }
            }
            _ => {
                return Err(ConfigError::invalid(
                    path,
                    "give an MCP server either `command = [...]` (stdio) or `url = \"...\"` (Streamable HTTP), not both or neither",
                ));
            }
        };
        let mut tools = BTreeMap::new();
        for (name, t) in &m.tools {
            if t.timeout_ms == Some(0) {
                return Err(ConfigError::invalid(
                    format!("{path}.tools.{name}.timeout_ms"),
                    "timeout_ms must be at least 1 – give it in milliseconds",
                ));
            }
            let guard = super::guard::compile(
                &format!("{path}.tools.{name}"),
                &super::guard::RawToolGuard {
                    consequential: t.consequential,
                    on_untrusted: t.on_untrusted,
                    arguments: t.arguments.as_ref(),
                    hide: t.hide,
                    echoes_arguments: t.echoes_arguments,
                    ..Default::default()
                },
                &serde_json::Value::Null,
            )?;
            tools.insert(
                name.clone(),
                McpToolOverride {
                    read_only: t.read_only,
                    idempotent: t.idempotent,
                    requires_approval: t.requires_approval,
                    timeout_ms: t.timeout_ms,
                    policy: McpToolPolicy {
                        consequential: guard.consequential,
                        on_untrusted: guard.on_untrusted,
                        arguments: guard.arguments,
                        hide: guard.hide,
                        no_echo: guard.no_echo,
                    },
                },
            );
        }
        out.push(McpSetup {
            server: McpServerConfig {
                name: m.name.clone(),
                transport,
                init_timeout_ms: m.init_timeout_ms,
                timeout_ms: m.timeout_ms,
                tools,
                results: super::guard::label(m.trust, m.confidentiality),
            },
            tools: Vec::new(),
        });
    }
    Ok(out)
}

/// `Err` with what to do unless `url` is `https://…`, or `http://…` on a loopback host.
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| format!("`{url}` is not a URL ({e}) – write e.g. https://host/mcp"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "`{url}` carries a user name or password, which would be stored with every run – pass credentials with `headers_env`"
        ));
    }
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&parsed) => Ok(()),
        "http" => Err(format!(
            "`{url}` uses http:// on a host that is not loopback – use https:// (http:// is only for 127.0.0.0/8, ::1 or localhost)"
        )),
        other => Err(format!(
            "`{url}` has scheme `{other}` – use https:// (or http:// on a loopback host)"
        )),
    }
}

/// Whether the URL's host is 127.0.0.0/8, ::1 (or its IPv4-mapped form) or `localhost`.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// The MCP grants taken out of the agents until the servers are listed, so the rest of the
/// spec can be validated at load.
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingGrants {
    /// Per agent: its grants as written (`None`: it wrote none).
    written: Vec<Option<Vec<String>>>,
    /// Per agent: for each grant kept at load, its index as written.
    kept_index: Vec<Vec<usize>>,
}

/// Takes MCP grants (those naming a server in `servers`) out of the agents' grants.
pub(crate) fn hold_grants(
    agents: &mut [crate::machine::AgentSpec],
    servers: &[McpSetup],
) -> PendingGrants {
    let is_mcp =
        |g: &str| naming::server_of(g).is_some_and(|s| servers.iter().any(|m| m.server.name == s));
    let mut pending = PendingGrants::default();
    for agent in agents.iter_mut() {
        pending.written.push(agent.tools.clone());
        let mut kept = Vec::new();
        if let Some(grants) = &mut agent.tools {
            let mut index = 0;
            grants.retain(|g| {
                let keep = !is_mcp(g);
                if keep {
                    kept.push(index);
                }
                index += 1;
                keep
            });
        }
        pending.kept_index.push(kept);
    }
    pending
}

/// Points a grant error of the load-time check at the grant as written.
pub(crate) fn restore_path(error: SpecError, pending: &PendingGrants) -> SpecError {
    let SpecError::UnknownTool {
        path,
        agent,
        tool,
        hint,
    } = error
    else {
        return error;
    };
    let fixed = (|| {
        let rest = path.strip_prefix("agents[")?;
        let (a, rest) = rest.split_once("].tools[")?;
        let g = rest.strip_suffix(']')?;
        let (a, g): (usize, usize) = (a.parse().ok()?, g.parse().ok()?);
        let original = *pending.kept_index.get(a)?.get(g)?;
        Some(format!("agents[{a}].tools[{original}]"))
    })();
    SpecError::UnknownTool {
        path: fixed.unwrap_or(path),
        agent,
        tool,
        hint,
    }
}

/// Folds what the servers listed into the spec and setup: every offered MCP tool becomes a
/// tool of the spec, and the agents' grants are restored with `SERVER__*` expanded to the
/// server's tools. Returns warnings (tools that cannot be offered, overrides naming no tool).
pub(crate) fn apply(
    spec: &mut crate::machine::Spec,
    setups: &mut [McpSetup],
    pending: &PendingGrants,
    listed: &[Listed],
) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for (i, (setup, listed)) in setups.iter_mut().zip(listed).enumerate() {
        let name = &setup.server.name;
        for (remote, why) in &listed.catalog.skipped {
            warnings.push(format!(
                "MCP server `{name}`: tool `{remote}` is not offered: {why}"
            ));
        }
        for remote in &listed.catalog.unknown_overrides {
            warnings.push(format!(
                "mcp[{i}].tools.{remote}: server `{name}` has no tool `{remote}` – fix the name or remove the override"
            ));
        }
        // From revision 4 a server's later tools are offered by its prefix: a [[tools]] entry
        // named with it could be shadowed by a tool the server adds, so it is refused.
        let prefix = format!("{name}{SEPARATOR}");
        if spec.semantics >= crate::machine::ADDED_TOOLS_SEMANTICS
            && let Some(t) = spec.tools.iter().find(|t| t.name.starts_with(&prefix))
        {
            return Err(ConfigError::invalid(
                format!("mcp[{i}].name"),
                format!(
                    "[[tools]] entry `{}` is named like a tool of MCP server `{name}` (`{prefix}…`, which the server's tools are offered by) – rename the tool or the server",
                    t.name
                ),
            ));
        }
        for info in &listed.catalog.tools {
            super::guard::check_argument_names(
                &format!("mcp[{i}].tools.{}", info.remote),
                info.policy.arguments.keys(),
                &info.schema,
            )?;
            if spec.tools.iter().any(|t| t.name == info.name) {
                return Err(ConfigError::invalid(
                    format!("mcp[{i}].name"),
                    format!(
                        "MCP tool `{}` has the same name as a [[tools]] entry – rename the server or the tool",
                        info.name
                    ),
                ));
            }
            spec.tools.push(info.to_tool_spec());
        }
        setup.tools = listed.catalog.tools.clone();
    }
    for (a, agent) in spec.agents.iter_mut().enumerate() {
        let Some(Some(written)) = pending.written.get(a) else {
            continue;
        };
        let mut grants = Vec::with_capacity(written.len());
        for (g, grant) in written.iter().enumerate() {
            let Some(server) = naming::server_of(grant) else {
                grants.push(grant.clone());
                continue;
            };
            let Some(setup) = setups.iter().find(|s| s.server.name == server) else {
                grants.push(grant.clone());
                continue;
            };
            if grant == &format!("{server}{SEPARATOR}*") {
                grants.extend(setup.tools.iter().map(|t| t.name.clone()));
                // Revision 4 keeps the grant itself, so tools the server adds later are
                // offered too (see `machine::offer`).
                if spec.semantics >= crate::machine::ADDED_TOOLS_SEMANTICS {
                    grants.push(grant.clone());
                }
                continue;
            }
            if setup.tools.iter().any(|t| &t.name == grant) {
                grants.push(grant.clone());
                continue;
            }
            let why = listed
                .iter()
                .find(|l| l.server.config().name == server)
                .and_then(|l| {
                    l.catalog
                        .skipped
                        .iter()
                        .find(|(remote, _)| &naming::combined_name(server, remote) == grant)
                })
                .map(|(_, why)| format!(" (it has it, but it cannot be offered: {why})"))
                .unwrap_or_else(|| {
                    did_you_mean(grant, setup.tools.iter().map(|t| t.name.as_str()))
                });
            return Err(ConfigError::Invalid {
                at: At::field(format!("agents[{a}].tools[{g}]")),
                message: format!(
                    "agent `{}` is granted `{grant}`, which MCP server `{server}` does not offer{why} – run `runtape tools SPEC` to see its tools",
                    agent.id
                ),
            });
        }
        agent.tools = Some(grants);
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::AgentSpec;

    #[test]
    fn urls_must_be_https_or_loopback_http_without_credentials() {
        for ok in [
            "https://tools.example.com/mcp",
            "http://127.0.0.1:8931/mcp",
            "http://localhost/mcp",
            "http://[::1]:9/mcp",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://example.com/mcp",
            "ftp://127.0.0.1/x",
            "not a url",
            "https://user:pw@example.com/mcp",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mcp_grants_are_held_back_and_errors_point_at_the_grant_as_written() {
        let setups = vec![McpSetup {
            server: McpServerConfig {
                name: "fs".into(),
                transport: McpTransport::Http {
                    url: "https://x/mcp".into(),
                    headers_env: Default::default(),
                },
                init_timeout_ms: None,
                timeout_ms: None,
                tools: Default::default(),
                results: Default::default(),
            },
            tools: Vec::new(),
        }];
        let mut agents = vec![AgentSpec {
            tools: Some(vec![
                "fs__*".into(),
                "search".into(),
                "fs__read".into(),
                "typo".into(),
            ]),
            ..AgentSpec::new("a", "p", "m")
        }];
        let pending = hold_grants(&mut agents, &setups);
        assert_eq!(agents[0].tools, Some(vec!["search".into(), "typo".into()]));
        let e = SpecError::UnknownTool {
            path: "agents[0].tools[1]".into(),
            agent: "a".into(),
            tool: "typo".into(),
            hint: String::new(),
        };
        assert_eq!(restore_path(e, &pending).path(), "agents[0].tools[3]");
    }
}
