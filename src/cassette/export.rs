//! A stored run's model exchanges as a cassette: every model call, in order, with the exact
//! prompt it was sent (messages, tools, settings, output schema), the reply or failure it got,
//! and the text chunks the reply streamed in. A run that recorded MCP tool lists (revision 3)
//! also gives the cassette every catalog it recorded (each server's first as its catalog, the
//! later ones as catalog changes at the model call they preceded) and its tools' results, so
//! the cassette replays without the servers, in a database that never saw the run. A
//! delegating agent's prompts carry its `delegate_…`/`transfer_to_…` tools as it was shown
//! them.
//!
//! A session run (revision 5) also gives the cassette the history it began with (its
//! `SessionStart`), and a run with a retriever every answer its retriever gave with the query
//! it was asked, so `runtape replay` begins and retrieves as the run did without its session's
//! earlier runs or its retriever.
//!
//! A delegation tree exports whole (cassette version 4): every run below the exported one
//! gets a section of its own, keyed by its path in the tree (`3.0`, `3.0.5.1`; see
//! [`crate::ledger::tree`]), holding its model calls in order; its MCP tool results join the
//! run's, and a server it alone used gives its first catalog. When a server's list changed
//! during a child's run, the child's section also keeps every list the child got of it, each
//! at the count of the child's own model calls before it, so a replay serves the child its
//! own lists at its own step boundaries (cassettes written before kept none: a replay serves
//! such a child the tree's lists).

use super::error::CassetteError;
use super::format::Cassette;
use super::hash::{CassetteId, Prompt};
use super::record::{CassetteBuilder, RecordOptions};
use crate::ledger::{self, HistoryError};
use crate::machine::{Digest, Effect, EventBody, ModelReply, RunId};
use crate::provider::{ProviderError, ToolDef};
use crate::store::Store;

/// Why a run could not be exported.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The run could not be read.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// A model turn could not be recorded (a value canonical JSON cannot carry).
    #[error("step {seq}: {error}")]
    Turn {
        /// The step whose reply could not be recorded.
        seq: u64,
        /// Why.
        error: CassetteError,
    },
    /// The cassette could not be finished.
    #[error(transparent)]
    Cassette(#[from] CassetteError),
}

/// The cassette of `run` as stored: one entry per model call answered in its history (across
/// its fork ancestry), in order. The cassette id derives from the run id and the recording
/// time is the run's creation time, so exporting the same run twice gives the same file.
pub fn export_run(store: &dyn Store, run: &RunId) -> Result<Cassette, ExportError> {
    let rec = ledger::record(store, run)?;
    let id_hex = &Digest::of(run.as_str().as_bytes()).to_hex()[..32];
    let options = RecordOptions {
        cassette_id: CassetteId::from_hex(id_hex),
        ..RecordOptions::default()
    };
    let mut builder = CassetteBuilder::new(options)?;
    let mut providers: Vec<String> = Vec::new();
    for below in ledger::tree(store, run)? {
        add_run(&mut builder, &mut providers, store, &below.run, &below.path)?;
    }
    let recorded_at = crate::text::rfc3339(rec.created_ms);
    let source = format!("runtape run {run} ({})", providers.join(", "));
    Ok(builder.finish(&recorded_at, &source)?)
}

