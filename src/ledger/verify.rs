//! `verify`: everything stored about a run, checked against what it should be.
//!
//! 1. The run's **head** (`runs.head`): its seal holds (signed with the trusted key when one is
//!    given), and the run's row carries the identity it sealed (id, parent, spec, setup, goal,
//!    creation time).
//! 2. The **history** (`transitions`), across fork ancestry, up to the seq the head says it
//!    ends at: every event re-folded through the current [`step`](crate::machine::step) gives
//!    the stored edge, effects, state hash and chain link; each row's `at` is its event's time
//!    and its event names the run whose row it is; nothing is stored past the end.
//! 3. Beside the history: every **message blob** a transition appends is read and must be the
//!    node the history implies; every **MCP catalog blob** a `ToolsListed` event names is read,
//!    must hash to its digest and list the event's tools (and hold the definitions it records
//!    for tools added after the run started, revision 4); every **attachment blob** (an image
//!    or PDF a message or a tool result names by digest) is read and must hash to its digest; every **snapshot** due (every 64 transitions) exists and is the
//!    folded state, and none is stored where none is due.
//! 4. The head against the replayed end (state hash, chain link, state kind, status, outcome,
//!    usage), then the run's row against the head (seq, state, status, outcome, usage, update
//!    time).
//! 5. The **outbox**: each row names a tool call of the history with its idempotency key, is
//!    `done` exactly when the history answers the call and `started` exactly when the head
//!    lists it.
//! 6. **Global memory** (revision 5, `memory_audit`): the rows each applied publish wrote, the
//!    values the run loaded, every row of its global memory explained by a publish or a
//!    removal, and the removal records' hash chain.
//! 7. The **receipts** rebuilt from the history: one per model turn and tool result, chained,
//!    each seal valid; the head's receipt tip is the chain's last, sealed the same way.
//! 7. The run's **session** (revision 5; see [`super::session`]): its place in
//!    `session_runs` is the one its spec names (none for a fork), and the history its
//!    `SessionStart` carries is what the run it goes on from ended with.
//!
//! The first problem is reported, naming the seq or the column at fault (`coverage` lists
//! what covers each stored column).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::HistoryError;
use super::audit::{self, OutboxFacts};
use super::codec::{decode_effects, decode_event, snapshot_due};
use super::memory_audit::{self, MemoryFacts};
use super::pairing::{answered, as_performed_by};
use super::read::{Segment, ancestry_of, record, spec_of};
use super::receipts::{ChainBuilder, ReceiptSummary, check_chain};
use super::replay::{Divergence, Recorded, replay_from};
use super::tail;
use crate::machine::{Digest, Effect, EventBody, RunId, RunSpec, RunState};
use crate::receipt::{HeadOrigin, RunHead, Seal, VerifyingKey, check_head_seal};
use crate::store::{HeadRecord, RunRecord, Store, StoreError, TransitionRecord};

/// What `verify` checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// The run.
    pub run: RunId,
    /// Transitions replayed.
    pub transitions: u64,
    /// Hash of the final state.
    pub final_state_hash: String,
    /// The head check.
    pub head: HeadSummary,
    /// Message blobs read and checked.
    pub messages: u64,
    /// MCP catalog blobs read and checked (one per `ToolsListed` event).
    pub catalogs: u64,
    /// Attachment blobs (images, PDFs a message or a tool result carries) read and checked,
    /// once per message or result naming one.
    #[serde(skip_serializing_if = "is_zero")]
    pub files: u64,
    /// Snapshots checked.
    pub snapshots: u64,
    /// Global memory rows and removal records checked (revision 5).
    pub memory: u64,
    /// Outbox rows checked.
    pub outbox: u64,
    /// The receipt check.
    pub receipts: ReceiptSummary,
}

/// What the head's seal established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HeadSummary {
    /// The seq the history ends at.
    pub seq: u64,
    /// The status sealed.
    pub status: String,
    /// `signed`, `unsigned` or `trusted on first use` (a run stored by runtape 0.1.0).
    pub sealed: &'static str,
    /// The key that signed it (hex), when signed.
    pub signed_by: Option<String>,
    /// True when checked against a key the caller gave.
    pub trusted_key: bool,
}

