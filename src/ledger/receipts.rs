//! Receipts against the history they describe: which transitions carry one, what their hashes
//! cover, and the check `verify` makes that every receipt matches the event and effect it
//! claims (not only that the chain and signatures hold).

use super::HistoryError;
use super::codec::{decode_effects, decode_event};
use super::pairing::Outstanding;
use super::read::{ancestry, ancestry_through, record};
use super::replay::Divergence;
use crate::machine::{AgentId, Effect, EffectId, Event, EventBody, RunId};
use crate::receipt::{
    self, ChildTip, Receipt, ReceiptBody, ReceiptDraft, ReceiptKind, Seal, VerifyingKey,
};
use crate::store::Store;

/// The receipt fields a transition's event implies, given the effect it answers: model replies,
/// model failures, tool results and reconcile answers each get one, and so does a child run's
/// result when it names where the child's record ends (revision 5, [`ChildTip`]); other events
/// none.
/// `request_hash` is the SHA-256 of the effect's JSON as emitted (its id, the request or call,
/// the attempt) — pass it when known (the writer has the stored bytes), `None` to encode the
/// effect; `response_hash` is the SHA-256 of the event exactly as stored (`event_bytes`). So a
/// receipt pins the rows it describes, and `verify` recomputes both from the database.
pub fn receipt_draft(
    run: &RunId,
    seq: u64,
    at: crate::machine::Hlc,
    effect: &Effect,
    request_hash: Option<String>,
    body: &EventBody,
    event_bytes: &[u8],
) -> Option<ReceiptDraft> {
    let mut child = None;
    let (kind, agent, usage, cost): (ReceiptKind, &AgentId, _, _) = match (effect, body) {
        (Effect::CallModel { agent, .. }, EventBody::ModelReplied { reply, .. }) => (
            ReceiptKind::Model,
            agent,
            reply.usage.and_then(|u| serde_json::to_value(u).ok()),
            reply.cost_nanos,
        ),
        (Effect::CallModel { agent, .. }, EventBody::ModelFailed { .. }) => {
            (ReceiptKind::Model, agent, None, None)
        }
        (Effect::CallTool { agent, .. }, EventBody::ToolReturned { .. })
        | (Effect::Reconcile { agent, .. }, EventBody::Reconciled { .. })
        | (Effect::Retrieve { agent, .. }, EventBody::Retrieved { .. }) => {
            (ReceiptKind::Tool, agent, None, None)
        }
        (
            Effect::RunChild { agent, .. },
            EventBody::ChildFinished {
                report,
                proof: Some(proof),
                ..
            },
        ) => {
            child = Some(ChildTip {
                anchor: proof.anchor.clone(),
                chain: proof.chain.to_hex(),
                receipt: proof.receipt.as_ref().map(|r| r.link.clone()),
                receipt_seq: proof.receipt.as_ref().map(|r| r.seq),
                run_id: proof.run.clone(),
                seq: proof.seq,
            });
            let usage = serde_json::to_value(report.usage).ok();
            (
                ReceiptKind::Child,
                agent,
                usage,
                Some(report.usage.cost_nanos),
            )
        }
        _ => return None,
    };
    let request_hash = match request_hash {
        Some(h) => h,
        None => receipt::sha256_hex(&serde_json::to_vec(effect).ok()?),
    };
    Some(ReceiptDraft {
        run_id: run.clone(),
        seq,
        kind,
        agent: agent.clone(),
        request_hash,
        response_hash: receipt::sha256_hex(event_bytes),
        usage,
        cost,
        hlc: at,
        child,
    })
}

/// The run's receipt chain, rebuilt: each transition that carries a seal gets the receipt body
/// its history implies ([`receipt_draft`] chained to the previous receipt), with the stored
/// seal. Across a fork's ancestry: the parent's receipts up to the fork point, then its own.
/// An edited event or effect changes the rebuilt body, so its seal no longer verifies.
pub fn receipts(store: &dyn Store, run: &RunId) -> Result<Vec<Receipt>, HistoryError> {
    Ok(walk(store, run)?.0)
}

