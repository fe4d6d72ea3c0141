//! The stored byte format: how a database keeps the JSON of events, effects and snapshots
//! ([`packed`]), conversation nodes and other blobs ([`packed_blob`]), a run's sealed head
//! ([`packed_head`]), and the stored names of edges and the shape of a conversation node
//! ([`stored`]).
//!
//! It sits below both the stores (which pack on write and unpack on read) and the ledger
//! (which decides what is written), so neither imports the other for bytes: `store` never
//! names `ledger`. Every encoding here is lossless and read back as the very bytes that were
//! hashed or signed; a value an earlier schema wrote is returned as it was written.

pub mod packed;
pub mod packed_blob;
pub mod packed_head;
pub mod stored;
