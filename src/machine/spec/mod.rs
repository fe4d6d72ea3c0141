//! The run spec as the machine sees it: agents, tools, the handoff plan and the caps, validated
//! and compiled once by [`RunSpec::build`]. The TOML file format lives in `config`; this is the
//! data it turns into.

use std::sync::Arc;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::Limits;
use super::delegation::{Delegation, SpecDelegate};
use super::effect::Effect;
use super::ids::AgentId;
use super::plan::{Plan, When};
pub use super::retry::{Backoff, DEFAULT_COOLDOWN_MS, MAX_RETRY_AFTER_MS, Route};
use super::settings::ModelSettings;
pub use super::spec_error::{SpecError, did_you_mean};

mod compile;
pub mod tags;
use compile::{Compiled, Names};

/// Default number of bad tool calls an agent may make in a row (each fed back as an error)
/// before it fails.
pub const DEFAULT_CORRECTION_BUDGET: u32 = 3;
/// Default cap on transitions per run.
pub const DEFAULT_MAX_TRANSITIONS: u64 = 1_000;
/// No run may have more transitions than this, whatever the spec says.
pub const HARD_MAX_TRANSITIONS: u64 = 100_000_000;

/// The revision of the machine's rules new runs follow. Each run stores the revision it
/// started with in its spec ([`Spec::semantics`]) and keeps it for its whole life, so a
/// history recorded by an older runtape replays to the same states under a newer one.
///
/// | revision | rules |
/// |---|---|
/// | 1 | runtape 0.1.0: a route that gives up moves the agent to its next route for the rest of the activation; retries wait the full backoff or `retry_after` |
/// | 2 | routes that give up cool down and the agent returns to its primary at a step boundary once the cooldown ends; a `retry_after` beyond [`MAX_RETRY_AFTER_MS`] gives the route up; retry delays never pass the remaining wall-time budget |
/// | 3 | MCP tool lists are inputs: a `ToolsListed` event records a server's list at a step boundary, and each model request offers the granted MCP tools that their server's latest recorded list has (and names the catalogs it used) |
/// | 4 | a tool an MCP server adds after the run started is offered to the agents granted all of that server's tools (a `SERVER__*` grant, kept in the stored spec) or, when read-only, to agents without a grant list; its definition comes from the `ToolsListed` event that recorded it. Agents may delegate (`delegates`: a child run per call, its answer the call's result, its spend charged back) and hand over by tool call (`handoffs`); see `machine::delegation` |
/// | 5 | a run of a session begins with `SessionStart`, carrying the conversations the session's previous run ended with; what falls out of the window is summarised by a recorded model call (`Summarizing`) — see [`session`](super::session); agents with a retriever call it before every model turn (`Retrieving`) and see its passages as user-position data — see [`retrieval`](super::retrieval). A `transfer_to_<agent>` call hands the sender's conversation over: the run rests in `Handoff` until the executor supplies the sender's messages (`ConversationSupplied`, checked against the conversation's head), and the receiver continues them after its own system prompt (see `machine::child`). A child's result (`ChildFinished`) names the child's last receipt and history tip and gets a receipt of its own; a spec may have `[memory]`: agent, shared and global memory, the `remember`/`recall`/`forget` tools answered by the machine, injected memory recorded in each model request, and global writes published when the run completes (`Publishing`) — see [`memory`](super::memory) |
/// | 6 | each state after a transition and each chain link of the history is hashed with SHA-256 (BLAKE3 before); the rules are revision 5's — see [`HistoryHash`](super::HistoryHash) |
/// | 7 | a reply cut by the output-token limit is not an answer: the agent's `on_truncated` retries it with twice the limit (the default), continues it, or fails the run `truncated`; retries and continuations count against the correction budget — see [`OnTruncated`](super::OnTruncated) |
pub const SEMANTICS: u32 = 7;

/// The first revision whose runs offer tools an MCP server adds after the run started: a
/// grant may then be `SERVER__*` (all of that server's tools, now and later).
pub const ADDED_TOOLS_SEMANTICS: u32 = 4;

/// The revision a stored spec without a `semantics` field follows: runtape 0.1.0's.
pub const FIRST_SEMANTICS: u32 = 1;

