//! The cassette in memory and on disk: the envelope, the entries, and writing the file.
//!
//! A [`Cassette`] value is always verified: it comes from a recording
//! ([`CassetteBuilder::finish`](super::CassetteBuilder::finish)) or from
//! [`Cassette::load`] / [`Cassette::from_json`], which check everything before returning one.
//! Its fields are read-only for that reason.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::CassetteError;
use super::hash::{self, EnvelopeFields, Prompt};
use super::session::{self, RecordedSession, RetrievalEntry};
use crate::machine::{AgentId, ModelReply, ToolOutcome};
use crate::provider::ProviderError;

/// The cassette format version this build writes for a run without children: 3, whose
/// `promptHash` also covers the request's model settings and output schema. Versions 2 (the
/// same hashes, `promptHash` over messages and tools only) and 1 (no `cassetteId`,
/// `responseHash` or `envelopeHash`) are still read and replayed, each compared the way it
/// was recorded.
pub const VERSION: u32 = 3;

/// The version written for a delegation tree: [`VERSION`] plus `children`, one section of
/// entries per delegated child run (see [`ChildSection`]).
pub const TREE_VERSION: u32 = 4;

/// What a recorded call returned: the reply, or the failure (failures replay too, so a
/// recorded 429 followed by a successful retry replays as exactly that). On disk it is
/// `{"reply": {...}}` or `{"error": {...}}`, with the [`ModelReply`] or [`ProviderError`] in
/// its own serde form (snake_case fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RecordedResponse {
    /// The call succeeded.
    Reply(ModelReply),
    /// The call failed.
    Error(ProviderError),
}

impl RecordedResponse {
    /// The response as the result `ModelProvider::complete` returned.
    pub fn as_result(&self) -> Result<&ModelReply, &ProviderError> {
        match self {
            RecordedResponse::Reply(reply) => Ok(reply),
            RecordedResponse::Error(error) => Err(error),
        }
    }
}

impl From<Result<ModelReply, ProviderError>> for RecordedResponse {
    fn from(result: Result<ModelReply, ProviderError>) -> Self {
        match result {
            Ok(reply) => RecordedResponse::Reply(reply),
            Err(error) => RecordedResponse::Error(error),
        }
    }
}

/// One recorded model call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    turn_index: u64,
    prompt_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response_hash: Option<String>,
    response: RecordedResponse,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    chunks: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt: Option<Prompt>,
}

impl Entry {
    /// A version-2 entry, its `responseHash` computed for `cassette_id` (and, in a child's
    /// section, its path).
    pub(crate) fn sealed(
        cassette_id: &str,
        section: Option<&str>,
        turn_index: u64,
        prompt_hash: String,
        response: RecordedResponse,
        chunks: Vec<String>,
        prompt: Option<Prompt>,
    ) -> Result<Entry, String> {
        let mut entry = Entry {
            turn_index,
            prompt_hash,
            response_hash: None,
            response,
            chunks,
            prompt,
        };
        entry.response_hash = Some(entry.digest_in(cassette_id, section)?);
        Ok(entry)
    }

    /// The `responseHash` this entry's content has under `cassette_id` in the section of the
    /// child at `section` (`None` for the run's own entries).
    pub(crate) fn digest_in(
        &self,
        cassette_id: &str,
        section: Option<&str>,
    ) -> Result<String, String> {
        let response = serde_json::to_value(&self.response).map_err(|e| e.to_string())?;
        hash::response_hash(
            cassette_id,
            section,
            self.turn_index,
            &self.prompt_hash,
            &response,
            &self.chunks,
        )
    }

    /// The response as JSON, for number checks.
    pub(crate) fn response_value(&self) -> Result<Value, String> {
        serde_json::to_value(&self.response).map_err(|e| e.to_string())
    }

    /// Position of the call in the recording: 0 for the first.
    pub fn turn_index(&self) -> u64 {
        self.turn_index
    }

    /// SHA-256 of the normalised prompt (see [`Prompt::hash`]).
    pub fn prompt_hash(&self) -> &str {
        &self.prompt_hash
    }

    /// The entry's digest (version 2; `None` in a version-1 cassette).
    pub fn response_hash(&self) -> Option<&str> {
        self.response_hash.as_deref()
    }

    /// What the call returned (after the recording's redact hook).
    pub fn response(&self) -> &RecordedResponse {
        &self.response
    }

    /// The text deltas the provider streamed, in order (after redaction); empty when it
    /// streamed none.
    pub fn chunks(&self) -> &[String] {
        &self.chunks
    }

    /// The normalised prompt, when the recording kept prompts
    /// ([`RecordOptions::store_prompts`](super::RecordOptions::store_prompts)); otherwise only
    /// its hash is stored.
    pub fn prompt(&self) -> Option<&Prompt> {
        self.prompt.as_ref()
    }
}

