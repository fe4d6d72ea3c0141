//! Writing a run's record: each transition a driver makes becomes one [`Commit`] — the event
//! and effects as stored bytes, the state hash, the chain link, the new conversation nodes,
//! a snapshot when one is due, the outbox rows, the receipt seal of the answer it carries, and
//! the run row's new standing. Pure: no I/O, no clock (times are given), no tokio; the driver
//! submits what it returns.

use std::sync::Arc;

use super::codec::{EncodeError, chain_link, encode_effects, encode_event, snapshot_due};
use super::pairing::{Outstanding, answered};
use super::receipts::receipt_draft;
use crate::format::stored::node_bytes;
use crate::machine::{Digest, Effect, EffectRef, Event, HistoryHash, Outcome, RunId, Transition};
use crate::receipt::{ChainTip, ReceiptSigner};
use crate::store::{Commit, OutboxRecord, OutboxStatus, RunStatus};

/// Why a transition could not be recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A value JSON cannot carry.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The receipt could not be sealed.
    #[error("cannot seal the receipt of step {seq}: {detail}")]
    Receipt {
        /// The step.
        seq: u64,
        /// Why.
        detail: String,
    },
}

/// The stored text of a run's outcome (the `outcome` column; the head seals its digest).
pub fn outcome_text(outcome: &Outcome) -> String {
    // An outcome is plain data (strings, numbers within range, JSON values): it always encodes.
    serde_json::to_string(outcome).unwrap_or_default()
}

/// When a commit is made: wall-clock ms now, and the lease expiry it pushes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitTimes {
    /// Wall-clock ms now (`updated_ms`).
    pub now_ms: u64,
    /// The lease's new expiry, wall-clock ms.
    pub lease_expires_ms: u64,
}

/// Keeps what encoding the next transition of one run needs: the chain link so far, the
/// effects issued and not yet answered, and the receipt chain's tip. One per driver.
#[derive(Debug)]
pub struct Recorder {
    run: RunId,
    epoch: u64,
    hash: HistoryHash,
    chain: Digest,
    outstanding: Outstanding,
    receipt_tip: Option<ChainTip>,
    signer: Arc<ReceiptSigner>,
}

impl Recorder {
    /// A recorder for `run`'s commits under lease `epoch`, hashing states and chain links with
    /// `hash` (the run's, [`RunSpec::history_hash`](crate::machine::RunSpec::history_hash)),
    /// continuing from the chain link `chain` (ZERO before the first transition) and the
    /// receipt `tip`.
    pub fn new(
        run: RunId,
        epoch: u64,
        hash: HistoryHash,
        chain: Digest,
        receipt_tip: Option<ChainTip>,
        signer: Arc<ReceiptSigner>,
    ) -> Self {
        Recorder {
            run,
            epoch,
            hash,
            chain,
            outstanding: Outstanding::new(),
            receipt_tip,
            signer,
        }
    }

    /// Records `effect` as issued and not yet answered: what a resumed run (or a fork) waits
    /// on, as it will perform it.
    pub fn inherit(&mut self, effect: Effect) {
        self.outstanding.insert(effect, None);
    }

    /// The chain link of the last transition recorded.
    pub fn chain(&self) -> Digest {
        self.chain
    }

