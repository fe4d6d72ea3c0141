//! Comparing two cassettes turn by turn: what the model did, not how the provider spelled
//! it. Tool calls compare by name and canonical (RFC 8785) arguments, never by call id;
//! assistant text compares unless [`DiffOptions::ignore_content`] is set; failures compare by
//! class. Prompts, usage, cost, model names and response ids are not compared.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::format::{Cassette, Entry, RecordedResponse};
use super::load::snippet;
use crate::machine::{ErrorClass, ProviderErrorClass, ToolCallRequest};

/// What [`diff`] compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffOptions {
    /// Compare only tool-call sequences and outcomes, not assistant text (for model upgrades
    /// where the wording may change but the actions should not).
    pub ignore_content: bool,
}

/// One tool call as the diff sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The tool name.
    pub name: String,
    /// The arguments as canonical JSON; `(unparsed) <raw text>` when they did not parse.
    pub arguments: String,
}

/// One side of one turn as the diff sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnView {
    /// The failure class when the call failed; `None` for a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProviderErrorClass>,
    /// The assistant text (left out when content is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallView>,
}

/// How one turn differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Difference {
    /// The turn exists only in the first cassette.
    OnlyInA,
    /// The turn exists only in the second cassette.
    OnlyInB,
    /// One side replied and the other failed, or they failed with different classes (then
    /// nothing else is compared for that turn).
    Outcome,
    /// The tool-call sequences differ (names, order, count or canonical arguments).
    ToolCalls,
    /// The assistant text differs.
    Text,
}

/// A turn that differs, with both sides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnDiff {
    /// The turn index.
    pub turn: u64,
    /// Every way it differs.
    pub differences: Vec<Difference>,
    /// The first cassette's side (`None` past its end).
    pub a: Option<TurnView>,
    /// The second cassette's side (`None` past its end).
    pub b: Option<TurnView>,
}

/// The result of [`diff`]: every differing turn, in order. `Display` gives a report for a
/// person; serde gives the same as JSON (for `--json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CassetteDiff {
    /// Turns in the first cassette.
    pub turns_a: u64,
    /// Turns in the second cassette.
    pub turns_b: u64,
    /// Whether assistant text was left out of the comparison.
    pub ignore_content: bool,
    /// The first turn that differs, `None` when the cassettes match.
    pub first_difference: Option<u64>,
    /// The differing turns, in order.
    pub turns: Vec<TurnDiff>,
    /// Version 4: each delegated child's section that differs (or that one cassette alone
    /// has), by its place in the tree, in tree order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<SectionDiff>,
}

/// How one child's section differs between two cassettes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SectionDiff {
    /// The child's place in the tree (`3.0`).
    pub path: String,
    /// Turns in the first cassette's section (0 when it has none).
    pub turns_a: u64,
    /// Turns in the second's.
    pub turns_b: u64,
    /// The differing turns, in order.
    pub turns: Vec<TurnDiff>,
}

impl CassetteDiff {
    /// True when no turn differs, a child's included.
    pub fn is_same(&self) -> bool {
        self.turns.is_empty() && self.children.is_empty()
    }
}

/// Compares `a` and `b` turn by turn (entry `i` of one with entry `i` of the other). Call it
/// to check a model upgrade or a prompt change: record before and after, then diff. Neither
/// cassette's hashes or recording metadata affect the result.
pub fn diff(a: &Cassette, b: &Cassette, options: DiffOptions) -> CassetteDiff {
    let turns = section(a.entries(), b.entries(), options);
    let mut paths: Vec<&str> = a
        .children()
        .iter()
        .chain(b.children())
        .map(|c| c.path.as_str())
        .collect();
    paths.sort_by_key(|p| super::load::path_key(p));
    paths.dedup();
    let children = paths
        .into_iter()
        .filter_map(|path| {
            let (x, y) = (
                a.section(path).unwrap_or(&[]),
                b.section(path).unwrap_or(&[]),
            );
            let turns = section(x, y, options);
            (!turns.is_empty()).then(|| SectionDiff {
                path: path.to_owned(),
                turns_a: as_u64(x.len()),
                turns_b: as_u64(y.len()),
                turns,
            })
        })
        .collect();
    CassetteDiff {
        turns_a: as_u64(a.entries().len()),
        turns_b: as_u64(b.entries().len()),
        ignore_content: options.ignore_content,
        first_difference: turns.first().map(|t| t.turn),
        turns,
        children,
    }
}