fn first_semantics() -> u32 {
    FIRST_SEMANTICS
}
/// Tool arguments nested deeper than this are rejected as invalid.
pub const MAX_ARGUMENT_DEPTH: usize = 64;
/// Tool arguments whose JSON encoding is larger than this are rejected as invalid.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// The spec's plain data, as written (after the file format has been parsed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The agents; ids must be unique.
    pub agents: Vec<AgentSpec>,
    /// The tools agents may be granted; names must be unique.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// The handoff plan; absent means: the first agent is entry and only exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// Run-wide caps, checked together with each agent's own.
    #[serde(default)]
    pub limits: Limits,
    /// What a run-wide budget running out does.
    #[serde(default)]
    pub on_exhausted: RunOnExhausted,
    /// Cap on transitions in the run (default 1,000; at most 100,000,000; never unlimited).
    #[serde(default = "default_max_transitions")]
    pub max_transitions: u64,
    /// The revision of the machine's rules this run follows ([`SEMANTICS`] for a new spec).
    /// Stored with the run, so a run keeps the rules it started with; a stored spec without
    /// it is revision [`FIRST_SEMANTICS`] (written by runtape 0.1.0).
    #[serde(default = "first_semantics")]
    pub semantics: u32,
    /// How deep in a delegation tree this run is: 0 for a run started by a person, its
    /// parent's depth + 1 for a child run (revision 4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// For a child run: the parent's `RunChild` effect that started it (the parent run and
    /// the effect's position). Stored with the spec, so the run's sealed head, and so
    /// `verify`, covers the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_by: Option<super::ids::EffectId>,
    /// Delegates given as whole specs (revision 4): an agent listing one's name in its
    /// `delegates` starts a child run of that spec. Carried here, so the run never needs the
    /// file it came from again and its sealed head covers it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spec_delegates: Vec<SpecDelegate>,
    /// For a run of a session (revision 5): the session, the run's place in it, the run whose
    /// conversations it continues, and the window. Stored with the spec, so the run's sealed
    /// head, and so `verify`, covers the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<super::session::SessionSpec>,
    /// Which agents call the retriever before each model turn (revision 5). The program it
    /// runs is part of the setup, not of the machine's spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retriever: Option<super::retrieval::RetrieverSpec>,
    /// Memory scopes and the memory tools (revision 5); `None`: the agents remember only
    /// their conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<super::memory::MemorySpec>,
    /// `[timers]`: the agents may sleep (`sleep_for`, `sleep_until`) up to a maximum, the
    /// run's wake instant committed in its history (see [`timer`](super::timer)); `None`:
    /// no timer tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timers: Option<super::timer::TimerSpec>,
    /// `[run] on_failure`: what a run that fails or is cancelled does about its completed
    /// calls (see [`saga`](super::saga)).
    #[serde(default, skip_serializing_if = "super::saga::OnFailure::is_fail")]
    pub on_failure: super::saga::OnFailure,
    /// Each tool's declared undo, by tool name (`[[tools]] compensate`, `[mcp.tools.NAME]
    /// compensate`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub compensations: std::collections::BTreeMap<String, super::saga::Compensation>,
    /// The run's tags (`runtape run --tag KEY=VALUE`, see [`tags`]): data about the run, not
    /// read by the machine. Stored with the spec, so the run's sealed head, and so `verify`,
    /// covers them; a fork keeps its parent's.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
    /// The files given with the goal (`runtape run --attach FILE`, see
    /// [`attachment`](super::attachment)): the entry agent's first user message carries
    /// them. Stored with the spec, so the sealed head covers them; their bytes are blobs
    /// the first transition stores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<super::Attachment>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_max_transitions() -> u64 {
    DEFAULT_MAX_TRANSITIONS
}

impl Default for Spec {
    /// No agents (so not valid on its own), no tools, the default plan and caps.
    fn default() -> Self {
        Spec {
            agents: Vec::new(),
            tools: Vec::new(),
            plan: None,
            limits: Limits::default(),
            on_exhausted: RunOnExhausted::default(),
            max_transitions: DEFAULT_MAX_TRANSITIONS,
            semantics: SEMANTICS,
            depth: 0,
            delegated_by: None,
            spec_delegates: Vec::new(),
            session: None,
            retriever: None,
            memory: None,
            timers: None,
            on_failure: Default::default(),
            compensations: Default::default(),
            tags: std::collections::BTreeMap::new(),
            attachments: Vec::new(),
        }
    }
}

impl AgentSpec {
    /// An agent with one route, no system prompt, the read-only tools and default budgets.
    pub fn new(id: &str, provider: &str, model: &str) -> Self {
        AgentSpec {
            id: AgentId::from(id),
            system_prompt: String::new(),
            routes: vec![Route::new(provider, model)],
            tools: None,
            limits: Limits::default(),
            on_exhausted: OnExhausted::default(),
            on_in_doubt: OnInDoubt::default(),
            correction_budget: DEFAULT_CORRECTION_BUDGET,
            output_schema: None,
            model_settings: ModelSettings::default(),
            delegates: Vec::new(),
            handoffs: Vec::new(),
            delegation: Delegation::default(),
            on_truncated: super::OnTruncated::default(),
            context: None,
            quarantine: None,
        }
    }
}