    /// The lease epoch commits are fenced by.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Encodes transition `t`, made by `event`, as the commit to submit, and moves the chain,
    /// the outstanding effects and the receipt tip past it. `non_idempotent` says which tools
    /// get an outbox row (their started-or-pending status decides, on resume, between in
    /// doubt and performing). On error nothing changes.
    pub fn record(
        &mut self,
        event: &Event,
        t: &Transition,
        non_idempotent: &dyn Fn(&str) -> bool,
        times: CommitTimes,
    ) -> Result<Commit, RecordError> {
        let seq = t.next.seq();
        let event_bytes = encode_event(event)?;
        let effects = encode_effects(&t.effects)?;
        // The state's bytes are hashed, and kept only when a snapshot is due.
        let (state_hash, snapshot) = crate::scratch::with_json(&t.next, |bytes| {
            (
                self.hash.of(bytes),
                snapshot_due(seq).then(|| bytes.to_vec()),
            )
        })
        .map_err(|e| EncodeError(e.to_string()))?;
        let chain = chain_link(self.hash, &self.chain, &event_bytes, &state_hash);
        let answers = self.outstanding.answer(event);
        let seal = match self.seal(seq, event, &event_bytes, answers.as_ref()) {
            Ok(seal) => seal,
            Err(e) => {
                // Nothing changes on error: the answered effect is outstanding again.
                if let Some(issued) = answers {
                    self.outstanding.insert(issued.effect, issued.request_hash);
                }
                return Err(e);
            }
        };
        // Only now, with nothing left to fail, does the recorder move on.
        let seal = seal.map(|(bytes, tip)| {
            self.receipt_tip = Some(tip);
            bytes
        });
        self.outstanding.issue_hashed(&t.effects, effects.hashes);
        self.chain = chain;
        let usage = t.next.data().map(|d| d.usage).unwrap_or_default();
        Ok(Commit {
            run: self.run.clone(),
            epoch: self.epoch,
            seq,
            at: event.at,
            event: event_bytes,
            edge: t.edge,
            effects: effects.bytes,
            outbox: outbox_rows(&t.effects, non_idempotent),
            resolves: answered(&event.body),
            state_kind: t.next.kind(),
            state_hash,
            chain,
            blobs: t
                .appended
                .iter()
                .map(|a| (a.head, node_bytes(&a.prev, &a.bytes)))
                .collect(),
            snapshot,
            status: RunStatus::of_state(&t.next),
            cost_nanos: usage.cost_nanos,
            unpriced_turns: usage.unpriced_turns,
            tokens: usage.input_tokens + usage.output_tokens,
            outcome: t.next.outcome().map(outcome_text),
            seal,
            now_ms: times.now_ms,
            lease_expires_ms: times.lease_expires_ms,
            head: None,
        })
    }

    /// The seal (bytes) of the receipt of the model turn or tool result `event` carries (as
    /// the answer to `answers`), chained to the tip, and the tip it becomes. Changes nothing.
    fn seal(
        &self,
        seq: u64,
        event: &Event,
        event_bytes: &[u8],
        answers: Option<&super::pairing::Issued>,
    ) -> Result<Option<(Vec<u8>, ChainTip)>, RecordError> {
        let Some(issued) = answers else {
            return Ok(None);
        };
        let Some(draft) = receipt_draft(
            &self.run,
            seq,
            event.at,
            &issued.effect,
            issued.request_hash.clone(),
            &event.body,
            event_bytes,
        ) else {
            return Ok(None);
        };
        let (receipt, bytes) = self
            .signer
            .seal_after_stored(self.receipt_tip.as_ref(), draft)
            .map_err(|e| RecordError::Receipt {
                seq,
                detail: e.to_string(),
            })?;
        Ok(Some((bytes, receipt.into_tip())))
    }
}

