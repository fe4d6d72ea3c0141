//! What a person changes about a run, typed and parsed from the words the command line and
//! the HTTP API take: budget raises for `resume` (`--raise`) and edits at a fork point
//! (`--edit`). Parsing reads nothing; what a `budget.` raise refers to is settled against the
//! run's state when it is applied ([`Raise::resolve`]).

use std::str::FromStr;

use super::{OpsError, quoted};
use crate::exec::ForkEdit;
use crate::machine::{AgentId, BudgetKey, MemoryScope, RunState, Scope, ToolOutcome};

/// Whose budget a [`Raise`] sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetTarget {
    /// `budget.KEY`: the exhausted budget's scope when the run rests out of budget, else the
    /// active agent's.
    Current,
    /// `run.KEY`: the run-wide budget.
    Run,
    /// `AGENT.KEY`: that agent's.
    Agent(AgentId),
}

/// A budget to set: `budget.KEY=VALUE`, `run.KEY=VALUE` or `AGENT.KEY=VALUE`, KEY being
/// `max_turns`, `max_tool_calls`, `max_tokens`, `max_cost_usd` (in US dollars) or
/// `max_wall_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raise {
    /// Whose budget.
    pub target: BudgetTarget,
    /// Which budget.
    pub key: BudgetKey,
    /// The new cap (nanodollars for [`BudgetKey::Cost`]).
    pub limit: u64,
}

impl Raise {
    /// Parses a raise as `resume --raise` takes it; the error names `--raise`.
    pub fn parse(s: &str) -> Result<Raise, OpsError> {
        parse_budget(s, "--raise").map_err(OpsError::BadRaise)
    }

    /// The scope, key and cap this raise sets in a run whose latest state (or state at the
    /// fork point) is `state`.
    pub fn resolve(&self, state: &RunState) -> (Scope, BudgetKey, u64) {
        let scope = match &self.target {
            BudgetTarget::Run => Scope::Run,
            BudgetTarget::Agent(agent) => Scope::Agent(agent.clone()),
            BudgetTarget::Current => match state {
                RunState::BudgetExhausted { scope, .. } => scope.clone(),
                _ => Scope::Agent(state.data().map(|d| d.active.clone()).unwrap_or_default()),
            },
        };
        (scope, self.key, self.limit)
    }
}

impl FromStr for Raise {
    type Err = OpsError;
    fn from_str(s: &str) -> Result<Raise, OpsError> {
        Raise::parse(s)
    }
}

/// `KEY=VALUE` for a budget, as [`Raise`] says; an error is the whole line, naming `flag`
/// (the option it came with).
fn parse_budget(s: &str, flag: &str) -> Result<Raise, String> {
    let bad = |why: String| {
        format!(
            "{flag} `{s}`: {why}; write budget.KEY=VALUE, run.KEY=VALUE or AGENT.KEY=VALUE with KEY one of max_turns, max_tool_calls, max_tokens, max_cost_usd, max_wall_ms"
        )
    };
    let (lhs, value) = s.split_once('=').ok_or_else(|| bad("no `=`".into()))?;
    let (who, key) = lhs
        .split_once('.')
        .ok_or_else(|| bad("no scope before the key".into()))?;
    let key = BudgetKey::ALL
        .into_iter()
        .find(|k| k.field() == key)
        .ok_or_else(|| {
            bad(format!(
                "unknown budget `{key}`{}",
                crate::machine::did_you_mean(key, BudgetKey::ALL.iter().map(|k| k.field()))
            ))
        })?;
    let limit = if key == BudgetKey::Cost {
        let usd: f64 = value
            .parse()
            .map_err(|_| bad("the value is not a number of dollars".into()))?;
        if !(0.0..=1e9).contains(&usd) {
            return Err(bad(
                "the value must be between 0 and 1000000000 dollars".into()
            ));
        }
        (usd * 1e9).round() as u64
    } else {
        value
            .parse()
            .map_err(|_| bad("the value is not a whole number".into()))?
    };
    let target = match who {
        "run" => BudgetTarget::Run,
        "budget" => BudgetTarget::Current,
        agent => BudgetTarget::Agent(agent.into()),
    };
    Ok(Raise { target, key, limit })
}