impl ToolSpec {
    /// A tool with an object schema and every flag off.
    pub fn new(name: &str, description: &str) -> Self {
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            schema: default_schema(),
            read_only: false,
            idempotent: false,
            requires_approval: false,
            interactive: false,
            guard: super::ToolGuard::default(),
        }
    }
}

impl ToolSpec {
    /// The definition of a tool the machine answers itself (memory, timers): idempotent, an
    /// object schema of `properties` with `required` and nothing else.
    pub(crate) fn answered_by_machine(
        name: &str,
        description: &str,
        properties: Value,
        required: Value,
        read_only: bool,
    ) -> Self {
        let mut tool = ToolSpec::new(name, description);
        tool.schema = serde_json::json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        });
        tool.read_only = read_only;
        tool.idempotent = true;
        tool
    }
}

/// One agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Unique id: letters, digits, `_` and `-`.
    pub id: AgentId,
    /// The first message of its conversation.
    #[serde(default)]
    pub system_prompt: String,
    /// Model routes: the primary first, then fallbacks in order.
    pub routes: Vec<Route>,
    /// Tools it is offered. `None` grants every read-only tool. From revision 4 an entry may
    /// be `SERVER__*` ([`server_pattern`]): every tool MCP server `SERVER` adds after the run
    /// started, besides the ones named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Its caps. `max_turns` and `max_tool_calls` default to 50 and 200 when left out.
    #[serde(default)]
    pub limits: Limits,
    /// What its own budget running out does.
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// What happens when a non-idempotent tool call of this agent was interrupted after it
    /// started and before its result was recorded.
    #[serde(default)]
    pub on_in_doubt: OnInDoubt,
    /// Bad tool calls (unknown tool, outside the grant, invalid arguments) it may make in a
    /// row before it fails; each is fed back to the model as an error result.
    #[serde(default = "default_correction_budget")]
    pub correction_budget: u32,
    /// JSON Schema of the agent's final answer. With one, the provider's structured-output
    /// mechanism is asked for, the answer must parse as JSON and validate (a failure is fed
    /// back under the correction budget), and the parsed value becomes the agent's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Sampling, stop sequences, output length, reasoning and tool-call behaviour, sent with
    /// every model call of this agent.
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub model_settings: ModelSettings,
    /// Agents it may run as child runs, offered as `delegate_<agent>(task)` (revision 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<AgentId>,
    /// Agents it may hand the run over to, offered as `transfer_to_<agent>(note)` (revision 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handoffs: Vec<AgentId>,
    /// Depth cap and child budgets for its delegates.
    #[serde(default, skip_serializing_if = "Delegation::is_default")]
    pub delegation: Delegation,
    /// What a reply cut by the output-token limit does (revision 7): `retry` with twice the
    /// limit (the default), `continue` it, or `fail` the run. See
    /// [`OnTruncated`](super::OnTruncated).
    #[serde(default, skip_serializing_if = "super::OnTruncated::is_default")]
    pub on_truncated: super::OnTruncated,
    /// Its context window and what happens when the next request would not fit it (see
    /// [`context`](super::context)); `None`: no window is known and requests are not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<super::context::ContextSpec>,
    /// Set for a quarantined reader: an agent with no tools that reads data its callers must
    /// not, and answers with a bounded value (see [`quarantine`](super::quarantine)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<super::quarantine::QuarantineSpec>,
}

fn default_correction_budget() -> u32 {
    DEFAULT_CORRECTION_BUDGET
}

/// A tool an agent may be granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Unique name, as offered to the model.
    pub name: String,
    /// What it does, as offered to the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments; calls that do not validate are fed back as errors.
    #[serde(default = "default_schema")]
    pub schema: Value,
    /// It changes nothing; agents without an explicit grant get the read-only tools.
    #[serde(default)]
    pub read_only: bool,
    /// Performing it twice with the same idempotency key is safe, so an interrupted call is
    /// simply performed again on resume.
    #[serde(default)]
    pub idempotent: bool,
    /// A person must approve each call before it runs.
    #[serde(default)]
    pub requires_approval: bool,
    /// It asks a person: the call becomes a question and the answer becomes its result.
    #[serde(default)]
    pub interactive: bool,
    /// The label its results carry and the policy checked before each call (see
    /// [`flow_policy`](super::flow_policy)); left out of the stored spec when it labels and
    /// checks nothing.
    #[serde(default, skip_serializing_if = "super::ToolGuard::is_open")]
    pub guard: super::ToolGuard,
}

