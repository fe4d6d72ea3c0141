//! The signer: turns a [`ReceiptDraft`] into the next sealed, chained [`Receipt`].

use std::fmt;
use std::path::Path;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

use super::body::{ChainTip, Receipt, ReceiptBody, ReceiptDraft, Seal};
use super::error::ReceiptError;
use super::{hex, key};

/// Seals receipts, with an Ed25519 key or (without one) as unsigned, hash-chained receipts.
///
/// Build one per process from the configured key ([`ReceiptSigner::from_env_or_file`]) and
/// share it (it is `Send + Sync`; wrap it in an `Arc`). It holds the secret key in memory only;
/// it is not `Clone`, not `Serialize`, and its `Debug` shows the public key id and
/// `<redacted>`. The key zeroes itself when the signer is dropped.
pub struct ReceiptSigner {
    /// The secret key; `None` for an unsigned signer.
    key: Option<SigningKey>,
    /// Hex of the public key, cached because every receipt carries it.
    key_id: Option<String>,
}

impl ReceiptSigner {
    /// A signer without a key: receipts are marked unsigned and only hash-chained. Use it when
    /// no key is configured; [`verify_chain`](super::verify_chain) reports such bundles as
    /// "unsigned, hash-chained only".
    pub fn unsigned() -> Self {
        ReceiptSigner {
            key: None,
            key_id: None,
        }
    }

    /// A signer for a key the caller already holds (tests, or a key from a secret manager).
    pub fn from_signing_key(key: SigningKey) -> Self {
        let key_id = key::public_key_hex(&key.verifying_key());
        ReceiptSigner {
            key: Some(key),
            key_id: Some(key_id),
        }
    }

    /// A signer whose key is read from a key file (format: see [`keygen`](super::keygen)).
    /// A missing, unreadable or malformed file is an error; the file's content never
    /// appears in it.
    pub fn from_key_file(path: &Path) -> Result<Self, ReceiptError> {
        key::load_key_file(path).map(Self::from_signing_key)
    }

    /// The signer for the configured key, looked up in this order:
    /// 1. the environment variable `env_var`, when set to something other than whitespace
    ///    (the key file's text, usually just the 64 hex characters);
    /// 2. the key file `file`, when given (it must then exist);
    /// 3. otherwise no key: [`ReceiptSigner::unsigned`].
    ///
    /// Call it once at start-up; a malformed key is an error rather than a silent fallback to
    /// unsigned receipts.
    pub fn from_env_or_file(env_var: &str, file: Option<&Path>) -> Result<Self, ReceiptError> {
        if let Some(key) = key::load_key_env(env_var)? {
            return Ok(Self::from_signing_key(key));
        }
        match file {
            Some(path) => Self::from_key_file(path),
            None => Ok(Self::unsigned()),
        }
    }

    /// True when receipts will be signed.
    pub fn is_signed(&self) -> bool {
        self.key.is_some()
    }

    /// Hex of the public key receipts will carry as `key_id`; `None` when unsigned.
    pub fn key_id(&self) -> Option<&str> {
        self.key_id.as_deref()
    }

    /// The public key to hand to verifiers; `None` when unsigned.
    pub fn verifying_key(&self) -> Option<VerifyingKey> {
        self.key.as_ref().map(SigningKey::verifying_key)
    }

    /// Seals `draft` as the receipt after `previous` (the chain tip, or `None` for the first
    /// receipt of a chain): sets `parent_sig` to `previous.link()`, checks the fields, and
    /// signs the canonical bytes (or, unsigned, records their SHA-256).
    ///
    /// Refuses to build a chain that could not verify: a seq not above the tip's, a tip sealed
    /// in the other mode (signed vs unsigned), or a tip signed by another key.
    pub fn seal(
        &self,
        previous: Option<&Receipt>,
        draft: ReceiptDraft,
    ) -> Result<Receipt, ReceiptError> {
        self.seal_after(previous.map(Receipt::tip).as_ref(), draft)
    }