/// A change to make at a fork point, as `fork --edit` takes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// `user=TEXT`: replace the active agent's last user message (what followed it is
    /// dropped, so the agent answers the new message).
    User(String),
    /// `tool:CALL_ID=VALUE`: replace a tool call's result (VALUE is JSON if it parses, else
    /// text).
    ToolResult {
        /// The call id.
        call_id: String,
        /// The result to use.
        value: serde_json::Value,
    },
    /// `budget.KEY=VALUE`, `run.KEY=VALUE`, `AGENT.KEY=VALUE`: set a budget.
    Budget(Raise),
    /// `memory:SCOPE:KEY=VALUE` sets a memory key, `memory:SCOPE:KEY` forgets it; SCOPE is
    /// `agent` (the active agent's notes), `agent@AGENT`, `shared` or `global`.
    Memory {
        /// The scope.
        scope: MemoryScope,
        /// Whose notes, for the `agent` scope (`None`: the active agent).
        agent: Option<AgentId>,
        /// The key.
        key: String,
        /// The value; `None` forgets the key.
        value: Option<String>,
    },
}

impl Edit {
    /// Parses an edit as `fork --edit` takes it; the error names `--edit`.
    pub fn parse(s: &str) -> Result<Edit, OpsError> {
        if let Some(text) = s.strip_prefix("user=") {
            return Ok(Edit::User(text.to_owned()));
        }
        if let Some(rest) = s.strip_prefix("tool:") {
            let (call_id, value) = rest.split_once('=').ok_or_else(|| {
                OpsError::BadEdit(format!("--edit `{s}`: write tool:CALL_ID=VALUE"))
            })?;
            let value = serde_json::from_str(value)
                .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
            return Ok(Edit::ToolResult {
                call_id: call_id.to_owned(),
                value,
            });
        }
        if let Some(rest) = s.strip_prefix("memory:") {
            return parse_memory_edit(s, rest);
        }
        if s.contains('=') && s.contains('.') {
            return parse_budget(s, "--edit")
                .map(Edit::Budget)
                .map_err(OpsError::BadEdit);
        }
        Err(OpsError::BadEdit(format!(
            "--edit `{s}`: write user=TEXT, tool:CALL_ID=VALUE, budget.KEY=VALUE or memory:SCOPE:KEY=VALUE"
        )))
    }

    /// The engine's edit for a fork whose state at the fork point is `state` (which a
    /// `budget.` edit refers to).
    pub fn resolve(&self, state: &RunState) -> ForkEdit {
        match self {
            Edit::User(text) => ForkEdit::ReplaceLastUserMessage {
                agent: None,
                text: text.clone(),
            },
            Edit::ToolResult { call_id, value } => ForkEdit::ReplaceToolResult {
                call_id: call_id.clone(),
                result: ToolOutcome::ok(value.clone()),
            },
            Edit::Budget(raise) => {
                let (scope, key, limit) = raise.resolve(state);
                ForkEdit::SetLimit { scope, key, limit }
            }
            Edit::Memory {
                scope,
                agent,
                key,
                value,
            } => ForkEdit::SetMemory {
                scope: *scope,
                agent: agent.clone(),
                key: key.clone(),
                value: value.clone(),
            },
        }
    }
}

impl FromStr for Edit {
    type Err = OpsError;
    fn from_str(s: &str) -> Result<Edit, OpsError> {
        Edit::parse(s)
    }
}

