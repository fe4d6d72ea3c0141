//! The handoff plan: which agent runs first, where an agent's answer goes next, and where the
//! run may end. Conditions are data ([`When`]), so a plan serialises, replays and diffs.

use std::collections::{BTreeSet, VecDeque};

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::AgentId;

/// Default cap on how many times one agent may be activated in a run.
pub const DEFAULT_MAX_AGENT_VISITS: u32 = 8;

/// Who runs first, how answers route between agents, and which agents may end the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The agent activated by `Start`.
    pub entry: AgentId,
    /// Routing rules, tried in order; the first whose `from` is the finishing agent and whose
    /// `when` matches its answer fires.
    #[serde(default)]
    pub edges: Vec<PlanEdge>,
    /// Agents whose answer ends the run when no edge fires.
    pub exits: Vec<AgentId>,
    /// How many times any one agent may be activated; the activation past it ends the run
    /// failed with `handoff_cycle`.
    #[serde(default = "default_visits")]
    pub max_agent_visits: u32,
}

fn default_visits() -> u32 {
    DEFAULT_MAX_AGENT_VISITS
}

impl Plan {
    /// The plan of a single-agent run: `agent` is entry and exit.
    pub fn single(agent: AgentId) -> Plan {
        Plan {
            entry: agent.clone(),
            edges: Vec::new(),
            exits: vec![agent],
            max_agent_visits: DEFAULT_MAX_AGENT_VISITS,
        }
    }

    /// Agents reachable from `entry` by following edges (entry included), in sorted order.
    pub fn reachable(&self) -> BTreeSet<AgentId> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([self.entry.clone()]);
        while let Some(agent) = queue.pop_front() {
            if !seen.insert(agent.clone()) {
                continue;
            }
            for edge in self.edges.iter().filter(|e| e.from == agent) {
                queue.push_back(edge.to.clone());
            }
        }
        seen
    }
}

/// One routing rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEdge {
    /// The agent that finished.
    pub from: AgentId,
    /// The agent to activate.
    pub to: AgentId,
    /// The condition on the finishing agent's answer.
    #[serde(default)]
    pub when: When,
}

/// A condition on an agent's final answer. An agent that finished without an answer (its
/// budget ran out) matches only `always`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum When {
    /// Always matches.
    #[default]
    Always,
    /// The answer contains `text` (case-sensitive).
    Contains {
        /// The substring.
        text: String,
    },
    /// The answer matches `pattern` (Rust `regex` syntax: linear time, safe on model output).
    Regex {
        /// The pattern.
        pattern: String,
    },
    /// The answer parses as JSON and the value at `pointer` (RFC 6901) equals `value`.
    JsonPointerEquals {
        /// The pointer, e.g. `/verdict`.
        pointer: String,
        /// The value to compare with.
        value: Value,
    },
}

impl When {
    /// Whether `answer` satisfies the condition. `regex` is the compiled pattern for
    /// [`When::Regex`] (compiled once when the spec is built). `output` is the answer as
    /// structured output, when the agent has an output schema: a JSON pointer reads it
    /// directly.
    pub(crate) fn matches(
        &self,
        answer: Option<&str>,
        output: Option<&Value>,
        regex: Option<&Regex>,
    ) -> bool {
        match (self, answer) {
            (When::Always, _) => true,
            (When::JsonPointerEquals { pointer, value }, _) if output.is_some() => output
                .and_then(|doc| doc.pointer(pointer))
                .is_some_and(|found| found == value),
            (_, None) => false,
            (When::Contains { text }, Some(a)) => a.contains(text.as_str()),
            (When::Regex { .. }, Some(a)) => regex.is_some_and(|r| r.is_match(a)),
            (When::JsonPointerEquals { pointer, value }, Some(a)) => {
                serde_json::from_str::<Value>(a.trim())
                    .ok()
                    .and_then(|doc| doc.pointer(pointer).cloned())
                    .is_some_and(|found| &found == value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str) -> PlanEdge {
        PlanEdge {
            from: from.into(),
            to: to.into(),
            when: When::Always,
        }
    }

    #[test]
    fn reachability_follows_edges() {
        let plan = Plan {
            entry: "a".into(),
            edges: vec![
                edge("a", "b"),
                edge("a", "c"),
                edge("b", "d"),
                edge("c", "d"),
            ],
            exits: vec!["d".into()],
            max_agent_visits: 8,
        };
        let r = plan.reachable();
        assert_eq!(r.len(), 4);
        assert!(r.contains(&AgentId::from("d")));
    }

    #[test]
    fn conditions_match_answers() {
        assert!(When::Always.matches(None, None, None));
        assert!(!When::Contains { text: "ok".into() }.matches(None, None, None));
        assert!(When::Contains { text: "ok".into() }.matches(Some("all ok"), None, None));
        let re = Regex::new("^APPROVED").ok();
        let when = When::Regex {
            pattern: "^APPROVED".into(),
        };
        assert!(when.matches(Some("APPROVED: yes"), None, re.as_ref()));
        assert!(!when.matches(Some("not APPROVED"), None, re.as_ref()));
        let ptr = When::JsonPointerEquals {
            pointer: "/verdict".into(),
            value: Value::from("pass"),
        };
        assert!(ptr.matches(Some(r#" {"verdict":"pass"} "#), None, None));
        assert!(!ptr.matches(Some(r#"{"verdict":"fail"}"#), None, None));
        assert!(!ptr.matches(Some("not json"), None, None));
        let output = serde_json::json!({"verdict": "pass"});
        assert!(ptr.matches(Some("ignored"), Some(&output), None));
        assert!(!ptr.matches(None, Some(&serde_json::json!({"verdict": 1})), None));
    }
}
