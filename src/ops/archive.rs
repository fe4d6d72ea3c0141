//! `runtape export` and `runtape import`: a verified run tree moved between databases (SQLite
//! and PostgreSQL alike) through one self-describing JSON document, so a run can be archived
//! before `runtape prune` removes it.
//!
//! The document ([`Archive`]) names its format and version and holds, for the run, every run
//! below it and the runs its forks' histories start in: each run's row, sealed head,
//! transitions, snapshots, outbox rows and session place, and every blob `verify` reads for
//! them (collected while the export verifies each run, so nothing it needs is left out and
//! nothing else is added). Bytes are hex. A run that does not verify is not exported.
//!
//! Import checks the whole document before it writes anything: it is written into an
//! in-memory store and every run verified there, and a run whose id the target holds with
//! another head is refused; then each run is written in one transaction of its own. A run the
//! target holds already with the same head is left as it is, so importing twice is harmless.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::OpsError;
use crate::machine::{Digest, EdgeId, EffectRef, Hlc, RunId, StateKind};
use crate::store::import::ImportedRun;
use crate::store::{
    HeadRecord, MemoryStore, OutboxRecord, OutboxStatus, RunRecord, SessionLink, Store, StoreError,
    TransitionRecord, Write,
};
use crate::text::lower_hex;

/// What an archive's `format` says.
pub const ARCHIVE_FORMAT: &str = "runtape-archive";
/// The archive version this runtape writes and reads.
pub const ARCHIVE_VERSION: u32 = 1;

/// A run tree as `runtape export` writes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Archive {
    /// [`ARCHIVE_FORMAT`].
    pub format: String,
    /// [`ARCHIVE_VERSION`].
    pub version: u32,
    /// The run exported.
    pub root: RunId,
    /// It, the runs below it and the runs its forks start in.
    pub runs: Vec<ArchivedRun>,
    /// Every blob those runs read.
    pub blobs: Vec<ArchivedBlob>,
}

/// One run of an [`Archive`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedRun {
    /// Its row.
    pub record: RunRecord,
    /// Its sealed head's body, hex.
    pub head: String,
    /// The head's seal, hex.
    pub head_seal: String,
    /// Its own transitions, in order.
    pub transitions: Vec<ArchivedTransition>,
    /// Its own snapshots: seq and state JSON, hex.
    pub snapshots: Vec<(u64, String)>,
    /// Its outbox rows.
    pub outbox: Vec<ArchivedOutbox>,
    /// Its session and place.
    pub session: Option<(String, u64)>,
}

/// One transition of an [`ArchivedRun`]; bytes hex.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedTransition {
    /// Its seq.
    pub seq: u64,
    /// Its HLC time.
    pub at: u64,
    /// The event JSON.
    pub event: String,
    /// The edge's name.
    pub edge: String,
    /// The effects JSON.
    pub effects: String,
    /// The state kind after it.
    pub state_kind: String,
    /// The state's digest.
    pub state_hash: String,
    /// The chain link.
    pub chain: String,
    /// The receipt seal, if any.
    pub seal: Option<String>,
}

/// One outbox row of an [`ArchivedRun`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedOutbox {
    /// The effect's seq.
    pub seq: u64,
    /// Its index.
    pub index: u32,
    /// `pending`, `started` or `done`.
    pub status: String,
    /// The idempotency key given to the tool, if any.
    pub idempotency_key: Option<String>,
}

/// One blob of an [`Archive`], hex.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedBlob {
    /// Its digest.
    pub digest: String,
    /// Its bytes as written.
    pub bytes: String,
}

/// What an import did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// The archive's run.
    pub root: RunId,
    /// Runs written.
    pub written: Vec<RunId>,
    /// Runs the database held already, the same.
    pub present: Vec<RunId>,
}