    /// [`seal`](Self::seal) after a chain tip rather than a whole receipt (what a process that
    /// resumes a run loads from storage).
    pub fn seal_after(
        &self,
        tip: Option<&ChainTip>,
        draft: ReceiptDraft,
    ) -> Result<Receipt, ReceiptError> {
        self.seal_after_stored(tip, draft)
            .map(|(receipt, _)| receipt)
    }

    /// [`seal_after`](Self::seal_after), with the seal also in its stored form
    /// ([`Seal::to_bytes`]) made from the digest or signature before it is spelled in hex:
    /// what the engine writes with every commit that answers a call.
    pub fn seal_after_stored(
        &self,
        tip: Option<&ChainTip>,
        draft: ReceiptDraft,
    ) -> Result<(Receipt, Vec<u8>), ReceiptError> {
        let parent_sig = match tip {
            None => None,
            Some(prev) => {
                self.check_tip(prev, draft.seq)?;
                Some(prev.seal.link())
            }
        };
        let seq = draft.seq;
        let body = ReceiptBody::from_draft(draft, parent_sig);
        body.validate()
            .map_err(|error| ReceiptError::InvalidField { seq, error })?;
        let bytes = body.canonical_bytes();
        let (seal, stored) = match (&self.key, &self.key_id) {
            (Some(key), Some(key_id)) => {
                let signature = key.sign(&bytes).to_bytes();
                let stored = [&[1u8][..], key.verifying_key().as_bytes(), &signature].concat();
                let seal = Seal::Ed25519 {
                    key_id: key_id.clone(),
                    signature: hex::encode(&signature),
                };
                (seal, stored)
            }
            _ => {
                let digest: [u8; 32] = Sha256::digest(&bytes).into();
                let seal = Seal::Unsigned {
                    digest: hex::encode(&digest),
                };
                (seal, [&[0u8][..], &digest].concat())
            }
        };
        Ok((Receipt { body, seal }, stored))
    }

    /// Seals a run's head: its canonical bytes, and over them (after
    /// [`HEAD_DOMAIN`](super::HEAD_DOMAIN)) a signature, or without a key their SHA-256. Call it
    /// for every write that changes what the head records; store both results together.
    pub fn seal_head(&self, head: &super::RunHead) -> (Vec<u8>, Seal) {
        let body = head.canonical_bytes();
        let seal = match (&self.key, &self.key_id) {
            (Some(key), Some(key_id)) => Seal::Ed25519 {
                key_id: key_id.clone(),
                signature: hex::encode(&key.sign(&super::head::sealed_bytes(&body)).to_bytes()),
            },
            _ => super::head::unsigned_head_seal(&body),
        };
        (body, seal)
    }

    /// [`seal_head`](Self::seal_head) with the seal already in its stored form
    /// ([`Seal::to_bytes`]): what the engine writes with every commit, without a round trip
    /// through hex. Returns the body, the stored seal and the body's
    /// [`head_body_digest`](super::head_body_digest) (taken from the seal when it is unsigned,
    /// so the body is hashed once).
    pub fn seal_head_stored(
        &self,
        head: &super::RunHead,
    ) -> (Vec<u8>, Vec<u8>, crate::machine::Digest) {
        let body = head.canonical_bytes();
        let digest = super::head::head_digest(&body);
        let seal = match &self.key {
            Some(key) => {
                let signature = key.sign(&super::head::sealed_bytes(&body)).to_bytes();
                [&[1u8][..], key.verifying_key().as_bytes(), &signature].concat()
            }
            None => [&[0u8][..], &digest].concat(),
        };
        (body, seal, crate::machine::Digest(digest))
    }

    /// Seals a global memory removal record over its chain link (see
    /// `receipt::removal`): the stored seal ([`Seal::to_bytes`]) with a key, `None` without
    /// one (the record is then only hash-chained).
    pub fn seal_removal(&self, chain: &crate::machine::Digest) -> Option<Vec<u8>> {
        let key = self.key.as_ref()?;
        let signature = key
            .sign(&super::removal::removal_sealed_bytes(chain))
            .to_bytes();
        Some([&[1u8][..], key.verifying_key().as_bytes(), &signature].concat())
    }

