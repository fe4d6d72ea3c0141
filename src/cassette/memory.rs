//! Replaying global memory from a cassette (revision 5): [`RecordedMemoryPlayer`] answers a
//! replayed run's loads and publishes with what the recorded run saw, in order, so a replay
//! is offline for global memory too and changes no one's memory.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::format::{Cassette, MemoryLoad};
use crate::exec::MemorySource;
use crate::machine::{PublishOutcome, Versioned};

/// The recorded loads and publish outcomes of one cassette, each served once.
pub struct RecordedMemoryPlayer {
    left: Mutex<(VecDeque<MemoryLoad>, VecDeque<PublishOutcome>)>,
}

impl RecordedMemoryPlayer {
    /// What `cassette` recorded, none served yet; `None` when it recorded no global memory.
    pub fn of(cassette: &Cassette) -> Option<Self> {
        let m = cassette.memory();
        (!m.is_empty()).then(|| RecordedMemoryPlayer {
            left: Mutex::new((
                m.loads.iter().cloned().collect(),
                m.publishes.iter().cloned().collect(),
            )),
        })
    }
}

impl MemorySource for RecordedMemoryPlayer {
    fn load(&self, name: &str) -> Option<BTreeMap<String, Versioned>> {
        // A poisoned lock only means a panic elsewhere while it was held; the queues are whole.
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        if left.0.front().is_some_and(|l| l.name == name) {
            return left.0.pop_front().map(|l| l.entries);
        }
        None
    }

    fn publish(&self) -> Option<PublishOutcome> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        left.1.pop_front()
    }
}
