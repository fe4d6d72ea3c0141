//! Delegation and model-chosen handoffs in the spec (revision 4): which agents an agent may
//! call as a child run (`delegates`) or hand the run over to (`handoffs`), the names those
//! are offered to the model by, the depth and budget rules, and their validation.
//!
//! # Names the model sees
//!
//! - `delegate_<agent>` with arguments `{"task": "..."}`: runs `<agent>` as a child run with
//!   `task` as its goal; the child's final answer (or its typed failure) is the call's result.
//! - `transfer_to_<agent>` with optional arguments `{"note": "..."}`: hands the run over to
//!   `<agent>` for good (one-way); it must be the only call in its reply.
//!
//! The runtime rules (what a call does to the run) live in [`child`](super::child).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::budget::{BudgetKey, Limits, Remaining};
use super::ids::AgentId;
use super::spec::{AgentSpec, Spec, SpecError, ToolSpec, did_you_mean, is_valid_tool_name};

/// The first revision whose specs may delegate and hand over by tool call.
pub(crate) const DELEGATION_SEMANTICS: u32 = 4;
/// The first revision whose `transfer_to_<agent>` calls hand the sender's conversation over
/// (see `machine::child`); revision 4 activates the receiver with the goal and the
/// note only.
pub const TRANSFER_CONVERSATION_SEMANTICS: u32 = 5;
/// The first revision whose child results (`ChildFinished`) name the child's last receipt and
/// history tip, and get a receipt of their own in the parent's chain, so the parent's receipts
/// commit to each child's whole chain.
pub const CHILD_RECEIPT_SEMANTICS: u32 = 5;
/// Default cap on how deep a chain of child runs may go (a child of a child of a child).
pub const DEFAULT_MAX_DEPTH: u32 = 3;
/// No spec may allow deeper chains than this.
pub const HARD_MAX_DEPTH: u32 = 16;
/// Prefix of the tool a delegate is offered by.
pub const DELEGATE_PREFIX: &str = "delegate_";
/// Prefix of the tool a handoff is offered by.
pub const TRANSFER_PREFIX: &str = "transfer_to_";

/// An agent's delegation rules (`[agents.delegation]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delegation {
    /// How deep a chain of child runs started from this agent may go: a call that would
    /// start a child deeper than this is answered with a tool error instead.
    #[serde(default = "default_max_depth")]
    pub max_depth: u32,
    /// What each child may spend.
    #[serde(default)]
    pub budget: ChildBudget,
}

fn default_max_depth() -> u32 {
    DEFAULT_MAX_DEPTH
}

impl Default for Delegation {
    fn default() -> Self {
        Delegation {
            max_depth: DEFAULT_MAX_DEPTH,
            budget: ChildBudget::default(),
        }
    }
}

impl Delegation {
    /// True for the defaults (left out of a stored spec).
    pub fn is_default(&self) -> bool {
        *self == Delegation::default()
    }
}

/// A child's budget, carved out of its parent's remaining budget when it starts: per key,
/// `share_permille` thousandths of what the parent had left before the reply that started it
/// (the tighter of the parent agent's and the run's), divided evenly among the children that
/// reply starts, further capped by `limits`. Keys neither caps are left uncapped (the child's
/// own agent caps still apply). So the children of one reply never get more together than
/// `share` of what the parent had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildBudget {
    /// Thousandths of the parent's remaining budget (1 to 1000; absent = all of it). The file
    /// format writes it as `share = 0.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_permille: Option<u32>,
    /// Absolute caps per child.
    #[serde(default)]
    pub limits: Limits,
}

