//! Validating and compiling a [`Spec`] into a [`RunSpec`]: every check a spec passes before
//! a run may follow it, and the lookups built once for the machine.

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::Regex;

use super::*;

/// Compiled lookups, built once.
pub(super) struct Compiled {
    pub(super) agent_index: BTreeMap<AgentId, usize>,
    pub(super) tool_index: BTreeMap<String, usize>,
    pub(super) validators: Vec<jsonschema::Validator>,
    /// Granted tool indices per agent, in grant order.
    pub(super) grants: Vec<Vec<usize>>,
    /// Per agent: the MCP servers it was granted every tool of (`SERVER__*`, revision 4).
    pub(super) server_grants: Vec<Vec<String>>,
    /// Compiled regex per plan edge (None for other conditions).
    pub(super) edge_regex: Vec<Option<Regex>>,
    /// Compiled output schema per agent (None for agents without one).
    pub(super) outputs: Vec<Option<jsonschema::Validator>>,
    pub(super) plan: Plan,
}

/// Whether tool names are held to the providers' rule.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Names {
    /// A new spec: they are.
    Checked,
    /// A spec stored with a run: they were checked by the rules of its day.
    AsStored,
}

impl RunSpec {
    /// Validates and compiles `spec`: ids, tool names (1 to 64 letters, digits, `_` or `-`,
    /// as model providers require), grants, schemas, the plan (unknown agents, unreachable
    /// exits, bad conditions) and the caps. Fills in the agent budget defaults.
    pub fn build(spec: Spec) -> Result<RunSpec, SpecError> {
        RunSpec::compile(spec, Names::Checked)
    }

