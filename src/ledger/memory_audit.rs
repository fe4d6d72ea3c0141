//! What `verify` checks of global memory (revision 5), beside a run's history:
//!
//! 1. Every value the run loaded is the stored value of that key at that version.
//! 2. The removal records (`runtape memory rm`) form an unbroken hash chain, ids 1, 2, ...,
//!    each naming the row it wrote; a signed record's signature holds over its chain link, and
//!    where a key is trusted every removal of the run's memory is signed by it.
//! 3. Every row of the run's global memory is accounted for: versions run 1, 2, ... per key;
//!    a published row matches the `PublishMemory` effect it names (in that run's history:
//!    same memory, same value, based on the version before); a removed row matches its
//!    removal record.
//! 4. Every publish the history says was applied wrote exactly its rows: for each written key
//!    the row `(name, key, version)` naming the run and the effect, holding the staged value;
//!    no other row names that effect.
//!
//! 5. A fork's load copied from an ancestor (`from_ancestor`, see [`super::fork_view`]) names
//!    a load of the same memory after the fork point, in the line the fork branched from, and
//!    holds exactly its entries.
//!
//! A run replayed from a cassette (`runtape replay`) took its loads and publish outcomes from
//! the recording and wrote nothing to this database: its events say so (`replayed`), and
//! they are not looked for here.
//!
//! Rows and records are reported by column (`memory_global.value`, `memory_removals.chain`,
//! ...), at the seq of the event that vouches for them when there is one.

use std::collections::BTreeMap;

use super::HistoryError;
use super::codec::{decode_effects, decode_event};
use super::read::transitions;
use super::replay::Divergence;
use crate::machine::{
    Effect, EffectRef, EventBody, LoadedAt, PublishOutcome, RunId, Staged, Versioned,
};
use crate::receipt::{VerifyingKey, check_removal_seal};
use crate::store::global_memory::{RemovalBody, chain_link};
use crate::store::{GlobalRow, Store, StoreError};

/// A publish the history says was applied.
#[derive(Clone, Debug)]
struct Applied {
    seq: u64,
    run: RunId,
    effect: EffectRef,
    name: String,
    writes: BTreeMap<String, Staged>,
    versions: BTreeMap<String, u64>,
}

/// What a history says about global memory, gathered while it is replayed.
#[derive(Debug, Default)]
pub(crate) struct MemoryFacts {
    /// `PublishMemory` effects emitted, by position: the memory and the writes.
    emitted: BTreeMap<EffectRef, (String, BTreeMap<String, Staged>)>,
    loaded: Vec<(u64, String, BTreeMap<String, Versioned>)>,
    /// Loads a fork took from an ancestor: seq, the run that recorded it, the load it names.
    inherited: Vec<Inherited>,
    applied: Vec<Applied>,
}

/// A fork's load copied from an ancestor's (see [`super::fork_view`]).
#[derive(Clone, Debug)]
struct Inherited {
    seq: u64,
    run: RunId,
    from: LoadedAt,
    name: String,
    entries: BTreeMap<String, Versioned>,
}

impl MemoryFacts {
    /// Notes transition `seq`: its event (of run `run`) and the effects it emitted.
    pub(crate) fn note(&mut self, seq: u64, run: &RunId, body: &EventBody, effects: &[Effect]) {
        if let EventBody::MemoryLoaded {
            name,
            entries,
            from_ancestor: Some(from),
            ..
        } = body
        {
            self.inherited.push(Inherited {
                seq,
                run: run.clone(),
                from: from.clone(),
                name: name.clone(),
                entries: entries.clone(),
            });
        }
        match body {
            EventBody::MemoryLoaded {
                name,
                entries,
                replayed: false,
                ..
            } => {
                self.loaded.push((seq, name.clone(), entries.clone()));
            }
            EventBody::MemoryPublished {
                effect,
                outcome: PublishOutcome::Published { versions },
                replayed: false,
            } => {
                let at = EffectRef {
                    seq: effect.seq,
                    index: effect.index,
                };
                if let Some((name, writes)) = self.emitted.get(&at) {
                    self.applied.push(Applied {
                        seq,
                        run: run.clone(),
                        effect: at,
                        name: name.clone(),
                        writes: writes.clone(),
                        versions: versions.clone(),
                    });
                }
            }
            _ => {}
        }
        for e in effects {
            if let Effect::PublishMemory { id, name, writes } = e {
                let at = EffectRef {
                    seq: id.seq,
                    index: id.index,
                };
                self.emitted.insert(at, (name.clone(), writes.clone()));
            }
        }
    }
}

