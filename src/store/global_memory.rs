//! Global memory in the store (revision 5): versioned rows, the publish write that applies a
//! run's staged writes all or none, and `runtape memory rm`'s chained removal records.
//!
//! Every write of a key adds a row `(name, key, version)` (versions 1, 2, ... per key, never
//! rewritten): a publish names the run and effect it came from, a removal names its removal
//! record. Forgetting a key adds a row without a value. The latest row of each key is the
//! memory as runs see it; the earlier rows are its history, which `verify` checks against
//! the histories of the runs that wrote them.
//!
//! **Publishing** ([`Publication`]) applies one `PublishMemory` effect's writes in one
//! transaction, at most once: if rows naming the effect exist, nothing is written again;
//! otherwise every written key must still be at the version the run based its write on
//! (0: absent), or nothing is written (first publisher wins). The outcome is then read back
//! ([`publish_outcome`]): the rows naming the effect, or the keys that moved. A refusal stays
//! a refusal when asked again, since versions only grow.
//!
//! **Removing** ([`Removal`]) adds a row without a value and a removal record; the records
//! form a hash chain ([`RemovalRecord::chain`]), so a removal cannot be edited or dropped from
//! the middle of the list without `verify` saying so.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::machine::{Digest, EffectRef, PublishOutcome, RunId, Staged, Versioned};

/// One version of one global memory key, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GlobalRow {
    /// The global memory.
    pub name: String,
    /// The key.
    pub key: String,
    /// Its version (1 for the key's first write).
    pub version: u64,
    /// The value; `None` when this version forgets (or removes) the key.
    pub value: Option<String>,
    /// For a published row: the run whose `PublishMemory` effect wrote it.
    pub run: Option<RunId>,
    /// For a published row: that effect's position in the run.
    pub effect: Option<EffectRef>,
    /// For a removal: the id of its [`RemovalRecord`].
    pub removal: Option<u64>,
}

impl GlobalRow {
    /// The version `version` of `r`'s key that removal `id` writes: no value, no run, only the
    /// removal it belongs to. What every store inserts when it applies a [`Removal`].
    pub(crate) fn removed(r: &Removal, version: u64, id: u64) -> GlobalRow {
        GlobalRow {
            name: r.name.clone(),
            key: r.key.clone(),
            version,
            value: None,
            run: None,
            effect: None,
            removal: Some(id),
        }
    }

    /// The position of the effect that published a row, from its two stored columns
    /// (`effect_seq`, `effect_index`): `None` unless both are set.
    pub(crate) fn effect_at(seq: Option<i64>, index: Option<i64>) -> Option<EffectRef> {
        match (seq, index) {
            (Some(seq), Some(index)) => Some(EffectRef {
                seq: seq as u64,
                index: index as u32,
            }),
            _ => None,
        }
    }
}

/// A publish to make durable: run `run`'s `PublishMemory` effect at `effect`, under lease
/// `epoch` (a stale driver is fenced and writes nothing).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// The run performing the effect (a fork performing its parent's is the fork).
    pub run: RunId,
    /// Its lease epoch.
    pub epoch: u64,
    /// The effect's position.
    pub effect: EffectRef,
    /// The global memory.
    pub name: String,
    /// The writes, each with the version it is based on.
    pub writes: BTreeMap<String, Staged>,
    /// The run's `max_bytes_global` (revision 5): a publish that would take the memory past
    /// it — keys plus values of every key's latest version, with these writes applied — and
    /// grow it is refused whole. `None`: not checked.
    pub cap: Option<u64>,
}

/// A publish refused because it would take the memory past its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverCap {
    /// The cap (the publishing run's `max_bytes_global`).
    pub cap: u64,
    /// The bytes the memory holds now.
    pub holds: u64,
    /// The bytes it would hold with the writes applied.
    pub would_hold: u64,
}

/// The bytes one version of a key adds to its memory: the key's and the value's, or nothing
/// for a version without a value.
pub fn row_bytes(key: &str, value: Option<&str>) -> u64 {
    value.map_or(0, |v| (key.len() + v.len()) as u64)
}

impl Publication {
    /// Run `run`'s effect at `effect`, under lease `epoch`, writing `writes` to `name`.
    pub fn new(
        run: RunId,
        epoch: u64,
        effect: EffectRef,
        name: String,
        writes: BTreeMap<String, Staged>,
    ) -> Publication {
        Publication {
            run,
            epoch,
            effect,
            name,
            writes,
            cap: None,
        }
    }