/// The run's receipts and the head line closing them, for a complete export
/// ([`crate::receipt::write_bundle`]): the chain rebuilt up to the seq the sealed head says the
/// history ends at, checked to have no missing or unexpected receipt and to end at the head's
/// receipt tip. A run whose stored receipts disagree with its head is refused
/// ([`HistoryError::Tampered`]).
pub fn receipts_export(
    store: &dyn Store,
    run: &RunId,
) -> Result<(Vec<Receipt>, crate::receipt::BundleHead), HistoryError> {
    export_section(store, run, true)
}

/// `run`'s export ([`receipts_export`]), then one section for each run below it in its
/// delegation tree ([`super::tree::tree`]: parents before children, each run's children in the
/// order it asked for them), each the run's own receipts and its head line: what
/// [`crate::receipt::verify_tree`] checks offline as one tree. A child with no receipts that
/// no receipt of its parent names (a revision-4 parent's child that ended before its first
/// model turn) has nothing to prove and is left out.
pub fn receipts_export_tree(
    store: &dyn Store,
    run: &RunId,
) -> Result<Vec<(Vec<Receipt>, crate::receipt::BundleHead)>, HistoryError> {
    let mut sections = vec![export_section(store, run, true)?];
    for below in super::tree::tree(store, run)?.into_iter().skip(1) {
        let (receipts, head) = export_section(store, &below.run, false)?;
        let named = sections
            .iter()
            .flat_map(|(r, _)| r)
            .any(|r| r.body.child.as_ref().is_some_and(|c| c.run_id == below.run));
        if receipts.is_empty() && !named {
            continue;
        }
        sections.push((receipts, head));
    }
    Ok(sections)
}

/// One run's receipts checked against its sealed head, and the head line closing them; with
/// `prefix`, a delegated child's parents' receipts through its anchor come first.
fn export_section(
    store: &dyn Store,
    run: &RunId,
    prefix: bool,
) -> Result<(Vec<Receipt>, crate::receipt::BundleHead), HistoryError> {
    // An unknown run is bad input (exit 2), not a run without a head.
    record(store, run)?;
    let refuse = |detail: String| HistoryError::Tampered {
        run: run.to_string(),
        detail,
    };
    let stored = store
        .head(run)?
        .ok_or_else(|| refuse("it has no sealed head (runs.head is empty)".into()))?;
    let (head, seal) = super::audit::open_head(&stored).map_err(|d| refuse(d.to_string()))?;
    let (own, problem) = walk_to(store, run, head.seq)?;
    if let Some(d) = problem {
        return Err(refuse(d.to_string()));
    }
    let mut chain = if prefix {
        delegation_prefix(store, run)?
    } else {
        Vec::new()
    };
    chain.extend(own);
    let last = chain.last().map(|r| (r.body.seq, r.link()));
    let sealed = head.receipt_tip.as_ref().map(|t| (t.seq, t.link.clone()));
    if last != sealed {
        return Err(refuse(
            "runs.head: the stored receipts do not end where the head says".into(),
        ));
    }
    let line = crate::receipt::BundleHead::new(head, seal, &chain);
    Ok((chain, line))
}

/// For a delegated child: the receipts its chain hangs under — its parent's through the
/// transition that asked for it, and, when the parent is a child too, its parent's before
/// those — so an export of the child verifies offline from a `null` start. Empty for a run
/// nobody delegated.
fn delegation_prefix(store: &dyn Store, run: &RunId) -> Result<Vec<Receipt>, HistoryError> {
    let mut pieces: Vec<(RunId, u64)> = Vec::new();
    let mut child = run.clone();
    loop {
        let to = record(store, &child)?.seq;
        let root = ancestry(store, &child, to)?
            .first()
            .map_or(child.clone(), |s| s.run.clone());
        let link = serde_json::from_str::<DelegationLink>(&record(store, &root)?.spec)
            .ok()
            .and_then(|l| l.delegated_by);
        let Some(effect) = link else { break };
        if effect.run == *run || pieces.iter().any(|(r, _)| *r == effect.run) {
            return Err(HistoryError::Diverged {
                run: run.to_string(),
                seq: 0,
                detail: format!(
                    "its delegation links loop back to run {} (run_specs.spec delegated_by)",
                    effect.run
                ),
            });
        }
        child = effect.run.clone();
        pieces.push((effect.run, effect.seq));
    }
    let mut prefix = Vec::new();
    for (parent, seq) in pieces.into_iter().rev() {
        let to = seq.min(record(store, &parent)?.seq);
        let (receipts, problem) = walk_to(store, &parent, to)?;
        if let Some(d) = problem {
            return Err(HistoryError::Tampered {
                run: parent.to_string(),
                detail: d.to_string(),
            });
        }
        // Each parent's chain hangs from the last receipt already in `prefix` (its own anchor),
        // and one without receipts through `seq` adds none: the child hangs from that anchor.
        prefix.extend(receipts);
    }
    Ok(prefix)
}