/// Outbox rows for the calls whose status matters on resume: tool calls that are not
/// idempotent (started vs pending decides between in doubt and performing). Every other
/// effect is pending by virtue of its committed transition, and is simply performed (again)
/// on resume.
pub fn outbox_rows(effects: &[Effect], non_idempotent: &dyn Fn(&str) -> bool) -> Vec<OutboxRecord> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CallTool {
                id,
                tool,
                idempotency_key,
                ..
            } if non_idempotent(tool) => Some(OutboxRecord {
                effect: EffectRef {
                    seq: id.seq,
                    index: id.index,
                },
                status: OutboxStatus::Pending,
                idempotency_key: Some(idempotency_key.clone()),
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{
        AgentSpec, EventBody, Hlc, ModelReply, RunSpec, RunState, Spec, ToolCallRequest, ToolSpec,
        step,
    };
    use crate::receipt::{Receipt, ReceiptBody, Seal};

    fn spec() -> RunSpec {
        RunSpec::build(Spec {
            agents: vec![AgentSpec {
                tools: Some(vec!["deploy".into()]),
                ..AgentSpec::new("a", "p", "m")
            }],
            tools: vec![ToolSpec::new("deploy", "deploys")],
            ..Spec::default()
        })
        .expect("valid")
    }

    const TIMES: CommitTimes = CommitTimes {
        now_ms: 1_000,
        lease_expires_ms: 16_000,
    };

    /// Steps `body` and records it; returns the commit and the next state.
    fn record(
        r: &mut Recorder,
        state: &RunState,
        seq_at: u64,
        body: EventBody,
    ) -> (Commit, RunState) {
        let run = RunId::new("run1");
        let event = Event::new(&run, Hlc::from_ms(seq_at), body);
        let t = step(state, &event, &spec()).expect("steps");
        let commit = r
            .record(&event, &t, &|tool| tool == "deploy", TIMES)
            .expect("records");
        (commit, t.next)
    }

    #[test]
    fn a_transition_becomes_the_commit_its_bytes_and_chain_imply() {
        let signer = Arc::new(ReceiptSigner::unsigned());
        let hash = spec().history_hash();
        assert_eq!(hash, HistoryHash::Sha256, "new runs record SHA-256");
        let mut r = Recorder::new(RunId::new("run1"), 3, hash, Digest::ZERO, None, signer);
        let (c1, s1) = record(
            &mut r,
            &RunState::Created,
            1,
            EventBody::Start { goal: "go".into() },
        );
        assert_eq!(
            (c1.seq, c1.epoch, c1.edge.as_str()),
            (1, 3, "created.start")
        );
        assert_eq!(
            c1.chain,
            chain_link(hash, &Digest::ZERO, &c1.event, &c1.state_hash)
        );
        assert_eq!(c1.state_hash, s1.state_hash(hash));
        assert_eq!(c1.blobs.len(), 1, "the goal is the first message");
        assert!(c1.effects.is_empty() && c1.seal.is_none() && c1.snapshot.is_none());
        assert_eq!(
            (c1.status, c1.now_ms, c1.lease_expires_ms),
            (RunStatus::Running, 1_000, 16_000)
        );

        let (c2, s2) = record(&mut r, &s1, 2, EventBody::Proceed);
        assert_eq!(
            c2.chain,
            chain_link(hash, &c1.chain, &c2.event, &c2.state_hash)
        );
        assert!(c2.outbox.is_empty(), "a model call needs no outbox row");
        let call = s2.outstanding()[0].in_run(&RunId::new("run1"));

        let reply = ModelReply::tools(vec![ToolCallRequest::new(
            "c1",
            "deploy",
            serde_json::json!({}),
        )]);
        let (c3, _) = record(
            &mut r,
            &s2,
            3,
            EventBody::ModelReplied {
                effect: call,
                reply,
                chunks: Vec::new(),
            },
        );
        assert_eq!(c3.resolves, Some(EffectRef { seq: 2, index: 0 }));
        assert_eq!(
            c3.outbox.len(),
            1,
            "the non-idempotent call gets a pending row"
        );
        assert_eq!(c3.outbox[0].status, OutboxStatus::Pending);
        // The seal is the receipt the stored rows imply, chained from nothing.
        let seal = Seal::from_bytes(c3.seal.as_deref().expect("sealed")).expect("a seal");
        let effect: Effect =
            serde_json::from_slice::<Vec<Effect>>(&c2.effects).expect("decodes")[0].clone();
        let event: Event = serde_json::from_slice(&c3.event).expect("decodes");
        let draft = receipt_draft(
            &RunId::new("run1"),
            3,
            event.at,
            &effect,
            None,
            &event.body,
            &c3.event,
        )
        .expect("a model turn has a receipt");
        let receipt = Receipt {
            body: ReceiptBody::from_draft(draft, None),
            seal,
        };
        assert!(crate::receipt::verify_chain(&[receipt], None).is_ok());
    }
}