/// `memory:SCOPE:KEY=VALUE` or `memory:SCOPE:KEY` (see [`Edit::Memory`]); `rest` is what
/// follows `memory:`.
fn parse_memory_edit(s: &str, rest: &str) -> Result<Edit, OpsError> {
    let bad = || {
        OpsError::BadEdit(format!(
            "--edit `{}`: write memory:SCOPE:KEY=VALUE (or memory:SCOPE:KEY to forget it), SCOPE being agent, agent@AGENT, shared or global",
            quoted(s)
        ))
    };
    let (scope, target) = rest.split_once(':').ok_or_else(bad)?;
    let (scope, agent) = match scope.split_once('@') {
        Some(("agent", agent)) if !agent.is_empty() => ("agent", Some(AgentId::from(agent))),
        Some(_) => return Err(bad()),
        None => (scope, None),
    };
    let scope = MemoryScope::parse(scope).ok_or_else(bad)?;
    let (key, value) = match target.split_once('=') {
        Some((key, value)) => (key, Some(value.to_owned())),
        None => (target, None),
    };
    if key.is_empty() {
        return Err(bad());
    }
    Ok(Edit::Memory {
        scope,
        agent,
        key: key.to_owned(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_parse_to_their_target_key_and_cap() {
        let r = Raise::parse("budget.max_turns=80").expect("parses");
        assert_eq!(
            (r.target.clone(), r.key, r.limit),
            (BudgetTarget::Current, BudgetKey::Turns, 80)
        );
        let r: Raise = "run.max_cost_usd=0.25".parse().expect("parses");
        assert_eq!(
            (r.target, r.key, r.limit),
            (BudgetTarget::Run, BudgetKey::Cost, 250_000_000)
        );
        let r = Raise::parse("writer.max_tool_calls=3").expect("parses");
        assert_eq!(r.target, BudgetTarget::Agent("writer".into()));
        // A resolved raise of an agent's budget does not depend on the state.
        assert_eq!(
            r.resolve(&RunState::Created).0,
            Scope::Agent("writer".into())
        );
    }

    #[test]
    fn a_bad_raise_or_edit_is_one_line_naming_its_flag_and_code() {
        for (bad, why) in [
            ("max_turns", "no `=`"),
            ("max_turns=3", "no scope before the key"),
            ("budget.max_turn=3", "unknown budget `max_turn`"),
            ("run.max_turns=x", "the value is not a whole number"),
            ("run.max_cost_usd=-1", "between 0 and 1000000000 dollars"),
        ] {
            let e = Raise::parse(bad).expect_err(bad);
            assert_eq!(e.code(), "bad_raise");
            let line = e.to_string();
            assert!(line.starts_with(&format!("--raise `{bad}`: ")), "{line}");
            assert!(line.contains(why), "{line}");
        }
        let e = Edit::parse("budget.max_turn=3").expect_err("unknown key");
        assert_eq!(e.code(), "bad_edit");
        assert!(
            e.to_string()
                .starts_with("--edit `budget.max_turn=3`: unknown budget `max_turn`"),
            "{e}"
        );
        for bad in [
            "nonsense",
            "tool:c1",
            "memory:x",
            "memory:nowhere:k=v",
            "memory:agent:",
        ] {
            let e = Edit::parse(bad).expect_err(bad);
            assert_eq!(e.code(), "bad_edit", "{bad}");
            assert!(e.to_string().starts_with("--edit `"), "{e}");
        }
    }

    #[test]
    fn edits_parse_to_what_the_fork_applies() {
        assert_eq!(
            Edit::parse("user=Try again").expect("parses"),
            Edit::User("Try again".into())
        );
        assert_eq!(
            Edit::parse("tool:c1={\"ok\":1}").expect("parses"),
            Edit::ToolResult {
                call_id: "c1".into(),
                value: serde_json::json!({"ok": 1})
            }
        );
        assert_eq!(
            Edit::parse("tool:c1=plain").expect("parses"),
            Edit::ToolResult {
                call_id: "c1".into(),
                value: serde_json::json!("plain")
            }
        );
        assert_eq!(
            Edit::parse("memory:agent@writer:tone").expect("parses"),
            Edit::Memory {
                scope: MemoryScope::parse("agent").expect("a scope"),
                agent: Some("writer".into()),
                key: "tone".into(),
                value: None
            }
        );
        let budget = Edit::parse("run.max_turns=9").expect("parses");
        assert_eq!(
            budget.resolve(&RunState::Created),
            ForkEdit::SetLimit {
                scope: Scope::Run,
                key: BudgetKey::Turns,
                limit: 9
            }
        );
    }
}