/// The rebuilt chain, and the first transition whose seal is missing or unexpected.
fn walk(
    store: &dyn Store,
    run: &RunId,
) -> Result<(Vec<Receipt>, Option<Divergence>), HistoryError> {
    let rec = record(store, run)?;
    walk_to(store, run, rec.seq)
}

/// [`walk`] through `to` (not clamped to the run's row).
fn walk_to(
    store: &dyn Store,
    run: &RunId,
    to: u64,
) -> Result<(Vec<Receipt>, Option<Divergence>), HistoryError> {
    let segments = ancestry_through(store, run, to)?;
    let root = segments.first().map_or(run, |s| &s.run);
    let mut builder = ChainBuilder::anchored(delegation_anchor(store, root)?);
    let mut rows = Vec::new();
    for seg in segments {
        rows.extend(store.transitions(&seg.run, seg.from, seg.to)?);
    }
    for t in &rows {
        let event = decode_event(run, t.seq, &t.event)?;
        let effects = decode_effects(run, t.seq, &t.effects)?;
        builder.visit(t.seq, &event, &t.event, t.seal.as_deref(), &effects);
    }
    Ok(builder.finish())
}

/// Rebuilds a receipt chain one transition at a time, in order.
#[derive(Default)]
pub(crate) struct ChainBuilder {
    /// The link the first receipt chains under: a delegated child's anchor in its parent.
    anchor: Option<String>,
    outstanding: Outstanding,
    chain: Vec<Receipt>,
    problem: Option<Divergence>,
}

impl ChainBuilder {
    /// A builder whose first receipt chains under `anchor` (from [`delegation_anchor`]; `None`
    /// for a run nobody delegated, whose chain starts at `null`).
    pub(crate) fn anchored(anchor: Option<receipt::ChainTip>) -> Self {
        ChainBuilder {
            anchor: anchor.map(|t| t.seal.link()),
            ..ChainBuilder::default()
        }
    }

    /// Takes transition `seq`: its event (and exact stored bytes), its stored seal, and the
    /// effects it emitted.
    pub(crate) fn visit(
        &mut self,
        seq: u64,
        event: &Event,
        event_bytes: &[u8],
        seal: Option<&[u8]>,
        effects: &[Effect],
    ) {
        // A fork performs the calls it inherited outstanding under its own ids (as the driver
        // does), so its receipt describes the request this run made.
        let answered = self.outstanding.answer(event);
        let draft = answered.and_then(|issued| {
            receipt_draft(
                &event.run,
                seq,
                event.at,
                &issued.effect,
                None,
                &event.body,
                event_bytes,
            )
        });
        match (draft, seal) {
            (Some(draft), Some(bytes)) => match Seal::from_bytes(bytes) {
                Some(seal) => {
                    let previous = self.chain.last().map(Receipt::link);
                    let body = ReceiptBody::from_draft(draft, previous.or(self.anchor.clone()));
                    self.chain.push(Receipt { body, seal });
                }
                None if self.problem.is_none() => {
                    self.problem = Some(Divergence::column(
                        seq,
                        "transitions.seal",
                        "receipt",
                        "a receipt seal",
                        "bytes that are not one",
                    ));
                }
                None => {}
            },
            (Some(_), None) if self.problem.is_none() => {
                self.problem = Some(Divergence::column(
                    seq,
                    "transitions.seal",
                    "receipt",
                    "a receipt for this result",
                    "none",
                ));
            }
            (None, Some(_)) if self.problem.is_none() => {
                self.problem = Some(Divergence::column(
                    seq,
                    "transitions.seal",
                    "receipt",
                    "no receipt (no model, tool or reconcile result here)",
                    "a receipt",
                ));
            }
            _ => {}
        }
        self.outstanding.issue(effects);
    }

