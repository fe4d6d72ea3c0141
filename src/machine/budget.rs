//! Budgets: what an agent (and the run as a whole) may spend, what it has spent, and the check
//! made before every model call.
//!
//! Money is counted in integer nanodollars so that state encodings contain no floats. A turn
//! whose cost is unknown (a model missing from the pricing table) adds nothing to `cost`, so a
//! cost cap cannot trigger for it; a reply without usage adds no tokens for the same reason.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One kind of budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKey {
    /// Model turns (completed model calls).
    Turns,
    /// Tool calls dispatched.
    ToolCalls,
    /// Input plus output tokens, as reported by the provider.
    Tokens,
    /// Cost in nanodollars (USD × 10⁹).
    Cost,
    /// Milliseconds since the run started (run scope) or since the agent was first activated
    /// (agent scope).
    WallTime,
}

impl BudgetKey {
    /// Every key, in the order the budget check tests them.
    pub const ALL: [BudgetKey; 5] = [
        BudgetKey::Turns,
        BudgetKey::ToolCalls,
        BudgetKey::Tokens,
        BudgetKey::Cost,
        BudgetKey::WallTime,
    ];

    /// The spec field name for this key (`max_turns`, ...).
    pub fn field(self) -> &'static str {
        match self {
            BudgetKey::Turns => "max_turns",
            BudgetKey::ToolCalls => "max_tool_calls",
            BudgetKey::Tokens => "max_tokens",
            BudgetKey::Cost => "max_cost_usd",
            BudgetKey::WallTime => "max_wall_ms",
        }
    }
}

impl fmt::Display for BudgetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetKey::Turns => "turns",
            BudgetKey::ToolCalls => "tool_calls",
            BudgetKey::Tokens => "tokens",
            BudgetKey::Cost => "cost",
            BudgetKey::WallTime => "wall_time",
        })
    }
}

/// Whose budget.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scope", content = "agent")]
pub enum Scope {
    /// The whole run.
    Run,
    /// One agent.
    Agent(super::AgentId),
}

/// Caps; `None` means no cap of that kind (the transition cap still bounds the run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Maximum model turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u64>,
    /// Maximum tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Maximum input + output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Maximum cost in nanodollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_nanos: Option<u64>,
    /// Maximum elapsed milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_ms: Option<u64>,
}

impl Limits {
    /// Agent defaults: 50 turns, 200 tool calls, no other caps.
    pub const AGENT_DEFAULT: Limits = Limits {
        max_turns: Some(50),
        max_tool_calls: Some(200),
        max_tokens: None,
        max_cost_nanos: None,
        max_wall_ms: None,
    };

    /// The cap for `key`.
    pub fn get(&self, key: BudgetKey) -> Option<u64> {
        match key {
            BudgetKey::Turns => self.max_turns,
            BudgetKey::ToolCalls => self.max_tool_calls,
            BudgetKey::Tokens => self.max_tokens,
            BudgetKey::Cost => self.max_cost_nanos,
            BudgetKey::WallTime => self.max_wall_ms,
        }
    }

    /// Sets the cap for `key`.
    pub fn set(&mut self, key: BudgetKey, value: Option<u64>) {
        match key {
            BudgetKey::Turns => self.max_turns = value,
            BudgetKey::ToolCalls => self.max_tool_calls = value,
            BudgetKey::Tokens => self.max_tokens = value,
            BudgetKey::Cost => self.max_cost_nanos = value,
            BudgetKey::WallTime => self.max_wall_ms = value,
        }
    }
}

