//! Two small stored shapes shared by every store and the ledger: a conversation node's bytes
//! (the previous conversation head, then the message JSON) and an edge's stored code.
//!
//! When to use: [`node_bytes`] when the ledger writes a conversation node, [`node_parts`] when
//! a store or a reader splits one; [`edge_code`] when a SQLite store writes
//! `transitions.edge`, [`stored_edge`] when it reads one back.

use crate::machine::{Digest, EdgeId};

/// The bytes stored for a conversation node: the previous head, then the message JSON.
pub fn node_bytes(prev: &Digest, message_json: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(32 + message_json.len());
    v.extend_from_slice(&prev.0);
    v.extend_from_slice(message_json);
    v
}

/// A stored conversation node split into the previous head and the message JSON; `None` when
/// it is shorter than a head.
pub fn node_parts(bytes: &[u8]) -> Option<(Digest, &[u8])> {
    let (prev, msg) = bytes.split_at_checked(32)?;
    Some((Digest(prev.try_into().ok()?), msg))
}

/// The stored form of an edge in a SQLite database from schema 4 on: the first four bytes of
/// the BLAKE3 digest of its persisted name ([`EdgeId::as_str`]), as a BLOB. Stable as long as
/// the name is (which never changes once released); distinct for every edge (checked by a
/// test, so a new edge whose code would collide cannot be added unnoticed).
pub fn edge_code(edge: EdgeId) -> [u8; 4] {
    let digest = blake3::hash(edge.as_str().as_bytes());
    let mut code = [0u8; 4];
    code.copy_from_slice(&digest.as_bytes()[..4]);
    code
}

/// The edge a stored `transitions.edge` value names: an [`edge_code`] (4 bytes) or, as
/// written before schema 4, the persisted name; `None` for anything else.
pub fn stored_edge(stored: &[u8]) -> Option<EdgeId> {
    static BY_CODE: std::sync::OnceLock<std::collections::BTreeMap<[u8; 4], EdgeId>> =
        std::sync::OnceLock::new();
    match <[u8; 4]>::try_from(stored) {
        Ok(code) => BY_CODE
            .get_or_init(|| EdgeId::ALL.iter().map(|e| (edge_code(*e), *e)).collect())
            .get(&code)
            .copied(),
        Err(_) => EdgeId::parse(std::str::from_utf8(stored).ok()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_edge_has_its_own_code_and_reads_back_from_it_or_its_name() {
        let codes: std::collections::BTreeSet<[u8; 4]> =
            EdgeId::ALL.iter().map(|e| edge_code(*e)).collect();
        assert_eq!(codes.len(), EdgeId::ALL.len(), "two edges share a code");
        for e in EdgeId::ALL {
            assert_eq!(stored_edge(&edge_code(*e)), Some(*e));
            assert_eq!(stored_edge(e.as_str().as_bytes()), Some(*e));
        }
        assert_eq!(stored_edge(b"nope"), None);
        assert_eq!(stored_edge(b""), None);
    }

    #[test]
    fn a_node_splits_back_into_its_parts() {
        let node = node_bytes(&Digest::of(b"p"), b"{}");
        assert_eq!(node_parts(&node), Some((Digest::of(b"p"), &b"{}"[..])));
        assert_eq!(node_parts(&[1, 2, 3]), None);
    }
}
