//! Recording: [`CassetteBuilder`] turns exchanges into sealed entries, and
//! [`RecordingProvider`] wraps a live provider and feeds its calls to one.
//!
//! Each exchange is checked the moment it is recorded, not when the file is loaded: the
//! response (after the redact hook) must still parse as a response, contain no integer that
//! canonical JSON cannot carry, and come back identical from a JSON round trip. An exchange
//! that fails is refused then, with its turn.

use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::error::CassetteError;
use super::format::{Cassette, CassetteData, ChildSection, Entry, RecordedResponse, VERSION};
use super::hash::{self, CassetteId, HashFilter, Prompt};
use super::load::check_rfc3339;
use crate::machine::{AgentId, ModelReply};
use crate::provider::{ModelProvider, ProviderError, ProviderRequest, TokenSink};

/// A redact hook: given one string of a response, returns it with sensitive patterns
/// replaced. It runs at record time over every string value of the stored response (reply
/// text, tool-call arguments, ids, error messages and body snippets) and over every stream
/// chunk. Object keys are left alone. Stored prompts are not redacted (they must hash to
/// their `promptHash`); see [`RecordOptions::store_prompts`].
pub type Redactor = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// What to do while recording.
#[derive(Clone)]
pub struct RecordOptions {
    /// Normalises prompts before hashing; its name is stored as `hashFilter` and the replay
    /// must use the same one.
    pub hash_filter: Option<HashFilter>,
    /// Scrubs the stored responses and chunks (see [`Redactor`]). What is replayed is what
    /// was stored, so the replayed replies carry the redacted text.
    pub redact: Option<Redactor>,
    /// Store each normalised prompt in clear (`prompt` in the entry), so that a replay
    /// mismatch shows a readable diff of the two requests. On by default; turn it off to store
    /// prompts only as hashes (a mismatch then names the turn and both hashes, without a diff).
    /// The redact hook does not apply to stored prompts (a stored prompt must hash to its
    /// `promptHash`), so turn this off for prompts that hold secrets. API keys are never part
    /// of a prompt.
    pub store_prompts: bool,
    /// The recording's id; `None` draws a random one. Give one only to make an export
    /// reproducible (see [`CassetteId::from_hex`]).
    pub cassette_id: Option<CassetteId>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            hash_filter: None,
            redact: None,
            store_prompts: true,
            cassette_id: None,
        }
    }
}

impl std::fmt::Debug for RecordOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOptions")
            .field("hash_filter", &self.hash_filter)
            .field("redact", &self.redact.is_some())
            .field("store_prompts", &self.store_prompts)
            .field("cassette_id", &self.cassette_id)
            .finish()
    }
}

/// Which agents the recorded calls came from, to fill `agentId`.
#[derive(Clone, Debug)]
enum Agents {
    None,
    One(AgentId),
    Several,
}

/// Builds a version-2 cassette one exchange at a time. Use it directly to export a stored
/// run (push each model call's agent, prompt, result and stream chunks in order); the
/// [`RecordingProvider`] uses it for live calls.
#[derive(Clone, Debug)]
pub struct CassetteBuilder {
    options: RecordOptions,
    cassette_id: CassetteId,
    entries: Vec<Entry>,
    agents: Agents,
    catalogs: std::collections::BTreeMap<String, Value>,
    tool_results: Vec<super::format::ToolEntry>,
    catalog_changes: Vec<super::format::CatalogChange>,
    /// The delegated children's sections, in the order their first call was recorded.
    children: Vec<ChildSection>,
    /// Each child's first tool list of each server, by `(path, server)`, with the count of
    /// the child's entries before it; moved into the child's section (as its first list) when
    /// a later list of that server follows, `None` once moved.
    child_first_lists: std::collections::BTreeMap<(String, String), Option<(u64, Value)>>,
    memory: super::format::RecordedMemory,
    session: Option<super::session::RecordedSession>,
    retrievals: Vec<super::session::RetrievalEntry>,
}

impl CassetteBuilder {
    /// An empty recording. Fails only when no id was given and the random source fails.
    pub fn new(mut options: RecordOptions) -> Result<Self, CassetteError> {
        let cassette_id = match options.cassette_id.take() {
            Some(id) => id,
            None => CassetteId::random()?,
        };
        Ok(CassetteBuilder {
            options,
            cassette_id,
            entries: Vec::new(),
            agents: Agents::None,
            catalogs: Default::default(),
            tool_results: Vec::new(),
            catalog_changes: Vec::new(),
            children: Vec::new(),
            child_first_lists: Default::default(),
            memory: Default::default(),
            session: None,
            retrievals: Vec::new(),
        })
    }

