//! Signed receipts: canonical bytes, chains, keys, tampering and complete exports.

mod canonical;
mod chain;
mod complete;
mod keys;
mod signed_runs;
mod tamper;