/// What has been spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Completed model turns.
    pub turns: u64,
    /// Tool calls dispatched.
    pub tool_calls: u64,
    /// Input tokens reported.
    pub input_tokens: u64,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// Known cost, nanodollars.
    pub cost_nanos: u64,
    /// Turns whose cost was unknown (not counted in `cost_nanos`).
    pub unpriced_turns: u64,
    /// Reasoning tokens reported (already part of `output_tokens`; counted apart to show).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// The amount spent of `key`; wall time is measured separately and passed in.
    pub fn spent(&self, key: BudgetKey, elapsed_ms: u64) -> u64 {
        match key {
            BudgetKey::Turns => self.turns,
            BudgetKey::ToolCalls => self.tool_calls,
            BudgetKey::Tokens => self.input_tokens.saturating_add(self.output_tokens),
            BudgetKey::Cost => self.cost_nanos,
            BudgetKey::WallTime => elapsed_ms,
        }
    }

    /// Adds what a child run spent (its turns, calls, tokens and cost count as this scope's).
    pub fn absorb(&mut self, other: &Usage) {
        self.turns = self.turns.saturating_add(other.turns);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_nanos = self.cost_nanos.saturating_add(other.cost_nanos);
        self.unpriced_turns = self.unpriced_turns.saturating_add(other.unpriced_turns);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Adds a completed turn with its reported usage and cost.
    pub fn add_turn(&mut self, tokens: Option<(u64, u64)>, cost_nanos: Option<u64>) {
        self.turns += 1;
        if let Some((input, output)) = tokens {
            self.input_tokens = self.input_tokens.saturating_add(input);
            self.output_tokens = self.output_tokens.saturating_add(output);
        }
        match cost_nanos {
            Some(c) => self.cost_nanos = self.cost_nanos.saturating_add(c),
            None => self.unpriced_turns += 1,
        }
    }
}

/// The first exhausted budget of `limits` given `usage`, in [`BudgetKey::ALL`] order.
pub fn first_exhausted(limits: &Limits, usage: &Usage, elapsed_ms: u64) -> Option<BudgetKey> {
    BudgetKey::ALL.into_iter().find(|&key| {
        limits
            .get(key)
            .is_some_and(|cap| usage.spent(key, elapsed_ms) >= cap)
    })
}

/// What is left of each budget, the smaller of the agent's and the run's; passed down in
/// every model request so a provider can size `max_tokens` and a person can see the margin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    /// Model turns left, counting the one being requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    /// Tool calls left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Tokens left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Nanodollars left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<u64>,
    /// Milliseconds left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
}

impl Remaining {
    /// What is left under both `(limits, usage, elapsed)` scopes.
    pub fn of(scopes: &[(&Limits, &Usage, u64)]) -> Remaining {
        let left = |key: BudgetKey| -> Option<u64> {
            scopes
                .iter()
                .filter_map(|(limits, usage, elapsed)| {
                    limits
                        .get(key)
                        .map(|cap| cap.saturating_sub(usage.spent(key, *elapsed)))
                })
                .min()
        };
        Remaining {
            turns: left(BudgetKey::Turns),
            tool_calls: left(BudgetKey::ToolCalls),
            tokens: left(BudgetKey::Tokens),
            cost_nanos: left(BudgetKey::Cost),
            wall_ms: left(BudgetKey::WallTime),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_reports_the_first_key_in_order() {
        let limits = Limits {
            max_turns: Some(2),
            max_tokens: Some(10),
            ..Limits::default()
        };
        let mut usage = Usage::default();
        assert_eq!(first_exhausted(&limits, &usage, 0), None);
        usage.add_turn(Some((6, 6)), None);
        assert_eq!(first_exhausted(&limits, &usage, 0), Some(BudgetKey::Tokens));
        usage.add_turn(None, None);
        assert_eq!(first_exhausted(&limits, &usage, 0), Some(BudgetKey::Turns));
    }

    #[test]
    fn unknown_cost_never_counts_toward_a_cost_cap() {
        let limits = Limits {
            max_cost_nanos: Some(1),
            ..Limits::default()
        };
        let mut usage = Usage::default();
        for _ in 0..100 {
            usage.add_turn(Some((1, 1)), None);
        }
        assert_eq!(first_exhausted(&limits, &usage, 0), None);
        assert_eq!(usage.unpriced_turns, 100);
    }

    #[test]
    fn remaining_takes_the_tighter_scope() {
        let agent = Limits {
            max_turns: Some(10),
            ..Limits::default()
        };
        let run = Limits {
            max_turns: Some(4),
            max_wall_ms: Some(1000),
            ..Limits::default()
        };
        let used = Usage {
            turns: 1,
            ..Usage::default()
        };
        let r = Remaining::of(&[(&agent, &used, 0), (&run, &used, 250)]);
        assert_eq!(r.turns, Some(3));
        assert_eq!(r.wall_ms, Some(750));
        assert_eq!(r.tokens, None);
    }
}