    /// Records `server`'s tool catalog (the JSON list a catalog blob holds), so a replay
    /// needs no server to know its tools. Call it for each list the run recorded, in order,
    /// between the model calls it came between: the first of a server becomes its catalog,
    /// each later one a [`CatalogChange`](super::format::CatalogChange) at the current entry.
    pub fn add_catalog(&mut self, server: &str, catalog: Value) -> Result<(), CassetteError> {
        super::hash::check_numbers(&catalog)
            .map_err(|d| CassetteError::unencodable(format!("catalog of {server}"), d))?;
        if self.catalogs.contains_key(server) {
            self.catalog_changes.push(super::format::CatalogChange {
                server: server.to_owned(),
                at_entry: self.entries.len() as u64,
                catalog,
            });
        } else {
            self.catalogs.insert(server.to_owned(), catalog);
        }
        Ok(())
    }

    /// [`add_catalog`](Self::add_catalog) for the run at `path` in the delegation tree (`""`:
    /// the run itself; else a child's path, as for [`push_in`](Self::push_in)). Call it for
    /// each list the child recorded, in order, between the child's model calls it came
    /// between. A child's first list of a server becomes the server's catalog when no run
    /// listed it before; once a later list of that server follows, the child's section keeps
    /// all of them, its first included, each at the count of the child's own entries before
    /// it, so a replay serves the child its own lists whatever other runs of the tree saw. A
    /// child whose lists never changed adds nothing to its section.
    pub fn add_catalog_in(
        &mut self,
        path: &str,
        server: &str,
        catalog: Value,
    ) -> Result<(), CassetteError> {
        if path.is_empty() {
            return self.add_catalog(server, catalog);
        }
        super::load::check_tree_path("recording", path)?;
        super::hash::check_numbers(&catalog)
            .map_err(|d| CassetteError::unencodable(format!("catalog of {server}"), d))?;
        if !self.catalogs.contains_key(server) {
            self.catalogs.insert(server.to_owned(), catalog.clone());
        }
        let at_entry = self
            .children
            .iter()
            .find(|c| c.path == path)
            .map_or(0, |c| c.entries.len() as u64);
        let key = (path.to_owned(), server.to_owned());
        let Some(first) = self.child_first_lists.get_mut(&key) else {
            self.child_first_lists
                .insert(key, Some((at_entry, catalog)));
            return Ok(());
        };
        let mut lists = Vec::new();
        if let Some((first_at, first_catalog)) = first.take() {
            lists.push(super::format::CatalogChange {
                server: server.to_owned(),
                at_entry: first_at,
                catalog: first_catalog,
            });
        }
        lists.push(super::format::CatalogChange {
            server: server.to_owned(),
            at_entry,
            catalog,
        });
        self.section_mut(path).catalog_changes.extend(lists);
        Ok(())
    }

    /// The section of the child at `path`, created empty when it has none yet.
    fn section_mut(&mut self, path: &str) -> &mut ChildSection {
        let index = match self.children.iter().position(|c| c.path == path) {
            Some(i) => i,
            None => {
                self.children.push(ChildSection {
                    path: path.to_owned(),
                    entries: Vec::new(),
                    retrievals: Vec::new(),
                    catalog_changes: Vec::new(),
                });
                self.children.len() - 1
            }
        };
        &mut self.children[index]
    }

    /// Whether a catalog of `server` was recorded.
    pub fn has_catalog(&self, server: &str) -> bool {
        self.catalogs.contains_key(server)
    }

    /// Records an MCP tool call's result, after the last one, with the bytes of the files it
    /// carries (those its outcome names, in order).
    pub fn push_tool_result(
        &mut self,
        tool: &str,
        args: Value,
        outcome: crate::machine::ToolOutcome,
        files: &[Vec<u8>],
    ) -> Result<(), CassetteError> {
        use base64::Engine as _;
        let entry = super::format::ToolEntry {
            tool: tool.to_owned(),
            args,
            outcome,
            files: files
                .iter()
                .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
                .collect(),
        };
        let value = serde_json::to_value(&entry).map_err(|e| {
            CassetteError::unencodable(format!("tool result of {tool}"), e.to_string())
        })?;
        super::hash::check_numbers(&value)
            .map_err(|d| CassetteError::unencodable(format!("tool result of {tool}"), d))?;
        self.tool_results.push(entry);
        Ok(())
    }

    /// Records a load of global memory `name` by the run at `path` in the recorded tree (`""`:
    /// the recorded run; revision 5), after the last one: a replay serves it instead of
    /// reading its database.
    pub fn add_memory_load(
        &mut self,
        path: &str,
        name: &str,
        entries: std::collections::BTreeMap<String, crate::machine::Versioned>,
    ) {
        self.memory.loads.push(super::format::MemoryLoad {
            path: path.to_owned(),
            name: name.to_owned(),
            entries,
        });
    }

