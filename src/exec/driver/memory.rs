//! Global memory in the driver (revision 5): loading the run's view at its first step
//! boundary, and performing `PublishMemory`.
//!
//! - **Loading.** A run whose spec names a global memory reads every key's latest version
//!   from the store at its first step boundary (before its first model request) and records
//!   it as a `MemoryLoaded` event: the history says what the run saw, so a resume, a fork, a
//!   replay and `verify` see the same.
//! - **A fork** taken before its line loaded takes the view its nearest ancestor loaded after
//!   the fork point, if one did ([`crate::ledger::fork_view`]): the memory as of the fork
//!   point, never what its ancestors published later.
//! - **From a recording.** With a [`MemorySource`](crate::cassette::MemorySource) (a replay's
//!   cassette), loads and publish outcomes come from it and nothing touches the store.
//! - **Publishing.** `PublishMemory` is one store write (all or none, at most once per effect,
//!   fenced by the lease, refused when it would take the memory past the run's cap), then a
//!   read of what it did; the answer is the `MemoryPublished` event. Performed again after a crash, it finds its rows and answers the same. A cancel
//!   does not abandon it (see [`Driver::cancel_inflight`]): once a run publishes, the publish
//!   decides how it ends.

use super::Driver;
use crate::exec::perform::Completion;
use crate::exec::reads::off_thread;
use crate::ledger::ancestor_load;
use crate::machine::{
    EffectId, EffectRef, EventBody, PUBLISH_CAP_SEMANTICS, PublishOutcome, RunState, Staged,
};
use crate::store::global_memory::{load_entries, publish_outcome};
use crate::store::{Publication, Write, Written};

impl Driver {
    /// At a step boundary: queues the `MemoryLoaded` event of a run whose global memory is not
    /// loaded yet, read from the store now. Returns whether it queued it.
    pub(super) async fn load_global_memory(&mut self) -> Result<bool, crate::exec::EngineError> {
        let RunState::Preparing { run } = &self.state else {
            return Ok(false);
        };
        let Some(name) = self
            .spec
            .spec()
            .memory
            .as_ref()
            .and_then(|m| m.global.clone())
        else {
            return Ok(false);
        };
        if run.memory.global.is_some() {
            return Ok(false);
        }
        let source = crate::exec::read_lock(&self.shared.memory_source).clone();
        if let Some(source) = source {
            let path = self.tree_path().await?;
            let entries =
                source
                    .load(&path, &name)
                    .ok_or_else(|| crate::exec::EngineError::NotRecorded {
                        what: "load of",
                        name: name.to_owned(),
                    })?;
            self.queue.push_back(EventBody::MemoryLoaded {
                name,
                entries,
                replayed: true,
                from_ancestor: None,
            });
            return Ok(true);
        }
        // A fork takes the view its line loaded after the fork point, if one did: the memory
        // as of the fork point, without its ancestors' later publishes.
        let (read, run) = (name.clone(), self.run.clone());
        let inherited =
            off_thread(&self.shared.store, move |s| ancestor_load(s, &run, &read)).await?;
        if let Some(load) = inherited {
            self.queue.push_back(EventBody::MemoryLoaded {
                name,
                entries: load.entries,
                replayed: load.replayed,
                from_ancestor: Some(load.at),
            });
            return Ok(true);
        }
        let read = name.clone();
        let mut entries = off_thread(&self.shared.store, move |s| load_entries(s, &read)).await?;
        // Another process may know other secrets than this one: what lands in this run's
        // history is scrubbed of the ones this process knows, like any input.
        crate::secrets::global().scrub(&mut entries);
        self.queue.push_back(EventBody::MemoryLoaded {
            name,
            entries,
            replayed: false,
            from_ancestor: None,
        });
        Ok(true)
    }

    /// Starts `PublishMemory`: the write, then the read of its outcome, as one future in
    /// flight whose result is the `MemoryPublished` event.
    pub(super) async fn publish_memory(
        &mut self,
        id: EffectId,
        name: String,
        writes: std::collections::BTreeMap<String, Staged>,
    ) {
        let mut publication = Publication::new(
            id.run.clone(),
            self.epoch(),
            EffectRef {
                seq: id.seq,
                index: id.index,
            },
            name,
            writes,
        );
        // The cap is held at the publish too, across every run writing the memory.
        let spec = self.spec.spec();
        if spec.semantics >= PUBLISH_CAP_SEMANTICS
            && let Some(m) = &spec.memory
        {
            publication = publication.capped(u64::from(m.limits.max_bytes_global));
        }
        let source = crate::exec::read_lock(&self.shared.memory_source).clone();
        if let Some(source) = source {
            let done = match self.tree_path().await.map(|path| source.publish(&path)) {
                Err(e) => Completion::Fatal(e),
                Ok(Some(outcome)) => Completion::Event(EventBody::MemoryPublished {
                    effect: id,
                    outcome,
                    replayed: true,
                }),
                Ok(None) => Completion::Fatal(crate::exec::EngineError::NotRecorded {
                    what: "outcome for the publish to",
                    name: publication.name.clone(),
                }),
            };
            self.inflight
                .push(Box::pin(futures_util::future::ready(done)));
            return;
        }
        let (store, queue) = (self.shared.store.clone(), self.shared.writes.clone());
        self.inflight.push(Box::pin(async move {
            match queue.write(Write::PublishMemory(publication.clone())).await {
                Err(e) => return Completion::Fatal(e.into()),
                Ok(Written::MemoryOverCap(refused)) => {
                    return Completion::Event(EventBody::MemoryPublished {
                        effect: id,
                        outcome: PublishOutcome::OverCap {
                            cap: refused.cap,
                            holds: refused.holds,
                            would_hold: refused.would_hold,
                        },
                        replayed: false,
                    });
                }
                Ok(_) => {}
            }
            match off_thread(&store, move |s| publish_outcome(s, &publication)).await {
                Ok(mut outcome) => {
                    crate::secrets::global().scrub(&mut outcome);
                    Completion::Event(EventBody::MemoryPublished {
                        effect: id,
                        outcome,
                        replayed: false,
                    })
                }
                Err(e) => Completion::Fatal(e),
            }
        }));
    }
}