macro_rules! bad {
    ($seq:expr, $column:expr, $what:expr, $expected:expr, $found:expr) => {
        return Ok(Err(Divergence::column(
            $seq, $column, $what, $expected, $found,
        )))
    };
}

fn show(value: &Option<String>) -> String {
    value
        .as_deref()
        .map_or("no value".into(), |v| format!("{v:?}"))
}

/// Checks what `facts` (of the verified run, whose spec names global memory `name`, if any)
/// say against the store, removal records' signatures against `key` when one is trusted.
/// Returns how many rows and records were checked.
pub(crate) fn check(
    store: &dyn Store,
    name: Option<&str>,
    facts: &MemoryFacts,
    key: Option<&VerifyingKey>,
) -> Result<Result<u64, Divergence>, HistoryError> {
    let mut checked = 0u64;
    if let Some(name) = name {
        let all = store.memory_rows(name, false)?;
        let by_version: BTreeMap<(&str, u64), &GlobalRow> = all
            .iter()
            .map(|r| ((r.key.as_str(), r.version), r))
            .collect();
        for (seq, loaded_name, entries) in &facts.loaded {
            for (key, v) in entries {
                let stored = by_version.get(&(key.as_str(), v.version));
                if loaded_name != name || stored.map(|r| &r.value) != Some(&v.value) {
                    bad!(
                        *seq,
                        "memory_global.value",
                        &format!("loaded value of `{key}` v{}", v.version),
                        show(&v.value),
                        stored.map_or("no such row".into(), |r| show(&r.value))
                    );
                }
            }
        }
        match removal_chain(store, name, key)? {
            Ok(n) => checked += n,
            Err(d) => return Ok(Err(d)),
        }
        if let Err(d) = rows_accounted(store, &all)? {
            return Ok(Err(d));
        }
        if let Err(d) = removals_wrote(store)? {
            return Ok(Err(d));
        }
        checked += all.len() as u64;
    }
    for i in &facts.inherited {
        if let Err(d) = inherited_matches(store, i)? {
            return Ok(Err(d));
        }
        checked += 1;
    }
    for a in &facts.applied {
        let rows = store.memory_published(&a.run, a.effect)?;
        for r in &rows {
            if r.name != a.name {
                bad!(
                    a.seq,
                    "memory_global.name",
                    "published row",
                    &a.name,
                    &r.name
                );
            }
            let Some(w) = a.writes.get(&r.key) else {
                bad!(
                    a.seq,
                    "memory_global.key",
                    "published row",
                    "a key the publish wrote",
                    &r.key
                );
            };
            if a.versions.get(&r.key) != Some(&r.version) {
                bad!(
                    a.seq,
                    "memory_global.version",
                    &format!("version of `{}`", r.key),
                    a.versions.get(&r.key).map_or("none".into(), u64::to_string),
                    r.version.to_string()
                );
            }
            if r.value != w.value {
                bad!(
                    a.seq,
                    "memory_global.value",
                    &format!("value of `{}`", r.key),
                    show(&w.value),
                    show(&r.value)
                );
            }
            checked += 1;
        }
        if let Some(key) = a.writes.keys().find(|k| !rows.iter().any(|r| &r.key == *k)) {
            bad!(
                a.seq,
                "memory_global.run_id",
                &format!("published row of `{key}`"),
                format!("a row naming run {} step {}", a.run, a.effect.seq),
                "none"
            );
        }
    }
    Ok(Ok(checked))
}

