//! From a server's `tools/list` answer to the tools runtape offers: names that fit the
//! providers, flags from the annotations and the spec's overrides, schemas checked.
//!
//! # Flags
//!
//! | flag | from the server | default when the server says nothing |
//! |---|---|---|
//! | read-only | `readOnlyHint` | false |
//! | idempotent | `idempotentHint`, or read-only (repeating a read changes nothing) | false |
//! | requires approval | `destructiveHint` on a tool that is not read-only | true (MCP's default for `destructiveHint`) |
//!
//! Each can be overridden per tool in the spec (`[mcp.tools.NAME]`), and the spec always
//! wins. Annotations are hints from the server; an untrusted server's hints should be
//! overridden, not believed.
//!
//! # Tools that cannot be offered
//!
//! A tool whose input schema is not a valid JSON Schema, or whose name collides with another
//! tool's after cleaning, is not offered; [`Catalog::skipped`] says why, and the loader
//! refuses a spec that grants such a tool by name.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::McpServerConfig;
use super::naming::combined_name;

/// One MCP tool as runtape offers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolInfo {
    /// The name the model calls it by: `SERVER__TOOL` (see [`super::naming`]).
    pub name: String,
    /// The server's name.
    pub server: String,
    /// The server's own name for it (what `tools/call` is sent).
    pub remote: String,
    /// What it does (its description, else its title).
    pub description: String,
    /// JSON Schema of its arguments, as the server gave it.
    pub schema: Value,
    /// It changes nothing.
    pub read_only: bool,
    /// Repeating a call with the same idempotency key is safe.
    pub idempotent: bool,
    /// A person approves each call first.
    pub requires_approval: bool,
    /// Limit of one call, from the spec (the tool's override, else the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The label its results carry: its server's (see [`crate::machine::label`]). Left out
    /// when trusted and public.
    #[serde(
        default,
        skip_serializing_if = "crate::machine::Label::is_trusted_public"
    )]
    pub results: crate::machine::Label,
    /// Its policy, from the spec's `[mcp.tools.NAME]` (see [`crate::machine::flow_policy`]).
    /// Left out when it sets none, so a catalog without policies keeps its bytes.
    #[serde(default, skip_serializing_if = "super::McpToolPolicy::is_open")]
    pub policy: super::McpToolPolicy,
}

/// A server's tools, ready to offer, and the ones that cannot be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// Offered, in the server's order.
    pub tools: Vec<McpToolInfo>,
    /// `(server's name for the tool, why it is not offered)`.
    pub skipped: Vec<(String, String)>,
    /// Overrides in the spec naming a tool the server does not have.
    pub unknown_overrides: Vec<String>,
}

/// The catalog of `config`'s server given its listed `tools`. Known secret values are
/// scrubbed from descriptions and schemas (the catalog is stored with the run and sent to the
/// model); a tool whose name holds one is not offered.
pub fn build(config: &McpServerConfig, tools: &[rmcp::model::Tool]) -> Catalog {
    let secrets = crate::secrets::global();
    let mut catalog = Catalog::default();
    for tool in tools {
        let remote = tool.name.to_string();
        if secrets.scrub_str(&remote) != remote {
            catalog.skipped.push((
                secrets.scrub_str(&remote).into_owned(),
                "its name holds a secret value".into(),
            ));
            continue;
        }
        let name = combined_name(&config.name, &remote);
        if let Some(first) = catalog.tools.iter().find(|t| t.name == name) {
            catalog.skipped.push((
                remote.clone(),
                format!("its name becomes `{name}`, as `{}`'s does", first.remote),
            ));
            continue;
        }
        let mut schema = Value::Object((*tool.input_schema).clone());
        secrets.scrub_value(&mut schema);
        if let Err(e) = jsonschema::validator_for(&schema) {
            catalog.skipped.push((
                remote,
                format!(
                    "its input schema is not a valid JSON Schema ({})",
                    one_line(&e.to_string())
                ),
            ));
            continue;
        }
        let hints = tool.annotations.clone().unwrap_or_default();
        let over = config.tools.get(&remote).cloned().unwrap_or_default();
        let read_only = over.read_only.unwrap_or(hints.read_only_hint == Some(true));
        let idempotent = over
            .idempotent
            .unwrap_or(read_only || hints.idempotent_hint == Some(true));
        let requires_approval = over
            .requires_approval
            .unwrap_or(!read_only && hints.destructive_hint != Some(false));
        let description = tool
            .description
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(str::to_owned)
            .or_else(|| tool.title.clone())
            .unwrap_or_default();
        let description = secrets.scrub_str(&description).into_owned();
        catalog.tools.push(McpToolInfo {
            name,
            server: config.name.clone(),
            remote,
            description,
            schema,
            read_only,
            idempotent,
            requires_approval,
            timeout_ms: over.timeout_ms.or(config.timeout_ms),
            results: config.results,
            policy: over.policy,
        });
    }
    catalog.unknown_overrides = config
        .tools
        .keys()
        .filter(|k| !tools.iter().any(|t| t.name == k.as_str()))
        .cloned()
        .collect();
    catalog
}