/// The file's shape, field for field (camelCase on disk).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CassetteData {
    pub(crate) version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent_id: Option<AgentId>,
    pub(crate) recorded_at: String,
    pub(crate) recorded_provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cassette_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hash_filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) envelope_hash: Option<String>,
    pub(crate) entries: Vec<Entry>,
    /// MCP servers' tool catalogs, by server name (see [`Cassette::catalogs`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) catalogs: BTreeMap<String, Value>,
    /// MCP tool results, in the order the run got them (see [`Cassette::tool_results`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_results: Vec<ToolEntry>,
    /// Later tool lists of MCP servers, in the order the run recorded them (see
    /// [`Cassette::catalog_changes`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) catalog_changes: Vec<CatalogChange>,
    /// Version 4: the model calls of each delegated child run, in tree order (see
    /// [`Cassette::children`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) children: Vec<ChildSection>,
    /// Global memory as the recorded run saw it (revision 5; see [`Cassette::memory`]).
    #[serde(default, skip_serializing_if = "RecordedMemory::is_empty")]
    pub(crate) memory: RecordedMemory,
    /// The history a recorded session run began with (revision 5; see [`Cassette::session`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<RecordedSession>,
    /// What the retriever answered the run, in order (revision 5; see
    /// [`Cassette::retrievals`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) retrievals: Vec<RetrievalEntry>,
}

/// The model calls of one delegated child run (version 4), keyed by the child's place in the
/// tree rather than its run id, so a replay under new run ids finds them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChildSection {
    /// The child's path below the recorded run: the `SEQ.INDEX` of each delegating effect
    /// from the top, joined by dots (`3.0`, `3.0.5.1`).
    pub path: String,
    /// Its calls, numbered from 0 like the run's own.
    pub entries: Vec<Entry>,
    /// What the retriever answered it, numbered from 0 (revision 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrievals: Vec<RetrievalEntry>,
    /// The child's own MCP tool lists when a server's list changed during its run: every list
    /// it recorded of such a server, its first included, each at the count of the child's own
    /// entries made before it (see [`Cassette::catalog_changes_in`]). Empty when no list
    /// changed during the child's run, and in cassettes written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_changes: Vec<CatalogChange>,
}

/// What a recorded run read from and published to global memory (revision 5), in order: a
/// replay serves these instead of touching its database's global memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedMemory {
    /// Each load: the memory's name and its entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loads: Vec<MemoryLoad>,
    /// Each publish's outcome.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publishes: Vec<MemoryPublish>,
}

/// One recorded load of global memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryLoad {
    /// The run that loaded it: its place in the recorded tree (`""`, left out: the recorded
    /// run itself; else a child's path, as in [`ChildSection::path`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The global memory.
    pub name: String,
    /// Every key with its latest version, as loaded.
    pub entries: BTreeMap<String, crate::machine::Versioned>,
}

/// One recorded publish of global memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryPublish {
    /// The run that published: its place in the recorded tree, as for [`MemoryLoad::path`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// What the store did.
    pub outcome: crate::machine::PublishOutcome,
}

impl RecordedMemory {
    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.loads.is_empty() && self.publishes.is_empty()
    }
}

/// A tool list an MCP server gave after its first one in the recorded run: the list, and the
/// step boundary it was recorded at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogChange {
    /// The server (`[[mcp]]` name).
    pub server: String,
    /// How many model calls (entries) the run had made when it recorded the list: a replay
    /// lists it at the step boundary before entry `at_entry` is asked.
    pub at_entry: u64,
    /// The list (the JSON a catalog blob holds).
    pub catalog: Value,
}

/// One recorded MCP tool call: the tool, its arguments, and what it returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolEntry {
    /// The tool, as the model called it (`SERVER__TOOL`).
    pub tool: String,
    /// The arguments it was called with.
    pub args: Value,
    /// What it returned (`{"status": "ok", "value": …}` or `{"status": "error", "message": …}`).
    pub outcome: ToolOutcome,
    /// The bytes, in base64, of each file the result carries (`outcome.files`, in order), so a
    /// replay stores them as the recorded run did. Left out when the result carries none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

