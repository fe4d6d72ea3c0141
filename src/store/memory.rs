//! An in-memory store: the same contract as SQLite (fencing, sequencing, leases) with nothing
//! on disk. For tests and for measuring the engine's own overhead.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::chunked::Chunked;
use super::protocol;
use super::{
    Ack, Commit, HeadRecord, LeaseRecord, NewRun, OutboxRecord, OutboxStatus, RunRecord, RunStatus,
    Store, StoreError, TransitionRecord, Write, Written,
};
use crate::machine::{Digest, EffectRef, RunId, StateKind};

#[derive(Clone, Default)]
struct MemRun {
    record: Option<RunRecord>,
    transitions: Chunked<TransitionRecord>,
    snapshots: BTreeMap<u64, Vec<u8>>,
    outbox: BTreeMap<EffectRef, OutboxRecord>,
    head: Option<HeadRecord>,
}

#[derive(Clone, Default)]
struct Inner {
    order: Vec<RunId>,
    runs: HashMap<RunId, MemRun>,
    blobs: HashMap<Digest, Vec<u8>>,
    bytes: u64,
    /// Each session's runs, in order.
    sessions: BTreeMap<String, Vec<RunId>>,
    global: super::global_memory::InMemory,
}

/// Runs kept in memory; lost when dropped. Every write is "durable" as soon as it is applied.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> Result<T, StoreError> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| StoreError::Io("memory store lock poisoned".into()))?;
        Ok(f(&mut inner))
    }
}

impl Inner {
    fn run_mut(&mut self, id: &RunId) -> Result<&mut MemRun, StoreError> {
        self.runs
            .get_mut(id)
            .ok_or_else(|| StoreError::UnknownRun(id.to_string()))
    }

    fn apply(&mut self, write: Write) -> Result<Written, StoreError> {
        match write {
            Write::CreateRun(new) => self.create(new),
            Write::Commit(c) => self.commit(*c),
            Write::Commits(cs) => {
                // All or none, like one SQL transaction: check the sequence first.
                if let Some(first) = cs.first() {
                    let r = self.run_mut(&first.run)?;
                    let rec = record_mut(r, &first.run)?;
                    let numbered = cs.iter().map(|c| protocol::Numbered {
                        run: &c.run,
                        epoch: c.epoch,
                        seq: c.seq,
                    });
                    protocol::in_sequence(&first.run, rec.lease_epoch, rec.seq, numbered)?;
                    head_fits(r, &first.run, cs.last().and_then(|c| c.head.as_ref()))?;
                }
                for c in cs {
                    self.commit(c)?;
                }
                Ok(Written::Done)
            }
            Write::MarkStarted {
                run,
                epoch,
                effects,
                expires_ms,
                head,
            } => {
                let r = self.run_mut(&run)?;
                fence(r, &run, epoch)?;
                head_fits(r, &run, head.as_ref())?;
                let answered = effects.iter().find(|e| {
                    r.outbox
                        .get(&e.effect)
                        .is_some_and(|o| o.status == OutboxStatus::Done)
                });
                protocol::may_start(&run, answered.map(|e| (e.effect.seq, e.effect.index)))?;
                record_mut(r, &run)?.lease_expires_ms = expires_ms;
                for e in effects {
                    let o = r.outbox.entry(e.effect).or_insert(OutboxRecord {
                        status: OutboxStatus::Pending,
                        ..e
                    });
                    if o.status == OutboxStatus::Pending {
                        o.status = OutboxStatus::Started;
                    }
                }
                if head.is_some() {
                    r.head = head;
                }
                Ok(Written::Done)
            }
            Write::RenewLease {
                run,
                epoch,
                expires_ms,
            } => {
                let r = self.run_mut(&run)?;
                fence(r, &run, epoch)?;
                let record = record_mut(r, &run)?;
                if record.lease_owner.is_some() {
                    record.lease_expires_ms = expires_ms;
                }
                Ok(Written::Done)
            }
            Write::AcquireLease {
                run,
                owner,
                now_ms,
                expires_ms,
            } => {
                let r = self.run_mut(&run)?;
                let rec = record_mut(r, &run)?;
                let row = protocol::LeaseRow {
                    epoch: rec.lease_epoch,
                    holder: rec.lease_owner.as_deref(),
                    expires_ms: rec.lease_expires_ms,
                    status: rec.status,
                };
                rec.lease_epoch = protocol::take_up(&run, &row, &owner, now_ms, |holder| {
                    super::owner_is_dead(holder)
                })?;
                rec.lease_owner = Some(owner);
                rec.lease_expires_ms = expires_ms;
                rec.control = protocol::control_after_take_up(rec.control.take());
                rec.status = RunStatus::Running;
                Ok(Written::Lease(rec.lease_epoch))
            }
            Write::ReleaseLease {
                run,
                epoch,
                status,
                head,
            } => {
                let r = self.run_mut(&run)?;
                fence(r, &run, epoch)?;
                head_fits(r, &run, head.as_ref())?;
                let rec = record_mut(r, &run)?;
                if rec.lease_owner.take().is_some() {
                    rec.lease_expires_ms = 0;
                    rec.status = protocol::status_on_release(rec.status, status);
                    if head.is_some() {
                        r.head = head;
                    }
                }
                Ok(Written::Done)
            }
            Write::PublishMemory(p) => {
                fence(self.run_mut(&p.run)?, &p.run, p.epoch)?;
                Ok(match self.global.publish(&p) {
                    Some(refused) => Written::MemoryOverCap(refused),
                    None => Written::Done,
                })
            }
            Write::RemoveMemory(r) => {
                self.global.remove(&r)?;
                Ok(Written::Done)
            }
            Write::Import(run) => self.import(*run),
            Write::Prune(p) => Err(StoreError::PruneRefused {
                run: p
                    .runs
                    .first()
                    .map(|r| r.run.to_string())
                    .unwrap_or_default(),
                why:
                    "the in-memory store keeps runs only while its process lives and does not prune"
                        .into(),
            }),
            Write::SetControl { run, control } => {
                let r = self.run_mut(&run)?;
                let rec = record_mut(r, &run)?;
                protocol::may_request(&run, rec.status, control.as_ref())?;
                rec.control = control;
                Ok(Written::Done)
            }
        }
    }

