//! `verify`: coverage of every stored column, live runs, tampering, refusing tampered runs.

mod coverage;
mod live;
mod tamper;
mod tamper_refused;