/// A short summary of a schema for listings: its properties, required ones marked `*`.
pub fn schema_summary(schema: &Value) -> String {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "{}".into();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let parts: Vec<String> = props
        .iter()
        .map(|(name, p)| {
            let ty = p.get("type").and_then(Value::as_str).unwrap_or("any");
            let star = if required.contains(&name.as_str()) {
                "*"
            } else {
                ""
            };
            format!("{name}{star}: {ty}")
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn one_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tool::mcp::config::{McpToolOverride, McpTransport};

    fn config() -> McpServerConfig {
        McpServerConfig {
            name: "fs".into(),
            transport: McpTransport::Stdio {
                program: "x".into(),
                args: vec![],
                dir: "/".into(),
                env: Vec::new(),
                env_set: Default::default(),
                env_all: false,
                confine: None,
            },
            init_timeout_ms: None,
            timeout_ms: Some(5000),
            tools: Default::default(),
            results: Default::default(),
        }
    }

    fn tool(v: Value) -> rmcp::model::Tool {
        serde_json::from_value(v).expect("a tool")
    }

    #[test]
    fn annotations_become_flags_and_the_spec_overrides_them() {
        let tools = [
            tool(
                json!({"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            ),
            tool(
                json!({"name": "write", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false, "idempotentHint": true, "destructiveHint": true}}),
            ),
            tool(
                json!({"name": "mkdir", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": false}}),
            ),
            tool(json!({"name": "bare", "inputSchema": {"type": "object"}})),
        ];
        let flags = |c: &Catalog, n: &str| {
            let t = c.tools.iter().find(|t| t.remote == n).expect(n);
            (t.read_only, t.idempotent, t.requires_approval)
        };
        let c = build(&config(), &tools);
        assert_eq!(flags(&c, "read"), (true, true, false));
        assert_eq!(flags(&c, "write"), (false, true, true));
        assert_eq!(flags(&c, "mkdir"), (false, false, false));
        assert_eq!(
            flags(&c, "bare"),
            (false, false, true),
            "MCP defaults: destructive"
        );
        assert_eq!(c.tools[0].name, "fs__read");
        assert_eq!(c.tools[0].timeout_ms, Some(5000));

        let mut cfg = config();
        cfg.tools.insert(
            "write".into(),
            McpToolOverride {
                requires_approval: Some(false),
                timeout_ms: Some(10),
                ..Default::default()
            },
        );
        cfg.tools.insert("nope".into(), McpToolOverride::default());
        let c = build(&cfg, &tools);
        assert_eq!(flags(&c, "write"), (false, true, false));
        assert_eq!(c.tools[1].timeout_ms, Some(10));
        assert_eq!(c.unknown_overrides, vec!["nope".to_owned()]);
    }

    #[test]
    fn a_tool_policy_reaches_the_tools_guard_with_the_servers_label() {
        let tools = [
            tool(json!({"name": "pay", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "read", "inputSchema": {"type": "object"}})),
        ];
        let mut cfg = config();
        cfg.results = crate::machine::Label::new(
            crate::machine::Integrity::Untrusted,
            crate::machine::Confidentiality::Public,
        );
        let mut arguments = std::collections::BTreeMap::new();
        arguments.insert(
            "to".to_owned(),
            crate::machine::ArgumentRule {
                trusted: true,
                public: false,
            },
        );
        let policy = crate::tool::mcp::McpToolPolicy {
            consequential: true,
            on_untrusted: crate::machine::OnUntrusted::Ask,
            arguments,
            hide: true,
            no_echo: true,
        };
        cfg.tools.insert(
            "pay".into(),
            McpToolOverride {
                policy: policy.clone(),
                ..Default::default()
            },
        );
        let c = build(&cfg, &tools);
        let pay = c.tools[0].to_tool_spec().guard;
        assert_eq!(pay, policy.guard(cfg.results));
        assert!(pay.consequential && pay.results.is_untrusted() && pay.hide && pay.no_echo);
        let read = c.tools[1].to_tool_spec().guard;
        assert!(!read.consequential && read.results.is_untrusted());
        // A tool without a policy keeps the catalog bytes it had before policies existed.
        let blob = String::from_utf8(crate::tool::mcp::listing::catalog_blob(&c.tools[1..]))
            .expect("utf-8");
        assert!(!blob.contains("policy"), "{blob}");
    }

    #[test]
    fn invalid_schemas_and_colliding_names_are_skipped_with_a_reason() {
        let tools = [
            tool(
                json!({"name": "bad", "inputSchema": {"type": "object", "properties": {"x": {"type": 12}}}}),
            ),
            tool(json!({"name": "a.b", "inputSchema": {"type": "object"}})),
            tool(
                json!({"name": "ok", "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}}, "required": ["p"]}}),
            ),
        ];
        let c = build(&config(), &tools);
        assert_eq!(c.tools.len(), 2);
        assert_eq!(c.skipped.len(), 1);
        assert!(
            c.skipped[0].1.contains("not a valid JSON Schema"),
            "{:?}",
            c.skipped
        );
        assert_eq!(schema_summary(&c.tools[1].schema), "{p*: string}");
    }
}