    /// Writes `run` whole ([`Write::Import`]).
    fn import(&mut self, run: super::import::ImportedRun) -> Result<Written, StoreError> {
        let id = run.record.id.clone();
        if let Some(existing) = self.runs.get(&id) {
            let same = existing.head.as_ref().map(|h| &h.body) == Some(&run.head.body);
            return match same {
                true => Ok(Written::Done),
                false => Err(StoreError::ImportConflict {
                    run: id.to_string(),
                    why: "its sealed head differs".into(),
                }),
            };
        }
        if let Some(link) = &run.session {
            let places = self.sessions.entry(link.name.clone()).or_default();
            if places.len() as u64 + 1 != link.index {
                return Err(StoreError::ImportConflict {
                    run: id.to_string(),
                    why: format!(
                        "place {} of session {} is not the next",
                        link.index, link.name
                    ),
                });
            }
            places.push(id.clone());
        }
        for (d, bytes) in run.blobs {
            self.bytes += bytes.len() as u64;
            self.blobs.entry(d).or_insert(bytes);
        }
        let mut mem = MemRun {
            record: Some(RunRecord {
                lease_owner: None,
                lease_expires_ms: 0,
                control: None,
                ..run.record
            }),
            head: Some(run.head),
            snapshots: run.snapshots.into_iter().collect(),
            outbox: run.outbox.into_iter().map(|o| (o.effect, o)).collect(),
            ..MemRun::default()
        };
        for t in run.transitions {
            mem.transitions.push(t);
        }
        self.order.push(id.clone());
        self.runs.insert(id, mem);
        Ok(Written::Done)
    }

    fn create(&mut self, new: NewRun) -> Result<Written, StoreError> {
        if self.runs.contains_key(&new.id) {
            return Err(StoreError::DuplicateRun(new.id.to_string()));
        }
        if let Some(link) = &new.session {
            let latest = self.sessions.get(&link.name).map_or(0, |r| r.len() as u64);
            if link.index != latest + 1 {
                return Err(StoreError::SessionTaken {
                    session: link.name.clone(),
                    index: link.index,
                    latest,
                });
            }
            self.sessions
                .entry(link.name.clone())
                .or_default()
                .push(new.id.clone());
        }
        let seq = new.parent.as_ref().map_or(0, |(_, s)| *s);
        let record = RunRecord {
            id: new.id.clone(),
            state_kind: if new.parent.is_some() {
                StateKind::Preparing
            } else {
                StateKind::Created
            },
            parent: new.parent,
            spec: new.spec,
            setup: new.setup,
            goal: new.goal,
            status: RunStatus::Running,
            seq,
            lease_epoch: 1,
            lease_owner: Some(new.owner),
            lease_expires_ms: new.lease_expires_ms,
            control: None,
            created_ms: new.now_ms,
            updated_ms: new.now_ms,
            cost_nanos: 0,
            unpriced_turns: 0,
            tokens: 0,
            outcome: None,
        };
        self.bytes += (record.spec.len() + record.goal.len()) as u64;
        self.order.push(new.id.clone());
        self.runs.insert(
            new.id,
            MemRun {
                record: Some(record),
                head: Some(new.head),
                ..MemRun::default()
            },
        );
        Ok(Written::Lease(1))
    }

