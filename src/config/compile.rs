//! From the file as written to the machine's [`Spec`] and the [`Setup`]: defaults that depend
//! on other entries, cross references (agents → providers), units (USD → nanodollars), and
//! the checks the machine cannot make (providers, programs, base URLs). The machine's own
//! checks run after, in [`RunSpec::build`](crate::machine::RunSpec::build).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{At, ConfigError};
use super::file::{
    RawAgent, RawBackoff, RawBudget, RawDelegate, RawFile, RawPlan, RawProvider, RawProviderKind,
    RawTool, RawToolKind,
};
use super::program;
use super::providers::provider;
use super::setup::{SETUP_VERSION, Setup};
use crate::machine::{
    AgentId, AgentSpec, Backoff, DEFAULT_CORRECTION_BUDGET, DEFAULT_MAX_AGENT_VISITS,
    DEFAULT_MAX_TRANSITIONS, Limits, OnInDoubt, Plan, PlanEdge, Route, Spec, ToolSpec, When,
    did_you_mean,
};
use crate::store::Durability;
use crate::tool::command::CommandConfig;

/// What a file compiles to, before the machine validates the spec.
pub(crate) struct Compiled {
    pub(crate) spec: Spec,
    pub(crate) setup: Setup,
    pub(crate) database: Option<PathBuf>,
    pub(crate) durability: Option<Durability>,
    /// `[session]`: how runs of a session keep their history.
    pub(crate) session: crate::exec::SessionSettings,
    /// The delegates given as other spec files, still to be loaded.
    pub(crate) spec_files: Vec<super::spec_files::SpecFileRef>,
}

/// Largest `max_cost_usd` accepted (keeps nanodollars far inside `u64`).
const MAX_COST_USD: f64 = 1e9;

pub(crate) fn compile(raw: RawFile, spec_dir: &Path) -> Result<Compiled, ConfigError> {
    let database = match raw.database.as_deref() {
        Some("") => {
            return Err(ConfigError::invalid(
                "database",
                "the path is empty – give a file path or leave `database` out",
            ));
        }
        // A PostgreSQL URL is kept as it is; a file path is relative to the spec file.
        Some(db) if crate::store::is_postgres_url(db) => Some(PathBuf::from(db)),
        Some(db) => Some(spec_dir.join(db)),
        None => None,
    };
    let durability = match raw.run.durability.as_deref() {
        None => None,
        Some(name) => Some(Durability::parse(name).ok_or_else(|| {
            ConfigError::invalid(
                "run.durability",
                format!(
                    "`{name}` is not a durability – give \"full\" (the default: every commit is on disk before it counts) or \"normal\" (faster; a power loss can drop the latest commits)"
                ),
            )
        })?),
    };
    let limits = limits(raw.run.budget.as_ref(), "run.budget")?;
    let providers = raw
        .providers
        .iter()
        .enumerate()
        .map(|(i, p)| provider(i, p, &raw))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tools = Vec::with_capacity(raw.tools.len());
    let mut commands = Vec::new();
    for (i, t) in raw.tools.iter().enumerate() {
        let (spec, command) = tool(i, t, spec_dir)?;
        tools.push(spec);
        commands.extend(command);
    }
    let agents = raw
        .agents
        .iter()
        .enumerate()
        .map(|(i, a)| agent(i, a, &raw.providers, spec_dir))
        .collect::<Result<Vec<_>, _>>()?;
    check_reconcilable(&agents, &tools, &commands)?;
    let plan = raw.plan.as_ref().map(plan).transpose()?;
    let mcp = super::mcp::compile(&raw.mcp, spec_dir)?;
    let session = super::session::session(raw.session.as_ref(), &raw.agents)?;
    let (retriever_spec, retriever) =
        super::session::retriever(raw.retriever.as_ref(), &raw.agents, spec_dir)?.unzip();
    let compensations = super::compensate::compile(&raw)?;
    let spec = Spec {
        agents,
        tools,
        plan,
        limits,
        on_exhausted: raw.run.on_exhausted.unwrap_or_default(),
        max_transitions: raw.run.max_transitions.unwrap_or(DEFAULT_MAX_TRANSITIONS),
        semantics: crate::machine::SEMANTICS,
        depth: 0,
        delegated_by: None,
        spec_delegates: Vec::new(),
        session: None,
        retriever: retriever_spec,
        memory: super::memory::compile(raw.memory.as_ref())?,
        timers: raw.timers,
        on_failure: raw.run.on_failure.unwrap_or_default(),
        compensations,
        tags: std::collections::BTreeMap::new(),
        attachments: Vec::new(),
    };
    let setup = Setup {
        version: SETUP_VERSION,
        spec_dir: spec_dir.to_path_buf(),
        providers,
        tools: commands,
        mcp,
        retriever,
        env_file: None,
        schedule: None,
    };
    let spec_files = super::spec_files::refs(&raw.agents);
    Ok(Compiled {
        spec,
        setup,
        database,
        durability,
        session,
        spec_files,
    })
}

