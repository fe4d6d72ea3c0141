//! Leases: one driver per run, across processes and partitions.

mod keeper;
mod partition;
mod two_processes;