fn default_schema() -> Value {
    serde_json::json!({"type": "object"})
}

/// What an agent's own budget running out does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// The agent counts as finished without an answer; the plan picks what is next.
    #[default]
    Handoff,
    /// The run rests in `BudgetExhausted` until a budget is raised.
    Pause,
}

/// What a run-wide budget running out does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOnExhausted {
    /// The run ends failed with the budget's limit class (`turn_limit`, ...).
    #[default]
    Fail,
    /// The run rests in `BudgetExhausted` until a budget is raised.
    Pause,
}

/// What an interrupted non-idempotent tool call does when the run resumes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInDoubt {
    /// The run ends failed with `effect_in_doubt`.
    #[default]
    Fail,
    /// The call is performed again with the same idempotency key.
    Retry,
    /// A person decides: approve retries it, reject reports it failed, an answer becomes its
    /// result.
    Ask,
    /// The tool's `reconcile` command is asked whether the call (by its idempotency key) was
    /// performed: performed → its recorded result (or a note that it was performed) goes back
    /// to the model; not performed → the call is performed, with the same key; unknown (or no
    /// answer) → a person decides, as with `Ask`. The answer is recorded in the history.
    Reconcile,
}

/// A validated spec. Build with [`RunSpec::build`]; serialises as its [`Spec`] and validates
/// again when deserialised, so a stored spec cannot bypass the checks.
#[derive(Clone)]
pub struct RunSpec {
    // Shared, not copied, by every clone: each run in flight holds one.
    spec: Arc<Spec>,
    compiled: Arc<Compiled>,
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

impl PartialEq for RunSpec {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl Serialize for RunSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.spec.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RunSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spec = Spec::deserialize(d)?;
        // A spec stored with a run was checked when the run started, by the rules of the
        // runtape that started it: tool names are not checked again, so a run from before the
        // name rule still reads, resumes and verifies.
        RunSpec::compile(spec, Names::AsStored).map_err(serde::de::Error::custom)
    }
}

/// The server of a grant of all its MCP tools (`fs__*` → `fs`), if `grant` is one.
pub fn server_pattern(grant: &str) -> Option<&str> {
    grant
        .strip_suffix("__*")
        .filter(|server| !server.is_empty() && !server.contains("__") && !server.contains('*'))
}