    /// Records a publish's outcome by the run at `path` (revision 5), after the last one: a
    /// replay serves it and writes nothing.
    pub fn add_memory_publish(&mut self, path: &str, outcome: crate::machine::PublishOutcome) {
        self.memory.publishes.push(super::format::MemoryPublish {
            path: path.to_owned(),
            outcome,
        });
    }

    /// Records that the run began as run `index` of session `name`, toward `goal`, with the
    /// history `seed` carries (its `SessionStart`, revision 5): a replay begins with it. Call
    /// it once, for the recorded run itself (a delegated child is never a session run).
    pub fn set_session(
        &mut self,
        name: &str,
        index: u64,
        goal: &str,
        seed: crate::machine::SessionSeed,
    ) -> Result<(), CassetteError> {
        let recorded = super::session::RecordedSession::sealed(
            self.cassette_id.as_str(),
            name,
            index,
            goal,
            seed,
        )
        .map_err(|d| CassetteError::unencodable("session", d))?;
        let value = serde_json::to_value(recorded.seed())
            .map_err(|e| CassetteError::unencodable("session", e.to_string()))?;
        super::hash::check_numbers(&value).map_err(|d| CassetteError::unencodable("session", d))?;
        self.session = Some(recorded);
        Ok(())
    }

    /// Records what the retriever answered the run at `path` (`""`: the run itself; else a
    /// child's path, as for [`push_in`](Self::push_in)) for `agent`'s turn `turn`, asked
    /// `query` (its `run` is dropped), after that run's earlier retrievals (revision 5).
    /// Returns its index in its section.
    pub fn push_retrieval_in(
        &mut self,
        path: &str,
        agent: &AgentId,
        turn: u64,
        query: Value,
        retrieval: crate::machine::Retrieval,
    ) -> Result<u64, CassetteError> {
        if !path.is_empty() {
            super::load::check_tree_path("recording", path)?;
        }
        let section = (!path.is_empty()).then_some(path);
        let count = match section {
            None => self.retrievals.len(),
            Some(p) => self
                .children
                .iter()
                .find(|c| c.path == p)
                .map_or(0, |c| c.retrievals.len()),
        };
        let index = u64::try_from(count).unwrap_or(u64::MAX);
        let location = || format!("retrieval {index}");
        let entry = super::session::RetrievalEntry::sealed(
            self.cassette_id.as_str(),
            section,
            index,
            agent,
            turn,
            query,
            retrieval,
        )
        .map_err(|d| CassetteError::unencodable(location(), d))?;
        for value in [
            entry.query().clone(),
            serde_json::to_value(entry.retrieval())
                .map_err(|e| CassetteError::unencodable(location(), e.to_string()))?,
        ] {
            super::hash::check_numbers(&value)
                .map_err(|d| CassetteError::unencodable(location(), d))?;
        }
        match section {
            None => self.retrievals.push(entry),
            Some(p) => self.section_mut(p).retrievals.push(entry),
        }
        Ok(index)
    }

    /// The recording's id.
    pub fn cassette_id(&self) -> &CassetteId {
        &self.cassette_id
    }

