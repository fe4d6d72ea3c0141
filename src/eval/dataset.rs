//! The dataset an experiment runs: a JSON Lines file, one goal per line.
//!
//! ```text
//! {"id": "capital", "goal": "What is the capital of France?", "expected": "Paris", "topic": "geo"}
//! {"goal": "Say hello"}
//! ```
//!
//! `goal` (a non-empty string) is required; `id` (a string, default the line number) names the
//! item in the report and in the tag `item=ID` its runs carry, so it follows the tag rule (1 to
//! 256 bytes, no control characters) and is unique in the file; `expected` (any JSON value) is
//! what the `exact` scorer compares with; every other key is kept as the item's metadata and
//! handed to `command` scorers. Blank lines are skipped. Parsing is pure: a bad line is one
//! [`DatasetError`] naming it, and nothing has run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::machine::tags::tag_problem;

/// The most items a dataset may hold: an experiment of more goals is split into several.
pub const MAX_ITEMS: usize = 10_000;

/// One goal of a dataset, with what a scorer may compare its answer with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Its name in the report and in its runs' `item` tag.
    pub id: String,
    /// The goal each variant's run is started with.
    pub goal: String,
    /// The answer the `exact` scorer expects, when the line gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    /// Every other key of the line, for `command` scorers and the report.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
}

/// Why a dataset was refused: the line (1-based) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DatasetError {
    /// A line is not one JSON object.
    #[error("line {line}: not a JSON object: {why}")]
    NotAnObject {
        /// The line.
        line: usize,
        /// The parser's or the shape's complaint.
        why: String,
    },
    /// A field is missing or of the wrong kind.
    #[error("line {line}: {why}")]
    BadField {
        /// The line.
        line: usize,
        /// What the field must be.
        why: String,
    },
    /// Two lines give the same id.
    #[error("line {line}: the id `{id}` is given again (first on line {first})")]
    DuplicateId {
        /// The second line.
        line: usize,
        /// The id.
        id: String,
        /// The line that gave it first.
        first: usize,
    },
    /// No line holds an item.
    #[error("the dataset holds no items: write one JSON object with a `goal` per line")]
    Empty,
    /// More lines than [`MAX_ITEMS`].
    #[error("the dataset holds more than {MAX_ITEMS} items: split it")]
    TooLarge,
}

/// Parses a dataset's text, every line checked before any item is returned.
pub fn parse(text: &str) -> Result<Vec<Item>, DatasetError> {
    let mut items = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if items.len() == MAX_ITEMS {
            return Err(DatasetError::TooLarge);
        }
        let item = parse_line(raw, line)?;
        if let Some(first) = seen.insert(item.id.clone(), line) {
            return Err(DatasetError::DuplicateId {
                line,
                id: quoted(&item.id),
                first,
            });
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(DatasetError::Empty);
    }
    Ok(items)
}

/// An id as an error quotes it: on one line, cut at 80 characters.
fn quoted(id: &str) -> String {
    crate::text::one_line(id, 80)
}

fn parse_line(raw: &str, line: usize) -> Result<Item, DatasetError> {
    let value: Value = serde_json::from_str(raw).map_err(|e| DatasetError::NotAnObject {
        line,
        why: e.to_string(),
    })?;
    let Value::Object(mut fields) = value else {
        return Err(DatasetError::NotAnObject {
            line,
            why: "a line holds one object, such as {\"goal\": \"…\"}".into(),
        });
    };
    let bad = |why: String| DatasetError::BadField { line, why };
    let goal = match fields.remove("goal") {
        Some(Value::String(goal)) if !goal.trim().is_empty() => goal,
        Some(Value::String(_)) => return Err(bad("`goal` is empty".into())),
        Some(_) => return Err(bad("`goal` must be a string".into())),
        None => return Err(bad("no `goal`: each line needs one".into())),
    };
    let id = match fields.remove("id") {
        Some(Value::String(id)) => id,
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err(bad("`id` must be a string or a number".into())),
        None => line.to_string(),
    };
    if let Some(why) = tag_problem("item", &id) {
        return Err(bad(format!("`id` {}: {why}", quoted(&id))));
    }
    let expected = fields.remove("expected");
    Ok(Item {
        id,
        goal,
        expected,
        metadata: fields.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_items_with_ids_expectations_and_metadata() {
        let items = parse(
            "{\"id\":\"a\",\"goal\":\"g1\",\"expected\":\"x\",\"topic\":\"t\"}\n\n{\"goal\":\"g2\"}\n{\"id\":7,\"goal\":\"g3\",\"expected\":{\"n\":1}}\n",
        )
        .unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].id, "a");
        assert_eq!(items[0].expected, Some(Value::String("x".into())));
        assert_eq!(items[0].metadata["topic"], Value::String("t".into()));
        assert_eq!(items[1].id, "3", "the line number when no id is given");
        assert_eq!(items[2].id, "7");
    }

    #[test]
    fn every_bad_line_is_named() {
        let cases = [
            ("{\"goal\":\"g\"}\nnot json", "line 2: not a JSON object"),
            ("[1]", "line 1: not a JSON object"),
            ("{\"id\":\"a\"}", "line 1: no `goal`"),
            ("{\"goal\":\"  \"}", "line 1: `goal` is empty"),
            ("{\"goal\":3}", "line 1: `goal` must be a string"),
            ("{\"goal\":\"g\",\"id\":\"a\\nb\"}", "line 1: `id`"),
            (
                "{\"goal\":\"g\",\"id\":\"a\"}\n{\"goal\":\"h\",\"id\":\"a\"}",
                "line 2: the id `a` is given again (first on line 1)",
            ),
            ("\n\n", "the dataset holds no items"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