/// Verifies a stored run (see the module doc). `key` is the public key to trust; without one,
/// signed seals are checked against the key they name, which proves consistency, not
/// authorship. `Ok(Err(_))` is a run that does not verify; `Err(_)` a failure to read it.
///
/// Everything is read from one snapshot of the store ([`Store::snapshot`]), so a run another
/// process is driving is checked as it stood at one moment.
pub fn verify(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
) -> Result<Result<Verified, Divergence>, HistoryError> {
    let snapshot = store.snapshot()?;
    let store = snapshot.as_deref().unwrap_or(store);
    match store.head(run) {
        Ok(head) => Ok(verify_once(store, run, key, head, Reach::Whole)?.map(|h| h.verified)),
        Err(StoreError::Damaged { detail, .. }) => Ok(Err(unreadable(&detail))),
        Err(e) => Err(e.into()),
    }
}

/// How much of a run's record a check covers: everything (`verify`), or what a command acting
/// on the run acts on ([`super::continuable`]), checked the way `verify` checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every step from the first, and every table beside them: `verify`.
    Whole,
    /// The steps from the newest snapshot before every call still outstanding at the end (see
    /// [`super::tail`]) to the sealed end, what the run's row and head say, its outbox and its
    /// receipts from there on: what resuming, answering or cancelling the run acts on.
    Tail,
    /// Every step through this seq, bound to the sealed end by the chain links after it: what
    /// a fork at this seq is made of.
    Through(u64),
}

/// What a stored row that does not decode (a damaged or edited column) is reported as.
fn unreadable(detail: &str) -> Divergence {
    Divergence {
        seq: 0,
        column: Some("stored row".into()),
        what: super::replay::clip(detail),
        expected: "a readable value".into(),
        found: "one that does not decode".into(),
    }
}

/// A check that held: what it checked, and the state it folded to (at the end of its reach)
/// with the chain link there — what a command acting from there acts on.
pub(crate) struct Held {
    /// What was checked.
    pub(crate) verified: Verified,
    /// The state at the end of the reach.
    pub(crate) state: RunState,
    /// The chain link there.
    pub(crate) chain: Digest,
}

/// Checks `run` (whose stored head is `head`, read from the same snapshot of `store`) as far
/// as `reach` says; a stored row that does not decode is a divergence, not an error.
pub(crate) fn verify_once(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
    head: Option<HeadRecord>,
    reach: Reach,
) -> Result<Result<Held, Divergence>, HistoryError> {
    match check(store, run, key, head, reach) {
        Ok(result) => Ok(result),
        Err(HistoryError::Store(StoreError::Damaged { detail, .. })) => {
            Ok(Err(unreadable(&detail)))
        }
        Err(e) => Err(e),
    }
}

macro_rules! fail {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(d) => return Ok(Err(d)),
        }
    };
}

/// What one run's check reads once and every stretch of it uses.
struct Run<'a> {
    store: &'a dyn Store,
    id: &'a RunId,
    key: Option<&'a VerifyingKey>,
    rec: &'a RunRecord,
    head: &'a RunHead,
    seal: &'a Seal,
    summary: &'a HeadSummary,
    spec: &'a RunSpec,
    segments: &'a [Segment],
}

/// How a check of one stretch of history came out.
enum Stretch {
    /// It holds.
    Holds(Box<Held>),
    /// A call outstanding at its end was emitted at or before where it started (this seq):
    /// it must start earlier, so that the call is checked against the step that emitted it.
    StartBefore(u64),
}

