//! Receipts against the history they describe: which transitions carry one, what their hashes
//! cover, and the check `verify` makes that every receipt matches the event and effect it
//! claims (not only that the chain and signatures hold).

use std::collections::HashMap;

use super::verify::Divergence;
use super::{HistoryError, ancestry, effects_of, event_of, record, transitions};
use crate::machine::{AgentId, Effect, EffectRef, EventBody, RunId};
use crate::receipt::{self, Receipt, ReceiptDraft, ReceiptKind, VerifyingKey};
use crate::store::Store;

/// The receipt fields a transition's event implies, given the effect it answers: model replies,
/// model failures and tool results each get one; other events none. `request_hash` is the
/// SHA-256 of the effect's JSON as emitted (its id, the request or call, the attempt);
/// `response_hash` is the SHA-256 of the event exactly as stored (`event_bytes`). So a receipt
/// pins the rows it describes, and `verify` recomputes both from the database.
pub fn receipt_draft(
    run: &RunId,
    seq: u64,
    at: crate::machine::Hlc,
    effect: &Effect,
    body: &EventBody,
    event_bytes: &[u8],
) -> Option<ReceiptDraft> {
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
        (Effect::CallTool { agent, .. }, EventBody::ToolReturned { .. }) => {
            (ReceiptKind::Tool, agent, None, None)
        }
        _ => return None,
    };
    let request = serde_json::to_vec(effect).ok()?;
    Some(ReceiptDraft {
        run_id: run.clone(),
        seq,
        kind,
        agent: agent.clone(),
        request_hash: receipt::sha256_hex(&request),
        response_hash: receipt::sha256_hex(event_bytes),
        usage,
        cost,
        hlc: at,
    })
}

/// The run's receipt chain: across a fork's ancestry, the parent's receipts up to the fork
/// point, then its own.
pub fn receipts(store: &dyn Store, run: &RunId) -> Result<Vec<Receipt>, HistoryError> {
    let rec = record(store, run)?;
    let mut out = Vec::new();
    for seg in ancestry(store, run, rec.seq)? {
        for bytes in store.receipts(&seg.run)? {
            let r: Receipt =
                serde_json::from_slice(&bytes).map_err(|e| HistoryError::Diverged {
                    run: seg.run.to_string(),
                    seq: 0,
                    detail: format!("a stored receipt does not decode: {e}"),
                })?;
            if (seg.from..=seg.to).contains(&r.body.seq) {
                out.push(r);
            }
        }
    }
    Ok(out)
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

/// Checks the run's receipts: the chain and signatures (against `key`, or — when none is given
/// — the key the receipts name, which proves consistency but not authorship), and that every
/// model turn and tool result in the history has exactly the receipt it implies.
pub fn check_receipts(
    store: &dyn Store,
    run: &RunId,
    key: Option<&VerifyingKey>,
) -> Result<Result<ReceiptSummary, Divergence>, HistoryError> {
    let chain = receipts(store, run)?;
    let named = chain
        .first()
        .and_then(|r| r.key_id())
        .and_then(|k| receipt::parse_public_key(k).ok());
    let key_used = key.copied().or(named);
    let fail = |seq: u64, what: &str, expected: String, found: String| {
        Ok(Err(Divergence {
            seq,
            what: what.into(),
            expected,
            found,
        }))
    };
    if let Err(e) = receipt::verify(&chain, key_used.as_ref()) {
        return fail(0, "receipts", "a valid receipt chain".into(), e.to_string());
    }
    let rec = record(store, run)?;
    let rows = transitions(store, run, 1, rec.seq)?;
    let by_seq: HashMap<u64, &Receipt> = chain.iter().map(|r| (r.body.seq, r)).collect();
    let mut issued: HashMap<EffectRef, Effect> = HashMap::new();
    let mut expected = 0;
    for t in &rows {
        let event = event_of(run, t)?;
        let answered = match &event.body {
            EventBody::ModelReplied { effect, .. }
            | EventBody::ModelFailed { effect, .. }
            | EventBody::ToolReturned { effect, .. } => issued.get(&EffectRef {
                seq: effect.seq,
                index: effect.index,
            }),
            _ => None,
        };
        let draft = answered.and_then(|effect| {
            receipt_draft(&event.run, t.seq, event.at, effect, &event.body, &t.event)
        });
        match (draft, by_seq.get(&t.seq)) {
            (None, None) => {}
            (Some(_), None) => {
                return fail(
                    t.seq,
                    "receipt",
                    "a receipt for this result".into(),
                    "none".into(),
                );
            }
            (None, Some(_)) => {
                return fail(
                    t.seq,
                    "receipt",
                    "no receipt (no model or tool result here)".into(),
                    "a receipt".into(),
                );
            }
            (Some(d), Some(r)) => {
                expected += 1;
                if d.request_hash != r.body.request_hash {
                    return fail(
                        t.seq,
                        "receipt request hash",
                        d.request_hash,
                        r.body.request_hash.clone(),
                    );
                }
                if d.response_hash != r.body.response_hash {
                    return fail(
                        t.seq,
                        "receipt response hash",
                        d.response_hash,
                        r.body.response_hash.clone(),
                    );
                }
                if d.agent != r.body.agent || d.kind != r.body.kind || d.cost != r.body.cost {
                    return fail(
                        t.seq,
                        "receipt fields",
                        format!("{:?} {} {:?}", d.kind, d.agent, d.cost),
                        format!("{:?} {} {:?}", r.body.kind, r.body.agent, r.body.cost),
                    );
                }
            }
        }
        for e in effects_of(run, t)? {
            issued.insert(
                EffectRef {
                    seq: e.id().seq,
                    index: e.id().index,
                },
                e,
            );
        }
    }
    if expected != chain.len() {
        return fail(
            rec.seq,
            "receipts",
            format!("{expected} receipts"),
            format!("{}", chain.len()),
        );
    }
    Ok(Ok(ReceiptSummary {
        receipts: chain.len(),
        signed_by: chain.first().and_then(|r| r.key_id()).map(str::to_owned),
        trusted_key: key.is_some(),
    }))
}
