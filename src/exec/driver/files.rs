//! The files (images, PDFs) a model request's messages carry: their bytes read from the
//! store for the provider, and a warning traced for each one the model is not sent.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Driver;
use crate::exec::EngineError;
use crate::exec::reads::off_thread;
use crate::exec::trace::Trace;
use crate::machine::{AgentId, Digest, Message};
use crate::provider::{Files, ModelProvider};

impl Driver {
    /// The bytes of every file `messages` name, read from the store (one read per distinct
    /// file). A blob that is missing, or whose bytes do not hash to its digest, is left out:
    /// the provider sends that file's placeholder text instead (and `verify` names it).
    pub(super) async fn files_of(&mut self, messages: &[Message]) -> Result<Files, EngineError> {
        let wanted: std::collections::BTreeSet<Digest> = messages
            .iter()
            .flat_map(|m| m.attachments.iter().map(|a| a.digest))
            .collect();
        if wanted.is_empty() {
            return Ok(Files::default());
        }
        let found = off_thread(&self.shared.store, move |s| {
            let mut out = BTreeMap::new();
            for digest in wanted {
                if let Some(bytes) = s.blob(&digest)?
                    && Digest::of(&bytes) == digest
                {
                    out.insert(digest, Arc::<[u8]>::from(bytes));
                }
            }
            Ok::<_, crate::store::StoreError>(out)
        })
        .await?;
        Ok(Arc::new(found))
    }

    /// Traces `model.attachments_not_sent` when `provider` declares which kinds of file
    /// `model` takes and some file of `messages` is not one of them, or its bytes are missing
    /// (those go as placeholder text).
    pub(super) fn warn_unsent(
        &self,
        seq: u64,
        agent: &AgentId,
        provider: &dyn ModelProvider,
        model: &str,
        messages: &[Message],
        files: &Files,
    ) {
        let Some(accepts) = provider.accepts(model) else {
            return;
        };
        let unsent: Vec<String> = messages
            .iter()
            .flat_map(|m| &m.attachments)
            .filter(|a| !accepts.contains(&a.kind()) || !files.contains_key(&a.digest))
            .map(|a| format!("{} ({})", a.file_name(), a.media_type))
            .collect();
        if unsent.is_empty() {
            return;
        }
        tracing::warn!(run = %self.run, %agent, model, "files not sent: {}", unsent.join(", "));
        self.emit(Some(seq), || Trace::AttachmentsNotSent {
            agent: agent.clone(),
            model: model.to_owned(),
            files: unsent,
        });
    }
}