/// A fork's copied load names a load of the same memory after its fork point, in the line it
/// branched from, and holds exactly that load's entries.
fn inherited_matches(
    store: &dyn Store,
    i: &Inherited,
) -> Result<Result<(), Divergence>, HistoryError> {
    let shown = format!("run {}@{}", i.from.run, i.from.seq);
    if !super::fork_view::is_after_fork_point(store, &i.run, &i.from)? {
        bad!(
            i.seq,
            "transitions.event",
            "the load a fork's view of global memory comes from",
            "a load after the fork point in the line the fork branched from",
            shown
        );
    }
    let found = transitions(store, &i.from.run, i.from.seq, i.from.seq)?;
    let event = match found.first() {
        Some(t) => Some(decode_event(&i.from.run, t.seq, &t.event)?.body),
        None => None,
    };
    match event {
        Some(EventBody::MemoryLoaded { name, entries, .. })
            if name == i.name && entries == i.entries => {}
        _ => bad!(
            i.seq,
            "transitions.event",
            "the view of global memory a fork took",
            format!("the entries {shown} loaded"),
            "other entries"
        ),
    }
    Ok(Ok(()))
}

/// Every row of one memory is explained by a publish or a removal, versions without gaps.
fn rows_accounted(
    store: &dyn Store,
    rows: &[GlobalRow],
) -> Result<Result<(), Divergence>, HistoryError> {
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    let mut effects: BTreeMap<(RunId, u64), Vec<Effect>> = BTreeMap::new();
    let removals: BTreeMap<u64, RemovalBody> = store
        .memory_removals()?
        .iter()
        .filter_map(|r| r.decode().map(|b| (r.id, b)))
        .collect();
    for r in rows {
        let next = expected.entry(&r.key).or_insert(1);
        if r.version != *next {
            bad!(
                0,
                "memory_global.version",
                &format!("version of `{}`", r.key),
                next.to_string(),
                r.version.to_string()
            );
        }
        *next += 1;
        match (&r.run, r.effect, r.removal) {
            (Some(run), Some(at), None) => {
                let key = (run.clone(), at.seq);
                if !effects.contains_key(&key) {
                    let found = match transitions(store, run, at.seq, at.seq) {
                        Ok(t) => t,
                        Err(HistoryError::UnknownRun(_))
                        | Err(HistoryError::Store(StoreError::UnknownRun(_))) => {
                            bad!(
                                0,
                                "memory_global.run_id",
                                "run of a published row",
                                "a run",
                                run.as_str()
                            );
                        }
                        Err(e) => return Err(e),
                    };
                    let decoded = match found.first() {
                        Some(t) => decode_effects(run, t.seq, &t.effects)?,
                        None => Vec::new(),
                    };
                    effects.insert(key.clone(), decoded);
                }
                let at_seq = &effects[&key];
                if !at_seq
                    .iter()
                    .any(|e| matches!(e, Effect::PublishMemory { .. }))
                {
                    bad!(
                        0,
                        "memory_global.effect_seq",
                        &format!("origin of `{}` v{}", r.key, r.version),
                        format!("a PublishMemory at run {run} step {}", at.seq),
                        "none"
                    );
                }
                let Some(Effect::PublishMemory { name, writes, .. }) =
                    at_seq.get(at.index as usize)
                else {
                    bad!(
                        0,
                        "memory_global.effect_index",
                        &format!("origin of `{}` v{}", r.key, r.version),
                        format!("a PublishMemory at index {}", at.index),
                        "another effect"
                    );
                };
                let Some(w) = writes.get(&r.key).filter(|_| name == &r.name) else {
                    bad!(
                        0,
                        "memory_global.key",
                        "published row",
                        format!("a key run {run} step {} wrote", at.seq),
                        format!("{}/{}", r.name, r.key)
                    );
                };
                if w.value != r.value {
                    bad!(
                        0,
                        "memory_global.value",
                        &format!("value of `{}` v{}", r.key, r.version),
                        show(&w.value),
                        show(&r.value)
                    );
                }
                if w.base + 1 != r.version {
                    bad!(
                        0,
                        "memory_global.version",
                        &format!("version of `{}`", r.key),
                        (w.base + 1).to_string(),
                        r.version.to_string()
                    );
                }
            }
            (None, None, Some(id)) => {
                let fits = removals
                    .get(&id)
                    .is_some_and(|b| b.name == r.name && b.key == r.key && b.version == r.version)
                    && r.value.is_none();
                if !fits {
                    bad!(
                        0,
                        "memory_global.removal",
                        &format!("removal of `{}` v{}", r.key, r.version),
                        format!("removal record {id} naming it, and no value"),
                        "none"
                    );
                }
            }
            _ => bad!(
                0,
                "memory_global.run_id",
                &format!("origin of `{}` v{}", r.key, r.version),
                "a publish (run and effect) or a removal",
                "neither"
            ),
        }
    }
    Ok(Ok(()))
}

