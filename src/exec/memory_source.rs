//! Where a run's global memory comes from when it is not this database (revision 5): a
//! [`MemorySource`] registered with [`Engine::use_memory_source`](super::Engine::use_memory_source)
//! answers the driver's loads and publishes instead of the store — `runtape replay` serves the
//! loads and publish outcomes a cassette recorded, so a replay reads and writes no global
//! memory. The events it produces say so (`replayed`), and `verify` does not look for them in
//! the database.

use std::collections::BTreeMap;

use crate::machine::{PublishOutcome, Versioned};

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