    /// Records `effect` as issued before the first transition this builder will visit (an
    /// effect outstanding where a check of a history's tail starts), so the receipt of its
    /// answer is rebuilt.
    pub(crate) fn already_issued(&mut self, effect: Effect) {
        self.outstanding.insert(effect, None);
    }

    /// The chain, and the first missing or unexpected receipt.
    pub(crate) fn finish(self) -> (Vec<Receipt>, Option<Divergence>) {
        (self.chain, self.problem)
    }

    /// The link the chain's first receipt hangs from (see [`Self::anchored`]).
    pub(crate) fn anchor(&self) -> Option<&str> {
        self.anchor.as_deref()
    }
}

/// The last receipt seal of `run`'s chain at or before `seq` (across fork ancestry), without
/// rebuilding the chain: what a resuming process needs to seal the next receipt. A delegated
/// child with no receipt yet gets its [`delegation_anchor`] instead, so its first receipt
/// chains under the parent's.
pub fn chain_tip(
    store: &dyn Store,
    run: &RunId,
    seq: u64,
) -> Result<Option<receipt::ChainTip>, HistoryError> {
    let segments = ancestry(store, run, seq)?;
    if let Some(tip) = own_tip(store, run, &segments)? {
        return Ok(Some(tip));
    }
    // A run with no transition yet (a child created, then killed before its `Start` was
    // committed) has no segments: it is its own root, as `walk_to` and verify take it.
    let root = segments.first().map_or(run, |s| &s.run);
    delegation_anchor(store, root)
}

/// The receipt link the chain stands at after step `seq` of a run whose ancestry (through at
/// least `seq`) is `segments`: its last seal at or before `seq`, else — a delegated child with
/// no receipt yet — its delegation anchor (given at seq 0); `None` for neither. Where a check
/// of the history's tail after `seq` picks the chain up.
pub(crate) fn tip_through(
    store: &dyn Store,
    run: &RunId,
    segments: &[super::read::Segment],
    seq: u64,
) -> Result<Option<receipt::ChainTip>, HistoryError> {
    let clipped: Vec<super::read::Segment> = segments
        .iter()
        .filter(|s| s.from <= seq)
        .map(|s| super::read::Segment {
            run: s.run.clone(),
            from: s.from,
            to: s.to.min(seq),
        })
        .collect();
    if let Some(tip) = own_tip(store, run, &clipped)? {
        return Ok(Some(tip));
    }
    let root = segments.first().map_or(run, |s| &s.run);
    delegation_anchor(store, root)
}

/// The last seal stored in `segments` (a run's ancestry), if any.
fn own_tip(
    store: &dyn Store,
    run: &RunId,
    segments: &[super::read::Segment],
) -> Result<Option<receipt::ChainTip>, HistoryError> {
    for seg in segments.iter().rev() {
        if let Some((at, bytes)) = store.last_seal(&seg.run, seg.to)?
            && at >= seg.from
        {
            let seal = Seal::from_bytes(&bytes).ok_or_else(|| HistoryError::Diverged {
                run: run.to_string(),
                seq: at,
                detail: "the stored receipt seal does not decode".into(),
            })?;
            return Ok(Some(receipt::ChainTip { seq: at, seal }));
        }
    }
    Ok(None)
}

/// Where the receipts of a child started by the parent's `effect` hang from (see
/// [`delegation_anchor`]): the parent's receipt tip at the transition that issued the effect,
/// given at seq 0. What a new child's driver seals its first receipt after.
pub fn anchor_under(
    store: &dyn Store,
    effect: &EffectId,
) -> Result<Option<receipt::ChainTip>, HistoryError> {
    Ok(
        chain_tip(store, &effect.run, effect.seq)?.map(|t| receipt::ChainTip {
            seq: 0,
            seal: t.seal,
        }),
    )
}