    fn commit(&mut self, c: Commit) -> Result<Written, StoreError> {
        let mut added = 0u64;
        for (d, bytes) in c.blobs {
            if let std::collections::hash_map::Entry::Vacant(v) = self.blobs.entry(d) {
                added += 32 + bytes.len() as u64;
                v.insert(bytes);
            }
        }
        let r = self.run_mut(&c.run)?;
        let rec = record_mut(r, &c.run)?;
        let numbered = protocol::Numbered {
            run: &c.run,
            epoch: c.epoch,
            seq: c.seq,
        };
        protocol::in_sequence(&c.run, rec.lease_epoch, rec.seq, [numbered])?;
        head_fits(r, &c.run, c.head.as_ref())?;
        added += (c.event.len() + c.effects.len() + 80) as u64;
        r.transitions.push(TransitionRecord {
            seq: c.seq,
            at: c.at,
            event: c.event,
            edge: c.edge,
            effects: c.effects,
            state_kind: c.state_kind,
            state_hash: c.state_hash,
            chain: c.chain,
            seal: c.seal,
        });
        if let Some(s) = c.snapshot {
            added += s.len() as u64;
            r.snapshots.insert(c.seq, s);
        }
        for o in c.outbox {
            r.outbox.insert(o.effect, o);
        }
        if let Some(e) = c.resolves
            && let Some(o) = r.outbox.get_mut(&e)
        {
            o.status = OutboxStatus::Done;
        }
        let rec = record_mut(r, &c.run)?;
        rec.seq = c.seq;
        rec.status = c.status;
        rec.state_kind = c.state_kind;
        rec.updated_ms = c.now_ms;
        rec.cost_nanos = c.cost_nanos;
        rec.unpriced_turns = c.unpriced_turns;
        rec.tokens = c.tokens;
        rec.outcome = c.outcome;
        rec.lease_expires_ms = c.lease_expires_ms;
        if c.head.is_some() {
            r.head = c.head;
        }
        self.bytes += added;
        Ok(Written::Done)
    }
}

fn record_mut<'a>(r: &'a mut MemRun, id: &RunId) -> Result<&'a mut RunRecord, StoreError> {
    r.record
        .as_mut()
        .ok_or_else(|| StoreError::UnknownRun(id.to_string()))
}

/// Refuses a head that replaces another than the one stored (see [`HeadRecord::replaces`]).
fn head_fits(r: &MemRun, id: &RunId, head: Option<&HeadRecord>) -> Result<(), StoreError> {
    protocol::head_follows(
        id,
        r.head.as_ref().map(HeadRecord::body_digest),
        head.and_then(|h| h.replaces),
    )
}

fn fence(r: &MemRun, id: &RunId, epoch: u64) -> Result<(), StoreError> {
    protocol::fence(
        id,
        epoch,
        r.record.as_ref().map_or(0, |rec| rec.lease_epoch),
    )
}

impl Store for MemoryStore {
    fn memory_rows(
        &self,
        name: &str,
        latest_only: bool,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        self.with(|inner| inner.global.rows(name, latest_only))
    }

    fn memory_published(
        &self,
        run: &RunId,
        effect: EffectRef,
    ) -> Result<Vec<super::GlobalRow>, StoreError> {
        self.with(|inner| inner.global.published(run, effect))
    }

    fn memory_names(&self) -> Result<Vec<String>, StoreError> {
        self.with(|inner| inner.global.names())
    }

    fn memory_removals(&self) -> Result<Vec<super::RemovalRecord>, StoreError> {
        self.with(|inner| inner.global.removals())
    }

    fn submit(&self, write: Write) -> Ack {
        let (tx, rx) = oneshot::channel();
        let result = self.with(|inner| inner.apply(write)).and_then(|r| r);
        let _ = tx.send(result);
        rx
    }

    fn submit_timed(&self, write: Write, durable: super::Durable) -> Ack {
        let (tx, rx) = oneshot::channel();
        let result = self.with(|inner| inner.apply(write)).and_then(|r| r);
        if result.is_ok() {
            durable(crate::clock::stopwatch());
        }
        let _ = tx.send(result);
        rx
    }

