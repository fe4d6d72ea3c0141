//! The byte format of a stored transition: how events, effects, conversation nodes and
//! snapshots are written and read back, and the hash-chain link that covers them. Nothing
//! else in runtape encodes or decodes these bytes.
//!
//! - **Event**: the [`Event`] as JSON (its serde form), stored exactly as written; the chain
//!   link and a receipt's `response_hash` cover these bytes, so they are never re-encoded.
//! - **Effects**: a JSON array of the emitted [`Effect`]s, empty (zero bytes) when none. It is
//!   written one effect at a time so each effect's own bytes can be hashed for the receipt of
//!   its answer; the result is byte-identical to encoding the whole list.
//! - **State**: [`RunState::canonical_bytes`](crate::machine::RunState::canonical_bytes); the
//!   state hash is their digest under the run's [`HistoryHash`] (SHA-256 from revision 6,
//!   BLAKE3 before), and a snapshot stores them as they are.
//! - **Conversation node** (a blob): the previous conversation head (32 bytes), then the
//!   message JSON ([`crate::format::stored::node_bytes`]); stored under the new head,
//!   `ConversationRef::chain(prev, message)`.
//! - **Chain link**: `H(previous link || event bytes || state hash)`, `H` the run's
//!   [`HistoryHash`], the first transition's previous link being [`Digest::ZERO`].
//!
//! Every hash above is over the JSON. A SQLite database (schema 4 on) keeps the event, effects
//! and snapshot columns as [packed JSON](crate::format::packed), a lossless compact transcoding that
//! reads back as these very bytes; the store packs on write and unpacks on read, so nothing
//! above the store sees the difference.

use super::HistoryError;
use crate::machine::{Digest, Effect, Event, HistoryHash, RunId};

/// Why a transition could not be encoded (a value JSON cannot carry).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode a transition: {0}")]
pub struct EncodeError(pub String);

/// The stored bytes of `event`.
pub fn encode_event(event: &Event) -> Result<Vec<u8>, EncodeError> {
    crate::scratch::json_exact(event).map_err(|e| EncodeError(e.to_string()))
}

/// The stored effects column of a transition and each effect's own bytes hashed (SHA-256,
/// lowercase hex): the `request_hash` of the receipt that will seal the effect's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodedEffects {
    /// The column: a JSON array, or nothing when there are no effects.
    pub bytes: Vec<u8>,
    /// SHA-256 of each effect's JSON, in order.
    pub hashes: Vec<String>,
}

/// Encodes the effects column. Its bytes equal `serde_json::to_vec(effects)` (none for an empty
/// list), which [`replay`](super::replay) compares against.
pub fn encode_effects(effects: &[Effect]) -> Result<EncodedEffects, EncodeError> {
    if effects.is_empty() {
        return Ok(EncodedEffects::default());
    }
    // Written in the thread's buffer and copied out at its length: the column is kept (by the
    // in-memory store as it is), so it should not carry spare capacity.
    crate::scratch::with_buffer(|buf| {
        let mut hashes = Vec::with_capacity(effects.len());
        buf.push(b'[');
        for (i, e) in effects.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            let start = buf.len();
            crate::compact_json::write(buf, e).map_err(|e| EncodeError(e.to_string()))?;
            hashes.push(crate::receipt::sha256_hex(&buf[start..]));
        }
        buf.push(b']');
        Ok(EncodedEffects {
            bytes: buf.to_vec(),
            hashes,
        })
    })
}

/// The effects column a replay expects for `effects` (no per-effect hashes).
pub fn effects_bytes(effects: &[Effect]) -> Result<Vec<u8>, EncodeError> {
    if effects.is_empty() {
        return Ok(Vec::new());
    }
    crate::compact_json::to_vec(effects).map_err(|e| EncodeError(e.to_string()))
}

/// Decodes a stored event of `run` at `seq`.
pub fn decode_event(run: &RunId, seq: u64, bytes: &[u8]) -> Result<Event, HistoryError> {
    serde_json::from_slice(bytes)
        .map_err(|e| super::damaged(run, seq, format!("stored event does not decode: {e}")))
}

/// Decodes a stored effects column of `run` at `seq`.
pub fn decode_effects(run: &RunId, seq: u64, bytes: &[u8]) -> Result<Vec<Effect>, HistoryError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| super::damaged(run, seq, format!("stored effects do not decode: {e}")))
}

/// The hash-chain link of a transition: `H(previous link || event bytes || state hash)`, `H`
/// the run's [`HistoryHash`] (BLAKE3 up to revision 5, SHA-256 from 6). The first transition's
/// previous link is [`Digest::ZERO`].
pub fn chain_link(hash: HistoryHash, prev: &Digest, event: &[u8], state_hash: &Digest) -> Digest {
    hash.of_parts(&[&prev.0, event, &state_hash.0])
}

/// True when transition `seq` stores a snapshot of its state.
pub fn snapshot_due(seq: u64) -> bool {
    seq.is_multiple_of(crate::store::SNAPSHOT_EVERY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{AgentId, EffectRef};

    fn tool_call(seq: u64, index: u32) -> Effect {
        let id = EffectRef { seq, index }.in_run(&RunId::new("r"));
        Effect::CallTool {
            idempotency_key: id.idempotency_key(),
            id,
            agent: AgentId::from("a"),
            call_id: format!("c{index}"),
            tool: "t".into(),
            args: serde_json::json!({"x": index}),
        }
    }

    #[test]
    fn effects_written_one_by_one_equal_the_whole_list_and_hash_each_effect() {
        let effects = vec![tool_call(3, 0), tool_call(3, 1)];
        let encoded = encode_effects(&effects).expect("encodes");
        assert_eq!(encoded.bytes, effects_bytes(&effects).expect("encodes"));
        assert_eq!(encoded.hashes.len(), 2);
        let first = serde_json::to_vec(&effects[0]).expect("encodes");
        assert_eq!(encoded.hashes[0], crate::receipt::sha256_hex(&first));
        assert_eq!(
            encode_effects(&[]).expect("encodes"),
            EncodedEffects::default()
        );
        let back = decode_effects(&RunId::new("r"), 3, &encoded.bytes).expect("decodes");
        assert_eq!(back, effects);
    }

    #[test]
    fn a_chain_link_covers_its_previous_link_event_and_state_under_the_runs_hash() {
        for h in [HistoryHash::Blake3, HistoryHash::Sha256] {
            let link = |prev: &[u8], event: &[u8], state: &[u8]| {
                chain_link(h, &Digest::of(prev), event, &Digest::of(state))
            };
            let a = link(b"", b"event", b"state");
            assert_ne!(a, link(b"x", b"event", b"state"));
            assert_ne!(a, link(b"", b"other", b"state"));
            assert_ne!(a, link(b"", b"event", b"other"));
            // The link is the run's hash of the three, one after another.
            let (prev, state) = (Digest::of(b""), Digest::of(b"state"));
            assert_eq!(a, h.of(&[&prev.0[..], b"event", &state.0[..]].concat()));
        }
        assert_ne!(
            chain_link(HistoryHash::Blake3, &Digest::ZERO, b"e", &Digest::ZERO),
            chain_link(HistoryHash::Sha256, &Digest::ZERO, b"e", &Digest::ZERO)
        );
    }
}