impl ChildBudget {
    /// The caps of each of `siblings` children started by one reply when the parent had
    /// `left`.
    pub fn carve(&self, left: &Remaining, siblings: u32) -> Limits {
        let share = u128::from(self.share_permille.unwrap_or(1000));
        let split = u128::from(siblings.max(1)) * 1000;
        let mut out = Limits::default();
        for key in BudgetKey::ALL {
            // share ≤ 1000 ≤ split, so the quotient is ≤ the u64 it came from.
            let carved = remaining_of(left, key)
                .map(|r| (u128::from(r) * share / split).min(r.into()) as u64);
            let cap = match (carved, self.limits.get(key)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.set(key, cap);
        }
        out
    }
}

/// Per key, the tighter of `a`'s and `b`'s caps (a key one leaves out takes the other's).
pub(crate) fn tighter(a: &Limits, b: &Limits) -> Limits {
    let mut out = Limits::default();
    for key in BudgetKey::ALL {
        let cap = match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        out.set(key, cap);
    }
    out
}

/// A delegate given as a whole spec (a spec file's `{ spec = "review.toml", as = "review" }`
/// entry of `delegates`, revision 4): an agent listing `name` in its `delegates` is offered
/// `delegate_<name>(task)`, and a call starts a child run of `spec` — its own agents, tools,
/// plan and caps (tightened to the budget carved for the child) — with `task` as its goal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecDelegate {
    /// The name agents list in `delegates`; it may not be an agent id of the spec carrying it.
    pub name: AgentId,
    /// The child runs' spec, as loaded and validated with the parent's.
    pub spec: Box<Spec>,
}

/// What `left` has left of `key`.
pub(crate) fn remaining_of(left: &Remaining, key: BudgetKey) -> Option<u64> {
    match key {
        BudgetKey::Turns => left.turns,
        BudgetKey::ToolCalls => left.tool_calls,
        BudgetKey::Tokens => left.tokens,
        BudgetKey::Cost => left.cost_nanos,
        BudgetKey::WallTime => left.wall_ms,
    }
}

impl super::spec::RunSpec {
    /// Whether `tool`, called by `agent`, starts a child run (a `delegate_…` of its own).
    pub fn is_delegate_call(&self, agent: &AgentId, tool: &str) -> bool {
        self.agent(agent)
            .and_then(|a| classify(a, tool))
            .is_some_and(|o| matches!(o, Offered::Delegate(_)))
    }
}

/// What a tool name of an agent stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Offered {
    /// `delegate_<agent>`: run it as a child.
    Delegate(AgentId),
    /// `transfer_to_<agent>`: hand the run over to it.
    Transfer(AgentId),
}

/// What `name` stands for when `agent` calls it: a delegate or handoff the agent has, or
/// `None` (then it is an ordinary tool name, or unknown).
pub(crate) fn classify(agent: &AgentSpec, name: &str) -> Option<Offered> {
    if let Some(target) = name.strip_prefix(DELEGATE_PREFIX)
        && agent.delegates.iter().any(|d| d.as_str() == target)
    {
        return Some(Offered::Delegate(AgentId::from(target)));
    }
    if let Some(target) = name.strip_prefix(TRANSFER_PREFIX)
        && agent.handoffs.iter().any(|d| d.as_str() == target)
    {
        return Some(Offered::Transfer(AgentId::from(target)));
    }
    None
}

/// The names `agent` is offered for its delegates and handoffs, delegates first, each in
/// spec order.
pub(crate) fn offered_names(agent: &AgentSpec) -> impl Iterator<Item = String> + '_ {
    let delegates = agent
        .delegates
        .iter()
        .map(|d| format!("{DELEGATE_PREFIX}{d}"));
    let handoffs = agent
        .handoffs
        .iter()
        .map(|h| format!("{TRANSFER_PREFIX}{h}"));
    delegates.chain(handoffs)
}

