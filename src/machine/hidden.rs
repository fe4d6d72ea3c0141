//! Hidden values: results the model passes on without reading them (issue 44, after CaMeL
//! and FIDES).
//!
//! A tool declared `hide = true` does not show its results to the model. The machine keeps
//! each result in the run state ([`RunData::hidden`](super::RunData::hidden)) with the label
//! it would have carried, and the model reads, as the call's result, only a trusted note
//! naming a variable: `$r1`, `$r2`, … in the order results were hidden. The agent's taint
//! does not rise, because the model read nothing an outsider wrote.
//!
//! The model uses a hidden value by passing its name as an argument: an argument whose whole
//! value is the string `"$r3"` (at any depth of the arguments) is a **reference**. When the
//! machine emits the call (`CallTool`, `Reconcile`, a person's approval request) it puts the
//! value in its place, so the tool gets what the hidden result held. The policy judges such
//! an argument by the join of the decision's label and the labels of the values it refers to
//! ([`carried`]): a consequential call decided from trusted context runs with an untrusted
//! value in an argument no rule constrains, and is refused when that argument is constrained
//! to `trusted` (or `public`, for a private value). The tool's answer to such a call carries
//! the labels of the values it was passed (it may echo them) and, when that makes it
//! untrusted, is hidden in turn. A string that names no hidden value is not a reference and
//! is passed as written.
//!
//! A quarantined reader (see [`quarantine`](super::quarantine)) may be given a hidden value
//! to read; its bounded answer is hidden in turn, or shown when the policy trusts its kind.
//!
//! Hidden values are part of the state, so the state hash, checkpoints and `verify` cover
//! them; they are kept out of every model request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::label::Label;
use super::state::{RunData, ToolResult};

/// One value kept from the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HiddenValue {
    /// What it holds: a tool's result text, or a reader's answer (a JSON value).
    pub value: Value,
    /// The label it carries (its source's); an argument referring to it carries it too.
    #[serde(default, skip_serializing_if = "Label::is_trusted_public")]
    pub label: Label,
    /// The tool (or reader) whose result it is.
    pub source: String,
    /// The call whose result it is.
    pub call_id: String,
}

/// The name the model uses for the `index`th hidden value (0-based): `$r1` for the first.
pub fn name_of(index: usize) -> String {
    format!("$r{}", index + 1)
}

/// The index `value` refers to when it is a reference to one of `hidden` (a string `$rN`
/// naming a value the run holds); `None` for anything else.
pub fn reference(hidden: &[HiddenValue], value: &Value) -> Option<usize> {
    let n: usize = value.as_str()?.strip_prefix("$r")?.parse().ok()?;
    let text = value.as_str()?;
    // "$r01" is not "$r1": only the canonical spelling refers.
    (n >= 1 && n <= hidden.len() && text == name_of(n - 1)).then(|| n - 1)
}

/// Calls `f` with every reference inside `value`.
fn each_reference(hidden: &[HiddenValue], value: &Value, f: &mut impl FnMut(usize)) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            other => {
                if let Some(i) = reference(hidden, other) {
                    f(i);
                }
            }
        }
    }
}

/// The join of the labels of the hidden values `value` refers to (trusted and public when it
/// refers to none): what an argument carries beyond the decision that wrote it.
pub fn carried(hidden: &[HiddenValue], value: &Value) -> Label {
    let mut label = Label::TRUSTED;
    each_reference(hidden, value, &mut |i| label = label.join(hidden[i].label));
    label
}

/// True when `value` refers to some hidden value.
pub fn refers(hidden: &[HiddenValue], value: &Value) -> bool {
    let mut any = false;
    each_reference(hidden, value, &mut |_| any = true);
    any
}

/// `value` with every reference replaced by the value it names: what a tool (or a person
/// approving the call) is given. Call it only where the result leaves the machine for a
/// tool or a person, never for a model request.
pub fn reveal(hidden: &[HiddenValue], value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(|v| reveal(hidden, v)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), reveal(hidden, v)))
                .collect(),
        ),
        other => match reference(hidden, other) {
            Some(i) => hidden[i].value.clone(),
            None => other.clone(),
        },
    }
}

/// Keeps `value` (labelled `label`) from the model: stores it in `run` and returns what the
/// model reads instead, a trusted note naming the new variable.
pub(crate) fn keep(
    run: &mut RunData,
    value: Value,
    label: Label,
    source: &str,
    call_id: &str,
) -> String {
    let name = name_of(run.hidden.len());
    run.hidden.push(HiddenValue {
        value,
        label,
        source: source.to_owned(),
        call_id: call_id.to_owned(),
    });
    format!(
        "[hidden as {name}: the result of {source} ({}) is kept from you. Pass \"{name}\" as a whole argument to use it without reading it, or give it to a quarantined reader.]",
        label.describe()
    )
}

/// The result the model reads for a tool's own `result`: `result` itself, or, when the tool
/// hides its results, the note naming where the machine kept it. The note is trusted (the
/// machine wrote it) and says whether the tool reported an error, nothing else of it.
pub(crate) fn file_result(
    run: &mut RunData,
    hide: bool,
    tool: &str,
    call_id: &str,
    result: ToolResult,
) -> ToolResult {
    if !hide {
        return result;
    }
    let content = keep(
        run,
        Value::String(result.content),
        result.label,
        tool,
        call_id,
    );
    ToolResult {
        content,
        is_error: result.is_error,
        label: Label::TRUSTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::label::{Confidentiality, Integrity};
    use serde_json::json;

    fn held() -> Vec<HiddenValue> {
        let untrusted = Label::new(Integrity::Untrusted, Confidentiality::Public);
        let private = Label::new(Integrity::Trusted, Confidentiality::Private);
        vec![
            HiddenValue {
                value: json!("IBAN FR76 from the bill"),
                label: untrusted,
                source: "read_file".into(),
                call_id: "c1".into(),
            },
            HiddenValue {
                value: json!(98.7),
                label: private,
                source: "reader".into(),
                call_id: "c2".into(),
            },
        ]
    }

    #[test]
    fn only_the_canonical_name_of_a_held_value_refers() {
        let h = held();
        assert_eq!(reference(&h, &json!("$r1")), Some(0));
        assert_eq!(reference(&h, &json!("$r2")), Some(1));
        for not in [
            json!("$r3"),
            json!("$r0"),
            json!("$r01"),
            json!(" $r1"),
            json!(1),
        ] {
            assert_eq!(reference(&h, &not), None, "{not}");
        }
        assert_eq!(reference(&[], &json!("$r1")), None);
    }

    #[test]
    fn reveal_replaces_whole_references_at_any_depth_and_nothing_else() {
        let h = held();
        let args = json!({"to": "$r1", "amount": "$r2", "memo": "pay $r1", "list": ["$r2", "$r9"]});
        assert_eq!(
            reveal(&h, &args),
            json!({"to": "IBAN FR76 from the bill", "amount": 98.7, "memo": "pay $r1", "list": [98.7, "$r9"]})
        );
        assert!(refers(&h, &args));
        assert!(!refers(&h, &json!({"memo": "pay $r1"})));
    }

    #[test]
    fn an_argument_carries_the_join_of_what_it_refers_to() {
        let h = held();
        assert_eq!(carried(&h, &json!("plain")), Label::TRUSTED);
        assert!(carried(&h, &json!("$r1")).is_untrusted());
        let both = carried(&h, &json!(["$r1", {"x": "$r2"}]));
        assert!(both.is_untrusted() && both.is_private());
    }
}