fn limits(budget: Option<&RawBudget>, path: &str) -> Result<Limits, ConfigError> {
    let Some(b) = budget else {
        return Ok(Limits::default());
    };
    let max_cost_nanos = match b.max_cost_usd {
        None => None,
        Some(usd) if usd.is_finite() && (0.0..=MAX_COST_USD).contains(&usd) => {
            // In range by the guard: at most 1e18, inside u64.
            Some((usd * 1e9).round() as u64)
        }
        Some(usd) => {
            return Err(ConfigError::invalid(
                format!("{path}.max_cost_usd"),
                format!(
                    "max_cost_usd must be a number of US dollars between 0 and {MAX_COST_USD:.0} (got {usd}) – fix the value"
                ),
            ));
        }
    };
    Ok(Limits {
        max_turns: b.max_turns,
        max_tool_calls: b.max_tool_calls,
        max_tokens: b.max_tokens,
        max_cost_nanos,
        max_wall_ms: b.max_wall_ms,
    })
}

fn tool(
    i: usize,
    t: &RawTool,
    spec_dir: &Path,
) -> Result<(ToolSpec, Option<CommandConfig>), ConfigError> {
    let path = format!("tools[{i}]");
    let schema = t
        .schema
        .clone()
        .unwrap_or_else(|| serde_json::json!({"type": "object"}));
    let spec = ToolSpec {
        schema: schema.clone(),
        read_only: t.read_only,
        idempotent: t.idempotent,
        requires_approval: t.requires_approval,
        interactive: t.kind == RawToolKind::Human,
        guard: super::guard::compile(
            &path,
            &super::guard::RawToolGuard {
                trust: t.trust,
                confidentiality: t.confidentiality,
                consequential: t.consequential,
                on_untrusted: t.on_untrusted,
                arguments: t.arguments.as_ref(),
                hide: t.hide,
                echoes_arguments: t.echoes_arguments,
            },
            &schema,
        )?,
        ..ToolSpec::new(&t.name, &t.description)
    };
    if t.timeout_ms == Some(0) {
        return Err(ConfigError::invalid(
            format!("{path}.timeout_ms"),
            "timeout_ms must be at least 1 – give the longest a call may take, in milliseconds",
        ));
    }
    if t.kind == RawToolKind::Human {
        for (field, set) in [
            ("command", t.command.is_some()),
            ("reconcile", t.reconcile.is_some()),
            ("timeout_ms", t.timeout_ms.is_some()),
            ("env", t.env.is_some()),
            ("env_all", t.env_all.is_some()),
            ("confine", t.confine.is_some()),
        ] {
            if set {
                return Err(ConfigError::invalid(
                    format!("{path}.{field}"),
                    format!(
                        "a `human` tool is answered by a person and takes no `{field}` – remove it"
                    ),
                ));
            }
        }
        return Ok((spec, None));
    }
    let Some((program, args)) = t.command.as_deref().and_then(<[String]>::split_first) else {
        return Err(ConfigError::invalid(
            format!("{path}.command"),
            "a command tool needs `command = [\"program\", \"arg\", …]` – add it, or set kind = \"human\"",
        ));
    };
    let program =
        program::resolve(program, spec_dir).map_err(|reason| ConfigError::CommandNotFound {
            at: At::field(format!("{path}.command[0]")),
            tool: t.name.clone(),
            reason,
        })?;
    let env = super::program_env::compile(t.env.as_ref(), &path)?;
    let reconcile = reconcile_command(&path, t, spec_dir)?;
    let confine = confinement(&path, t.confine.as_ref(), spec_dir)?;
    let command = CommandConfig {
        name: t.name.clone(),
        description: t.description.clone(),
        schema,
        program,
        args: args.to_vec(),
        dir: spec_dir.to_path_buf(),
        timeout_ms: t.timeout_ms,
        idempotent: t.idempotent,
        read_only: t.read_only,
        env: env.pass,
        env_set: env.set,
        env_all: t.env_all.unwrap_or(false),
        reconcile,
        confine,
    };
    Ok((spec, Some(command)))
}