/// Adds `run`'s model calls (and MCP lists and results) to `builder`, in the section of
/// `path` (`""`: the exported run itself).
fn add_run(
    builder: &mut CassetteBuilder,
    providers: &mut Vec<String>,
    store: &dyn Store,
    run: &RunId,
    path: &str,
) -> Result<(), ExportError> {
    let rec = ledger::record(store, run)?;
    let spec = ledger::spec_of(&rec)?;
    let rows = ledger::transitions(store, run, 1, rec.seq)?;
    // MCP servers whose tool lists the run recorded: their catalogs go in the cassette, and
    // so do their tools' results, so a replay needs no server.
    let mut mcp_servers: Vec<String> = Vec::new();
    // Definitions of tools servers added after the run started (revision 4), by server, as
    // of the latest list: what the model was shown for them.
    let mut added_tools: std::collections::BTreeMap<String, Vec<crate::machine::ToolSpec>> =
        Default::default();
    // The goal the run began with: part of each query its retriever was given.
    let mut goal = rec.goal.clone();
    let session = spec.spec().session.as_ref();
    for step in ledger::pairs(run, &rows) {
        let step = step?;
        if let EventBody::ToolsListed {
            server,
            catalog,
            added,
            ..
        } = &step.event.body
        {
            added_tools.insert(server.clone(), added.clone());
            let seq = step.row.seq;
            let bytes = store
                .blob(catalog)
                .map_err(|e| ledger::damaged(run, seq, format!("catalog blob {catalog}: {e}")))?
                .ok_or_else(|| {
                    ledger::damaged(run, seq, format!("catalog blob {catalog} is missing"))
                })?;
            let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                ledger::damaged(
                    run,
                    seq,
                    format!("catalog blob {catalog} does not decode: {e}"),
                )
            })?;
            // A child's lists go to its own section when they changed (see the module doc).
            builder
                .add_catalog_in(path, server, value)
                .map_err(|error| ExportError::Turn { seq, error })?;
            if !mcp_servers.contains(server) {
                mcp_servers.push(server.clone());
            }
            continue;
        }
        match &step.event.body {
            // Global memory as the run saw it (revision 5): a replay serves it.
            EventBody::MemoryLoaded { name, entries, .. } => {
                builder.add_memory_load(path, name, entries.clone());
                continue;
            }
            EventBody::MemoryPublished { outcome, .. } => {
                builder.add_memory_publish(path, outcome.clone());
                continue;
            }
            EventBody::Start { goal: g } => {
                goal.clone_from(g);
                continue;
            }
            // The history a session run began with (revision 5): a replay begins with it.
            EventBody::SessionStart { goal: g, seed } => {
                goal.clone_from(g);
                if let Some(s) = session.filter(|_| path.is_empty()) {
                    builder
                        .set_session(&s.name, s.index, g, seed.clone())
                        .map_err(|error| ExportError::Turn {
                            seq: step.row.seq,
                            error,
                        })?;
                }
                continue;
            }
            // What the retriever answered (revision 5), with the query it was given: a replay
            // serves it and checks it would ask the same.
            EventBody::Retrieved { retrieval, .. } => {
                if let Some(Effect::Retrieve {
                    agent,
                    conversation,
                    turn,
                    ..
                }) = step.answers.map(|a| a.effect)
                {
                    let messages = ledger::conversation(store, &agent, &conversation)?;
                    let query = crate::tool::retriever::query(
                        "",
                        agent.as_str(),
                        &goal,
                        turn,
                        session.map(|s| s.name.as_str()),
                        &messages,
                    );
                    builder
                        .push_retrieval_in(path, &agent, turn, query, retrieval.clone())
                        .map_err(|error| ExportError::Turn {
                            seq: step.row.seq,
                            error,
                        })?;
                }
                continue;
            }
            _ => {}
        }
        let answered = step.answers.map(|a| a.effect);
        if let (Some(Effect::CallTool { tool, args, .. }), EventBody::ToolReturned { outcome, .. }) =
            (&answered, &step.event.body)
            && tool
                .split_once(crate::tool::mcp::SEPARATOR)
                .is_some_and(|(server, _)| mcp_servers.iter().any(|s| s == server))
        {
            let files = match outcome {
                crate::machine::ToolOutcome::Ok { files, .. } => files.as_slice(),
                crate::machine::ToolOutcome::Error { .. } => &[],
            };
            let seq = step.row.seq;
            let mut bytes = Vec::with_capacity(files.len());
            for f in files {
                let what = format!("the blob of file {} of a tool result", f.digest);
                let b = store
                    .blob(&f.digest)
                    .map_err(|e| ledger::damaged(run, seq, format!("{what}: {e}")))?
                    .ok_or_else(|| ledger::damaged(run, seq, format!("{what} is missing")))?;
                bytes.push(b);
            }
            builder
                .push_tool_result(tool, args.clone(), outcome.clone(), &bytes)
                .map_err(|error| ExportError::Turn {
                    seq: step.row.seq,
                    error,
                })?;
            continue;
        }
        let Some(Effect::CallModel { agent, request, .. }) = answered else {
            continue;
        };
        let (result, chunks) = match step.event.body {
            EventBody::ModelReplied { reply, chunks, .. } => {
                let chunks = stream_of(&reply, &chunks);
                (Ok(reply), chunks)
            }
            EventBody::ModelFailed { failure, .. } => {
                let mut e =
                    ProviderError::new(&request.provider, failure.class, failure.message.clone());
                e.retryable = failure.retryable;
                e.retry_after_ms = failure.retry_after_ms;
                e.status = failure.status;
                e.budget = failure.budget;
                (Err(e), Vec::new())
            }
            _ => continue,
        };
        let mut messages = ledger::conversation(store, &agent, &request.conversation)?;
        // Compactions and injected memory, as the driver sent them.
        request.complete_messages(&mut messages);
        let tools = request
            .tools
            .iter()
            .filter_map(|n| {
                // A declared tool, a tool an MCP server added (revision 4), or the
                // `delegate_…`/`transfer_to_…` tool of an agent's delegate or handoff: the
                // definitions the driver showed the model.
                let added = added_tools
                    .values()
                    .flatten()
                    .find(|t| t.name == n.as_str());
                match spec.tool(n).or(added) {
                    Some(t) => Some(std::borrow::Cow::Borrowed(t)),
                    None => spec.offered_tool(n),
                }
            })
            .map(|t| ToolDef {
                name: t.name.clone(),
                description: t.description.clone(),
                schema: t.schema.clone(),
            })
            .collect();
        let spec_agent = spec.agent(&agent);
        let prompt = Prompt {
            messages,
            tools,
            settings: request.settings(spec_agent),
            // A session summary (revision 5) is asked for as plain text.
            output_schema: spec_agent
                .filter(|_| !request.summary)
                .and_then(|a| a.output_schema.clone()),
        };
        if !providers.contains(&request.provider) {
            providers.push(request.provider.clone());
        }
        builder
            .push_in(path, &agent, prompt, result, chunks)
            .map_err(|error| ExportError::Turn {
                seq: step.row.seq,
                error,
            })?;
    }
    Ok(())
}

