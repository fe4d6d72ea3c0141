//! Seals of global memory removal records (`runtape memory rm`, revision 5): with a key
//! configured, each record's chain link is signed, so `verify --pubkey KEY` tells a removal
//! made by the key's holder from one written into the database by anyone else.
//!
//! What is signed is [`REMOVAL_DOMAIN`] then the record's 32-byte chain link
//! (`blake3(previous link || body)`), so one signature vouches for the record and every record
//! before it, and can never pass for a head's or a receipt's. Stored as [`Seal::to_bytes`]
//! gives it (`0x01`, the public key, the signature); a record made without a key has no seal
//! and is only hash-chained.
//!
//! A signature proves who wrote the records that are there; it cannot show that a record is
//! missing. Dropping the newest removal record together with the row it wrote leaves a shorter
//! chain that still verifies, signed or not: nothing left in the database says it existed
//! (see the memory chapter of the guide, `runtape::guide::memory`).

use ed25519_dalek::{Signature, VerifyingKey};

use super::body::Seal;
use super::head::HeadSealError;
use super::{hex, key};
use crate::machine::Digest;

/// What a removal record's signature covers before its chain link.
pub const REMOVAL_DOMAIN: &[u8] = b"runtape memory removal v1\n";

/// The bytes a removal record's seal covers: [`REMOVAL_DOMAIN`] then the chain link.
pub(crate) fn removal_sealed_bytes(chain: &Digest) -> Vec<u8> {
    [REMOVAL_DOMAIN, &chain.0[..]].concat()
}

/// Checks a removal record's stored seal over its chain link: a signature, checked against
/// `key` when one is given (and it must name it), else against the key it names (which proves
/// consistency, not authorship). Returns the signing key's id (hex).
pub fn check_removal_seal(
    chain: &Digest,
    stored: &[u8],
    key: Option<&VerifyingKey>,
) -> Result<String, HeadSealError> {
    let Some(Seal::Ed25519 { key_id, signature }) = Seal::from_bytes(stored) else {
        return Err(HeadSealError::BadSignature);
    };
    let named;
    let key = match key {
        Some(k) => {
            let expected = key::public_key_hex(k);
            if expected != key_id {
                return Err(HeadSealError::KeyMismatch {
                    expected,
                    found: key_id,
                });
            }
            k
        }
        None => {
            named = key::parse_public_key(&key_id).map_err(|_| HeadSealError::BadSignature)?;
            &named
        }
    };
    let bytes = hex::decode::<64>(&signature).ok_or(HeadSealError::BadSignature)?;
    key.verify_strict(&removal_sealed_bytes(chain), &Signature::from_bytes(&bytes))
        .map_err(|_| HeadSealError::BadSignature)?;
    Ok(key_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::{ReceiptSigner, SigningKey};

    #[test]
    fn a_removal_seal_holds_over_its_link_and_its_key_only() {
        let signer = ReceiptSigner::from_signing_key(SigningKey::from_bytes(&[7; 32]));
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        let link = Digest::of(b"a removal");
        let seal = signer.seal_removal(&link).expect("a key signs");
        assert!(check_removal_seal(&link, &seal, None).is_ok());
        assert!(check_removal_seal(&link, &seal, signer.verifying_key().as_ref()).is_ok());
        assert!(matches!(
            check_removal_seal(&link, &seal, Some(&other)),
            Err(HeadSealError::KeyMismatch { .. })
        ));
        assert_eq!(
            check_removal_seal(&Digest::of(b"another"), &seal, None),
            Err(HeadSealError::BadSignature)
        );
        assert_eq!(ReceiptSigner::unsigned().seal_removal(&link), None);
        let mut flipped = seal.clone();
        flipped[40] ^= 1;
        assert!(check_removal_seal(&link, &flipped, None).is_err());
    }
}