    fn run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.with(|inner| inner.runs.get(id).and_then(|r| r.record.clone()))
    }

    fn leases(&self, runs: &[RunId]) -> Result<Vec<LeaseRecord>, StoreError> {
        self.with(|inner| {
            runs.iter()
                .filter_map(|id| inner.runs.get(id)?.record.as_ref())
                .map(|r| {
                    LeaseRecord::new(
                        r.id.clone(),
                        r.lease_epoch,
                        r.lease_expires_ms,
                        r.control.clone(),
                    )
                })
                .collect()
        })
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.with(|inner| {
            inner
                .order
                .iter()
                .rev()
                .filter_map(|id| inner.runs.get(id).and_then(|r| r.record.clone()))
                .collect()
        })
    }

    fn transitions(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<TransitionRecord>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).map_or_else(Vec::new, |r| {
                // Seqs only grow along a run's history.
                r.transitions
                    .iter_from(|t| t.seq < from)
                    .skip_while(|t| t.seq < from)
                    .take_while(|t| t.seq <= to)
                    .cloned()
                    .collect()
            })
        })
    }

    fn snapshot_at_or_before(
        &self,
        run: &RunId,
        at: u64,
    ) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).and_then(|r| {
                r.snapshots
                    .range(..=at)
                    .next_back()
                    .map(|(s, b)| (*s, b.clone()))
            })
        })
    }

    fn last_seal(&self, run: &RunId, at: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).and_then(|r| {
                r.transitions
                    .iter()
                    .rev()
                    .filter(|t| t.seq <= at)
                    .find_map(|t| t.seal.clone().map(|s| (t.seq, s)))
            })
        })
    }

    fn blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        self.with(|inner| inner.blobs.get(digest).cloned())
    }

    fn conversation_nodes(
        &self,
        head: &Digest,
        len: u64,
    ) -> Result<Vec<(Digest, Vec<u8>)>, StoreError> {
        // The whole walk under one lock: one read, as SQLite's and PostgreSQL's are one query.
        self.with(|inner| {
            let mut out = Vec::new();
            let mut at = *head;
            while at != Digest::ZERO && (out.len() as u64) < len {
                let Some(bytes) = inner.blobs.get(&at) else {
                    break;
                };
                let prev = crate::format::stored::node_parts(bytes).map(|(prev, _)| prev);
                out.push((at, bytes.clone()));
                match prev {
                    Some(prev) => at = prev,
                    None => break,
                }
            }
            out
        })
    }

    fn open_effects(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).map_or_else(Vec::new, |r| {
                r.outbox
                    .values()
                    .filter(|o| o.status != OutboxStatus::Done)
                    .cloned()
                    .collect()
            })
        })
    }

    fn outbox(&self, run: &RunId) -> Result<Vec<OutboxRecord>, StoreError> {
        self.with(|inner| {
            inner
                .runs
                .get(run)
                .map_or_else(Vec::new, |r| r.outbox.values().cloned().collect())
        })
    }

    fn snapshots(
        &self,
        run: &RunId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).map_or_else(Vec::new, |r| {
                r.snapshots
                    .range(from..=to.max(from))
                    .filter(|(s, _)| **s <= to)
                    .map(|(s, b)| (*s, b.clone()))
                    .collect()
            })
        })
    }

    fn head(&self, run: &RunId) -> Result<Option<HeadRecord>, StoreError> {
        self.with(|inner| {
            inner.runs.get(run).and_then(|r| {
                r.head.clone().map(|h| HeadRecord {
                    replaces: None,
                    ..h
                })
            })
        })
    }

    fn session_runs(&self, name: &str) -> Result<Vec<(u64, RunId)>, StoreError> {
        self.with(|inner| {
            inner.sessions.get(name).map_or_else(Vec::new, |runs| {
                (1u64..).zip(runs.iter().cloned()).collect()
            })
        })
    }

    fn sessions(&self) -> Result<Vec<super::SessionRecord>, StoreError> {
        self.with(|inner| {
            inner
                .sessions
                .iter()
                .filter_map(|(name, runs)| {
                    Some(super::SessionRecord {
                        name: name.clone(),
                        runs: runs.len() as u64,
                        latest: runs.last()?.clone(),
                    })
                })
                .collect()
        })
    }

    fn session_of(&self, run: &RunId) -> Result<Option<super::SessionLink>, StoreError> {
        self.with(|inner| {
            inner.sessions.iter().find_map(|(name, runs)| {
                let i = runs.iter().position(|r| r == run)?;
                Some(super::SessionLink {
                    name: name.clone(),
                    index: i as u64 + 1,
                })
            })
        })
    }

    fn snapshot(&self) -> Result<Option<Box<dyn Store>>, StoreError> {
        let copy = self.with(|inner| inner.clone())?;
        Ok(Some(Box::new(MemoryStore {
            inner: Mutex::new(copy),
        })))
    }

    fn size_bytes(&self) -> Result<u64, StoreError> {
        self.with(|inner| inner.bytes)
    }
}
