//! A file (image, PDF) a run's messages carry, read back for display (`runtape serve`'s
//! `GET /api/runs/{id}/files/{digest}`).

use super::OpsError;
use crate::history::HistoryError;
use crate::ledger;
use crate::machine::{Attachment, Digest, RunId};
use crate::store::Store;

/// The attachment `digest` names in `run` (the goal's, or one a message of any of its
/// agents' conversations carries) and its bytes, checked against the digest. `None` when the
/// run names no such file, or its blob is missing or does not hash to it (`verify` names
/// the fault): only files of that run are ever read, never another blob.
pub fn attached_file(
    store: &dyn Store,
    run: &RunId,
    digest: &Digest,
) -> Result<Option<(Attachment, Vec<u8>)>, OpsError> {
    let rec = ledger::record(store, run)?;
    let spec = ledger::spec_of(&rec)?;
    let mut found = spec
        .spec()
        .attachments
        .iter()
        .find(|a| a.digest == *digest)
        .cloned();
    if found.is_none() {
        let end = ledger::state_at(store, run, &spec, rec.seq)?;
        if let Some(data) = end.state.data() {
            for (agent, a) in &data.agents {
                let messages = ledger::conversation(store, agent, &a.conversation)?;
                found = messages
                    .iter()
                    .flat_map(|m| &m.attachments)
                    .find(|f| f.digest == *digest)
                    .cloned();
                if found.is_some() {
                    break;
                }
            }
        }
    }
    let Some(attachment) = found else {
        return Ok(None);
    };
    let bytes = store.blob(digest).map_err(HistoryError::from)?;
    Ok(bytes
        .filter(|b| Digest::of(b) == *digest)
        .map(|b| (attachment, b)))
}
