//! Workers on PostgreSQL under chaos and partitions.

mod chaos;
mod partition;