/// The longest tool name model providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// True for a tool name every model provider accepts: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl RunSpec {
    /// The plain data this spec was built from (with budget defaults filled in).
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// How runs of this spec hash their states and chain links: fixed by its revision, so
    /// what records, replays, verifies, forks or shows a run's history calls this.
    pub fn history_hash(&self) -> super::HistoryHash {
        super::HistoryHash::of_revision(self.spec.semantics)
    }

    /// The spec of the child run `effect` starts (`RunChild` of this run): the same agents
    /// and tools, `delegate` as entry and only exit (its handoff targets may end it too), the
    /// carved-out `limits` as its run-wide caps, `depth`, the link to `effect`, every depth
    /// cap no looser than the delegating agent's, and budgets that run out ending the child
    /// (failed with the budget's class, which its parent reads as `budget_exhausted`) rather
    /// than resting it, since nobody is there to raise them.
    pub fn child_spec(&self, effect: &Effect) -> Result<RunSpec, SpecError> {
        let Effect::RunChild {
            id,
            agent,
            delegate,
            limits,
            depth,
            ..
        } = effect
        else {
            return Err(SpecError::BadDelegation {
                path: "effect".into(),
                reason: "only a RunChild effect starts a child run".into(),
            });
        };
        let cap = self
            .agent(agent)
            .map_or(super::delegation::DEFAULT_MAX_DEPTH, |a| {
                a.delegation.max_depth
            });
        let embedded = self
            .spec
            .spec_delegates
            .iter()
            .find(|d| &d.name == delegate);
        let mut spec = match embedded {
            // A spec delegate: its own agents, tools and plan, its caps tightened to the carve.
            Some(d) => {
                let mut spec = Spec::clone(&d.spec);
                spec.limits = super::delegation::tighter(limits, &spec.limits);
                spec
            }
            None => {
                let mut spec = Spec::clone(&self.spec);
                spec.plan = Some(Plan {
                    entry: delegate.clone(),
                    edges: Vec::new(),
                    exits: vec![delegate.clone()],
                    max_agent_visits: self.plan().max_agent_visits,
                });
                spec.limits = *limits;
                spec
            }
        };
        spec.on_exhausted = RunOnExhausted::Fail;
        spec.depth = *depth;
        spec.delegated_by = Some(id.clone());
        // A child run is part of its parent's work, not a run of the parent's session.
        spec.session = None;
        for a in &mut spec.agents {
            a.delegation.max_depth = a.delegation.max_depth.min(cap);
            a.on_exhausted = OnExhausted::Handoff;
        }
        RunSpec::compile(spec, Names::AsStored)
    }

    /// The plan in force (the explicit one, or the single-agent default).
    pub fn plan(&self) -> &Plan {
        &self.compiled.plan
    }

    /// The agent with this id.
    pub fn agent(&self, id: &AgentId) -> Option<&AgentSpec> {
        self.compiled
            .agent_index
            .get(id)
            .map(|&i| &self.spec.agents[i])
    }

    /// The tool with this name.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.compiled
            .tool_index
            .get(name)
            .map(|&i| &self.spec.tools[i])
    }

    /// The definition a model is shown for the tool offered as `name`: a declared tool, or
    /// (revision 4) the `delegate_…`/`transfer_to_…` tool of an agent's delegate or handoff, or
    /// (revision 5) a memory tool.
    pub fn offered_tool(&self, name: &str) -> Option<std::borrow::Cow<'_, ToolSpec>> {
        match self.tool(name) {
            Some(t) => Some(std::borrow::Cow::Borrowed(t)),
            None => super::delegation::definition(&self.spec.agents, name)
                .or_else(|| super::memory::tools::definition(&self.spec, name))
                .or_else(|| super::timer::definition(&self.spec, name))
                .map(std::borrow::Cow::Owned),
        }
    }

    /// The tools `agent` is offered, in grant order.
    pub fn granted(&self, agent: &AgentId) -> impl Iterator<Item = &ToolSpec> {
        let idx = self.compiled.agent_index.get(agent).copied();
        idx.into_iter().flat_map(move |a| {
            self.compiled.grants[a]
                .iter()
                .map(move |&t| &self.spec.tools[t])
        })
    }

    /// Whether `agent` is granted `tool`.
    pub fn is_granted(&self, agent: &AgentId, tool: &str) -> bool {
        match (
            self.compiled.agent_index.get(agent),
            self.compiled.tool_index.get(tool),
        ) {
            (Some(&a), Some(t)) => self.compiled.grants[a].contains(t),
            _ => false,
        }
    }

    /// Whether `agent` was granted every tool of MCP server `server`, including tools the
    /// server adds after the run started (a `SERVER__*` grant, revision 4).
    pub(crate) fn grants_server(&self, agent: &AgentId, server: &str) -> bool {
        self.compiled
            .agent_index
            .get(agent)
            .and_then(|&a| self.compiled.server_grants.get(a))
            .is_some_and(|servers| servers.iter().any(|s| s == server))
    }

    /// Schema errors of `args` for `tool`, sorted so the text does not depend on the
    /// validator's internal order; empty when valid or when the tool is unknown.
    pub(crate) fn schema_errors(&self, tool: &str, args: &Value) -> Vec<String> {
        let Some(&i) = self.compiled.tool_index.get(tool) else {
            return Vec::new();
        };
        schema_errors(&self.compiled.validators[i], args)
    }

    /// Whether `agent` has an output schema (its final answer is structured output).
    pub fn has_output_schema(&self, agent: &AgentId) -> bool {
        self.compiled
            .agent_index
            .get(agent)
            .and_then(|&i| self.compiled.outputs.get(i))
            .is_some_and(Option::is_some)
    }

    /// Schema errors of `answer` against `agent`'s output schema, sorted; `None` when the
    /// agent has no output schema.
    pub(crate) fn output_errors(&self, agent: &AgentId, answer: &Value) -> Option<Vec<String>> {
        let &i = self.compiled.agent_index.get(agent)?;
        let validator = self.compiled.outputs.get(i)?.as_ref()?;
        Some(schema_errors(validator, answer))
    }

    /// The compiled regex of plan edge `index`, if its condition is a regex.
    pub(crate) fn edge_regex(&self, index: usize) -> Option<&Regex> {
        self.compiled.edge_regex.get(index).and_then(Option::as_ref)
    }
}

/// Where `value` breaks `validator`'s schema, one line each (`/path: error`), sorted and
/// without repeats, so the same value always reads the same way back to the model.
pub(crate) fn schema_errors(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    let mut errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    errors.sort();
    errors.dedup();
    errors
}