impl CassetteData {
    /// The fields `envelopeHash` covers, when there is a cassette id to cover.
    pub(crate) fn envelope_fields(&self) -> Option<EnvelopeFields<'_>> {
        Some(EnvelopeFields {
            version: self.version,
            agent_id: self.agent_id.as_ref().map(AgentId::as_str),
            recorded_at: &self.recorded_at,
            recorded_provider: &self.recorded_provider,
            cassette_id: self.cassette_id.as_deref()?,
            hash_filter: self.hash_filter.as_deref(),
        })
    }

    /// `envelopeHash` over the envelope and the entries' stored digests.
    pub(crate) fn compute_envelope_hash(&self) -> Result<Option<String>, String> {
        let Some(fields) = self.envelope_fields() else {
            return Ok(None);
        };
        let digests: Vec<&str> = self
            .entries
            .iter()
            .map(|e| e.response_hash.as_deref().unwrap_or(""))
            .collect();
        let mut extras = Vec::new();
        if !self.catalogs.is_empty() {
            extras.push((
                "catalogs",
                serde_json::to_value(&self.catalogs).map_err(|e| e.to_string())?,
            ));
        }
        if !self.tool_results.is_empty() {
            extras.push((
                "toolResults",
                serde_json::to_value(&self.tool_results).map_err(|e| e.to_string())?,
            ));
        }
        if !self.memory.is_empty() {
            extras.push((
                "memory",
                serde_json::to_value(&self.memory).map_err(|e| e.to_string())?,
            ));
        }
        if !self.catalog_changes.is_empty() {
            extras.push((
                "catalogChanges",
                serde_json::to_value(&self.catalog_changes).map_err(|e| e.to_string())?,
            ));
        }
        if !self.children.is_empty() {
            let children: Vec<serde_json::Value> = self
                .children
                .iter()
                .map(|c| -> Result<serde_json::Value, String> {
                    let digests: Vec<&str> = c
                        .entries
                        .iter()
                        .map(|e| e.response_hash.as_deref().unwrap_or(""))
                        .collect();
                    let mut child = serde_json::json!({"path": c.path, "entries": digests});
                    if !c.retrievals.is_empty() {
                        child["retrievals"] = serde_json::json!(session::digests(&c.retrievals));
                    }
                    if !c.catalog_changes.is_empty() {
                        child["catalogChanges"] =
                            serde_json::to_value(&c.catalog_changes).map_err(|e| e.to_string())?;
                    }
                    Ok(child)
                })
                .collect::<Result<_, String>>()?;
            extras.push(("children", serde_json::Value::Array(children)));
        }
        if let Some(s) = &self.session {
            extras.push(("session", serde_json::json!(s.session_hash().unwrap_or(""))));
        }
        if !self.retrievals.is_empty() {
            extras.push((
                "retrievals",
                serde_json::json!(session::digests(&self.retrievals)),
            ));
        }
        hash::envelope_hash(&fields, &digests, extras).map(Some)
    }
}

/// A verified set of recorded model calls, ready to save or replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Cassette {
    pub(crate) data: CassetteData,
}

impl Cassette {
    /// The format version: 3 for everything this build records, 2 or 1 for older files.
    pub fn version(&self) -> u32 {
        self.data.version
    }