    /// How many exchanges of the run itself were recorded so far (the turn index its next one
    /// gets).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True before the first exchange (of the run or of a child).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.children.is_empty()
    }

    /// Records one exchange as the next turn and returns its turn index. `prompt` is what was
    /// sent (before the hash filter, which this applies); `chunks` are the text deltas the
    /// provider streamed, in order. On error nothing is recorded.
    pub fn push(
        &mut self,
        agent: &AgentId,
        prompt: Prompt,
        result: Result<ModelReply, ProviderError>,
        chunks: Vec<String>,
    ) -> Result<u64, CassetteError> {
        self.push_in("", agent, prompt, result, chunks)
    }

    /// [`push`](Self::push) for the run at `path` in the delegation tree: `""` for the run
    /// itself, a child's path (`3.0`, `3.0.5.1`: the `SEQ.INDEX` of each delegating effect
    /// from the top) for a delegated child, whose calls go to its own section (version 4),
    /// numbered from 0. Returns the turn index within that section.
    pub fn push_in(
        &mut self,
        path: &str,
        agent: &AgentId,
        prompt: Prompt,
        result: Result<ModelReply, ProviderError>,
        chunks: Vec<String>,
    ) -> Result<u64, CassetteError> {
        if !path.is_empty() {
            super::load::check_tree_path("recording", path)?;
        }
        let section_len = if path.is_empty() {
            self.entries.len()
        } else {
            self.children
                .iter()
                .find(|c| c.path == path)
                .map_or(0, |c| c.entries.len())
        };
        let turn = u64::try_from(section_len).unwrap_or(u64::MAX);
        let section = (!path.is_empty()).then_some(path);
        let location = || match section {
            Some(p) => format!("entry {turn} of child {p}"),
            None => format!("entry {turn}"),
        };
        let prompt = match &self.options.hash_filter {
            Some(filter) => filter.apply(prompt),
            None => prompt,
        };
        let prompt_hash = hash::prompt_hash(&prompt)
            .map_err(|d| CassetteError::unencodable(format!("request of turn {turn}"), d))?;
        // Registered secret values never reach a cassette (the redact hook comes after).
        let secrets = crate::secrets::global();
        let mut response = RecordedResponse::from(result);
        secrets.scrub(&mut response);
        let chunks = if secrets.is_empty() {
            chunks
        } else {
            let mut stream = secrets.stream();
            let mut clean: Vec<String> = chunks.iter().map(|c| stream.push(c)).collect();
            let rest = stream.finish();
            match clean.last_mut() {
                Some(last) => last.push_str(&rest),
                None if !rest.is_empty() => clean.push(rest),
                None => {}
            }
            clean.retain(|c| !c.is_empty());
            clean
        };
        let (response, chunks) = self.redacted(response, chunks, turn)?;
        let stored_prompt = self.options.store_prompts.then_some(prompt);
        let entry = Entry::sealed(
            self.cassette_id.as_str(),
            section,
            turn,
            prompt_hash,
            response,
            chunks,
            stored_prompt,
        )
        .map_err(|d| CassetteError::unencodable(location(), d))?;
        round_trip(&entry).map_err(|d| CassetteError::unencodable(location(), d))?;
        match section {
            None => self.entries.push(entry),
            Some(p) => self.section_mut(p).entries.push(entry),
        }
        self.agents = match std::mem::replace(&mut self.agents, Agents::None) {
            Agents::None => Agents::One(agent.clone()),
            Agents::One(a) if &a == agent => Agents::One(a),
            _ => Agents::Several,
        };
        Ok(turn)
    }

    /// Applies the redact hook, then re-reads the response so a hook that broke its shape
    /// fails here.
    fn redacted(
        &self,
        response: RecordedResponse,
        chunks: Vec<String>,
        turn: u64,
    ) -> Result<(RecordedResponse, Vec<String>), CassetteError> {
        let Some(redact) = &self.options.redact else {
            return Ok((response, chunks));
        };
        let location = || format!("entry {turn}");
        let mut value = serde_json::to_value(&response)
            .map_err(|e| CassetteError::unencodable(location(), e.to_string()))?;
        redact_strings(&mut value, redact.as_ref());
        let response = serde_json::from_value(value).map_err(|e| {
            CassetteError::unencodable(
                location(),
                format!("after the redact hook the response is no longer a valid reply or error ({e}); make the hook leave field values such as `stop` or `bad_request` alone"),
            )
        })?;
        let chunks = chunks.iter().map(|c| redact(c)).collect();
        Ok((response, chunks))
    }

    /// The finished cassette. `recorded_at` is the caller's RFC 3339 time (this module reads
    /// no clock); `recorded_provider` describes the source (a provider's `describe()`).
    /// `agentId` is set when every call came from one agent.
    pub fn finish(
        self,
        recorded_at: &str,
        recorded_provider: &str,
    ) -> Result<Cassette, CassetteError> {
        check_rfc3339(recorded_at)
            .map_err(|d| CassetteError::bad_field("recording", "recordedAt", d))?;
        let mut children = self.children;
        // Numeric order of the paths is tree order: a child's path extends its parent's.
        children.sort_by_key(|c| super::load::path_key(&c.path));
        let mut data = CassetteData {
            version: if children.is_empty() {
                VERSION
            } else {
                super::format::TREE_VERSION
            },
            agent_id: match self.agents {
                Agents::One(agent) => Some(agent),
                Agents::None | Agents::Several => None,
            },
            recorded_at: recorded_at.to_owned(),
            recorded_provider: recorded_provider.to_owned(),
            cassette_id: Some(self.cassette_id.as_str().to_owned()),
            hash_filter: self
                .options
                .hash_filter
                .as_ref()
                .map(|f| f.name().to_owned()),
            envelope_hash: None,
            entries: self.entries,
            catalogs: self.catalogs,
            tool_results: self.tool_results,
            catalog_changes: self.catalog_changes,
            children,
            memory: self.memory,
            session: self.session,
            retrievals: self.retrievals,
        };
        data.envelope_hash = data
            .compute_envelope_hash()
            .map_err(|d| CassetteError::unencodable("envelope", d))?;
        Ok(Cassette { data })
    }
}