    /// The same, refused when it would take the memory past `bytes` (see [`Publication::cap`]).
    pub fn capped(mut self, bytes: u64) -> Publication {
        self.cap = Some(bytes);
        self
    }

    /// Whether applying the writes to the memory as it is — `holds` bytes in all, `current`
    /// giving each written key's bytes now (absent: none) — takes it past the cap while
    /// growing it. Checked after the versions (a moved key is a conflict first).
    pub fn over_cap(&self, holds: u64, current: &BTreeMap<String, u64>) -> Option<OverCap> {
        let cap = self.cap?;
        let mut would_hold = holds;
        for (key, w) in &self.writes {
            would_hold = would_hold.saturating_sub(current.get(key).copied().unwrap_or(0));
            would_hold = would_hold.saturating_add(row_bytes(key, w.value.as_deref()));
        }
        (would_hold > cap && would_hold > holds).then_some(OverCap {
            cap,
            holds,
            would_hold,
        })
    }

    /// The rows this publication adds when every key is at its base version: version
    /// `base + 1` of each, naming the effect. `latest` gives each written key's latest stored
    /// version (absent: none); `None` when a key moved (the publish is refused).
    pub fn rows(&self, latest: &BTreeMap<String, u64>) -> Option<Vec<GlobalRow>> {
        let mut rows = Vec::with_capacity(self.writes.len());
        for (key, w) in &self.writes {
            if latest.get(key).copied().unwrap_or(0) != w.base {
                return None;
            }
            rows.push(GlobalRow {
                name: self.name.clone(),
                key: key.clone(),
                version: w.base + 1,
                value: w.value.clone(),
                run: Some(self.run.clone()),
                effect: Some(self.effect),
                removal: None,
            });
        }
        Some(rows)
    }
}

/// A `runtape memory rm` to make durable: forget `key` of global memory `name`.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct Removal {
    /// The global memory.
    pub name: String,
    /// The key.
    pub key: String,
    /// Who removed it (`user@host`, as the command found it).
    pub by: String,
    /// Wall-clock ms now.
    pub at_ms: u64,
    /// Signs the record's chain link when it holds a key (see
    /// [`crate::receipt::check_removal_seal`]); `None` or unsigned: hash-chained only.
    pub signer: Option<std::sync::Arc<crate::receipt::ReceiptSigner>>,
}

impl Removal {
    /// `by` removes `key` of `name` at `at_ms`.
    pub fn new(name: String, key: String, by: String, at_ms: u64) -> Removal {
        Removal {
            name,
            key,
            by,
            at_ms,
            signer: None,
        }
    }

    /// The same, its record signed by `signer` when it holds a key.
    pub fn signed_by(mut self, signer: std::sync::Arc<crate::receipt::ReceiptSigner>) -> Removal {
        self.signer = Some(signer);
        self
    }

    /// The record this removal writes after `prev` (`None` for the first), saying `body`:
    /// chained, and sealed when the signer holds a key.
    pub fn record_after(&self, prev: Option<&RemovalRecord>, body: &RemovalBody) -> RemovalRecord {
        let mut record = RemovalRecord::after(prev, body);
        record.seal = self
            .signer
            .as_ref()
            .and_then(|s| s.seal_removal(&record.chain));
        record
    }
}

/// What a removal record says, as its canonical JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemovalBody {
    /// The record's id (1, 2, ... in order).
    pub id: u64,
    /// The global memory.
    pub name: String,
    /// The key removed.
    pub key: String,
    /// The version the removal wrote (a row without a value).
    pub version: u64,
    /// Who removed it.
    pub by: String,
    /// When, wall-clock ms.
    pub at_ms: u64,
}

/// One stored removal record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovalRecord {
    /// Its id.
    pub id: u64,
    /// The canonical JSON of its [`RemovalBody`].
    pub body: Vec<u8>,
    /// `blake3(previous record's chain || body)` (the first record's previous is zero).
    pub chain: Digest,
    /// A signature over the chain link ([`crate::receipt::check_removal_seal`]), when the
    /// removal was made with a key; `None`: hash-chained only.
    pub seal: Option<Vec<u8>>,
}