/// The link in a stored spec naming the parent's effect that started the run.
#[derive(serde::Deserialize)]
struct DelegationLink {
    delegated_by: Option<EffectId>,
}

/// Where the receipt chain of `run` (a run with no fork parent) hangs from: for a child run
/// started by a parent's `RunChild` effect, the parent's last receipt at or before the
/// transition that asked for the child (the model turn whose reply delegated) — or, when the
/// parent has none there, the parent's own anchor. `None` for a run nobody delegated, whose
/// chain starts at `null`. The tip is given at seq 0: a child's seqs start afresh, so only its
/// link carries over.
pub fn delegation_anchor(
    store: &dyn Store,
    run: &RunId,
) -> Result<Option<receipt::ChainTip>, HistoryError> {
    let mut child = run.clone();
    let mut seen = vec![child.clone()];
    loop {
        let rec = record(store, &child)?;
        let link: Option<EffectId> = serde_json::from_str::<DelegationLink>(&rec.spec)
            .ok()
            .and_then(|l| l.delegated_by);
        let Some(effect) = link else {
            return Ok(None);
        };
        if seen.contains(&effect.run) {
            return Err(HistoryError::Diverged {
                run: run.to_string(),
                seq: 0,
                detail: format!(
                    "its delegation links loop back to run {} (run_specs.spec delegated_by)",
                    effect.run
                ),
            });
        }
        let segments = ancestry(store, &effect.run, effect.seq)?;
        if let Some(tip) = own_tip(store, &effect.run, &segments)? {
            return Ok(Some(receipt::ChainTip {
                seq: 0,
                seal: tip.seal,
            }));
        }
        child = segments
            .first()
            .map_or(effect.run.clone(), |s| s.run.clone());
        seen.push(effect.run);
        seen.push(child.clone());
    }
}

/// What the receipt check found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReceiptSummary {
    /// Receipts checked.
    pub receipts: usize,
    /// The key that signed them (hex), or `None` when unsigned.
    pub signed_by: Option<String>,
    /// True when they were checked against a key the caller gave.
    pub trusted_key: bool,
}

/// Checks the run's receipts: every model turn and tool result in the history carries exactly
/// one, and each rebuilt receipt's seal verifies — its signature (against `key`, or, when none
/// is given, the key the receipts name, which proves consistency but not authorship) or its
/// digest — so an edited event, effect or seal is caught at its receipt.
pub fn check_receipts(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
) -> Result<Result<ReceiptSummary, Divergence>, HistoryError> {
    let segments = ancestry(store, run, record(store, run)?.seq)?;
    let root = segments.first().map_or(run, |s| &s.run);
    let anchor = delegation_anchor(store, root)?.map(|t| t.seal.link());
    Ok(check_chain(walk(store, run)?, key, anchor.as_deref()))
}

/// Checks a rebuilt chain (see [`check_receipts`]).
pub(crate) fn check_chain(
    (chain, problem): (Vec<Receipt>, Option<Divergence>),
    key: Option<&VerifyingKey>,
    anchor: Option<&str>,
) -> Result<ReceiptSummary, Divergence> {
    if let Some(d) = problem {
        return Err(d);
    }
    let named = chain
        .first()
        .and_then(|r| r.key_id())
        .and_then(|k| receipt::parse_public_key(k).ok());
    let key_used = key.copied().or(named);
    if let Err(e) = receipt::verify_chain_under(&chain, key_used.as_ref(), anchor) {
        let seq = e.at().map_or(0, |a| a.seq);
        return Err(Divergence::new(
            seq,
            "receipt",
            "a valid receipt",
            e.to_string(),
        ));
    }
    Ok(ReceiptSummary {
        receipts: chain.len(),
        signed_by: chain.first().and_then(|r| r.key_id()).map(str::to_owned),
        trusted_key: key.is_some(),
    })
}
