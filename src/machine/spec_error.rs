//! Why a spec was refused: [`SpecError`], each naming the field at fault as a path the file
//! layer points at, and the did-you-mean hint for misspelt names.

use super::spec::MAX_TOOL_NAME;

/// A spec that failed validation. Each variant names the field at fault as a path
/// (`agents[1].tools[0]`) so the file layer can point at its line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// No agents at all.
    #[error("agents: the spec defines no agents; add at least one [[agents]] entry")]
    NoAgents,
    /// An agent id is empty or has characters other than letters, digits, `_`, `-`.
    #[error("{path}: agent id `{id}` must be letters, digits, `_` or `-`")]
    BadAgentId {
        /// Field path.
        path: String,
        /// The id.
        id: String,
    },
    /// Two agents share an id.
    #[error("{path}: duplicate agent id `{id}`")]
    DuplicateAgent {
        /// Field path.
        path: String,
        /// The id.
        id: String,
    },
    /// Two tools share a name, or a name is empty.
    #[error("{path}: duplicate or empty tool name `{name}`")]
    DuplicateTool {
        /// Field path.
        path: String,
        /// The name.
        name: String,
    },
    /// A tool name model providers refuse: anything but 1 to 64 letters, digits, `_` or `-`.
    #[error(
        "{path}: tool name `{name}` is not 1 to {MAX_TOOL_NAME} letters, digits, `_` or `-`, which model providers require"
    )]
    BadToolName {
        /// Field path.
        path: String,
        /// The name, on one line and cut.
        name: String,
    },
    /// A grant names a tool the spec does not define.
    #[error("{path}: agent `{agent}` is granted unknown tool `{tool}`{hint}")]
    UnknownTool {
        /// Field path.
        path: String,
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
        /// A did-you-mean, or empty.
        hint: String,
    },
    /// A tool's schema is not a valid JSON Schema.
    #[error("{path}: schema of tool `{tool}` is not a valid JSON Schema: {reason}")]
    BadSchema {
        /// Field path.
        path: String,
        /// The tool.
        tool: String,
        /// What the schema compiler said.
        reason: String,
    },
    /// An agent has no model routes.
    #[error("{path}: agent `{agent}` has no model route; give it a provider and model")]
    NoRoute {
        /// Field path.
        path: String,
        /// The agent.
        agent: String,
    },
    /// A number is out of its allowed range.
    #[error("{path}: {reason}")]
    OutOfRange {
        /// Field path.
        path: String,
        /// What is allowed.
        reason: String,
    },
    /// The plan names an agent the spec does not define.
    #[error("{path}: unknown agent `{agent}`{hint}")]
    UnknownAgent {
        /// Field path.
        path: String,
        /// The agent named.
        agent: String,
        /// A did-you-mean, or empty.
        hint: String,
    },
    /// The plan has no exits.
    #[error("plan.exits: the plan has no exit; name the agent(s) whose answer ends the run")]
    NoExit,
    /// An exit cannot be reached from the entry.
    #[error(
        "{path}: exit `{agent}` is unreachable from entry `{entry}`; add an edge that leads to it"
    )]
    UnreachableExit {
        /// Field path.
        path: String,
        /// The exit.
        agent: String,
        /// The entry.
        entry: String,
    },
    /// An agent's output schema is not a valid JSON Schema.
    #[error("{path}: output_schema of agent `{agent}` is not a valid JSON Schema: {reason}")]
    BadOutputSchema {
        /// Field path.
        path: String,
        /// The agent.
        agent: String,
        /// What the schema compiler said.
        reason: String,
    },
    /// An agent's `delegates`, `handoffs` or `delegation` is wrong (revision, names, caps,
    /// a delegation cycle).
    #[error("{path}: {reason}")]
    BadDelegation {
        /// Field path.
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// `[memory]` is wrong (revision, the global name, injected scopes, caps, a tool named
    /// like a memory tool).
    #[error("{path}: {reason}")]
    BadMemory {
        /// Field path.
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// An agent's `[agents.context]` is wrong (the agent `on_overflow` summarises with).
    #[error("{path}: {reason}")]
    BadContext {
        /// Field path.
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A `when` condition does not compile.
    #[error("{path}: {reason}")]
    BadCondition {
        /// Field path.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl SpecError {
    /// The dotted field path the error is about (`agents[0].tools[1]`).
    pub fn path(&self) -> &str {
        match self {
            SpecError::NoAgents => "agents",
            SpecError::NoExit => "plan.exits",
            SpecError::BadAgentId { path, .. }
            | SpecError::DuplicateAgent { path, .. }
            | SpecError::DuplicateTool { path, .. }
            | SpecError::BadToolName { path, .. }
            | SpecError::UnknownTool { path, .. }
            | SpecError::BadSchema { path, .. }
            | SpecError::BadOutputSchema { path, .. }
            | SpecError::NoRoute { path, .. }
            | SpecError::OutOfRange { path, .. }
            | SpecError::UnknownAgent { path, .. }
            | SpecError::UnreachableExit { path, .. }
            | SpecError::BadCondition { path, .. }
            | SpecError::BadContext { path, .. }
            | SpecError::BadDelegation { path, .. }
            | SpecError::BadMemory { path, .. } => path,
        }
    }
}

/// ` (did you mean `x`?)` for the closest candidate within edit distance 2, else empty.
pub fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_close_names() {
        assert_eq!(
            did_you_mean("serch", ["search", "fetch"].into_iter()),
            " (did you mean `search`?)"
        );
        assert_eq!(did_you_mean("zzzzzz", ["search"].into_iter()), "");
    }
}