impl RemovalRecord {
    /// The record following `prev` (`None` for the first) that says `body`.
    pub fn after(prev: Option<&RemovalRecord>, body: &RemovalBody) -> RemovalRecord {
        // A body is strings and integers: it always encodes.
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let chain = chain_link(&prev.map_or(Digest::ZERO, |p| p.chain), &bytes);
        RemovalRecord {
            id: body.id,
            body: bytes,
            chain,
            seal: None,
        }
    }

    /// The body, if it decodes.
    pub fn decode(&self) -> Option<RemovalBody> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// `blake3(prev || body)`.
pub fn chain_link(prev: &Digest, body: &[u8]) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&prev.0);
    h.update(body);
    Digest(*h.finalize().as_bytes())
}

/// The removal a [`Removal`] makes of a key whose latest row is `latest` (`None`: no row):
/// the body of record `id`, or the one-line error when there is nothing to remove.
pub fn removal_body(
    removal: &Removal,
    latest: Option<&GlobalRow>,
    id: u64,
) -> Result<RemovalBody, StoreError> {
    match latest {
        Some(row) if row.value.is_some() => Ok(RemovalBody {
            id,
            name: removal.name.clone(),
            key: removal.key.clone(),
            version: row.version + 1,
            by: removal.by.clone(),
            at_ms: removal.at_ms,
        }),
        _ => Err(StoreError::NoMemoryKey {
            name: removal.name.clone(),
            key: removal.key.clone(),
        }),
    }
}

/// The latest row of each key of `rows` (rows of one memory, in `(key, version)` order).
pub fn latest_of(rows: Vec<GlobalRow>) -> BTreeMap<String, GlobalRow> {
    let mut out = BTreeMap::new();
    for r in rows {
        out.insert(r.key.clone(), r);
    }
    out
}

/// The entries a run loads: every key's latest version (forgotten keys without a value).
pub fn load_entries(
    store: &dyn Store,
    name: &str,
) -> Result<BTreeMap<String, Versioned>, StoreError> {
    Ok(store
        .memory_rows(name, true)?
        .into_iter()
        .map(|r| {
            (
                r.key,
                Versioned {
                    version: r.version,
                    value: r.value,
                },
            )
        })
        .collect())
}

/// What became of `publication` once its write is durable: the versions its rows have, or
/// (none stored) each written key that moved, as it is now. Call it after the publish write
/// returned: a publish either wrote every row or none.
pub fn publish_outcome(
    store: &dyn Store,
    publication: &Publication,
) -> Result<PublishOutcome, StoreError> {
    let mine = store.memory_published(&publication.run, publication.effect)?;
    if !mine.is_empty() {
        let versions = mine
            .into_iter()
            .filter(|r| r.name == publication.name)
            .map(|r| (r.key, r.version))
            .collect();
        return Ok(PublishOutcome::Published { versions });
    }
    let latest = latest_of(store.memory_rows(&publication.name, true)?);
    let keys: BTreeMap<String, Versioned> = publication
        .writes
        .iter()
        .filter_map(|(key, w)| {
            let now = latest.get(key);
            let version = now.map_or(0, |r| r.version);
            (version != w.base).then(|| {
                (
                    key.clone(),
                    Versioned {
                        version,
                        value: now.and_then(|r| r.value.clone()),
                    },
                )
            })
        })
        .collect();
    if keys.is_empty() {
        return Err(StoreError::Damaged {
            run: publication.run.to_string(),
            detail: format!(
                "the publish of step {} to global memory {} wrote nothing and nothing moved",
                publication.effect.seq, publication.name
            ),
        });
    }
    Ok(PublishOutcome::Conflict { keys })
}

/// Global memory held in memory, for [`MemoryStore`](super::MemoryStore): the same rules as
/// the SQL stores.
#[derive(Clone, Debug, Default)]
pub(crate) struct InMemory {
    rows: BTreeMap<(String, String, u64), GlobalRow>,
    removals: Vec<RemovalRecord>,
}