/// A program's `confine = { … }` with its paths made absolute against `spec_dir`, each one
/// checked to exist (at `{path}.confine`).
pub(crate) fn confinement(
    path: &str,
    raw: Option<&crate::tool::confine::Confine>,
    spec_dir: &std::path::Path,
) -> Result<Option<crate::tool::confine::Confine>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let absolute = |ps: &[std::path::PathBuf]| ps.iter().map(|p| spec_dir.join(p)).collect();
    let confine = crate::tool::confine::Confine {
        read: absolute(&raw.read),
        write: absolute(&raw.write),
        ..raw.clone()
    };
    confine.check_paths().map_err(|why| {
        ConfigError::invalid(
            format!("{path}.confine"),
            format!("{why} – give paths that exist, relative to the spec file or absolute"),
        )
    })?;
    if confine.cpu_seconds == Some(0) || confine.memory_mb == Some(0) {
        return Err(ConfigError::invalid(
            format!("{path}.confine"),
            "cpu_seconds and memory_mb must be at least 1 – or leave them out for no limit",
        ));
    }
    Ok(Some(confine))
}

/// The tool's `reconcile = ["program", "arg", …]`, its program resolved like `command`'s.
/// Only a non-idempotent tool can be in doubt, so only such a tool may declare one.
fn reconcile_command(
    path: &str,
    t: &RawTool,
    spec_dir: &Path,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(argv) = &t.reconcile else {
        return Ok(None);
    };
    if t.idempotent {
        return Err(ConfigError::invalid(
            format!("{path}.reconcile"),
            "an idempotent tool is simply performed again when interrupted, so it needs no `reconcile` – remove it, or set idempotent = false",
        ));
    }
    let Some((program, args)) = argv.split_first() else {
        return Err(ConfigError::invalid(
            format!("{path}.reconcile"),
            "`reconcile` is empty – give [\"program\", \"arg\", …], or remove it",
        ));
    };
    let program =
        program::resolve(program, spec_dir).map_err(|reason| ConfigError::CommandNotFound {
            at: At::field(format!("{path}.reconcile[0]")),
            tool: t.name.clone(),
            reason,
        })?;
    let mut full = vec![program];
    full.extend(args.iter().cloned());
    Ok(Some(full))
}

