//! The timeline's words for the steps of a saga (see [`crate::machine::saga`]): which call's
//! undo a step started, and what became of the one it answers.

use crate::machine::{EdgeId, Effect};

/// `CallTool` effects of undos carry the original call id after this prefix.
const UNDO_PREFIX: &str = "undo:";

/// Words to add to the summary of a step that took `edge`, answering `answered` and emitting
/// `emitted`; `None` for a step that is not part of a saga.
pub(super) fn saga_words(
    edge: EdgeId,
    answered: Option<&Effect>,
    emitted: &[Effect],
) -> Option<String> {
    let outcome = match edge {
        EdgeId::AnyCompensate => "",
        EdgeId::AnyCompensateStopped => {
            return Some(
                "saga stopped: the latest call's undo arguments could not be filled".to_owned(),
            );
        }
        EdgeId::CompensatingReturnedNext => "undone",
        EdgeId::CompensatingReturnedDone => "undone; saga over: compensated",
        EdgeId::CompensatingReturnedStopped => "failed; saga stopped: compensation_failed",
        EdgeId::CompensatingInDoubtRetry => "in doubt: performed again with its key",
        EdgeId::CompensatingInDoubtStopped => "in doubt; saga stopped: compensation_failed",
        EdgeId::CompensatingCancel => return Some("saga goes on".to_owned()),
        _ => return None,
    };
    let undo = |e: &Effect| match e {
        Effect::CallTool { call_id, tool, .. } => call_id
            .strip_prefix(UNDO_PREFIX)
            .map(|of| format!("undo of {of} by {tool}")),
        _ => None,
    };
    let mut words: Vec<String> = Vec::new();
    if let Some(done) = answered.and_then(undo) {
        words.push(format!("{done}: {outcome}"));
    }
    words.extend(
        emitted
            .iter()
            .filter_map(undo)
            .map(|u| format!("{u} starts")),
    );
    Some(words.join("; "))
}