fn redact_strings(value: &mut Value, redact: &(dyn Fn(&str) -> String + Send + Sync)) {
    match value {
        Value::String(s) => *s = redact(s),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_strings(v, redact)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_strings(v, redact)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Writes the entry as it will be saved and reads it back: anything that does not survive
/// (a float the parser rounds differently, a field that reads back as another) is refused.
fn round_trip(entry: &Entry) -> Result<(), String> {
    let text = serde_json::to_string(entry).map_err(|e| e.to_string())?;
    let back: Entry = serde_json::from_str(&text)
        .map_err(|e| format!("the entry does not read back from its own JSON: {e}"))?;
    if &back == entry {
        Ok(())
    } else {
        Err("the entry reads back differently from its own JSON (a number JSON cannot carry exactly?)".into())
    }
}

/// Records every call made through it while passing it on unchanged: the request's prompt
/// hash, the reply or error, and the streamed chunks (which still reach the caller's token
/// sink as they arrive). It sees only requests and replies, never the wrapped provider's
/// configuration or key. Entries are numbered in the order calls complete; a call whose
/// future is dropped (cancelled) records nothing. A call of a delegated child run (its
/// request's [`origin`](crate::provider::ProviderRequest::origin) has a path) goes to the
/// child's own section, so a whole tree records into one cassette.
pub struct RecordingProvider {
    inner: Arc<dyn ModelProvider>,
    state: Mutex<RecorderState>,
}

struct RecorderState {
    builder: CassetteBuilder,
    /// The first exchange that could not be recorded; later calls pass through unrecorded.
    failed: Option<CassetteError>,
}

impl RecordingProvider {
    /// Wraps `inner`. Fails only when no cassette id was given and the random source fails.
    pub fn new(
        inner: Arc<dyn ModelProvider>,
        options: RecordOptions,
    ) -> Result<Self, CassetteError> {
        Ok(RecordingProvider {
            inner,
            state: Mutex::new(RecorderState {
                builder: CassetteBuilder::new(options)?,
                failed: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, RecorderState> {
        // A panic while holding the lock cannot leave the state half-updated (every update
        // is a single push or assignment), so a poisoned lock is safe to keep using.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many calls were recorded so far.
    pub fn len(&self) -> usize {
        self.state().builder.len()
    }

    /// True before the first recorded call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The error that stopped the recording, if an exchange could not be recorded. That call
    /// returned it as a `bad_request` [`ProviderError`]; later calls pass through unrecorded.
    pub fn last_error(&self) -> Option<CassetteError> {
        self.state().failed.clone()
    }

    /// The cassette of every call so far, with `recorded_at` (RFC 3339) as its time. Call it
    /// when the run is over; calling it again later includes the later calls (same
    /// cassetteId). Fails with the recording error if an exchange could not be recorded.
    pub fn finish(&self, recorded_at: &str) -> Result<Cassette, CassetteError> {
        let state = self.state();
        if let Some(error) = &state.failed {
            return Err(error.clone());
        }
        state
            .builder
            .clone()
            .finish(recorded_at, &self.inner.describe())
    }

    fn record(
        &self,
        request: &ProviderRequest,
        result: &Result<ModelReply, ProviderError>,
        chunks: Vec<String>,
    ) -> Result<(), CassetteError> {
        let mut state = self.state();
        if state.failed.is_some() {
            return Ok(());
        }
        let pushed = state.builder.push_in(
            &request.origin.path,
            &request.agent,
            Prompt::of(request),
            result.clone(),
            chunks,
        );
        match pushed {
            Ok(_) => Ok(()),
            Err(error) => {
                state.failed = Some(error.clone());
                Err(error)
            }
        }
    }
}

impl ModelProvider for RecordingProvider {
    fn describe(&self) -> String {
        format!("recording:{}", self.inner.describe())
    }

    fn complete<'a>(
        &'a self,
        request: &'a ProviderRequest,
        tokens: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ProviderError>> {
        Box::pin(async move {
            let chunks = Mutex::new(Vec::new());
            let sink = |delta: &str| {
                chunks
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(delta.to_owned());
                tokens(delta);
            };
            let result = self.inner.complete(request, &sink).await;
            let chunks = chunks
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match self.record(request, &result, chunks) {
                Ok(()) => result,
                Err(error) => Err(error.to_provider_error(&self.describe())),
            }
        })
    }
}