/// The definition the model is shown for a delegate or handoff tool named `name`, when some
/// agent of `agents` offers it.
pub(crate) fn definition(agents: &[AgentSpec], name: &str) -> Option<ToolSpec> {
    let (target, delegate) = if let Some(t) = name.strip_prefix(DELEGATE_PREFIX) {
        (t, true)
    } else {
        (name.strip_prefix(TRANSFER_PREFIX)?, false)
    };
    let offered = agents.iter().any(|a| {
        let list = if delegate { &a.delegates } else { &a.handoffs };
        list.iter().any(|d| d.as_str() == target)
    });
    if !offered {
        return None;
    }
    if delegate
        && let Some(reader) = agents
            .iter()
            .find(|a| a.id.as_str() == target && a.quarantine.is_some())
    {
        return Some(super::quarantine::definition(name, reader.id.as_str()));
    }
    let mut tool = if delegate {
        let mut t = ToolSpec::new(
            name,
            &format!(
                "Ask agent `{target}` to do a task and wait for its answer. Give it everything it needs: it sees only the task."
            ),
        );
        t.schema = json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the agent should do."}},
            "required": ["task"],
            "additionalProperties": false
        });
        t
    } else {
        let mut t = ToolSpec::new(
            name,
            &format!(
                "Hand the conversation over to agent `{target}` for good; it answers from here on. Call it alone."
            ),
        );
        t.schema = json!({
            "type": "object",
            "properties": {"note": {"type": "string", "description": "What the next agent should know."}},
            "additionalProperties": false
        });
        t
    };
    tool.read_only = false;
    Some(tool)
}

/// The `task` of a delegate call, or what is wrong with its arguments.
pub(crate) fn task_of(args: &Value) -> Result<String, String> {
    match args.get("task") {
        Some(Value::String(t)) if !t.trim().is_empty() => Ok(t.clone()),
        Some(Value::String(_)) => Err("`task` is empty".into()),
        Some(_) => Err("`task` must be a string".into()),
        None => Err("`task` is required".into()),
    }
}

/// The `note` of a transfer call (empty when not given), or what is wrong with its arguments.
pub(crate) fn note_of(args: &Value) -> Result<String, String> {
    match args.get("note") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(n)) => Ok(n.clone()),
        Some(_) => Err("`note` must be a string".into()),
    }
}

