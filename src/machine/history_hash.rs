//! [`HistoryHash`]: the hash function a run's recorded history is named by — the hash of
//! each state after a transition and the chain link that binds each transition to the one
//! before. It is fixed by the run's revision ([`Spec::semantics`](super::Spec::semantics)), so
//! a run keeps it for its whole life and its forks and child runs share it: runs recorded
//! under revision 5 or earlier are named by BLAKE3 and verify as they always did; new runs
//! (revision 6 on) by SHA-256.
//!
//! Why SHA-256 now: a step hashes short inputs (a state is about 800 bytes, a chain link's
//! input about 400), where the CPUs' SHA extensions make SHA-256 2.2–2.4× faster than BLAKE3
//! (measured on the bench machine: 464 ns against 1,072 ns for 830 bytes; 244 against 579 for
//! 390); the in-memory engine makes 18% more transitions per second with it (`runtape bench
//! --only w4`, the performance notes in git history). And any SHA-256 tool can check a state or a link. A conversation's head and the
//! message blobs it names stay BLAKE3 for every revision: they are compared across runs (a
//! session's next run, a transfer's receiver), and a run's revision is not theirs to choose.

use sha2::Digest as _;

use super::Digest;

/// The first revision whose states and chain links are SHA-256 (BLAKE3 before).
pub const SHA256_HISTORY_SEMANTICS: u32 = 6;

/// How a run's states and chain links are hashed; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryHash {
    /// Revisions 1–5.
    Blake3,
    /// Revision 6 on.
    Sha256,
}

impl HistoryHash {
    /// The hash a run of revision `semantics` is recorded with.
    pub fn of_revision(semantics: u32) -> HistoryHash {
        if semantics >= SHA256_HISTORY_SEMANTICS {
            HistoryHash::Sha256
        } else {
            HistoryHash::Blake3
        }
    }

    /// The digest of `parts` written one after another (the same as of their concatenation).
    pub fn of_parts(self, parts: &[&[u8]]) -> Digest {
        match self {
            HistoryHash::Blake3 => {
                let mut h = blake3::Hasher::new();
                for p in parts {
                    h.update(p);
                }
                Digest(*h.finalize().as_bytes())
            }
            HistoryHash::Sha256 => {
                let mut h = sha2::Sha256::new();
                for p in parts {
                    h.update(p);
                }
                Digest(h.finalize().into())
            }
        }
    }

    /// The digest of `bytes`.
    pub fn of(self, bytes: &[u8]) -> Digest {
        self.of_parts(&[bytes])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_chooses_the_hash_and_each_is_the_standard_function() {
        assert_eq!(HistoryHash::of_revision(1), HistoryHash::Blake3);
        assert_eq!(HistoryHash::of_revision(5), HistoryHash::Blake3);
        assert_eq!(HistoryHash::of_revision(6), HistoryHash::Sha256);
        // Known answers: SHA-256("abc") and BLAKE3("abc").
        assert_eq!(
            HistoryHash::Sha256.of(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            HistoryHash::Blake3.of(b"abc").to_hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        for h in [HistoryHash::Blake3, HistoryHash::Sha256] {
            assert_eq!(h.of_parts(&[b"a", b"", b"bc"]), h.of(b"abc"));
        }
    }
}