fn check(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
    head: Option<HeadRecord>,
    reach: Reach,
) -> Result<Result<Held, Divergence>, HistoryError> {
    let rec = record(store, run)?;
    let Some(stored) = head else {
        return Ok(Err(Divergence::column(
            0,
            "runs.head",
            "sealed head",
            "the run's head",
            "none",
        )));
    };
    let (head, seal) = fail!(audit::open_head(&stored));
    let mut summary = fail!(head_seal(&stored, &head, &seal, key));
    summary.seq = head.seq;
    fail!(audit::identity(&rec, &head));
    let spec = spec_of(&rec)?;
    // The row just read is the one the ancestry starts from: not read again.
    let segments = ancestry_of(store, rec.clone(), head.seq)?;
    let to = match reach {
        Reach::Through(seq) if seq > head.seq => {
            return Err(HistoryError::SeqOutOfRange {
                run: run.to_string(),
                seq,
                latest: head.seq,
            });
        }
        Reach::Through(seq) => seq,
        Reach::Whole | Reach::Tail => head.seq,
    };
    let mut from = match reach {
        Reach::Tail => tail::base_at_or_before(store, &segments, to)?,
        Reach::Whole | Reach::Through(_) => 0,
    };
    let cx = Run {
        store,
        id: run,
        key,
        rec: &rec,
        head: &head,
        seal: &seal,
        summary: &summary,
        spec: &spec,
        segments: &segments,
    };
    loop {
        match fail!(stretch(&cx, from, to)?) {
            Stretch::Holds(held) => return Ok(Ok(*held)),
            Stretch::StartBefore(seq) => {
                from = tail::base_at_or_before(store, &segments, seq.saturating_sub(1))?;
            }
        }
    }
}