/// Checks every agent's `delegates`, `handoffs` and `delegation`: revision 4 or later,
/// defined agents, names that are valid tool names and collide with no declared tool, a
/// depth cap in range, a share in range, and no delegation cycle (an agent that would,
/// directly or through others, delegate to itself).
pub(crate) fn validate(
    spec: &Spec,
    agent_index: &BTreeMap<AgentId, usize>,
    tool_index: &BTreeMap<String, usize>,
) -> Result<(), SpecError> {
    let (agents, semantics) = (&spec.agents[..], spec.semantics);
    let is_spec_delegate = |name: &AgentId| spec.spec_delegates.iter().any(|d| &d.name == name);
    let bad = |path: String, reason: String| SpecError::BadDelegation { path, reason };
    for (i, agent) in agents.iter().enumerate() {
        let path = format!("agents[{i}]");
        let uses = !agent.delegates.is_empty() || !agent.handoffs.is_empty();
        let toolless = agent.tools.as_ref().is_some_and(Vec::is_empty);
        if agent.quarantine.is_some() && (uses || !toolless) {
            return Err(bad(
                format!("{path}.quarantine"),
                "a quarantined reader reads untrusted data, so it may use nothing: give it tools = [] and no delegates or handoffs".into(),
            ));
        }
        if let Some(k) = agent
            .handoffs
            .iter()
            .position(|h| agents.iter().any(|a| &a.id == h && a.quarantine.is_some()))
        {
            return Err(bad(
                format!("{path}.handoffs[{k}]"),
                "a quarantined reader is only asked, as a delegate; the run is never handed to it"
                    .into(),
            ));
        }
        if (uses || !agent.delegation.is_default()) && semantics < DELEGATION_SEMANTICS {
            return Err(bad(
                path,
                format!(
                    "delegates, handoffs and delegation need revision {DELEGATION_SEMANTICS} of the machine's rules (this spec follows {semantics})"
                ),
            ));
        }
        for (field, list) in [
            ("delegates", &agent.delegates),
            ("handoffs", &agent.handoffs),
        ] {
            for (k, target) in list.iter().enumerate() {
                let at = format!("{path}.{field}[{k}]");
                let spec_delegate = field == "delegates" && is_spec_delegate(target);
                if !agent_index.contains_key(target) && !spec_delegate {
                    return Err(SpecError::UnknownAgent {
                        path: at,
                        agent: target.to_string(),
                        hint: did_you_mean(
                            target.as_str(),
                            agent_index.keys().map(AgentId::as_str),
                        ),
                    });
                }
                if list[..k].contains(target) {
                    return Err(bad(at, format!("agent `{target}` is listed twice")));
                }
                if target == &agent.id {
                    return Err(bad(
                        at,
                        format!(
                            "agent `{target}` cannot {} itself",
                            if field == "delegates" {
                                "delegate to"
                            } else {
                                "hand over to"
                            }
                        ),
                    ));
                }
            }
        }
        for name in offered_names(agent) {
            if !is_valid_tool_name(&name) {
                return Err(bad(
                    path.clone(),
                    format!(
                        "`{name}` is too long for a tool name (at most 64 characters): use a shorter agent id"
                    ),
                ));
            }
            if tool_index.contains_key(&name) {
                return Err(bad(
                    path.clone(),
                    format!(
                        "a declared tool is named `{name}`, the name this agent's delegate or handoff is offered by: rename the tool"
                    ),
                ));
            }
        }
        let d = &agent.delegation;
        if !(1..=HARD_MAX_DEPTH).contains(&d.max_depth) {
            return Err(bad(
                format!("{path}.delegation.max_depth"),
                format!(
                    "max_depth must be between 1 and {HARD_MAX_DEPTH} (got {})",
                    d.max_depth
                ),
            ));
        }
        if let Some(s) = d.budget.share_permille
            && !(1..=1000).contains(&s)
        {
            return Err(bad(
                format!("{path}.delegation.budget.share"),
                format!(
                    "share must be above 0 and at most 1 (got {})",
                    f64::from(s) / 1000.0
                ),
            ));
        }
    }
    if let Some(cycle) = delegation_cycle(agents, agent_index) {
        let names: Vec<&str> = cycle.iter().map(AgentId::as_str).collect();
        return Err(bad(
            "agents".into(),
            format!(
                "delegation cycle {}: an agent may not (through others) delegate to itself",
                names.join(" → ")
            ),
        ));
    }
    Ok(())
}

/// Checks the spec's [`SpecDelegate`]s: revision 4 or later, each name a valid agent id
/// listed once, clashing with no agent of the spec and (as `delegate_<name>`) with no declared
/// tool, and each embedded spec valid by `check` (the machine's own checks) and not itself
/// already a child run.
pub(crate) fn validate_spec_delegates(
    spec: &Spec,
    agent_index: &BTreeMap<AgentId, usize>,
    tool_index: &BTreeMap<String, usize>,
    check: impl Fn(&Spec) -> Result<(), SpecError>,
) -> Result<(), SpecError> {
    let bad = |path: String, reason: String| SpecError::BadDelegation { path, reason };
    for (i, d) in spec.spec_delegates.iter().enumerate() {
        let path = format!("spec_delegates[{i}]");
        let name = d.name.as_str();
        if spec.semantics < DELEGATION_SEMANTICS {
            return Err(bad(
                path,
                format!(
                    "a delegate given as a spec needs revision {DELEGATION_SEMANTICS} of the machine's rules (this spec follows {})",
                    spec.semantics
                ),
            ));
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad(
                format!("{path}.name"),
                format!("`{name}` is not a valid name: use letters, digits, `_` and `-`"),
            ));
        }
        if spec.spec_delegates[..i].iter().any(|o| o.name == d.name) {
            return Err(bad(
                format!("{path}.name"),
                format!("two spec delegates are named `{name}`: give each its own `as`"),
            ));
        }
        if agent_index.contains_key(&d.name) {
            return Err(bad(
                format!("{path}.name"),
                format!("`{name}` is also an agent of this spec: choose another `as` name"),
            ));
        }
        let offered = format!("{DELEGATE_PREFIX}{name}");
        if !is_valid_tool_name(&offered) {
            return Err(bad(
                format!("{path}.name"),
                format!(
                    "`{offered}` is too long for a tool name (at most 64 characters): use a shorter `as` name"
                ),
            ));
        }
        if tool_index.contains_key(&offered) || tool_index.contains_key(name) {
            return Err(bad(
                format!("{path}.name"),
                format!(
                    "a declared tool is named `{name}` or `{offered}`: choose another `as` name"
                ),
            ));
        }
        if d.spec.depth != 0 || d.spec.delegated_by.is_some() {
            return Err(bad(
                format!("{path}.spec"),
                "a delegate's spec may not carry `depth` or `delegated_by` (they are set when its child run starts)".into(),
            ));
        }
        check(&d.spec).map_err(|e| bad(format!("{path}.spec"), e.to_string()))?;
    }
    Ok(())
}

