//! What the span tracker reads from a run's stored setup: each provider's kind as the GenAI
//! conventions name it (`gen_ai.provider.name`) and the server it talks to (`server.address`,
//! `server.port`), and each tool's type (`gen_ai.tool.type`) and description. Read once per
//! run and process; a run whose providers and tools were registered in code has no setup, and
//! its spans then carry the provider's name as its kind and `function` for every tool.

use std::collections::HashMap;

use opentelemetry::KeyValue;

use crate::config::{ProviderSetup, Setup};
use crate::machine::RunId;
use crate::store::Store;

/// One provider as spans name it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ProviderInfo {
    /// `openai`, `anthropic`, `ollama`, `azure.ai.openai`, `runtape.scripted`, `runtape.echo`.
    pub(super) kind: String,
    /// Host and port of its base URL (HTTP providers only).
    pub(super) server: Option<(String, u16)>,
    /// The output-token cap the provider entry asks for (`max_tokens`), used when the agent
    /// sets none of its own.
    pub(super) max_tokens: Option<u64>,
}

impl ProviderInfo {
    /// `server.address` and `server.port`, when the provider talks HTTP.
    pub(super) fn server_attributes(&self) -> Vec<KeyValue> {
        match &self.server {
            Some((host, port)) => vec![
                KeyValue::new("server.address", host.clone()),
                KeyValue::new("server.port", i64::from(*port)),
            ],
            None => Vec::new(),
        }
    }
}

/// One tool as spans name it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ToolInfo {
    /// `function` (runtape performs it: a command tool, a built-in) or `extension` (an MCP
    /// server performs it), as the conventions' `gen_ai.tool.type` says.
    pub(super) kind: &'static str,
    /// What it does, as the model is told.
    pub(super) description: Option<String>,
    /// For an MCP server's tool: the server's name and its own name for the tool (what
    /// `tools/call` is sent).
    pub(super) mcp: Option<(String, String)>,
}

/// What a run's setup says of its providers and tools.
#[derive(Clone, Debug, Default)]
pub(super) struct RunSetup {
    providers: HashMap<String, ProviderInfo>,
    tools: HashMap<String, ToolInfo>,
    /// The MCP servers' names: a tool named `SERVER__…` that the setup did not list yet (the
    /// server's list changed during the run) is still theirs.
    mcp_servers: Vec<String>,
}

impl RunSetup {
    /// Reads `run`'s stored setup; empty when it has none or it cannot be read.
    pub(super) fn read(store: &dyn Store, run: &RunId) -> RunSetup {
        let setup = store
            .run(run)
            .ok()
            .flatten()
            .and_then(|rec| Setup::from_json(rec.setup.as_deref()?).ok());
        setup.map(|s| RunSetup::of(&s)).unwrap_or_default()
    }

    fn of(setup: &Setup) -> RunSetup {
        let providers = setup
            .providers
            .iter()
            .map(|p| (p.name().to_owned(), provider_info(p)))
            .collect();
        let mut tools: HashMap<String, ToolInfo> = setup
            .tools
            .iter()
            .map(|t| {
                let info = ToolInfo {
                    kind: "function",
                    description: Some(t.description.clone()),
                    mcp: None,
                };
                (t.name.clone(), info)
            })
            .collect();
        for server in &setup.mcp {
            for t in &server.tools {
                let info = ToolInfo {
                    kind: "extension",
                    description: Some(t.description.clone()),
                    mcp: Some((t.server.clone(), t.remote.clone())),
                };
                tools.insert(t.name.clone(), info);
            }
        }
        RunSetup {
            providers,
            tools,
            mcp_servers: setup.mcp.iter().map(|m| m.server.name.clone()).collect(),
        }
    }

    /// The provider named `name`; its name as its kind when the setup does not list it.
    pub(super) fn provider(&self, name: &str) -> ProviderInfo {
        self.providers
            .get(name)
            .cloned()
            .unwrap_or_else(|| ProviderInfo {
                kind: name.to_owned(),
                ..ProviderInfo::default()
            })
    }

    /// The tool named `name` (a built-in or a code-registered tool is a `function` with no
    /// description).
    pub(super) fn tool(&self, name: &str) -> ToolInfo {
        if let Some(t) = self.tools.get(name) {
            return t.clone();
        }
        let of_server = name
            .split_once(crate::tool::mcp::SEPARATOR)
            .filter(|(server, _)| self.mcp_servers.iter().any(|s| s == server));
        ToolInfo {
            kind: if of_server.is_some() {
                "extension"
            } else {
                "function"
            },
            description: None,
            mcp: of_server.map(|(server, tool)| (server.to_owned(), tool.to_owned())),
        }
    }
}

fn provider_info(p: &ProviderSetup) -> ProviderInfo {
    match p {
        ProviderSetup::Http(h) => {
            let kind = match serde_json::to_value(h.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
            {
                Some(k) if k == "azure" => "azure.ai.openai".to_owned(),
                Some(k) if k == "openai-responses" => "openai".to_owned(),
                Some(k) => k,
                None => "unknown".to_owned(),
            };
            ProviderInfo {
                kind,
                server: server_of(&h.base_url),
                max_tokens: h.max_tokens,
            }
        }
        ProviderSetup::Echo { .. } => ProviderInfo {
            kind: "runtape.echo".to_owned(),
            ..ProviderInfo::default()
        },
        ProviderSetup::Scripted(_) => ProviderInfo {
            kind: "runtape.scripted".to_owned(),
            ..ProviderInfo::default()
        },
    }
}

/// The host and port a base URL names (the scheme's port when it names none).
fn server_of(base_url: &str) -> Option<(String, u16)> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url.host_str()?.trim_matches(['[', ']']).to_owned();
    Some((host, url.port_or_known_default()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_gives_its_host_and_port() {
        assert_eq!(
            server_of("https://api.openai.com/v1"),
            Some(("api.openai.com".into(), 443))
        );
        assert_eq!(
            server_of("http://127.0.0.1:11434"),
            Some(("127.0.0.1".into(), 11434))
        );
        assert_eq!(
            server_of("http://[::1]:8080/v1"),
            Some(("::1".into(), 8080))
        );
        assert_eq!(server_of("not a url"), None);
    }
}