/// Checks the steps `from+1..=to` folded from the base at `from` (see [`super::tail`]), and
/// everything beside them that a check reaching that far can judge.
fn stretch(cx: &Run<'_>, from: u64, to: u64) -> Result<Result<Stretch, Divergence>, HistoryError> {
    let Run {
        store,
        id: run,
        key,
        rec,
        head,
        seal,
        summary,
        spec,
        segments,
    } = *cx;
    let hash = spec.history_hash();
    let mut rows: Vec<TransitionRecord> = Vec::new();
    let mut snapshots: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut events = Vec::new();
    let base_row = match from {
        0 => None,
        _ => tail::row_at(store, segments, from)?,
    };
    let base = fail!(tail::open_base(
        store,
        run,
        segments,
        hash,
        from,
        base_row.as_ref()
    )?);
    for seg in segments {
        let (lo, hi) = (seg.from.max(from + 1), seg.to.min(to));
        if lo > hi {
            continue;
        }
        let start = rows.len();
        rows.extend(store.transitions(&seg.run, lo, hi)?);
        snapshots.extend(store.snapshots(&seg.run, lo, hi)?);
        for t in &rows[start..] {
            let Ok(event) = decode_event(run, t.seq, &t.event) else {
                return Ok(Err(Divergence::column(
                    t.seq,
                    "transitions.event",
                    "event",
                    "a decodable event",
                    String::from_utf8_lossy(&t.event),
                )));
            };
            if event.run != seg.run {
                return Ok(Err(Divergence::column(
                    t.seq,
                    "transitions.event",
                    "the event's run",
                    seg.run.as_str(),
                    event.run.as_str(),
                )));
            }
            if event.at != t.at {
                return Ok(Err(Divergence::column(
                    t.seq,
                    "transitions.at",
                    "time",
                    event.at.0.to_string(),
                    t.at.0.to_string(),
                )));
            }
            events.push(event);
        }
    }
    let outbox_rows = store.outbox(run)?;
    let wanted: BTreeSet<(u64, u32)> = outbox_rows
        .iter()
        .map(|o| (o.effect.seq, o.effect.index))
        .filter(|(seq, _)| *seq > from && *seq <= to)
        .collect();
    let mut facts = OutboxFacts::default();
    let base_tip = if from == 0 {
        let root = segments.first().map_or(run, |s| &s.run);
        super::receipts::delegation_anchor(store, root)?
    } else {
        super::receipts::tip_through(store, run, segments, from)?
    };
    // Where the chain stands at the base, when that is a receipt of the run's own (a link
    // given at seq 0 is a delegated child's anchor in its parent).
    let base_receipt = base_tip
        .as_ref()
        .filter(|t| t.seq > 0)
        .map(|t| (t.seq, t.seal.link()));
    let mut receipts = ChainBuilder::anchored(base_tip);
    // The calls outstanding at the base are answered (if at all) in this stretch: their
    // receipts describe them as emitted before it.
    for at in base.state.outstanding() {
        match super::read::effect_at(store, run, at) {
            Ok(effect) => receipts.already_issued(effect),
            Err(HistoryError::Diverged { detail, .. }) => {
                return Ok(Err(Divergence::column(
                    at.seq,
                    "transitions.effects",
                    "an effect outstanding where the check starts",
                    "the effect the state waits on",
                    detail,
                )));
            }
            Err(e) => return Err(e),
        }
    }
    let first_seq = from + 1;
    let mut snapshots_checked = 0u64;
    let mut messages = 0u64;
    let mut catalogs = 0u64;
    let mut files = 0u64;
    let mut seed = None;
    let mut memory = MemoryFacts::default();
    let recorded = rows.iter().zip(events).map(|(t, event)| Recorded {
        seq: t.seq,
        event_bytes: &t.event,
        event,
        edge: t.edge.as_str(),
        effects: &t.effects,
        state_hash: t.state_hash,
        chain: Some(t.chain),
    });
    let mut visit = |r: &Recorded<'_>, t: &crate::machine::Transition| -> Result<(), Divergence> {
        let seal = usize::try_from(r.seq - first_seq)
            .ok()
            .and_then(|i| rows.get(i))
            .and_then(|row| row.seal.as_deref());
        receipts.visit(r.seq, &r.event, r.event_bytes, seal, &t.effects);
        // Read from a snapshot (one read transaction), each lookup is a plain B-tree probe.
        for file in r.event.body.files() {
            let stored = store.blob(&file.digest).map_err(|e| {
                Divergence::column(r.seq, "blobs", "attachment blob", "readable", e.to_string())
            })?;
            audit::attachment(r.seq, &file.digest, stored.as_deref())?;
            files += 1;
        }
        for a in &t.appended {
            let stored = store.blob(&a.head).map_err(|e| {
                Divergence::column(r.seq, "blobs", "message blob", "readable", e.to_string())
            })?;
            audit::blob(r.seq, &a.head, &a.prev, &a.bytes, stored.as_deref())?;
            messages += 1;
            for file in &a.message.attachments {
                let stored = store.blob(&file.digest).map_err(|e| {
                    Divergence::column(r.seq, "blobs", "attachment blob", "readable", e.to_string())
                })?;
                audit::attachment(r.seq, &file.digest, stored.as_deref())?;
                files += 1;
            }
        }
        if let EventBody::ToolsListed {
            catalog,
            tools,
            added,
            ..
        } = &r.event.body
        {
            let stored = store.blob(catalog).map_err(|e| {
                Divergence::column(r.seq, "blobs", "catalog blob", "readable", e.to_string())
            })?;
            audit::catalog(r.seq, catalog, tools, stored.as_deref())?;
            if let Some(bytes) = stored.as_deref() {
                audit::catalog_added(r.seq, catalog, added, bytes)?;
            }
            catalogs += 1;
        }
        if let EventBody::SessionStart { seed: carried, .. } = &r.event.body {
            seed = Some(carried.clone());
        }
        memory.note(r.seq, &r.event.run, &r.event.body, &t.effects);
        if snapshot_due(r.seq) {
            audit::snapshot(r.seq, snapshots.remove(&r.seq).as_deref(), &t.next)?;
            snapshots_checked += 1;
        }
        if !wanted.is_empty() {
            note_outbox(run, &wanted, &mut facts, &r.event.body, &t.effects);
        }
        Ok(())
    };
    let state = fail!(replay_from(
        spec, base.state, base.chain, recorded, &mut visit
    ));
    if state.seq() != to {
        return Ok(Err(tail::missing_before_end(state.seq() + 1, head.seq)));
    }
    // A call the run waits on must be checked against the step that emitted it.
    if let Some(first) = state.outstanding().iter().map(|r| r.seq).min()
        && first <= from
    {
        return Ok(Ok(Stretch::StartBefore(first)));
    }
    let chain = rows.last().map_or(base.chain, |t| t.chain);
    let global = spec
        .spec()
        .memory
        .as_ref()
        .and_then(|m| m.global.as_deref());
    if to == head.seq {
        let own_from = head.parent.as_ref().map_or(0, |p| p.seq);
        fail!(audit::head_against_history(
            head,
            &state,
            hash,
            &chain,
            head.seq > own_from
        ));
    } else {
        // Stopping short of the end (a fork point): the steps after it are not folded, but
        // what they say of the calls emitted by then (answered, or not) and of the global
        // memory they published to is read from their events, for the checks below.
        let mut awaiting: BTreeSet<(u64, u32)> = wanted
            .iter()
            .filter(|at| !facts.answered.contains(at))
            .copied()
            .collect();
        let mut after = |t: &TransitionRecord| -> Result<(), Divergence> {
            if awaiting.is_empty() && global.is_none() {
                return Ok(());
            }
            let undecodable = || {
                Divergence::column(
                    t.seq,
                    "transitions.event",
                    "event",
                    "a decodable event",
                    String::from_utf8_lossy(&t.event),
                )
            };
            let event = decode_event(run, t.seq, &t.event).map_err(|_| undecodable())?;
            if let Some(at) = answered(&event.body)
                && awaiting.remove(&(at.seq, at.index))
            {
                facts.answered.insert((at.seq, at.index));
            }
            if global.is_some() {
                let effects = decode_effects(run, t.seq, &t.effects).map_err(|_| {
                    Divergence::column(
                        t.seq,
                        "transitions.effects",
                        "effects",
                        "decodable effects",
                        String::from_utf8_lossy(&t.effects),
                    )
                })?;
                memory.note(t.seq, &event.run, &event.body, &effects);
            }
            Ok(())
        };
        fail!(tail::bind_to_head(
            store, segments, hash, to, chain, head, &mut after
        )?);
    }
    if let Some((&seq, _)) = snapshots.iter().next() {
        return Ok(Err(Divergence::column(
            seq,
            "snapshots.id",
            "snapshot",
            "none (snapshots are due every 64 transitions)",
            "a snapshot",
        )));
    }
    fail!(nothing_past_the_end(store, run, head.seq)?);
    fail!(audit::standing(rec, head));
    let through = (to < head.seq).then_some(to);
    fail!(audit::outbox(&outbox_rows, &facts, head, from, through));
    fail!(super::session::check(
        store,
        run,
        spec,
        head,
        seed.as_ref()
    )?);
    // The global memory's rows and removal records are checked whole; the loads and publishes
    // checked against them are those of the steps read here.
    let memory_checked = fail!(memory_audit::check(store, global, &memory, key)?);
    let anchor = receipts.anchor().map(str::to_owned);
    let (chain_receipts, problem) = receipts.finish();
    // No receipt in this stretch: the chain still stands where it stood at its base.
    let tip = chain_receipts
        .last()
        .map(|r| (r.body.seq, r.link()))
        .or(base_receipt);
    let receipt_summary = fail!(check_chain(
        (chain_receipts, problem),
        key,
        anchor.as_deref()
    ));
    if to == head.seq {
        fail!(receipts_match_head(head, seal, &receipt_summary, tip));
    }
    let verified = Verified {
        run: run.clone(),
        transitions: to,
        final_state_hash: state.state_hash(hash).to_hex(),
        head: summary.clone(),
        messages,
        catalogs,
        files,
        snapshots: snapshots_checked,
        memory: memory_checked,
        outbox: outbox_rows.len() as u64,
        receipts: receipt_summary,
    };
    Ok(Ok(Stretch::Holds(Box::new(Held {
        verified,
        state,
        chain,
    }))))
}

