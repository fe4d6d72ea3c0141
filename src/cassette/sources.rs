//! What a run is served from in place of the world (revision 5): a [`MemorySource`]
//! registered with [`Engine::use_memory_source`](crate::exec::Engine::use_memory_source)
//! answers the driver's global memory loads and publishes instead of the store, and a
//! [`RetrievalSource`] registered with
//! [`Engine::use_retrieval_source`](crate::exec::Engine::use_retrieval_source) answers each
//! `Retrieve` effect instead of the retriever. `runtape replay` registers the cassette's
//! ([`RecordedMemoryPlayer`](super::RecordedMemoryPlayer),
//! [`RecordedRetrievals`](super::RecordedRetrievals)), so a replay reads and writes no global
//! memory, runs no retriever and sees exactly what the recorded run saw. The events a memory
//! source produces say so (`replayed`), and `verify` does not look for them in the database.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::machine::{PublishOutcome, Retrieval, Versioned};

/// Answers a run's global memory loads and publishes in place of the store. Each run asks by
/// its place in its delegation tree (`path`: `""` for the top run, `SEQ.INDEX[.SEQ.INDEX…]` for
/// a child), so a tree's runs each get their own.
pub trait MemorySource: Send + Sync {
    /// The entries of global memory `name` for the next load of the run at `path`, or `None`
    /// when the source has no (more) such load.
    fn load(&self, path: &str, name: &str) -> Option<BTreeMap<String, Versioned>>;

    /// The outcome of the next publish of the run at `path`, or `None` when the source has
    /// no (more) outcomes for it.
    fn publish(&self, path: &str) -> Option<PublishOutcome>;
}

/// Answers a run's retrievals in place of the retriever. Each run asks by its place in its
/// delegation tree (`path`: `""` for the top run, `SEQ.INDEX[.SEQ.INDEX…]` for a child), so a
/// tree's runs each get their own, in order.
pub trait RetrievalSource: Send + Sync {
    /// The answer to the next retrieval of the run at `path`, which would send the retriever
    /// `query` (the JSON object the retriever reads on stdin, `run` included). `Err` with one
    /// line when the source cannot answer it (it holds no more retrievals for that run, or a
    /// different query): the run is then cancelled with that line as the reason.
    fn retrieve(&self, path: &str, query: &Value) -> Result<Retrieval, String>;
}