impl InMemory {
    /// Applies `p` (the caller checked the lease epoch); a refusal over the cap says so.
    pub(crate) fn publish(&mut self, p: &Publication) -> Option<OverCap> {
        let done = self
            .rows
            .values()
            .any(|r| r.run.as_ref() == Some(&p.run) && r.effect == Some(p.effect));
        if done {
            return None;
        }
        let latest: BTreeMap<String, u64> = p
            .writes
            .keys()
            .filter_map(|k| self.latest(&p.name, k).map(|r| (k.clone(), r.version)))
            .collect();
        let rows = p.rows(&latest)?;
        let now = self.rows(&p.name, true);
        let holds = now
            .iter()
            .map(|r| row_bytes(&r.key, r.value.as_deref()))
            .sum();
        let current = now
            .iter()
            .filter(|r| p.writes.contains_key(&r.key))
            .map(|r| (r.key.clone(), row_bytes(&r.key, r.value.as_deref())))
            .collect();
        if let Some(refused) = p.over_cap(holds, &current) {
            return Some(refused);
        }
        for r in rows {
            self.rows
                .insert((r.name.clone(), r.key.clone(), r.version), r);
        }
        None
    }

    /// Applies `r`.
    pub(crate) fn remove(&mut self, r: &Removal) -> Result<(), StoreError> {
        let id = self.removals.last().map_or(1, |p| p.id + 1);
        let body = removal_body(r, self.latest(&r.name, &r.key), id)?;
        let record = r.record_after(self.removals.last(), &body);
        self.removals.push(record);
        let row = GlobalRow::removed(r, body.version, id);
        self.rows
            .insert((row.name.clone(), row.key.clone(), row.version), row);
        Ok(())
    }

    fn latest(&self, name: &str, key: &str) -> Option<&GlobalRow> {
        self.rows
            .range(
                (name.to_owned(), key.to_owned(), 0)..=(name.to_owned(), key.to_owned(), u64::MAX),
            )
            .next_back()
            .map(|(_, r)| r)
    }

    /// See [`Store::memory_rows`].
    pub(crate) fn rows(&self, name: &str, latest_only: bool) -> Vec<GlobalRow> {
        let all: Vec<GlobalRow> = self
            .rows
            .values()
            .filter(|r| r.name == name)
            .cloned()
            .collect();
        if latest_only {
            latest_of(all).into_values().collect()
        } else {
            all
        }
    }

    /// See [`Store::memory_published`].
    pub(crate) fn published(&self, run: &RunId, effect: EffectRef) -> Vec<GlobalRow> {
        self.rows
            .values()
            .filter(|r| r.run.as_ref() == Some(run) && r.effect == Some(effect))
            .cloned()
            .collect()
    }

    /// See [`Store::memory_names`].
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.rows.values().map(|r| r.name.clone()).collect();
        names.dedup();
        names
    }

    /// See [`Store::memory_removals`].
    pub(crate) fn removals(&self) -> Vec<RemovalRecord> {
        self.removals.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::AgentId;

    fn staged(base: u64, value: &str) -> Staged {
        Staged {
            base,
            value: Some(value.into()),
            by: AgentId::from("a"),
        }
    }

    #[test]
    fn a_publication_applies_only_over_its_bases() {
        let p = Publication::new(
            RunId::new("r"),
            1,
            EffectRef { seq: 9, index: 0 },
            "g".into(),
            [
                ("a".to_owned(), staged(0, "1")),
                ("b".to_owned(), staged(2, "2")),
            ]
            .into_iter()
            .collect(),
        );
        let mut latest = BTreeMap::from([("b".to_owned(), 2)]);
        let rows = p.rows(&latest).expect("applies");
        assert_eq!(
            rows.iter()
                .map(|r| (r.key.as_str(), r.version))
                .collect::<Vec<_>>(),
            [("a", 1), ("b", 3)]
        );
        latest.insert("a".into(), 1);
        assert_eq!(p.rows(&latest), None, "a moved");
    }

    #[test]
    fn removal_records_chain() {
        let body = |id| RemovalBody {
            id,
            name: "g".into(),
            key: "k".into(),
            version: id + 1,
            by: "me@here".into(),
            at_ms: 5,
        };
        let first = RemovalRecord::after(None, &body(1));
        let second = RemovalRecord::after(Some(&first), &body(2));
        assert_eq!(second.chain, chain_link(&first.chain, &second.body));
        assert_eq!(first.decode(), Some(body(1)));
        assert_ne!(first.chain, RemovalRecord::after(None, &body(2)).chain);
    }
}
