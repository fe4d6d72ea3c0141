//! Identifiers and time values that flow into the machine from outside.
//!
//! The machine never creates an id from randomness and never reads a clock: run ids arrive in
//! every [`Event`](super::Event), time arrives as the event's [`Hlc`], and effect ids are derived
//! from `(run, seq, index)`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A run's identifier. Chosen by whoever creates the run (the engine uses a time-ordered id);
/// the machine only copies it into the effect ids it emits. A shared string: a clone (every
/// effect id, receipt and trace holds one) is a reference count, not a copy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub Arc<str>);

impl RunId {
    /// Wraps a string as a run id.
    pub fn new(id: impl Into<String>) -> Self {
        RunId(id.into().into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An agent's identifier, as written in the run spec. A shared string, cloned by reference
/// count like [`RunId`].
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(pub Arc<str>);

impl AgentId {
    /// Wraps a string as an agent id.
    pub fn new(id: impl Into<String>) -> Self {
        AgentId(id.into().into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for AgentId {
    fn from(s: &str) -> Self {
        AgentId(s.into())
    }
}

/// Identifies one effect: the run, the seq of the transition that emitted it, and its position
/// in that transition's effect list. Never random, so replaying the same events yields the same
/// ids.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EffectId {
    /// The run whose transition emitted the effect.
    pub run: RunId,
    /// Seq of the emitting transition.
    pub seq: u64,
    /// Index within that transition's effects.
    pub index: u32,
}

impl EffectId {
    /// The idempotency key handed to a tool for this effect: stable across retries of the
    /// same effect and across process restarts, distinct between runs (and so between a run
    /// and its forks).
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}:{}", self.run, self.seq, self.index)
    }

    /// The id of the child run this effect starts when it is a `RunChild` (revision 4):
    /// `PARENT.SEQ.INDEX`, or — when that would pass 128 characters (a deep tree) — `d`
    /// and 32 hex digits of BLAKE3 over it. Derived, never random, so performing the effect
    /// again after a crash finds the child it started instead of starting a second one.
    pub fn child_run_id(&self) -> RunId {
        let plain = format!("{}.{}.{}", self.run, self.seq, self.index);
        if plain.len() <= 128 {
            return RunId(plain.into());
        }
        let hex = Digest::of(plain.as_bytes()).to_hex();
        RunId(format!("d{}", &hex[..32]).into())
    }

    /// The same position (`seq`, `index`) in another run; used when comparing a fork's effects
    /// with its parent's.
    pub fn local(&self) -> (u64, u32) {
        (self.seq, self.index)
    }
}

impl fmt::Display for EffectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.run, self.seq, self.index)
    }
}

/// Where an effect sits in a run, without the run id: what the state remembers about an
/// outstanding effect. States stay free of run ids so that a fork replaying its parent's
/// events reaches identical state hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EffectRef {
    /// Seq of the emitting transition.
    pub seq: u64,
    /// Index within that transition's effects.
    pub index: u32,
}

impl EffectRef {
    /// True when `id` names this effect (in any run).
    pub fn matches(&self, id: &EffectId) -> bool {
        self.seq == id.seq && self.index == id.index
    }

    /// The full id of this effect in `run`.
    pub fn in_run(&self, run: &RunId) -> EffectId {
        EffectId {
            run: run.clone(),
            seq: self.seq,
            index: self.index,
        }
    }
}

/// A hybrid logical clock value: wall-clock milliseconds in the high 48 bits, a logical
/// counter in the low 16. Ordered like the pair `(ms, counter)`. The executor's clock makes
/// these; the machine only compares and subtracts them.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Hlc(pub u64);

impl Hlc {
    /// Builds a value from wall milliseconds and a logical counter.
    pub fn new(ms: u64, logical: u16) -> Self {
        Hlc((ms << 16) | u64::from(logical))
    }

    /// A value at `ms` with a zero counter.
    pub fn from_ms(ms: u64) -> Self {
        Hlc::new(ms, 0)
    }

    /// The wall-clock milliseconds part.
    pub fn ms(self) -> u64 {
        self.0 >> 16
    }

    /// The logical counter part.
    pub fn logical(self) -> u16 {
        (self.0 & 0xffff) as u16
    }

    /// Milliseconds from `earlier` to `self`; zero if `earlier` is later.
    pub fn ms_since(self, earlier: Hlc) -> u64 {
        self.ms().saturating_sub(earlier.ms())
    }

    /// This value moved `ms` milliseconds later (counter reset).
    pub fn plus_ms(self, ms: u64) -> Hlc {
        Hlc::from_ms(self.ms().saturating_add(ms).min(u64::MAX >> 16))
    }
}

impl fmt::Display for Hlc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.ms(), self.logical())
    }
}

/// A 32-byte digest (BLAKE3 for conversations and blobs; a state's or chain link's is the run's
/// [`HistoryHash`](super::HistoryHash)), shown and serialised as
/// lowercase hex.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The all-zero digest: the head of an empty conversation.
    pub const ZERO: Digest = Digest([0; 32]);

    /// blake3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        crate::text::lower_hex(&self.0)
    }

    /// Parses 64 hex characters (either case).
    pub fn from_hex(s: &str) -> Option<Digest> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
        }
        Some(Digest(out))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Spelled on the stack: states and effects serialise digests on every step.
        let mut hex = [0u8; 64];
        crate::text::lower_hex_into(&self.0, &mut hex);
        // Only ASCII hex digits were written.
        s.serialize_str(std::str::from_utf8(&hex).unwrap_or_default())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex characters"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_serialises_as_its_hex_and_reads_back() {
        let d = Digest(std::array::from_fn(|i| (i * 37 + 5) as u8));
        let json = serde_json::to_string(&d).expect("encodes");
        assert_eq!(json, format!("\"{}\"", d.to_hex()));
        assert_eq!(json.len(), 66);
        assert_eq!(serde_json::from_str::<Digest>(&json).expect("decodes"), d);
    }

    #[test]
    fn hlc_orders_like_its_parts() {
        assert!(Hlc::new(5, 9) < Hlc::new(6, 0));
        assert!(Hlc::new(5, 1) > Hlc::new(5, 0));
        assert_eq!(Hlc::new(1234, 7).ms(), 1234);
        assert_eq!(Hlc::new(1234, 7).logical(), 7);
        assert_eq!(Hlc::from_ms(10).ms_since(Hlc::from_ms(4)), 6);
        assert_eq!(Hlc::from_ms(4).ms_since(Hlc::from_ms(10)), 0);
    }

    #[test]
    fn digest_hex_round_trips() {
        let d = Digest::of(b"runtape");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
        let json = serde_json::to_string(&d).expect("a digest always serialises");
        assert_eq!(serde_json::from_str::<Digest>(&json).ok(), Some(d));
    }
}
