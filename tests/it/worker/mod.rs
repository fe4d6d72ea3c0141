//! Workers on PostgreSQL under chaos, partitions, a database that goes away, and their metrics.

mod chaos;
mod database_down;
mod metrics;
mod network_partition;
mod partition;
mod polls_on_the_engines_clock;
mod refuses_tampered_runs;
