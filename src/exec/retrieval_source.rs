//! Where a run's retrievals come from when the retriever is not run (revision 5): a
//! [`RetrievalSource`] registered with
//! [`Engine::use_retrieval_source`](super::Engine::use_retrieval_source) answers each
//! `Retrieve` effect in place of the retriever — `runtape replay` serves the passages a
//! cassette recorded, so a replay runs no retriever and sees exactly what the recorded run saw.

use serde_json::Value;

use crate::machine::Retrieval;

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