/// An agent whose `on_in_doubt` is `reconcile` must be able to ask every non-idempotent
/// command tool it is granted: each must declare a `reconcile` command.
fn check_reconcilable(
    agents: &[AgentSpec],
    tools: &[ToolSpec],
    commands: &[CommandConfig],
) -> Result<(), ConfigError> {
    for (i, a) in agents.iter().enumerate() {
        if a.on_in_doubt != OnInDoubt::Reconcile {
            continue;
        }
        let granted = tools.iter().filter(|t| match &a.tools {
            Some(list) => list.contains(&t.name),
            None => t.read_only,
        });
        for t in granted.filter(|t| !t.idempotent && !t.interactive) {
            let asks = commands
                .iter()
                .any(|c| c.name == t.name && c.reconcile.is_some());
            if !asks {
                return Err(ConfigError::invalid(
                    format!("agents[{i}].on_in_doubt"),
                    format!(
                        "agent `{}` reconciles calls in doubt, but its tool `{}` declares no `reconcile` command – add `reconcile = [\"program\", …]` to the tool, or choose fail, retry or ask",
                        a.id, t.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn agent(
    i: usize,
    a: &RawAgent,
    providers: &[RawProvider],
    spec_dir: &Path,
) -> Result<AgentSpec, ConfigError> {
    let path = format!("agents[{i}]");
    let mut routes = vec![route(
        &a.id,
        &a.provider,
        a.model.as_deref(),
        (a.max_attempts, a.backoff.as_ref(), a.cooldown_ms),
        providers,
        &path,
    )?];
    for (j, f) in a.fallbacks.iter().enumerate() {
        routes.push(route(
            &a.id,
            &f.provider,
            f.model.as_deref(),
            (f.max_attempts, f.backoff.as_ref(), f.cooldown_ms),
            providers,
            &format!("{path}.fallbacks[{j}]"),
        )?);
    }
    let model_settings = a.model_settings.clone().unwrap_or_default();
    let names: Vec<&str> = routes.iter().map(|r| r.provider.as_str()).collect();
    super::models::check(&path, &model_settings, &names, providers)?;
    let output_schema = output_schema(a, &path, spec_dir)?;
    let context = super::context::resolve(a.context.as_ref(), &routes, providers, &path)?;
    Ok(AgentSpec {
        context,
        quarantine: a.quarantine.clone(),
        output_schema,
        model_settings,
        id: AgentId::new(a.id.clone()),
        system_prompt: a.system_prompt.clone(),
        routes,
        tools: a.tools.clone(),
        limits: limits(a.budget.as_ref(), &format!("{path}.budget"))?,
        on_exhausted: a.on_exhausted.unwrap_or_default(),
        on_in_doubt: a.on_in_doubt.unwrap_or_default(),
        on_truncated: a.on_truncated.unwrap_or_default(),
        correction_budget: a.correction_budget.unwrap_or(DEFAULT_CORRECTION_BUDGET),
        delegates: a
            .delegates
            .iter()
            .map(|d| match d {
                RawDelegate::Agent(id) => AgentId::new(id.clone()),
                RawDelegate::SpecFile(f) => AgentId::new(f.name.clone()),
            })
            .collect(),
        handoffs: a.handoffs.iter().map(|h| AgentId::new(h.clone())).collect(),
        delegation: delegation(a.delegation.as_ref(), &format!("{path}.delegation"))?,
    })
}

/// `[agents.delegation]`: the depth cap and the child budget (`share` of the parent's
/// remaining budget, 0 < share ≤ 1, written as thousandths; absolute caps as in a budget).
fn delegation(
    raw: Option<&super::file::RawDelegation>,
    path: &str,
) -> Result<crate::machine::Delegation, ConfigError> {
    let mut out = crate::machine::Delegation::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    if let Some(depth) = raw.max_depth {
        out.max_depth = depth;
    }
    if let Some(b) = &raw.budget {
        if let Some(share) = b.share {
            if !(share.is_finite() && share > 0.0 && share <= 1.0) {
                return Err(ConfigError::invalid(
                    format!("{path}.budget.share"),
                    format!(
                        "share must be a fraction above 0 and at most 1 (got {share}) – e.g. share = 0.5"
                    ),
                ));
            }
            // In (0, 1] by the guard: the product is in (0, 1000].
            out.budget.share_permille = Some(((share * 1000.0).round() as u32).max(1));
        }
        let caps = RawBudget {
            max_turns: b.max_turns,
            max_tool_calls: b.max_tool_calls,
            max_tokens: b.max_tokens,
            max_cost_usd: b.max_cost_usd,
            max_wall_ms: b.max_wall_ms,
        };
        out.budget.limits = limits(Some(&caps), &format!("{path}.budget"))?;
    }
    Ok(out)
}

/// The agent's output schema: written inline (`output_schema`) or in a JSON file
/// (`output_schema_file`, relative to the spec), not both.
fn output_schema(a: &RawAgent, path: &str, spec_dir: &Path) -> Result<Option<Value>, ConfigError> {
    match (&a.output_schema, &a.output_schema_file) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            format!("{path}.output_schema_file"),
            "give the output schema inline (`output_schema`) or in a file (`output_schema_file`), not both – remove one",
        )),
        (Some(v), None) => Ok(Some(v.clone())),
        (None, Some(file)) => {
            let field = format!("{path}.output_schema_file");
            let full = spec_dir.join(file);
            let meta = std::fs::metadata(&full).map_err(|e| {
                ConfigError::invalid(
                    field.clone(),
                    format!(
                        "cannot read `{}` ({e}) – give a JSON Schema file relative to the spec",
                        full.display()
                    ),
                )
            })?;
            if meta.len() > super::MAX_SPEC_BYTES {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "`{}` is larger than {} MiB – a schema is a few kilobytes",
                        full.display(),
                        super::MAX_SPEC_BYTES >> 20
                    ),
                ));
            }
            let bytes = std::fs::read(&full).map_err(|e| {
                ConfigError::invalid(
                    field.clone(),
                    format!("cannot read `{}` ({e})", full.display()),
                )
            })?;
            serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ConfigError::invalid(
                    field,
                    format!(
                        "`{}` is not JSON ({e}) – write the schema as a JSON document",
                        full.display()
                    ),
                )
            })
        }
        (None, None) => Ok(None),
    }
}