    fn check_tip(&self, prev: &ChainTip, seq: u64) -> Result<(), ReceiptError> {
        match (prev.seal.key_id(), self.key_id()) {
            (Some(tip_key), Some(signer_key)) if tip_key != signer_key => {
                return Err(ReceiptError::KeyChanged {
                    tip_key: tip_key.to_owned(),
                    signer_key: signer_key.to_owned(),
                });
            }
            (None, Some(_)) | (Some(_), None) => {
                return Err(ReceiptError::ModeChanged {
                    signer_signs: self.is_signed(),
                });
            }
            _ => {}
        }
        if seq <= prev.seq {
            return Err(ReceiptError::SeqNotIncreasing {
                previous: prev.seq,
                seq,
            });
        }
        Ok(())
    }
}

impl fmt::Debug for ReceiptSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key_id {
            Some(key_id) => f
                .debug_struct("ReceiptSigner")
                .field("scheme", &"ed25519")
                .field("key_id", key_id)
                .field("secret", &"<redacted>")
                .finish(),
            None => f
                .debug_struct("ReceiptSigner")
                .field("scheme", &"unsigned")
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{AgentId, Hlc, RunId};
    use crate::receipt::{ReceiptKind, hash_json};

    fn draft(seq: u64) -> ReceiptDraft {
        ReceiptDraft {
            run_id: RunId::new("run-1"),
            seq,
            kind: ReceiptKind::Model,
            agent: AgentId::new("planner"),
            request_hash: hash_json(&serde_json::json!({"seq": seq})),
            response_hash: hash_json(&serde_json::json!("ok")),
            usage: None,
            cost: None,
            hlc: Hlc::new(1_700_000_000_000, 0),
            child: None,
        }
    }

    #[test]
    fn the_stored_seal_is_the_seal_in_its_stored_form_signed_or_not() {
        let signed = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[1; 32]));
        for signer in [signed, ReceiptSigner::unsigned()] {
            let (receipt, stored) = signer.seal_after_stored(None, draft(1)).expect("valid");
            assert_eq!(receipt.seal.to_bytes(), Some(stored.clone()));
            assert_eq!(Seal::from_bytes(&stored), Some(receipt.seal.clone()));
            let tip = receipt.tip();
            assert_eq!(receipt.clone().into_tip(), tip);
            assert_eq!(tip.seq, 1);
            let (next, stored) = signer
                .seal_after_stored(Some(&tip), draft(2))
                .expect("valid");
            assert_eq!(next.seal.to_bytes(), Some(stored));
            assert_eq!(
                signer.seal_after(Some(&tip), draft(2)).expect("valid"),
                next
            );
        }
    }

    #[test]
    fn refuses_chains_that_could_not_verify() {
        let signer = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[1; 32]));
        let other = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[2; 32]));
        let unsigned = ReceiptSigner::unsigned();
        let first = signer.seal(None, draft(1)).expect("valid draft");
        assert!(matches!(
            signer.seal(Some(&first), draft(1)),
            Err(ReceiptError::SeqNotIncreasing {
                previous: 1,
                seq: 1
            })
        ));
        assert!(matches!(
            other.seal(Some(&first), draft(2)),
            Err(ReceiptError::KeyChanged { .. })
        ));
        assert_eq!(
            unsigned.seal(Some(&first), draft(2)),
            Err(ReceiptError::ModeChanged {
                signer_signs: false
            })
        );
        let mut bad = draft(3);
        bad.usage = Some(serde_json::json!({"input_tokens": u64::MAX}));
        assert!(matches!(
            signer.seal(Some(&first), bad),
            Err(ReceiptError::InvalidField { seq: 3, .. })
        ));
    }

    #[test]
    fn debug_shows_the_key_id_and_hides_the_secret() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let secret_hex = hex::encode(key.as_bytes());
        let signer = ReceiptSigner::from_signing_key(key);
        let shown = format!("{signer:?} {signer:#?}");
        assert!(shown.contains("<redacted>"));
        assert!(shown.contains(signer.key_id().unwrap_or("missing key id")));
        assert!(!shown.contains(&secret_hex));
        assert_eq!(
            format!("{:?}", ReceiptSigner::unsigned()),
            r#"ReceiptSigner { scheme: "unsigned" }"#
        );
    }
}