/// A chain of delegates that comes back to where it started, if any (depth-first, in spec
/// order, so the same spec always reports the same cycle).
fn delegation_cycle(
    agents: &[AgentSpec],
    agent_index: &BTreeMap<AgentId, usize>,
) -> Option<Vec<AgentId>> {
    // 0 = unseen, 1 = on the current path, 2 = done.
    let mut mark = vec![0u8; agents.len()];
    let mut path: Vec<usize> = Vec::new();
    fn visit(
        i: usize,
        agents: &[AgentSpec],
        index: &BTreeMap<AgentId, usize>,
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<AgentId>> {
        mark[i] = 1;
        path.push(i);
        for d in &agents[i].delegates {
            let Some(&j) = index.get(d) else { continue };
            if mark[j] == 1 {
                let from = path.iter().position(|&p| p == j).unwrap_or(0);
                let mut cycle: Vec<AgentId> =
                    path[from..].iter().map(|&p| agents[p].id.clone()).collect();
                cycle.push(agents[j].id.clone());
                return Some(cycle);
            }
            if mark[j] == 0
                && let Some(c) = visit(j, agents, index, mark, path)
            {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }
    (0..agents.len()).find_map(|i| {
        if mark[i] == 0 {
            visit(i, agents, agent_index, &mut mark, &mut path)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_carves_each_capped_key_and_absolute_caps_tighten_it() {
        let left = Remaining {
            turns: Some(9),
            cost_nanos: Some(1_000),
            ..Remaining::default()
        };
        let budget = ChildBudget {
            share_permille: Some(500),
            limits: Limits {
                max_cost_nanos: Some(100),
                max_tokens: Some(7),
                ..Limits::default()
            },
        };
        let caps = budget.carve(&left, 1);
        assert_eq!(caps.max_turns, Some(4));
        assert_eq!(caps.max_cost_nanos, Some(100));
        assert_eq!(caps.max_tokens, Some(7));
        assert_eq!(caps.max_wall_ms, None);
        assert_eq!(ChildBudget::default().carve(&left, 1).max_turns, Some(9));
        // Three children of one reply share it evenly.
        assert_eq!(ChildBudget::default().carve(&left, 3).max_turns, Some(3));
        assert_eq!(budget.carve(&left, 2).max_turns, Some(2));
    }

    #[test]
    fn tasks_and_notes_are_checked() {
        assert_eq!(task_of(&json!({"task": "x"})), Ok("x".into()));
        assert!(task_of(&json!({"task": " "})).is_err());
        assert!(task_of(&json!({"task": 1})).is_err());
        assert!(task_of(&json!({})).is_err());
        assert_eq!(note_of(&json!({})), Ok(String::new()));
        assert!(note_of(&json!({"note": []})).is_err());
    }
}