/// The removal records chain, ids without gaps, each a removal record.
fn removal_chain(
    store: &dyn Store,
    name: &str,
    key: Option<&VerifyingKey>,
) -> Result<Result<u64, Divergence>, HistoryError> {
    let records = store.memory_removals()?;
    let mut prev = crate::machine::Digest::ZERO;
    for (i, r) in records.iter().enumerate() {
        let want = i as u64 + 1;
        if r.id != want {
            bad!(
                0,
                "memory_removals.id",
                "removal record id",
                want.to_string(),
                r.id.to_string()
            );
        }
        let link = chain_link(&prev, &r.body);
        if link != r.chain {
            bad!(
                0,
                "memory_removals.chain",
                &format!("chain link of removal {}", r.id),
                link.to_hex(),
                r.chain.to_hex()
            );
        }
        prev = r.chain;
        let Some(body) = r.decode().filter(|b| b.id == r.id) else {
            bad!(
                0,
                "memory_removals.body",
                &format!("removal {}", r.id),
                "a removal record",
                String::from_utf8_lossy(&r.body)
            );
        };
        // A signature must hold wherever it is; a trusted key must have signed every removal
        // of this run's memory (an unsigned one was made without it, or had its seal stripped).
        let what = format!("seal of removal {}", r.id);
        match &r.seal {
            Some(seal) => {
                if let Err(e) = check_removal_seal(&r.chain, seal, key) {
                    bad!(
                        0,
                        "memory_removals.seal",
                        &what,
                        "a signature over the record's chain link",
                        e.to_string()
                    );
                }
            }
            None if key.is_some() && body.name == name => {
                bad!(
                    0,
                    "memory_removals.seal",
                    &what,
                    "signed by the trusted key",
                    "unsigned: removed without a key, or its signature was stripped"
                );
            }
            None => {}
        }
    }
    Ok(Ok(records.len() as u64))
}

/// Each removal record names a row it wrote: a version without a value naming it.
fn removals_wrote(store: &dyn Store) -> Result<Result<(), Divergence>, HistoryError> {
    for r in store.memory_removals()? {
        let Some(body) = r.decode() else { continue };
        let wrote = store
            .memory_rows(&body.name, false)?
            .into_iter()
            .any(|row| {
                row.key == body.key && row.version == body.version && row.removal == Some(r.id)
            });
        if !wrote {
            bad!(
                0,
                "memory_removals.body",
                &format!("removal {}", r.id),
                format!(
                    "a row {}/{} v{} it wrote",
                    body.name, body.key, body.version
                ),
                "none"
            );
        }
    }
    Ok(Ok(()))
}