    /// The agent whose calls were recorded, when they all came from one agent.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.data.agent_id.as_ref()
    }

    /// When the recording finished, as the recorder's caller gave it (RFC 3339).
    pub fn recorded_at(&self) -> &str {
        &self.data.recorded_at
    }

    /// The recorded provider's [`describe`](crate::provider::ModelProvider::describe) text
    /// (kind and model or base URL, never a key).
    pub fn recorded_provider(&self) -> &str {
        &self.data.recorded_provider
    }

    /// The recording's random id (version 2; `None` for version 1).
    pub fn cassette_id(&self) -> Option<&str> {
        self.data.cassette_id.as_deref()
    }

    /// The name of the hash filter the recording used, if any.
    pub fn hash_filter(&self) -> Option<&str> {
        self.data.hash_filter.as_deref()
    }

    /// The digest over envelope and entries (version 2; `None` for version 1).
    pub fn envelope_hash(&self) -> Option<&str> {
        self.data.envelope_hash.as_deref()
    }

    /// The recorded calls of the run itself, turn 0 first.
    pub fn entries(&self) -> &[Entry] {
        &self.data.entries
    }

    /// The recorded calls of each delegated child run, in tree order (version 4; empty for a
    /// run without children or an older cassette).
    pub fn children(&self) -> &[ChildSection] {
        &self.data.children
    }

    /// The calls recorded for the run at `path` in the tree (`""`: the run itself), if the
    /// cassette has them.
    pub fn section(&self, path: &str) -> Option<&[Entry]> {
        if path.is_empty() {
            return Some(&self.data.entries);
        }
        self.data
            .children
            .iter()
            .find(|c| c.path == path)
            .map(|c| c.entries.as_slice())
    }

    /// The tool catalogs of the MCP servers the recorded run used, by server name: each the
    /// JSON list of the tools the server offered (as `runtape` stores a catalog blob). A
    /// replay uses them instead of starting the servers. Empty for a cassette without MCP.
    pub fn catalogs(&self) -> &BTreeMap<String, Value> {
        &self.data.catalogs
    }

    /// The MCP tool lists the recorded run got after each server's first one
    /// ([`catalogs`](Self::catalogs)), in order, each with the step boundary it was recorded
    /// at: a replay serves them there. Empty for a cassette written before they were kept.
    pub fn catalog_changes(&self) -> &[CatalogChange] {
        &self.data.catalog_changes
    }

    /// The MCP tool lists the child at `path` recorded itself (`""`: the run itself, whose
    /// later lists are [`catalog_changes`](Self::catalog_changes)): when a server's list
    /// changed during a delegated child's run, every list the child got of that server, each
    /// with the count of the child's own model calls made before it. A replay serves the child
    /// these at its own step boundaries. Empty for a child whose lists never changed and for a
    /// cassette written before they were kept.
    pub fn catalog_changes_in(&self, path: &str) -> &[CatalogChange] {
        if path.is_empty() {
            return &self.data.catalog_changes;
        }
        self.data
            .children
            .iter()
            .find(|c| c.path == path)
            .map_or(&[], |c| c.catalog_changes.as_slice())
    }

    /// The MCP tool results of the recorded run, in order; a replay answers each MCP call
    /// from them (the first unused one with the same tool and arguments) instead of calling
    /// the server.
    pub fn tool_results(&self) -> &[ToolEntry] {
        &self.data.tool_results
    }

    /// What the recorded run read from and published to global memory (revision 5), in
    /// order; a replay serves it ([`super::RecordedMemoryPlayer`]).
    pub fn memory(&self) -> &RecordedMemory {
        &self.data.memory
    }

    /// The history the recorded run began with when it was a run of a session (revision 5):
    /// a replay begins with it instead of reading the session's previous run.
    pub fn session(&self) -> Option<&RecordedSession> {
        self.data.session.as_ref()
    }

    /// What the retriever answered the recorded run itself, in order (revision 5): a replay
    /// serves these instead of running the retriever.
    pub fn retrievals(&self) -> &[RetrievalEntry] {
        &self.data.retrievals
    }

    /// The retrievals recorded for the run at `path` in the tree (`""`: the run itself).
    pub fn retrievals_in(&self, path: &str) -> &[RetrievalEntry] {
        if path.is_empty() {
            return &self.data.retrievals;
        }
        self.data
            .children
            .iter()
            .find(|c| c.path == path)
            .map_or(&[], |c| c.retrievals.as_slice())
    }

    /// True when the recording holds retrievals, in any section.
    pub fn has_retrievals(&self) -> bool {
        !self.data.retrievals.is_empty()
            || self.data.children.iter().any(|c| !c.retrievals.is_empty())
    }

    /// How many calls were recorded, the children's included.
    pub fn len(&self) -> usize {
        self.data.entries.len()
            + self
                .data
                .children
                .iter()
                .map(|c| c.entries.len())
                .sum::<usize>()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's text: indented JSON ending in a newline. Fails only if an entry cannot be
    /// serialised, which recording already ruled out.
    pub fn to_json(&self) -> Result<String, CassetteError> {
        let mut text = serde_json::to_string_pretty(&self.data)
            .map_err(|e| CassetteError::unencodable("cassette", e.to_string()))?;
        text.push('\n');
        Ok(text)
    }

    /// Writes the cassette to `path` atomically: the text goes to a temporary file in the
    /// same directory, is flushed to disk, then renamed over `path`, so a reader sees the old
    /// file or the new one, never half of one.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CassetteError> {
        let path = path.as_ref();
        let text = self.to_json()?;
        write_atomically(path, text.as_bytes())
    }
}

/// Distinguishes temporary files of concurrent saves in one process.
static SAVE_COUNTER: AtomicU64 = AtomicU64::new(0);

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CassetteError> {
    let io_error = |action: &'static str, e: std::io::Error| CassetteError::Io {
        path: path.display().to_string(),
        action,
        message: e.to_string(),
    };
    let file_name = path.file_name().ok_or_else(|| CassetteError::Io {
        path: path.display().to_string(),
        action: "write",
        message: "the path names no file".to_owned(),
    })?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let n = SAVE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(
        ".{}.tmp-{}-{n}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| io_error("create a temporary file next to", e))?;
        file.write_all(bytes).map_err(|e| io_error("write", e))?;
        file.sync_all().map_err(|e| io_error("flush", e))?;
        fs::rename(&temp, path).map_err(|e| io_error("rename the temporary file onto", e))
    })();
    if written.is_err() {
        // Best effort: the temporary file may not exist; the original error is what matters.
        let _ = fs::remove_file(&temp);
    }
    written?;
    // Persist the rename itself where the platform allows opening a directory; failing to
    // do so leaves a complete file that may revert to the old one after a power cut.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