/// The head's seal: signed heads against `key` (or the key they name); unsigned heads by
/// their digest, and refused where a key is trusted unless sealed by the migration (trust on
/// first use).
pub(crate) fn head_seal(
    stored: &HeadRecord,
    head: &RunHead,
    seal: &Seal,
    key: Option<&VerifyingKey>,
) -> Result<HeadSummary, Divergence> {
    let bad = |found: String| {
        Divergence::column(
            0,
            "runs.seal",
            "head seal",
            "a seal over the stored head",
            found,
        )
    };
    check_head_seal(&stored.body, seal, key).map_err(|e| bad(e.to_string()))?;
    if key.is_some() && matches!(seal, Seal::Unsigned { .. }) && head.origin == HeadOrigin::Engine {
        return Err(bad(
            "an unsigned head: the run was not signed, or its signature was stripped".into(),
        ));
    }
    Ok(HeadSummary {
        seq: head.seq,
        status: head.status.clone(),
        sealed: audit::sealed_by(head, seal),
        signed_by: seal.key_id().map(str::to_owned),
        trusted_key: key.is_some(),
    })
}

/// The head's receipt tip is the rebuilt chain's last receipt, and head and receipts are
/// sealed the same way (a head trusted on first use excepted).
fn receipts_match_head(
    head: &RunHead,
    seal: &Seal,
    receipts: &ReceiptSummary,
    tip: Option<(u64, String)>,
) -> Result<(), Divergence> {
    let sealed = head.receipt_tip.as_ref().map(|t| (t.seq, t.link.clone()));
    if sealed != tip {
        let show = |t: &Option<(u64, String)>| {
            t.as_ref().map_or("none".into(), |(s, l)| {
                format!("seq {s} ({})", &l[..l.len().min(16)])
            })
        };
        return Err(Divergence::column(
            head.seq,
            "runs.head",
            "last receipt",
            show(&sealed),
            show(&tip),
        ));
    }
    if receipts.receipts > 0
        && head.origin == HeadOrigin::Engine
        && receipts.signed_by.as_deref() != seal.key_id()
    {
        let show = |k: Option<&str>| k.map_or("no key".to_owned(), |k| format!("key {k}"));
        return Err(Divergence::column(
            0,
            "runs.seal",
            "head seal",
            format!(
                "sealed like the receipts ({})",
                show(receipts.signed_by.as_deref())
            ),
            show(seal.key_id()),
        ));
    }
    Ok(())
}

