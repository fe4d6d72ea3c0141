//! Cassettes: recorded model exchanges in a portable JSON file, for testing agents offline and
//! checking model upgrades.
//!
//! Record a run by wrapping its provider in a [`RecordingProvider`], [`save`] the
//! [`Cassette`] it produces, and replay it later with a [`CassetteProvider`], which answers
//! the same requests with the same replies, errors and token chunks, and fails loudly when
//! the requests drift. [`diff`] compares two recordings by what the model did.
//! [`export_run`] turns a stored run into its cassette; to build one from other records, push
//! each model call into a [`CassetteBuilder`].
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use runtape::cassette::{
//!     CassetteProvider, LoadOptions, RecordOptions, RecordingProvider, ReplayOptions,
//! };
//! use runtape::machine::{AgentId, Message, ModelReply, Remaining, Role};
//! use runtape::provider::{ModelProvider, ProviderRequest, ScriptedProvider};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let request = ProviderRequest {
//!     agent: AgentId::from("geo"),
//!     model: "any".into(),
//!     messages: Arc::new(vec![
//!         Message::text(Role::System, "Answer in one word."),
//!         Message::text(Role::User, "Capital of France?"),
//!     ]),
//!     tools: vec![],
//!     remaining: Remaining::default(),
//!     attempt: 1,
//!     ..ProviderRequest::default()
//! };
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("geo.cassette.json");
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! runtime.block_on(async {
//!     // Record: the scripted provider stands in for a live model.
//!     let model = ScriptedProvider::replies("demo", vec![ModelReply::text("Paris")]);
//!     let recorder = RecordingProvider::new(Arc::new(model), RecordOptions::default())?;
//!     let live_chunks = Mutex::new(Vec::new());
//!     let live = recorder
//!         .complete(&request, &|d| live_chunks.lock().unwrap().push(d.to_owned()))
//!         .await?;
//!     recorder.finish("2025-01-31T12:00:00Z")?.save(&path)?;
//!
//!     // Replay: same reply, same token chunks, no model.
//!     let replay = CassetteProvider::load(&path, &LoadOptions::default(), ReplayOptions::default())?;
//!     let replayed_chunks = Mutex::new(Vec::new());
//!     let replayed = replay
//!         .complete(&request, &|d| replayed_chunks.lock().unwrap().push(d.to_owned()))
//!         .await?;
//!     assert_eq!(replayed, live);
//!     assert_eq!(replayed_chunks.into_inner()?, live_chunks.into_inner()?);
//!     assert!(replay.is_finished());
//!     Ok::<(), Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```
//!
//! # The file (version 3)
//!
//! ```text
//! { "version": 3, "agentId": "geo", "recordedAt": "2025-01-31T12:00:00Z",
//!   "recordedProvider": "scripted:demo", "cassetteId": "<32 hex>",
//!   "hashFilter": "date-v1", "envelopeHash": "<64 hex>",
//!   "entries": [ { "turnIndex": 0, "promptHash": "<64 hex>", "responseHash": "<64 hex>",
//!                  "response": { "reply": { "text": "Paris", ... } },
//!                  "chunks": ["Paris"], "prompt": { "messages": [...], "tools": [...] } } ] }
//! ```
//!
//! A cassette exported from a stored run may also carry what the run got from outside
//! besides its model calls, each covered by `envelopeHash`: MCP tool lists and results
//! (`catalogs`, `catalogChanges`, `toolResults`), the global memory it loaded and its publish
//! outcomes (`memory`), the history a session run began with (`session`, with its own
//! `sessionHash`) and the retriever's answers (`retrievals`, each with its `retrievalHash`;
//! a child's in its section; so are a child's own tool lists when one changed during its run,
//! as its section's `catalogChanges`) — see [`RecordedSession`] and [`RetrievalEntry`].
//!
//! Envelope and entry fields are camelCase; the reply or error inside `response` keeps its own
//! serde form ([`ModelReply`](crate::machine::ModelReply) and
//! [`ProviderError`](crate::provider::ProviderError), snake_case). Optional fields
//! (`agentId`, `hashFilter`, `chunks`, `prompt`) are left out when empty; unknown fields are
//! refused. Version 2 is the same file with `promptHash` over the messages and tools only;
//! version 1 is version 2 without `cassetteId`, `responseHash` and `envelopeHash`. Both are
//! still read, and a replay compares each request with an old entry the way that entry was
//! hashed (so a version-2 recording does not notice a changed setting; re-record it to).
//!
//! # The hashes
//!
//! All three are lowercase hex SHA-256 of the RFC 8785 canonical JSON of a value:
//!
//! - `promptHash` covers `{"messages", "tools", "settings"?, "output_schema"?}` of the
//!   request ([`Prompt`]) after the hash filter: the model settings (temperature, stop,
//!   reasoning, ...) and the structured-output schema are left out when absent, so a request
//!   without them hashes as it did in version 2. The model, attempt number and remaining
//!   budget are not part of the prompt.
//! - `responseHash` covers `{cassetteId, turnIndex, promptHash, response}`, plus `chunks`
//!   when the entry has any (so edited chunks are caught too). The cassette id binds each
//!   entry to its recording; a stored prompt is covered through `promptHash`, which it must
//!   hash to.
//! - `envelopeHash` covers `{version, agentId?, recordedAt, recordedProvider, cassetteId,
//!   hashFilter?, entries}`, where `entries` is the list of the entries' `responseHash`
//!   values in order, so adding, removing or reordering entries changes it.
//!
//! The hashes detect edits, splices and downgrades; they are not signatures. See
//! [`Cassette::load`] for the checks and the error each tamper produces.
//!
//! # What is stored, and what is not
//!
//! Responses (replies and errors) and stream chunks are stored with every secret value
//! registered in [`crate::secrets`] replaced by `[redacted:NAME]`, then after the
//! [`Redactor`] if one is given. Prompts are stored in clear by default, unredacted (which is what lets a replay
//! mismatch show a diff of the two requests); with [`RecordOptions::store_prompts`] off they
//! are stored only as their hash. The recorder sees requests and replies
//! only, never the wrapped provider's configuration or API key. Integers beyond ±(2^53 − 1)
//! cannot be represented exactly in canonical JSON and are refused when recorded.
//!
//! # Time and randomness
//!
//! This module reads no clock: `recordedAt` is given by the caller. The only outside input
//! is the random `cassetteId` drawn by [`CassetteId::random`] when no id is given (the replay
//! diff is computed with a 2-second time limit, which bounds its work and not its result's
//! correctness).
//!
//! [`save`]: Cassette::save

mod diff;
mod error;
mod export;
mod format;
mod hash;
mod load;
mod memory;
mod record;
mod replay;
mod retrievals;
mod session;
mod sources;
mod tools;

pub use diff::{
    CassetteDiff, DiffOptions, Difference, SectionDiff, ToolCallView, TurnDiff, TurnView, diff,
};
pub use error::CassetteError;
pub use export::{ExportError, export_run};
pub use format::{
    Cassette, CatalogChange, ChildSection, Entry, MemoryLoad, MemoryPublish, RecordedMemory,
    RecordedResponse, TREE_VERSION, ToolEntry, VERSION,
};
pub use hash::{CassetteId, HashFilter, Prompt};
pub use load::{DEFAULT_MAX_BYTES, LoadOptions};
pub use memory::RecordedMemoryPlayer;
pub use record::{CassetteBuilder, RecordOptions, RecordingProvider, Redactor};
pub use replay::{CassetteProvider, ReplayOptions};
pub use retrievals::RecordedRetrievals;
pub use session::{RecordedSession, RetrievalEntry, comparable_query};
pub use sources::{MemorySource, RetrievalSource};
pub use tools::{RecordedCatalog, RecordedTool, RecordedToolResults, ReplayPosition};
