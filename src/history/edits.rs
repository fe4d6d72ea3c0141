//! A fork's edits in words: what `log` and `diff` print for an `Edited` step, and the goal a
//! fork asks instead of its parent's (`ls`, the `log` header), read from that step.

use crate::ledger::HistoryError;
use crate::ledger::codec::decode_event;
use crate::machine::{Edit, EventBody, Role};
use crate::store::{RunRecord, Store};

/// One fork edit in a few words: whose message or which call now says what. Call it to show
/// an `Edited` step (`log`, `diff`).
pub fn edit_in_words(edit: &Edit) -> String {
    match edit {
        Edit::RewriteConversation {
            agent, messages, ..
        } => {
            let said: Vec<String> = messages
                .iter()
                .map(|m| {
                    let role = match m.role {
                        Role::System => "system",
                        Role::User => "user",
                        Role::Assistant => "assistant",
                        Role::Tool => "tool",
                    };
                    format!("{role} \"{}\"", m.content.as_deref().unwrap_or_default())
                })
                .collect();
            format!("{agent}'s conversation goes on with {}", said.join(", "))
        }
        Edit::ReplaceToolResult { call_id, result } => match result {
            crate::machine::ToolOutcome::Ok { .. } => format!("call {call_id} gets another result"),
            crate::machine::ToolOutcome::Error { message } => {
                format!("call {call_id} fails: {message}")
            }
        },
        Edit::SetMemory { key, value, .. } => match value {
            Some(v) => format!("memory {key} = \"{v}\""),
            None => format!("memory {key} forgotten"),
        },
        Edit::SetLimit { key, limit, .. } => format!("{key} budget set to {limit}"),
    }
}

/// The goal `rec`'s run works on when it is a fork whose first step of its own rewrote a
/// user message (`runtape fork RUN@SEQ --edit "user=…"`): that message. `None` for a run that
/// is not a fork, or a fork that kept its parent's words. One read of one row; call it to
/// show a fork beside its parent, where the stored goal (the one the run began with, shared
/// with the parent) would read as if the edit were lost.
pub fn fork_goal(store: &dyn Store, rec: &RunRecord) -> Result<Option<String>, HistoryError> {
    let Some((_, at)) = &rec.parent else {
        return Ok(None);
    };
    let first = at + 1;
    let Some(row) = store.transitions(&rec.id, first, first)?.into_iter().next() else {
        return Ok(None);
    };
    let EventBody::Edited { edits } = decode_event(&rec.id, first, &row.event)?.body else {
        return Ok(None);
    };
    Ok(edits.iter().rev().find_map(|e| match e {
        Edit::RewriteConversation { messages, .. } => messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .and_then(|m| m.content.clone()),
        _ => None,
    }))
}