    pub(super) fn compile(mut spec: Spec, names: Names) -> Result<RunSpec, SpecError> {
        if spec.agents.is_empty() {
            return Err(SpecError::NoAgents);
        }
        if spec.max_transitions == 0 || spec.max_transitions > HARD_MAX_TRANSITIONS {
            return Err(SpecError::OutOfRange {
                path: "max_transitions".into(),
                reason: format!(
                    "max_transitions must be between 1 and {HARD_MAX_TRANSITIONS} (got {})",
                    spec.max_transitions
                ),
            });
        }

        if !(FIRST_SEMANTICS..=SEMANTICS).contains(&spec.semantics) {
            return Err(SpecError::OutOfRange {
                path: "semantics".into(),
                reason: format!(
                    "this spec follows revision {} of the machine's rules; this runtape knows revisions {FIRST_SEMANTICS} to {SEMANTICS} (a newer runtape wrote it: upgrade; the revisions: runtape::guide::changelog)",
                    spec.semantics
                ),
            });
        }

        crate::machine::memory::spec::validate(&spec)?;
        super::tags::validate(&spec.tags)?;
        crate::machine::timer::validate(&spec)?;
        let mut tool_index = BTreeMap::new();
        let mut validators = Vec::with_capacity(spec.tools.len());
        for (i, tool) in spec.tools.iter().enumerate() {
            let path = format!("tools[{i}]");
            if tool.name.is_empty() || tool_index.insert(tool.name.clone(), i).is_some() {
                return Err(SpecError::DuplicateTool {
                    path: format!("{path}.name"),
                    name: tool.name.clone(),
                });
            }
            if names == Names::Checked && !is_valid_tool_name(&tool.name) {
                return Err(SpecError::BadToolName {
                    path: format!("{path}.name"),
                    name: crate::text::one_line(&tool.name, 80),
                });
            }
            let validator =
                jsonschema::validator_for(&tool.schema).map_err(|e| SpecError::BadSchema {
                    path: format!("{path}.schema"),
                    tool: tool.name.clone(),
                    reason: e.to_string(),
                })?;
            validators.push(validator);
        }

        let mut agent_index = BTreeMap::new();
        let mut grants = Vec::with_capacity(spec.agents.len());
        let mut server_grants = Vec::with_capacity(spec.agents.len());
        let mut outputs = Vec::with_capacity(spec.agents.len());
        for (i, agent) in spec.agents.iter_mut().enumerate() {
            let path = format!("agents[{i}]");
            let id = agent.id.as_str();
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(SpecError::BadAgentId {
                    path: format!("{path}.id"),
                    id: id.to_owned(),
                });
            }
            if agent_index.insert(agent.id.clone(), i).is_some() {
                return Err(SpecError::DuplicateAgent {
                    path: format!("{path}.id"),
                    id: id.to_owned(),
                });
            }
            if agent.routes.is_empty() {
                return Err(SpecError::NoRoute {
                    path: format!("{path}.routes"),
                    agent: id.to_owned(),
                });
            }
            for (r, route) in agent.routes.iter().enumerate() {
                if route.max_attempts == 0 || route.max_attempts > 100 {
                    return Err(SpecError::OutOfRange {
                        path: format!("{path}.routes[{r}].max_attempts"),
                        reason: format!(
                            "max_attempts must be between 1 and 100 (got {})",
                            route.max_attempts
                        ),
                    });
                }
            }
            if let Some((field, reason)) = agent.model_settings.problem() {
                return Err(SpecError::OutOfRange {
                    path: format!("{path}.model_settings.{field}"),
                    reason,
                });
            }
            let output = match &agent.output_schema {
                None => None,
                Some(schema) => Some(jsonschema::validator_for(schema).map_err(|e| {
                    SpecError::BadOutputSchema {
                        path: format!("{path}.output_schema"),
                        agent: id.to_owned(),
                        reason: e.to_string(),
                    }
                })?),
            };
            outputs.push(output);
            agent.limits.max_turns = agent.limits.max_turns.or(Limits::AGENT_DEFAULT.max_turns);
            agent.limits.max_tool_calls = agent
                .limits
                .max_tool_calls
                .or(Limits::AGENT_DEFAULT.max_tool_calls);
            let mut servers = Vec::new();
            let granted = match &agent.tools {
                None => spec
                    .tools
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.read_only)
                    .map(|(i, _)| i)
                    .collect(),
                Some(names) => {
                    let mut out = Vec::with_capacity(names.len());
                    for (g, name) in names.iter().enumerate() {
                        if spec.semantics >= ADDED_TOOLS_SEMANTICS
                            && let Some(server) = server_pattern(name)
                        {
                            if !servers.iter().any(|s| s == server) {
                                servers.push(server.to_owned());
                            }
                            continue;
                        }
                        if spec.timers.is_some()
                            && crate::machine::timer::TIMER_TOOLS.contains(&name.as_str())
                        {
                            // A timer tool: granted by name, defined by the machine.
                            continue;
                        }
                        if spec.memory.is_some()
                            && crate::machine::memory::TOOL_NAMES.contains(&name.as_str())
                        {
                            // A memory tool (revision 5): granted by name, defined by the
                            // machine.
                            continue;
                        }
                        let Some(&t) = tool_index.get(name) else {
                            return Err(SpecError::UnknownTool {
                                path: format!("{path}.tools[{g}]"),
                                agent: id.to_owned(),
                                tool: name.clone(),
                                hint: did_you_mean(name, tool_index.keys().map(String::as_str)),
                            });
                        };
                        if !out.contains(&t) {
                            out.push(t);
                        }
                    }
                    out
                }
            };
            grants.push(granted);
            server_grants.push(servers);
        }

        let plan = spec
            .plan
            .clone()
            .unwrap_or_else(|| Plan::single(spec.agents[0].id.clone()));
        let known = |agent: &AgentId, path: String| -> Result<(), SpecError> {
            if agent_index.contains_key(agent) {
                Ok(())
            } else {
                Err(SpecError::UnknownAgent {
                    path,
                    agent: agent.to_string(),
                    hint: did_you_mean(agent.as_str(), agent_index.keys().map(AgentId::as_str)),
                })
            }
        };
        known(&plan.entry, "plan.entry".into())?;
        let mut edge_regex = Vec::with_capacity(plan.edges.len());
        for (e, edge) in plan.edges.iter().enumerate() {
            known(&edge.from, format!("plan.edges[{e}].from"))?;
            known(&edge.to, format!("plan.edges[{e}].to"))?;
            edge_regex.push(compile_condition(&edge.when, e)?);
        }
        if plan.exits.is_empty() {
            return Err(SpecError::NoExit);
        }
        let reachable = plan.reachable();
        for (x, exit) in plan.exits.iter().enumerate() {
            known(exit, format!("plan.exits[{x}]"))?;
            if !reachable.contains(exit) {
                return Err(SpecError::UnreachableExit {
                    path: format!("plan.exits[{x}]"),
                    agent: exit.to_string(),
                    entry: plan.entry.to_string(),
                });
            }
        }
        crate::machine::delegation::validate_spec_delegates(
            &spec,
            &agent_index,
            &tool_index,
            |s| RunSpec::compile(s.clone(), names).map(drop),
        )?;
        crate::machine::delegation::validate(&spec, &agent_index, &tool_index)?;
        crate::machine::session::validate(&spec, &agent_index)?;
        crate::machine::context_summary::validate(&spec, &agent_index, &grants, &server_grants)?;
        crate::machine::retrieval::validate(&spec, &agent_index)?;
        // An agent a run can be handed over to by tool call may end it: its answer completes
        // the run when no plan edge routes it on.
        let mut plan = plan;
        for agent in &spec.agents {
            for target in &agent.handoffs {
                if !plan.exits.contains(target) {
                    plan.exits.push(target.clone());
                }
            }
        }
        if plan.max_agent_visits == 0 {
            return Err(SpecError::OutOfRange {
                path: "plan.max_agent_visits".into(),
                reason: "max_agent_visits must be at least 1".into(),
            });
        }

        let compiled = Compiled {
            agent_index,
            tool_index,
            validators,
            grants,
            server_grants,
            edge_regex,
            outputs,
            plan,
        };
        Ok(RunSpec {
            spec: Arc::new(spec),
            compiled: Arc::new(compiled),
        })
    }
}

fn compile_condition(when: &When, edge: usize) -> Result<Option<Regex>, SpecError> {
    match when {
        When::Regex { pattern } => regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map(Some)
            .map_err(|e| SpecError::BadCondition {
                path: format!("plan.edges[{edge}].when.pattern"),
                reason: format!("invalid regex: {e}"),
            }),
        When::JsonPointerEquals { pointer, .. }
            if !(pointer.is_empty() || pointer.starts_with('/')) =>
        {
            Err(SpecError::BadCondition {
                path: format!("plan.edges[{edge}].when.pointer"),
                reason: format!("JSON pointer `{pointer}` must be empty or start with `/`"),
            })
        }
        _ => Ok(None),
    }
}
