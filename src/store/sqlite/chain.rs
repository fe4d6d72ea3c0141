//! A conversation read whole: the chain of nodes from a head back to the first message in
//! one recursive query, and the events those nodes refer to ([`blob_source`]) in one more,
//! so a conversation of any length costs two queries, where reading it node by node cost
//! two per message.
//!
//! When to call: [`Store::conversation_nodes`](super::super::Store::conversation_nodes) on a
//! SQLite store; the nodes come back unpacked, exactly as [`Store::blob`] returns each.
//!
//! [`Store::blob`]: super::super::Store::blob

use std::collections::HashMap;

use rusqlite::{Connection, params};

use super::bytes_at;
use crate::format::packed_blob::blob_source;
use crate::machine::Digest;

/// The node stored under `?1` and the nodes before it (each node's first 32 bytes are the
/// digest of the one before), newest first, at most `?2` of them, stopping at a node whose
/// previous head is zero. Each step finds its node through the index of the digests' first 8
/// bytes, as [`blob_by_hash!`](super) spells it.
const CHAIN: &str = "WITH RECURSIVE chain(n, hash, bytes) AS (
    SELECT 1, hash, bytes FROM blobs WHERE substr(hash, 1, 8) = substr(?1, 1, 8) AND hash = ?1
    UNION ALL
    SELECT c.n + 1, b.hash, b.bytes FROM chain c JOIN blobs b
        ON substr(b.hash, 1, 8) = substr(c.bytes, 1, 8) AND b.hash = substr(c.bytes, 1, 32)
        WHERE c.n < ?2 AND length(c.bytes) >= 32 AND substr(c.bytes, 1, 32) <> zeroblob(32)
    LIMIT ?2
)
SELECT n, hash, bytes FROM chain ORDER BY n";

/// The events (as stored) of the transitions whose row ids are in the JSON array `?1`.
const EVENTS: &str =
    "SELECT id, event FROM transitions WHERE id IN (SELECT value FROM json_each(?1))";

/// The chain's nodes as stored, newest first (at most `len`), and the stored event of every
/// transition a node refers to, by row id. Blobs and events never change once written, so the
/// two queries need not share a transaction.
pub(super) type Stored = (Vec<(Digest, Vec<u8>)>, HashMap<i64, Vec<u8>>);

/// Reads [`Stored`] for the chain ending at `head`.
pub(super) fn read(c: &Connection, head: &Digest, len: u64) -> rusqlite::Result<Stored> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let mut nodes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stmt = c.prepare_cached(CHAIN)?;
    let mut rows = stmt.query(params![&head.0[..], len])?;
    while let Some(r) = rows.next()? {
        let n: i64 = r.get(0)?;
        // A damaged file holding a digest twice would branch the walk: keep the first node of
        // each depth, as `blob` keeps the first stored.
        if !seen.insert(n) {
            continue;
        }
        let hash = bytes_at(r, 1)?;
        let Ok(digest) = <[u8; 32]>::try_from(hash.as_slice()) else {
            break;
        };
        nodes.push((Digest(digest), bytes_at(r, 2)?));
    }
    let mut sources: Vec<i64> = nodes
        .iter()
        .filter_map(|(_, bytes)| blob_source(bytes).and_then(|row| i64::try_from(row).ok()))
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let mut events = HashMap::with_capacity(sources.len());
    if !sources.is_empty() {
        let ids: Vec<String> = sources.iter().map(i64::to_string).collect();
        let ids = format!("[{}]", ids.join(","));
        let mut stmt = c.prepare_cached(EVENTS)?;
        let mut rows = stmt.query([ids])?;
        while let Some(r) = rows.next()? {
            events.insert(r.get::<_, i64>(0)?, bytes_at(r, 1)?);
        }
    }
    Ok((nodes, events))
}