/// The text chunks `reply` streamed in: its text cut at the recorded chunk lengths (bytes),
/// or the whole text as one chunk when no lengths were recorded (a run recorded before they
/// were, or a reply that did not stream) or they do not fit the text.
fn stream_of(reply: &ModelReply, lengths: &[u32]) -> Vec<String> {
    let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(lengths.len());
    let mut rest = text;
    for &len in lengths {
        match rest.split_at_checked(len as usize) {
            Some((chunk, tail)) if !chunk.is_empty() => {
                out.push(chunk.to_owned());
                rest = tail;
            }
            _ => return vec![text.to_owned()],
        }
    }
    if !rest.is_empty() || out.is_empty() {
        return vec![text.to_owned()];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_cut_from_the_text_at_their_recorded_lengths() {
        let reply = ModelReply::text("héllo world");
        assert_eq!(stream_of(&reply, &[3, 3, 6]), ["hé", "llo", " world"]);
        assert_eq!(stream_of(&reply, &[]), ["héllo world"], "none recorded");
        assert_eq!(stream_of(&reply, &[2]), ["héllo world"], "mid-character");
        assert_eq!(stream_of(&reply, &[3]), ["héllo world"], "text left over");
        assert_eq!(stream_of(&reply, &[20]), ["héllo world"], "past the end");
        assert!(
            stream_of(&ModelReply::default(), &[1]).is_empty(),
            "no text"
        );
    }
}