/// The archive of `root`: it, every run below it, and the runs its forks' histories start in,
/// each verified first ([`OpsError::DoesNotVerify`] names the first that does not).
pub fn export(store: Arc<dyn Store>, root: &RunId) -> Result<Archive, OpsError> {
    let mut ids = vec![root.clone()];
    ids.extend(super::descendants(store.as_ref(), root)?);
    let mut i = 0;
    while i < ids.len() {
        let rec = store
            .run_without_setup(&ids[i])?
            .ok_or_else(|| StoreError::UnknownRun(ids[i].to_string()))?;
        if let Some((parent, _)) = rec.parent
            && !ids.contains(&parent)
        {
            ids.push(parent);
        }
        i += 1;
    }
    let reader = Arc::new(Recording {
        inner: store.clone(),
        seen: Mutex::new(BTreeSet::new()),
    });
    let mut runs = Vec::with_capacity(ids.len());
    for id in &ids {
        super::verify(reader.as_ref(), id, None)?.check()?;
        runs.push(archived(store.as_ref(), id)?);
    }
    let seen = reader.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut blobs = Vec::with_capacity(seen.len());
    for d in seen {
        if let Some(bytes) = store.blob(&d)? {
            blobs.push(ArchivedBlob {
                digest: d.to_hex(),
                bytes: lower_hex(&bytes),
            });
        }
    }
    Ok(Archive {
        format: ARCHIVE_FORMAT.into(),
        version: ARCHIVE_VERSION,
        root: root.clone(),
        runs,
        blobs,
    })
}

fn archived(store: &dyn Store, id: &RunId) -> Result<ArchivedRun, OpsError> {
    let record = store
        .run(id)?
        .ok_or_else(|| StoreError::UnknownRun(id.to_string()))?;
    let head = store.head(id)?.ok_or_else(|| StoreError::Damaged {
        run: id.to_string(),
        detail: "it has no sealed head".into(),
    })?;
    let transitions = store
        .transitions(id, 0, record.seq)?
        .into_iter()
        .map(|t| ArchivedTransition {
            seq: t.seq,
            at: t.at.0,
            event: lower_hex(&t.event),
            edge: t.edge.as_str().into(),
            effects: lower_hex(&t.effects),
            state_kind: t.state_kind.as_str().into(),
            state_hash: t.state_hash.to_hex(),
            chain: t.chain.to_hex(),
            seal: t.seal.as_deref().map(lower_hex),
        })
        .collect();
    Ok(ArchivedRun {
        head: lower_hex(&head.body),
        head_seal: lower_hex(&head.seal),
        transitions,
        snapshots: store
            .snapshots(id, 0, record.seq)?
            .into_iter()
            .map(|(seq, s)| (seq, lower_hex(&s)))
            .collect(),
        outbox: store
            .outbox(id)?
            .into_iter()
            .map(|o| ArchivedOutbox {
                seq: o.effect.seq,
                index: o.effect.index,
                status: o.status.as_str().into(),
                idempotency_key: o.idempotency_key,
            })
            .collect(),
        session: store.session_of(id)?.map(|l| (l.name, l.index)),
        record,
    })
}

/// Writes `archive` into `store` once every run of it verifies (in an in-memory store first)
/// and none conflicts with a run `store` holds: [`OpsError::BadArchive`] names what is wrong,
/// and nothing is written then.
pub async fn import(store: &dyn Store, archive: &Archive) -> Result<Imported, OpsError> {
    if archive.format != ARCHIVE_FORMAT || archive.version != ARCHIVE_VERSION {
        return Err(OpsError::BadArchive(format!(
            "format `{}` version {}, where this runtape reads {ARCHIVE_FORMAT} version {ARCHIVE_VERSION}",
            archive.format, archive.version
        )));
    }
    let runs = decode(archive)?;
    let scratch = MemoryStore::new();
    for run in &runs {
        crate::store::write(&scratch, Write::Import(Box::new(run.clone()))).await?;
    }
    for run in &runs {
        let id = &run.record.id;
        super::verify(&scratch, id, None)?
            .check()
            .map_err(|e| OpsError::BadArchive(format!("it does not verify: {e}")))?;
    }
    let mut done = Imported {
        root: archive.root.clone(),
        written: Vec::new(),
        present: Vec::new(),
    };
    for run in &runs {
        if let Some(head) = store.head(&run.record.id)? {
            if head.body != run.head.body {
                return Err(StoreError::ImportConflict {
                    run: run.record.id.to_string(),
                    why: "its sealed head differs".into(),
                }
                .into());
            }
            done.present.push(run.record.id.clone());
        }
    }
    for run in runs {
        let id = run.record.id.clone();
        if done.present.contains(&id) {
            continue;
        }
        crate::store::write(store, Write::Import(Box::new(run))).await?;
        done.written.push(id);
    }
    Ok(done)
}