/// The differing turns of two lists of entries, entry `i` against entry `i`.
fn section(a: &[Entry], b: &[Entry], options: DiffOptions) -> Vec<TurnDiff> {
    (0..a.len().max(b.len()))
        .filter_map(|i| {
            let side_a = a.get(i).map(|e| view(e, options));
            let side_b = b.get(i).map(|e| view(e, options));
            let differences = compare(side_a.as_ref(), side_b.as_ref());
            (!differences.is_empty()).then(|| TurnDiff {
                turn: as_u64(i),
                differences,
                a: side_a,
                b: side_b,
            })
        })
        .collect()
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn view(entry: &Entry, options: DiffOptions) -> TurnView {
    match entry.response() {
        RecordedResponse::Reply(reply) => TurnView {
            error: None,
            text: if options.ignore_content {
                None
            } else {
                reply.text.clone()
            },
            tool_calls: reply.tool_calls.iter().map(call_view).collect(),
        },
        RecordedResponse::Error(error) => TurnView {
            error: Some(error.class),
            text: None,
            tool_calls: Vec::new(),
        },
    }
}

fn call_view(call: &ToolCallRequest) -> ToolCallView {
    let arguments = match (&call.parse_error, &call.arguments_raw) {
        (Some(_), Some(raw)) => format!("(unparsed) {raw}"),
        _ => serde_json_canonicalizer::to_string(&call.arguments)
            .unwrap_or_else(|_| call.arguments.to_string()),
    };
    ToolCallView {
        name: call.name.clone(),
        arguments,
    }
}

fn compare(a: Option<&TurnView>, b: Option<&TurnView>) -> Vec<Difference> {
    let (a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (Some(_), None) => return vec![Difference::OnlyInA],
        (None, Some(_)) => return vec![Difference::OnlyInB],
        (None, None) => return Vec::new(),
    };
    if a.error != b.error {
        // A reply against a failure, or two different failures: nothing else to compare.
        return vec![Difference::Outcome];
    }
    let mut differences = Vec::new();
    if a.tool_calls != b.tool_calls {
        differences.push(Difference::ToolCalls);
    }
    if a.text != b.text {
        differences.push(Difference::Text);
    }
    differences
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Difference::OnlyInA => "only in a",
            Difference::OnlyInB => "only in b",
            Difference::Outcome => "outcome differs",
            Difference::ToolCalls => "tool calls differ",
            Difference::Text => "text differs",
        })
    }
}

impl fmt::Display for TurnView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(class) = self.error {
            return write!(f, "error {}", ErrorClass::from(class));
        }
        let mut parts: Vec<String> = self
            .tool_calls
            .iter()
            .map(|c| format!("{} {}", c.name, snippet(&c.arguments)))
            .collect();
        if let Some(text) = &self.text {
            parts.push(format!("text {:?}", snippet(text)));
        }
        if parts.is_empty() {
            f.write_str("(no tool calls or text)")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

impl fmt::Display for CassetteDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let compared = if self.ignore_content {
            "tool calls and outcomes"
        } else {
            "tool calls, outcomes and text"
        };
        if self.is_same() {
            return writeln!(
                f,
                "cassettes match ({} turns; compared {compared})",
                self.turns_a
            );
        }
        match self.first_difference {
            Some(first) => writeln!(
                f,
                "cassettes differ from turn {first}: {} differing turns (a: {} turns, b: {} turns; compared {compared})",
                self.turns.len(),
                self.turns_a,
                self.turns_b
            )?,
            None => writeln!(
                f,
                "cassettes differ in child runs only (their own {} turns match; compared {compared})",
                self.turns_a
            )?,
        }
        write_turns(f, &self.turns, "")?;
        for c in &self.children {
            writeln!(
                f,
                "child {}: {} differing turns (a: {} turns, b: {} turns)",
                c.path,
                c.turns.len(),
                c.turns_a,
                c.turns_b
            )?;
            write_turns(f, &c.turns, "  ")?;
        }
        Ok(())
    }
}

fn write_turns(f: &mut fmt::Formatter<'_>, turns: &[TurnDiff], indent: &str) -> fmt::Result {
    for turn in turns {
        let what: Vec<String> = turn.differences.iter().map(ToString::to_string).collect();
        writeln!(f, "{indent}turn {}: {}", turn.turn, what.join(", "))?;
        if let Some(a) = &turn.a {
            writeln!(f, "{indent}  a: {a}")?;
        }
        if let Some(b) = &turn.b {
            writeln!(f, "{indent}  b: {b}")?;
        }
    }
    Ok(())
}