/// No transition or snapshot of the run's own is stored past the sealed end.
fn nothing_past_the_end(
    store: &dyn Store,
    run: &RunId,
    end: u64,
) -> Result<Result<(), Divergence>, HistoryError> {
    let past = end + 1;
    if let Some(t) = store.transitions(run, past, u64::from(u32::MAX))?.first() {
        return Ok(Err(Divergence::column(
            t.seq,
            "runs.seq",
            "transition past the sealed end of the history",
            format!("nothing after seq {end}"),
            "a transition",
        )));
    }
    if let Some((seq, _)) = store.snapshots(run, past, u64::from(u32::MAX))?.first() {
        return Ok(Err(Divergence::column(
            *seq,
            "snapshots.id",
            "snapshot past the sealed end of the history",
            format!("nothing after seq {end}"),
            "a snapshot",
        )));
    }
    Ok(Ok(()))
}

/// Records, for the outbox rows in `wanted`, the idempotency key of the tool call each names
/// (as the run performs it: a fork performs inherited calls under its own ids) and whether
/// this transition's event answers it.
fn note_outbox(
    run: &RunId,
    wanted: &BTreeSet<(u64, u32)>,
    facts: &mut OutboxFacts,
    body: &EventBody,
    effects: &[Effect],
) {
    if let Some(at) = answered(body)
        && wanted.contains(&(at.seq, at.index))
    {
        facts.answered.insert((at.seq, at.index));
    }
    for e in effects {
        let id = e.id();
        let at = (id.seq, id.index);
        if !wanted.contains(&at) {
            continue;
        }
        if let Effect::CallTool {
            idempotency_key, ..
        } = as_performed_by(run, e.clone())
        {
            facts.keys.insert(at, idempotency_key);
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
