//! Replaying global memory from a cassette (revision 5): [`RecordedMemoryPlayer`] answers a
//! replayed run's loads and publishes with what the recorded run saw, in order — each run of
//! a tree its own, by its place in the tree — so a replay is offline for global memory too and
//! changes no one's memory.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::MemorySource;
use super::format::Cassette;
use crate::machine::{PublishOutcome, Versioned};

/// What one run of the recorded tree loaded and published, in order.
type Queues = (
    VecDeque<(String, BTreeMap<String, Versioned>)>,
    VecDeque<PublishOutcome>,
);

/// The recorded loads and publish outcomes of one cassette, by the place in the tree of the
/// run that made them, each served once.
pub struct RecordedMemoryPlayer {
    left: Mutex<BTreeMap<String, Queues>>,
}

impl RecordedMemoryPlayer {
    /// What `cassette` recorded, none served yet; `None` when it recorded no global memory.
    pub fn of(cassette: &Cassette) -> Option<Self> {
        let m = cassette.memory();
        if m.is_empty() {
            return None;
        }
        let mut left: BTreeMap<String, Queues> = BTreeMap::new();
        for l in &m.loads {
            let q = left.entry(l.path.clone()).or_default();
            q.0.push_back((l.name.clone(), l.entries.clone()));
        }
        for p in &m.publishes {
            let q = left.entry(p.path.clone()).or_default();
            q.1.push_back(p.outcome.clone());
        }
        Some(RecordedMemoryPlayer {
            left: Mutex::new(left),
        })
    }
}

impl MemorySource for RecordedMemoryPlayer {
    fn load(&self, path: &str, name: &str) -> Option<BTreeMap<String, Versioned>> {
        // A poisoned lock only means a panic elsewhere while it was held; the queues are whole.
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        let loads = &mut left.get_mut(path)?.0;
        if loads.front().is_some_and(|(n, _)| n == name) {
            return loads.pop_front().map(|(_, entries)| entries);
        }
        None
    }

    fn publish(&self, path: &str) -> Option<PublishOutcome> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        left.get_mut(path)?.1.pop_front()
    }
}