/// A route's retry rules as written: `max_attempts`, `backoff`, `cooldown_ms`.
type RetryRules<'a> = (Option<u32>, Option<&'a RawBackoff>, Option<u64>);

fn route(
    agent: &str,
    provider: &str,
    model: Option<&str>,
    (max_attempts, backoff, cooldown_ms): RetryRules<'_>,
    providers: &[RawProvider],
    path: &str,
) -> Result<Route, ConfigError> {
    let Some(p) = providers.iter().find(|p| p.name == provider) else {
        return Err(ConfigError::UnknownProvider {
            at: At::field(format!("{path}.provider")),
            agent: agent.to_owned(),
            provider: provider.to_owned(),
            hint: did_you_mean(provider, providers.iter().map(|p| p.name.as_str())),
        });
    };
    let offline = match p.kind {
        RawProviderKind::Echo => Some("echo"),
        RawProviderKind::Scripted => Some("scripted"),
        _ => None,
    };
    let nonempty = |m: Option<&str>| m.filter(|m| !m.trim().is_empty()).map(str::to_owned);
    let model = nonempty(model)
        .or_else(|| nonempty(p.model.as_deref()))
        .or_else(|| offline.map(str::to_owned))
        .ok_or_else(|| {
            ConfigError::invalid(
                format!("{path}.model"),
                format!("no model for provider `{provider}` – set `model` here or on the provider"),
            )
        })?;
    let mut route = Route::new(provider, &model);
    if let Some(n) = max_attempts {
        route.max_attempts = n;
    }
    if let Some(ms) = cooldown_ms {
        route.cooldown_ms = ms;
    }
    let default = Backoff::default();
    route.backoff = Backoff {
        initial_ms: backoff
            .and_then(|b| b.initial_ms)
            .unwrap_or(default.initial_ms),
        max_ms: backoff.and_then(|b| b.max_ms).unwrap_or(default.max_ms),
    };
    Ok(route)
}

fn plan(p: &RawPlan) -> Result<Plan, ConfigError> {
    let edges = p
        .edges
        .iter()
        .enumerate()
        .map(|(e, edge)| {
            Ok(PlanEdge {
                from: AgentId::new(edge.from.clone()),
                to: AgentId::new(edge.to.clone()),
                when: when(edge.when.as_ref(), &format!("plan.edges[{e}].when"))?,
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    Ok(Plan {
        entry: AgentId::new(p.entry.clone()),
        edges,
        exits: p.exits.iter().map(|x| AgentId::new(x.clone())).collect(),
        max_agent_visits: p.max_agent_visits.unwrap_or(DEFAULT_MAX_AGENT_VISITS),
    })
}

fn when(value: Option<&Value>, path: &str) -> Result<When, ConfigError> {
    let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let form = match value {
        None => Some(When::Always),
        Some(Value::String(s)) if s == "always" => Some(When::Always),
        Some(Value::Object(map)) => {
            let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
            keys.sort_unstable();
            match keys.as_slice() {
                ["contains"] => string(map.get("contains")).map(|text| When::Contains { text }),
                ["regex"] => string(map.get("regex")).map(|pattern| When::Regex { pattern }),
                ["equals", "json_pointer"] => {
                    string(map.get("json_pointer")).map(|pointer| When::JsonPointerEquals {
                        pointer,
                        value: map.get("equals").cloned().unwrap_or(Value::Null),
                    })
                }
                _ => None,
            }
        }
        _ => None,
    };
    form.ok_or_else(|| {
        ConfigError::invalid(
            path,
            "`when` must be \"always\", { contains = \"…\" }, { regex = \"…\" } or { json_pointer = \"/…\", equals = … } – use one of these",
        )
    })
}
