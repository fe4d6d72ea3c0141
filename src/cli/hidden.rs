//! `show`'s lines for hidden values (see [`crate::machine::hidden`]): what the run keeps from
//! its model, by the name the model uses.

use super::common::outln;
use crate::machine::HiddenValue;

/// The longest part of a hidden value `show` prints on its line.
const SHOWN_CHARS: usize = 120;

/// Prints one line per hidden value of a run's state: its name, label, source and the start
/// of its value (a person reading `show` may see what the model may not).
pub(crate) fn describe(hidden: &[HiddenValue]) {
    for (i, h) in hidden.iter().enumerate() {
        let text = match &h.value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let one_line = text.replace('\n', " ");
        let shown: String = one_line.chars().take(SHOWN_CHARS).collect();
        let more = if one_line.chars().count() > SHOWN_CHARS {
            "…"
        } else {
            ""
        };
        outln!(
            "hidden  {} ({}) from {} call {}: {shown}{more}",
            crate::machine::hidden::name_of(i),
            h.label.describe(),
            h.source,
            h.call_id
        );
    }
}