/// The runs of `archive` as a store writes them; [`OpsError::BadArchive`] for a field that
/// does not decode.
fn decode(archive: &Archive) -> Result<Vec<ImportedRun>, OpsError> {
    let bad = |what: String| OpsError::BadArchive(what);
    let mut blobs = Vec::with_capacity(archive.blobs.len());
    for b in &archive.blobs {
        let d = Digest::from_hex(&b.digest)
            .ok_or_else(|| bad(format!("blob digest `{}`", b.digest)))?;
        blobs.push((
            d,
            unhex(&b.bytes).ok_or_else(|| bad(format!("blob {}", b.digest)))?,
        ));
    }
    let mut out = Vec::with_capacity(archive.runs.len());
    for (i, r) in archive.runs.iter().enumerate() {
        let id = &r.record.id;
        let field = |what: &str| bad(format!("run {id}: {what} does not decode"));
        let mut transitions = Vec::with_capacity(r.transitions.len());
        for t in &r.transitions {
            transitions.push(TransitionRecord {
                seq: t.seq,
                at: Hlc(t.at),
                event: unhex(&t.event).ok_or_else(|| field("an event"))?,
                edge: EdgeId::parse(&t.edge).ok_or_else(|| field("an edge"))?,
                effects: unhex(&t.effects).ok_or_else(|| field("effects"))?,
                state_kind: StateKind::parse(&t.state_kind).ok_or_else(|| field("a state kind"))?,
                state_hash: Digest::from_hex(&t.state_hash).ok_or_else(|| field("a state hash"))?,
                chain: Digest::from_hex(&t.chain).ok_or_else(|| field("a chain link"))?,
                seal: match &t.seal {
                    Some(s) => Some(unhex(s).ok_or_else(|| field("a seal"))?),
                    None => None,
                },
            });
        }
        let mut snapshots = Vec::with_capacity(r.snapshots.len());
        for (seq, s) in &r.snapshots {
            snapshots.push((*seq, unhex(s).ok_or_else(|| field("a snapshot"))?));
        }
        let mut outbox = Vec::with_capacity(r.outbox.len());
        for o in &r.outbox {
            outbox.push(OutboxRecord {
                effect: EffectRef {
                    seq: o.seq,
                    index: o.index,
                },
                status: OutboxStatus::parse(&o.status).ok_or_else(|| field("an outbox status"))?,
                idempotency_key: o.idempotency_key.clone(),
            });
        }
        let head = HeadRecord::new(
            unhex(&r.head).ok_or_else(|| field("the head"))?,
            unhex(&r.head_seal).ok_or_else(|| field("the head's seal"))?,
            None,
        );
        out.push(ImportedRun {
            record: r.record.clone(),
            head,
            transitions,
            snapshots,
            outbox,
            session: r
                .session
                .clone()
                .map(|(name, index)| SessionLink { name, index }),
            // Every run gets the blobs; a store keeps one copy of each.
            blobs: if i == 0 { blobs.clone() } else { Vec::new() },
        });
    }
    Ok(out)
}

/// A store's reads, noting every blob read (by `verify`, to export what it needs).
struct Recording {
    inner: Arc<dyn Store>,
    seen: Mutex<BTreeSet<Digest>>,
}

impl Recording {
    fn note(&self, digests: impl IntoIterator<Item = Digest>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.extend(digests);
        }
    }
}

impl Store for Recording {
    fn submit(&self, write: Write) -> crate::store::Ack {
        self.inner.submit(write)
    }

    fn blob(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        self.note([*digest]);
        self.inner.blob(digest)
    }
    fn conversation_nodes(
        &self,
        head: &Digest,
        len: u64,
    ) -> Result<Vec<(Digest, Vec<u8>)>, StoreError> {
        let nodes = self.inner.conversation_nodes(head, len)?;
        self.note(nodes.iter().map(|(d, _)| *d));
        Ok(nodes)
    }
    crate::forward_store_reads!(inner, but blobs);
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
